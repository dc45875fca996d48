#pragma once
// The fused batch-norm op family (core/src/ops/batch_norm*.cpp): the forward, its gradient and
// the gradient's gradient, each one fused op, with the semantics of TensorFlow's
// FusedBatchNormV3 / FusedBatchNormGradV3. The contract is docs/batch_norm_contract.md;
// docs/batch_norm.md is the reference (formulas, dtypes, layouts, errors, derivations).
//
// These free functions are xgrad's own API, in its own words: the forward saves the statistics
// its gradient needs as saved_mean and saved_var (what TensorFlow calls reserve_space_1 and _2),
// and the gradient returns dx, dscale and doffset. Errors name the function called. The
// TensorFlow-shaped classes (Scope, ops::FusedBatchNormV3, ops::FusedBatchNormGradV3 and V2,
// with TensorFlow's names and messages) are a compatibility layer for porting, in
// xgrad/compat/tensorflow.hpp, built on the same code.
//
// Shapes: x is rank 4 (data_format "NHWC" or "NCHW") or rank 5 ("NDHWC", "NCDHW"); C is its
// channel extent and every per-channel tensor is 1-D of length C. dtypes: x-like tensors
// float16, bfloat16, float32 or float64; per-channel tensors float32 (float64 when x is
// float64). Bad input throws xgrad::invalid_argument (a std::invalid_argument) naming the
// shapes, dtypes or attribute, before any output is written.
//
// Autograd: y of the forward is differentiable w.r.t. x, scale and offset (the other outputs
// are not); the gradient op's outputs are differentiable w.r.t. dy, x and scale (a
// fused second-order op), and that op is differentiable again, to any order. The saved and
// running statistics, mean, variance and epsilon get no gradient.
//
// ReLU fusion: fused_batch_norm_relu is relu(fused_batch_norm(...).y) in one pass, and
// fused_batch_norm_relu_grad its gradient, fused_batch_norm_grad of the masked
// where(y > 0, dy, 0), also in one pass (docs/batch_norm.md, section 1.8).
// fused_batch_norm_relu_max_pool2d adds the max pooling that usually follows: one autograd
// node whose backward never reads the full-size ReLU output (section 1.9).
#include <string>
#include <string_view>

#include "xgrad/errors.hpp"
#include "xgrad/ops/pool.hpp"
#include "xgrad/ops/reduce.hpp"
#include "xgrad/tensor.hpp"

namespace xgrad
{
    struct batch_norm_attrs
    {
        float epsilon = 0.0001f;
        std::string data_format = "NHWC";
        bool is_training = true;
        /// Forward only: running statistics = (1 - f) old + f batch (f = 1: batch only).
        float exponential_avg_factor = 1.0f;
    };

    struct batch_norm_forward_result
    {
        /// The normalised x (x's shape and dtype).
        tensor y;
        /// The running statistics after this call, [C]: in training (1 - f) mean + f batch
        /// mean and (1 - f) variance + f unbiased batch variance, f = exponential_avg_factor;
        /// in inference, copies of mean and variance.
        tensor running_mean, running_var;
        /// What the gradient needs, [C]: the batch mean and biased batch variance (training),
        /// or copies of mean and variance (inference).
        tensor saved_mean, saved_var;
    };

    /// Batch normalisation of x: y = (x - m) / sqrt(v + epsilon) * scale + offset per channel,
    /// with the batch's statistics m, v (training) or the given mean and variance (inference).
    /// mean/variance may be empty when is_training and exponential_avg_factor == 1 (they are
    /// not read then).
    batch_norm_forward_result fused_batch_norm(const tensor& x, const tensor& scale, const tensor& offset,
                                               const tensor& mean, const tensor& variance,
                                               const batch_norm_attrs& attrs = {});

    /// Batch norm followed by ReLU, fused: the outputs of fused_batch_norm (same arguments, same
    /// checks, errors naming "fused_batch_norm_relu"), except y = max(y_bn, 0) (NaN stays NaN),
    /// applied by the kernels as they store y, so no pre-activation tensor is written.
    /// Autograd: y is differentiable w.r.t. x, scale and offset; its backward is
    /// fused_batch_norm_relu_grad with this y and the saved statistics. ReLU's derivative at 0 is
    /// taken as 0 (an element with y == 0 gets no gradient), as in xgrad::relu.
    batch_norm_forward_result fused_batch_norm_relu(const tensor& x, const tensor& scale, const tensor& offset,
                                                    const tensor& mean, const tensor& variance,
                                                    const batch_norm_attrs& attrs = {});

    /// max_pool2d(fused_batch_norm_relu(x, ...).y, pool, attrs.data_format) as one op: x is
    /// rank 4 ("NHWC" or "NCHW"); the checks are those of both ops (errors naming
    /// "fused_batch_norm_relu_max_pool2d"). The result is fused_batch_norm_relu's with y the
    /// pooled output, bit for bit the two ops' values, statistics included. Autograd: y is
    /// differentiable w.r.t. x, scale and offset, to any order, with the gradients of the two
    /// ops chained (bit for bit in the first order): the backward masks the pooled gradient by
    /// (pooled y > 0), which is ReLU's mask at every window's chosen element, scatters it to
    /// x's shape and runs the batch-norm gradient on it, without the full-size ReLU output,
    /// which the op does not keep.
    batch_norm_forward_result fused_batch_norm_relu_max_pool2d(const tensor& x, const tensor& scale,
                                                               const tensor& offset, const tensor& mean,
                                                               const tensor& variance, const batch_norm_attrs& attrs,
                                                               const pool2d_params& pool);

