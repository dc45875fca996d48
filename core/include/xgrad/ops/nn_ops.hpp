#pragma once
// The fused batch-norm ops in the shape of TensorFlow's C++ API (tensorflow/cc/ops/nn_ops.h),
// for code ported from it: one class per op, constructed from a Scope, the inputs in TensorFlow's
// order and an optional Attrs value; the outputs are public tensor members.
//
//     using namespace xgrad;
//     auto scope = Scope::NewRootScope();
//     ops::FusedBatchNormV3 bn(scope, x, scale, offset, mean, variance,
//                              ops::FusedBatchNormV3::DataFormat("NCHW").Epsilon(1e-3f));
//     ops::FusedBatchNormGradV3 g(scope, dy, x, scale, bn.reserve_space_1, bn.reserve_space_2,
//                                 bn.reserve_space_3, ops::FusedBatchNormGradV3::DataFormat("NCHW"));
//     // g.x_backprop, g.scale_backprop, g.offset_backprop
//
// Each class is a thin face over the free functions of xgrad/ops/batch_norm.hpp (fused_batch_norm,
// fused_batch_norm_grad) and gives bit-identical outputs. In short (full text,
// formulas and derivations: docs/batch_norm.md):
//   - x, y_backprop: rank 4 ("NHWC", "NCHW") or rank 5 ("NDHWC", "NCDHW"; not for GradV2),
//     dtype float16, bfloat16, float32 or float64. scale, offset, mean, variance and the
//     reserve spaces: 1-D of length C (the channel extent), float32 (float64 with float64 x).
//   - Attributes and defaults: epsilon 0.0001, data_format "NHWC", is_training true, and on the
//     forward exponential_avg_factor 1.0 (running statistics = (1 - f) old + f batch; with
//     f = 1 the mean/variance inputs are not read and may be empty).
//   - Training: the forward normalises with the batch statistics and saves the batch mean and
//     biased variance in reserve_space_1/2 for the gradient; batch_mean/batch_variance are the
//     running statistics (variance Bessel-corrected). Inference: it normalises with mean and
//     variance, which the gradient then takes as reserve_space_1/2.
//   - reserve_space_3 of the forward and the trailing outputs of the gradients (V3:
//     reserve_space_4/5, V2: reserve_space_3/4) are empty [0] placeholders; the gradient's
//     reserve_space_3 input is accepted with any shape and ignored.
//   - Autograd: y is differentiable w.r.t. x, scale and offset; the gradient's x_backprop,
//     scale_backprop and offset_backprop are differentiable w.r.t. y_backprop, x and scale,
//     to any order. Recording follows the scope (see xgrad/scope.hpp).
//   - Errors: xgrad::invalid_argument (a std::invalid_argument) naming the op and the shapes,
//     dtypes, attribute or devices at fault, thrown before any output is computed; an input
//     on another device than the scope's is one of them.
//
// Attrs setters return a modified copy, so they chain (Attrs().Epsilon(1e-3f).IsTraining(false));
// each class's static setters start such a chain (FusedBatchNormGradV3::Epsilon(1e-3f)).
#include <string>
#include <string_view>
#include <utility>

#include "xgrad/autograd.hpp"
#include "xgrad/ops/batch_norm.hpp"
#include "xgrad/scope.hpp"
#include "xgrad/tensor.hpp"

namespace xgrad::ops
{
    /// FusedBatchNormV3: batch normalization, y = (x - mean) / sqrt(variance + epsilon) * scale
    /// + offset per channel, with the batch statistics (training) or the given ones (inference).
    class FusedBatchNormV3
    {
    public:
        /// Optional attributes; each setter returns a modified copy.
        struct Attrs
        {
            /// A small number added to the variance (finite, >= 0).
            [[nodiscard]] Attrs Epsilon(float x) const
            {
                Attrs r = *this;
                r.epsilon_ = x;
                return r;
            }
            /// Running statistics = (1 - x) * (mean, variance) + x * batch statistics; in [0, 1].
            [[nodiscard]] Attrs ExponentialAvgFactor(float x) const
            {
                Attrs r = *this;
                r.exponential_avg_factor_ = x;
                return r;
            }
            /// "NHWC", "NCHW", "NDHWC" or "NCDHW": the layout of x and y.
            [[nodiscard]] Attrs DataFormat(std::string_view x) const
            {
                Attrs r = *this;
                r.data_format_ = std::string(x);
                return r;
            }
            /// Training (batch statistics) or inference (the given mean and variance).
            [[nodiscard]] Attrs IsTraining(bool x) const
            {
                Attrs r = *this;
                r.is_training_ = x;
                return r;
            }

