#pragma once
// xgrad::compat::tensorflow: a compatibility layer that mirrors TensorFlow's C++ API, for code
// ported from it. It is not xgrad's own API: that is the snake_case free functions of
// xgrad/ops/batch_norm.hpp (fused_batch_norm, fused_batch_norm_grad, with batch_norm_attrs),
// which this layer calls. Its outputs are bit-identical to theirs, with the same formulas, checks
// and autograd behaviour; its error messages name the TensorFlow op and TensorFlow's arguments
// ("FusedBatchNormGradV3: reserve_space_1 must be ..." where fused_batch_norm_grad says
// "fused_batch_norm_grad: saved_mean must be ..."). xgrad/xgrad.hpp does not include this header;
// include it explicitly:
//
//     #include <xgrad/compat/tensorflow.hpp>
//     namespace tf = xgrad::compat::tensorflow;
//
//     const tf::Scope scope = tf::Scope::NewRootScope();
//     tf::ops::FusedBatchNormV3 bn(scope, x, scale, offset, mean, variance,
//                                  tf::ops::FusedBatchNormV3::DataFormat("NCHW").Epsilon(1e-3f));
//     tf::ops::FusedBatchNormGradV3 g(scope, dy, x, scale, bn.reserve_space_1, bn.reserve_space_2,
//                                     bn.reserve_space_3, tf::ops::FusedBatchNormGradV3::DataFormat("NCHW"));
//     // g.x_backprop, g.scale_backprop, g.offset_backprop
//
// The names are TensorFlow's on purpose (CamelCase classes and setters, Attrs members with a
// trailing underscore, outputs as public members), so that ported code reads as before. The ops
// that exist are the fused batch-norm ones: FusedBatchNormV3, FusedBatchNormGradV3 and
// FusedBatchNormGradV2. Implementation: core/src/compat/tensorflow.cpp.
//
// The ops' contract in short (full text, formulas and derivations: docs/batch_norm.md):
//   - x, y_backprop: rank 4 ("NHWC", "NCHW") or rank 5 ("NDHWC", "NCDHW"; not for GradV2),
//     dtype float16, bfloat16, float32 or float64. scale, offset, mean, variance and the
//     reserve spaces: 1-D of length C (the channel extent), float32 (float64 with float64 x).
//   - Attributes and defaults: epsilon 0.0001, data_format "NHWC", is_training true, and on the
//     forward exponential_avg_factor 1.0 (running statistics = (1 - f) old + f batch; with
//     f = 1 the mean/variance inputs are not read and may be empty). They equal the defaults of
//     xgrad::batch_norm_attrs.
//   - Training: the forward normalises with the batch statistics and saves the batch mean and
//     biased variance in reserve_space_1/2 for the gradient; batch_mean/batch_variance are the
//     running statistics (variance Bessel-corrected). Inference: it normalises with mean and
//     variance, which the gradient then takes as reserve_space_1/2.
//   - reserve_space_3 of the forward and the trailing outputs of the gradients (V3:
//     reserve_space_4/5, V2: reserve_space_3/4) are empty [0] placeholders; the gradient's
//     reserve_space_3 input is accepted with any shape and ignored.
//   - Autograd: y is differentiable w.r.t. x, scale and offset; the gradient's x_backprop,
//     scale_backprop and offset_backprop are differentiable w.r.t. y_backprop, x and scale,
//     to any order. Whether an op records follows its Scope (below), not the thread's grad mode.
//   - Errors: xgrad::invalid_argument (a std::invalid_argument) naming the op and the shapes,
//     dtypes, attribute or devices at fault, thrown before any output is computed. An input on
//     another device than the scope's is one of them:
//     "FusedBatchNormV3: x is on cpu but the scope's device is cuda:0".
//
// Attrs setters return a modified copy, so they chain (Attrs().Epsilon(1e-3f).IsTraining(false));
// each class's static setters start such a chain (FusedBatchNormGradV3::Epsilon(1e-3f)).
#include <string>
#include <string_view>

#include "xgrad/dtype.hpp"
#include "xgrad/tensor.hpp"

namespace xgrad::compat::tensorflow
{
    /// The execution context that every op class takes as its first argument, in the shape of
    /// TensorFlow's `Scope`. xgrad runs ops eagerly, so a scope holds no graph; it carries two
    /// settings:
    ///   - the device the op runs on. Every defined input of an op built with the scope must live
    ///     there, else the op throws xgrad::invalid_argument naming both devices. Nothing is
    ///     copied between devices implicitly.
    ///   - whether the op records itself for autograd. An op built with the scope runs under
    ///     xgrad::grad_mode_guard(records_gradients()): with recording on it records even inside
    ///     a no_grad block; with recording off its outputs never require grad. The thread's grad
    ///     mode is restored when the op returns.
    /// A scope is a small value: the With* methods return a modified copy and leave the original
    /// as it was, so they chain:
    ///
    ///     auto scope = Scope::NewRootScope().WithDevice("cuda:0").WithGradientRecording(false);
    class Scope
    {
    public:
        /// The root scope: CPU device, gradient recording on.
        static Scope NewRootScope() noexcept;