    struct batch_norm_grad_result
    {
        /// The gradients w.r.t. x (x's shape and dtype), scale and offset ([C]).
        tensor dx, dscale, doffset;
    };

    /// The gradient of fused_batch_norm w.r.t. x, scale and offset, given dy (the gradient of
    /// its y) and its saved_mean and saved_var; attrs as in the forward (epsilon, data_format,
    /// is_training: whether the statistics were the batch's, and so depend on x).
    batch_norm_grad_result fused_batch_norm_grad(const tensor& dy, const tensor& x, const tensor& scale,
                                                 const tensor& saved_mean, const tensor& saved_var,
                                                 const batch_norm_attrs& attrs = {});

    /// The gradient of fused_batch_norm_relu: fused_batch_norm_grad (V3 formats) evaluated at the
    /// masked cotangent where(y > 0, dy, 0), the mask applied by the kernel as it loads
    /// dy. y is the fused op's output (x's shape, dtype and device, else
    /// xgrad::invalid_argument naming y); the other arguments and checks are those of
    /// fused_batch_norm_grad, with "fused_batch_norm_relu_grad" in the messages. Differentiable
    /// w.r.t. dy, x and scale, to any order: the mask is constant almost everywhere, so
    /// the backward is fused_batch_norm_grad_grad at the masked dy, with its
    /// d_dy masked too. y gets no gradient.
    batch_norm_grad_result fused_batch_norm_relu_grad(const tensor& dy, const tensor& x, const tensor& y,
                                                      const tensor& scale, const tensor& saved_mean,
                                                      const tensor& saved_var, const batch_norm_attrs& attrs = {});

    // --- the training-mode gradient as its two phases (not recorded by autograd) -------------
    /// Phase 1, a per-channel reduction: sum_dy = Σdy, sum_dy_xc = Σdy·(x − μ). A data-parallel
    /// batch norm all-reduces these 2·C values between the phases.
    struct batch_norm_grad_sums
    {
        tensor sum_dy, sum_dy_xc;
    };
    batch_norm_grad_sums batch_norm_grad_reduce(const tensor& dy, const tensor& x, const tensor& saved_mean,
                                                const batch_norm_attrs& attrs = {});
    /// Phase 2, elementwise given the (possibly all-reduced) sums and the total element count
    /// per channel R (over every replica). Returns dx, dscale = r·sum_dy_xc and
    /// doffset = sum_dy.
    batch_norm_grad_result batch_norm_grad_apply(const tensor& dy, const tensor& x, const tensor& scale,
                                                 const tensor& saved_mean, const tensor& saved_var,
                                                 const batch_norm_grad_sums& sums, std::int64_t count,
                                                 const batch_norm_attrs& attrs = {});

    // --- for ops built on the batch norm (a data-parallel one) --------------------------------
    /// x as the batch-norm kernels see it: [outer, C, inner] (channels-last: inner = 1;
    /// channels-first: outer = N).
    struct batch_norm_layout
    {
        bool channels_last = true;
        std::int64_t rank = 4;
        std::int64_t channel_dim = 3;
        std::int64_t outer = 0, C = 0, inner = 0;
        std::int64_t count() const noexcept { return outer * inner; } // R, elements per channel
        /// The shape a per-channel [C] tensor is reshaped to so that it broadcasts against x.
        shape_type channel_shape() const;
        /// Every axis but the channel axis.
        axes_type reduce_axes() const;
    };

    /// The dtype of the per-channel tensors for x of dtype xdt: float64 for float64, float32
    /// otherwise.
    dtype batch_norm_stats_dtype(dtype xdt) noexcept;

    /// The checks fused_batch_norm makes of x, scale, offset and attrs in training mode without
    /// running statistics (is_training and exponential_avg_factor are not read), with `op`, the
    /// name of the caller, at the start of the messages; returns x's layout.
    batch_norm_layout check_batch_norm_forward(const tensor& x, const tensor& scale, const tensor& offset,
                                               const batch_norm_attrs& attrs, const char* op);

    /// Per channel, the mean and the biased variance of x ([C], the statistics dtype): the
    /// statistics the training forward normalises with, by the same two-pass kernel (the mean,
    /// then the squared deviations from it). Not recorded (no gradient). x: rank 4 or 5 in
    /// attrs.data_format, as for fused_batch_norm; an x with no elements per channel gives NaN.
    struct batch_norm_moments_result
    {
        tensor mean, variance;
    };
    batch_norm_moments_result batch_norm_moments(const tensor& x, const batch_norm_attrs& attrs = {});

    // --- second order ------------------------------------------------------------------------
    struct batch_norm_grad_grad_result
    {
        /// The vector-Jacobian products w.r.t. dy, x and scale.
        tensor d_dy, d_x, d_scale;
    };
    /// The gradient of fused_batch_norm_grad: given cotangents A (of dx), a (of
    /// dscale) and b (of doffset), the vector-Jacobian products w.r.t.
    /// dy, x and scale (training: batch statistics as functions of x). Two passes over
    /// memory. Differentiable itself (its gradient is that of the composite formula).
    batch_norm_grad_grad_result fused_batch_norm_grad_grad(const tensor& A, const tensor& a, const tensor& b,
                                                           const tensor& dy, const tensor& x, const tensor& scale,
                                                           const tensor& saved_mean, const tensor& saved_var,
                                                           const batch_norm_attrs& attrs = {});
}