            float epsilon_ = 0.0001f;
            float exponential_avg_factor_ = 1.0f;
            std::string data_format_ = "NHWC";
            bool is_training_ = true;
        };

        FusedBatchNormV3(const Scope& scope, const tensor& x, const tensor& scale, const tensor& offset,
                         const tensor& mean, const tensor& variance)
            : FusedBatchNormV3(scope, x, scale, offset, mean, variance, Attrs())
        {
        }

        FusedBatchNormV3(const Scope& scope, const tensor& x, const tensor& scale, const tensor& offset,
                         const tensor& mean, const tensor& variance, const Attrs& attrs)
        {
            const char* op = "FusedBatchNormV3";
            scope.check_device(x, op, "x");
            scope.check_device(scale, op, "scale");
            scope.check_device(offset, op, "offset");
            scope.check_device(mean, op, "mean");
            scope.check_device(variance, op, "variance");
            batch_norm_attrs a;
            a.epsilon = attrs.epsilon_;
            a.data_format = attrs.data_format_;
            a.is_training = attrs.is_training_;
            a.exponential_avg_factor = attrs.exponential_avg_factor_;
            grad_mode_guard recording(scope.records_gradients());
            batch_norm_forward_result r = fused_batch_norm(x, scale, offset, mean, variance, a);
            y = std::move(r.y);
            batch_mean = std::move(r.batch_mean);
            batch_variance = std::move(r.batch_variance);
            reserve_space_1 = std::move(r.reserve_space_1);
            reserve_space_2 = std::move(r.reserve_space_2);
            reserve_space_3 = std::move(r.reserve_space_3);
        }

        [[nodiscard]] static Attrs Epsilon(float x) { return Attrs().Epsilon(x); }
        [[nodiscard]] static Attrs ExponentialAvgFactor(float x) { return Attrs().ExponentialAvgFactor(x); }
        [[nodiscard]] static Attrs DataFormat(std::string_view x) { return Attrs().DataFormat(x); }
        [[nodiscard]] static Attrs IsTraining(bool x) { return Attrs().IsTraining(x); }

        /// The normalized x (x's shape and dtype).
        tensor y;
        /// Running mean and (Bessel-corrected) variance; in inference, copies of mean/variance.
        tensor batch_mean, batch_variance;
        /// For the gradient: batch mean and biased batch variance (training) or copies of
        /// mean/variance (inference).
        tensor reserve_space_1, reserve_space_2;
        /// An empty [0] placeholder.
        tensor reserve_space_3;
    };

    namespace detail
    {
        /// The attributes of FusedBatchNormGradV3 and FusedBatchNormGradV2 (one type serves
        /// both: they take the same three); each setter returns a modified copy.
        struct fused_batch_norm_grad_attrs
        {
            /// The forward's epsilon (finite, >= 0).
            [[nodiscard]] fused_batch_norm_grad_attrs Epsilon(float x) const
            {
                fused_batch_norm_grad_attrs r = *this;
                r.epsilon_ = x;
                return r;
            }
            /// The layout of y_backprop, x and x_backprop: "NHWC", "NCHW", "NDHWC" or "NCDHW"
            /// (V2: "NHWC" or "NCHW").
            [[nodiscard]] fused_batch_norm_grad_attrs DataFormat(std::string_view x) const
            {
                fused_batch_norm_grad_attrs r = *this;
                r.data_format_ = std::string(x);
                return r;
            }
            /// The forward's mode: reserve spaces hold batch (true) or population statistics.
            [[nodiscard]] fused_batch_norm_grad_attrs IsTraining(bool x) const
            {
                fused_batch_norm_grad_attrs r = *this;
                r.is_training_ = x;
                return r;
            }
            /// The same attributes for the free functions.
            batch_norm_attrs to_attrs() const
            {
                batch_norm_attrs a;
                a.epsilon = epsilon_;
                a.data_format = data_format_;
                a.is_training = is_training_;
                return a;
            }

            float epsilon_ = 0.0001f;
            std::string data_format_ = "NHWC";
            bool is_training_ = true;
        };
    }

    /// FusedBatchNormGradV3: the gradient of FusedBatchNormV3 w.r.t. x, scale and offset, given
    /// the gradient y_backprop of its y and its reserve spaces.
    class FusedBatchNormGradV3
    {
    public:
        /// Optional attributes; each setter returns a modified copy.
        using Attrs = detail::fused_batch_norm_grad_attrs;