        /// A copy of this scope whose ops run on `dev`.
        [[nodiscard]] Scope WithDevice(xgrad::device dev) const noexcept;
        /// A copy of this scope whose ops run on the device named by `text`: xgrad's names
        /// ("cpu", "cuda", "cuda:1", as xgrad::parse_device reads them) or TensorFlow's
        /// ("/device:CPU:0", "/cpu:0", "/device:GPU:1", "/gpu:1", after optional "/job:..",
        /// "/replica:..", "/task:.." parts; GPU n is cuda:n, and the one CPU is index 0).
        /// Throws std::invalid_argument naming the text when it names none.
        [[nodiscard]] Scope WithDevice(std::string_view text) const;
        /// A copy of this scope whose ops record themselves for autograd (or not).
        [[nodiscard]] Scope WithGradientRecording(bool enabled) const noexcept;

        xgrad::device device() const noexcept { return m_device; }
        bool records_gradients() const noexcept { return m_records_gradients; }

    private:
        Scope(xgrad::device dev, bool records_gradients) noexcept;

        xgrad::device m_device;
        bool m_records_gradients;
    };

    namespace ops
    {
        /// FusedBatchNormV3: batch normalization, y = (x - mean) / sqrt(variance + epsilon) * scale
        /// + offset per channel, with the batch statistics (training) or the given ones (inference).
        /// Equals xgrad::fused_batch_norm with the same attributes.
        class FusedBatchNormV3
        {
        public:
            /// Optional attributes; each setter returns a modified copy.
            struct Attrs
            {
                /// A small number added to the variance (finite, >= 0).
                [[nodiscard]] Attrs Epsilon(float x) const;
                /// Running statistics = (1 - x) * (mean, variance) + x * batch statistics; in [0, 1].
                [[nodiscard]] Attrs ExponentialAvgFactor(float x) const;
                /// "NHWC", "NCHW", "NDHWC" or "NCDHW": the layout of x and y.
                [[nodiscard]] Attrs DataFormat(std::string_view x) const;
                /// Training (batch statistics) or inference (the given mean and variance).
                [[nodiscard]] Attrs IsTraining(bool x) const;

                float epsilon_ = 0.0001f;
                float exponential_avg_factor_ = 1.0f;
                std::string data_format_ = "NHWC";
                bool is_training_ = true;
            };

            FusedBatchNormV3(const Scope& scope, const tensor& x, const tensor& scale, const tensor& offset,
                             const tensor& mean, const tensor& variance);
            FusedBatchNormV3(const Scope& scope, const tensor& x, const tensor& scale, const tensor& offset,
                             const tensor& mean, const tensor& variance, const Attrs& attrs);

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
                [[nodiscard]] fused_batch_norm_grad_attrs Epsilon(float x) const;
                /// The layout of y_backprop, x and x_backprop: "NHWC", "NCHW", "NDHWC" or "NCDHW"
                /// (V2: "NHWC" or "NCHW").
                [[nodiscard]] fused_batch_norm_grad_attrs DataFormat(std::string_view x) const;
                /// The forward's mode: reserve spaces hold batch (true) or population statistics.
                [[nodiscard]] fused_batch_norm_grad_attrs IsTraining(bool x) const;

                float epsilon_ = 0.0001f;
                std::string data_format_ = "NHWC";
                bool is_training_ = true;
            };
        }

        /// FusedBatchNormGradV3: the gradient of FusedBatchNormV3 w.r.t. x, scale and offset, given
        /// the gradient y_backprop of its y and its reserve spaces. Equals
        /// xgrad::fused_batch_norm_grad (dy = y_backprop, saved_mean = reserve_space_1, saved_var =
        /// reserve_space_2).
        class FusedBatchNormGradV3
        {
        public:
            /// Optional attributes; each setter returns a modified copy.
            using Attrs = detail::fused_batch_norm_grad_attrs;

            FusedBatchNormGradV3(const Scope& scope, const tensor& y_backprop, const tensor& x, const tensor& scale,
                                 const tensor& reserve_space_1, const tensor& reserve_space_2,
                                 const tensor& reserve_space_3);
            FusedBatchNormGradV3(const Scope& scope, const tensor& y_backprop, const tensor& x, const tensor& scale,
                                 const tensor& reserve_space_1, const tensor& reserve_space_2,
                                 const tensor& reserve_space_3, const Attrs& attrs);

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
        /// tensors only (data_format "NHWC" or "NCHW"). Equals xgrad::fused_batch_norm_grad on them.
        class FusedBatchNormGradV2
        {
        public:
            /// Optional attributes; each setter returns a modified copy.
            using Attrs = detail::fused_batch_norm_grad_attrs;

            FusedBatchNormGradV2(const Scope& scope, const tensor& y_backprop, const tensor& x, const tensor& scale,
                                 const tensor& reserve_space_1, const tensor& reserve_space_2);
            FusedBatchNormGradV2(const Scope& scope, const tensor& y_backprop, const tensor& x, const tensor& scale,
                                 const tensor& reserve_space_1, const tensor& reserve_space_2, const Attrs& attrs);

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
}