        FusedBatchNormGradV3(const Scope& scope, const tensor& y_backprop, const tensor& x, const tensor& scale,
                             const tensor& reserve_space_1, const tensor& reserve_space_2,
                             const tensor& reserve_space_3)
            : FusedBatchNormGradV3(scope, y_backprop, x, scale, reserve_space_1, reserve_space_2, reserve_space_3,
                                   Attrs())
        {
        }

        FusedBatchNormGradV3(const Scope& scope, const tensor& y_backprop, const tensor& x, const tensor& scale,
                             const tensor& reserve_space_1, const tensor& reserve_space_2,
                             const tensor& reserve_space_3, const Attrs& attrs)
        {
            const char* op = "FusedBatchNormGradV3";
            scope.check_device(y_backprop, op, "y_backprop");
            scope.check_device(x, op, "x");
            scope.check_device(scale, op, "scale");
            scope.check_device(reserve_space_1, op, "reserve_space_1");
            scope.check_device(reserve_space_2, op, "reserve_space_2");
            scope.check_device(reserve_space_3, op, "reserve_space_3");
            const batch_norm_attrs a = attrs.to_attrs();
            grad_mode_guard recording(scope.records_gradients());
            batch_norm_grad_result r = fused_batch_norm_grad(y_backprop, x, scale, reserve_space_1, reserve_space_2,
                                                             reserve_space_3, a, batch_norm_grad_version::v3);
            x_backprop = std::move(r.x_backprop);
            scale_backprop = std::move(r.scale_backprop);
            offset_backprop = std::move(r.offset_backprop);
            reserve_space_4 = std::move(r.placeholder_1);
            reserve_space_5 = std::move(r.placeholder_2);
        }

        [[nodiscard]] static Attrs Epsilon(float x) { return Attrs().Epsilon(x); }
        [[nodiscard]] static Attrs DataFormat(std::string_view x) { return Attrs().DataFormat(x); }
        [[nodiscard]] static Attrs IsTraining(bool x) { return Attrs().IsTraining(x); }

        /// The gradient w.r.t. x (x's shape and dtype).
        tensor x_backprop;
        /// The gradients w.r.t. scale and offset ([C]).
        tensor scale_backprop, offset_backprop;
        /// Empty [0] placeholders.
        tensor reserve_space_4, reserve_space_5;
    };

    /// FusedBatchNormGradV2: FusedBatchNormGradV3 without the reserve_space_3 input, for 4-D
    /// tensors only (data_format "NHWC" or "NCHW").
    class FusedBatchNormGradV2
    {
    public:
        /// Optional attributes; each setter returns a modified copy.
        using Attrs = detail::fused_batch_norm_grad_attrs;

        FusedBatchNormGradV2(const Scope& scope, const tensor& y_backprop, const tensor& x, const tensor& scale,
                             const tensor& reserve_space_1, const tensor& reserve_space_2)
            : FusedBatchNormGradV2(scope, y_backprop, x, scale, reserve_space_1, reserve_space_2, Attrs())
        {
        }

        FusedBatchNormGradV2(const Scope& scope, const tensor& y_backprop, const tensor& x, const tensor& scale,
                             const tensor& reserve_space_1, const tensor& reserve_space_2, const Attrs& attrs)
        {
            const char* op = "FusedBatchNormGradV2";
            scope.check_device(y_backprop, op, "y_backprop");
            scope.check_device(x, op, "x");
            scope.check_device(scale, op, "scale");
            scope.check_device(reserve_space_1, op, "reserve_space_1");
            scope.check_device(reserve_space_2, op, "reserve_space_2");
            const batch_norm_attrs a = attrs.to_attrs();
            grad_mode_guard recording(scope.records_gradients());
            batch_norm_grad_result r = fused_batch_norm_grad(y_backprop, x, scale, reserve_space_1, reserve_space_2,
                                                             tensor(), a, batch_norm_grad_version::v2);
            x_backprop = std::move(r.x_backprop);
            scale_backprop = std::move(r.scale_backprop);
            offset_backprop = std::move(r.offset_backprop);
            reserve_space_3 = std::move(r.placeholder_1);
            reserve_space_4 = std::move(r.placeholder_2);
        }

        [[nodiscard]] static Attrs Epsilon(float x) { return Attrs().Epsilon(x); }
        [[nodiscard]] static Attrs DataFormat(std::string_view x) { return Attrs().DataFormat(x); }
        [[nodiscard]] static Attrs IsTraining(bool x) { return Attrs().IsTraining(x); }

        /// The gradient w.r.t. x (x's shape and dtype).
        tensor x_backprop;
        /// The gradients w.r.t. scale and offset ([C]).
        tensor scale_backprop, offset_backprop;
        /// Empty [0] placeholders.
        tensor reserve_space_3, reserve_space_4;
    };
}
