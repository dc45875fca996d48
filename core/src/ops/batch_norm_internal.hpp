#pragma once
// Shared by the batch-norm implementation files (and the synchronised batch norm of
// layers/src/distributed/): the layout of x as the kernels see it, the argument checks of the
// contract's section 6, and the recorded identity the composite backward paths build on (all
// defined in batch_norm_check.cpp).
#include <vector>

#include "xgrad/ops/batch_norm.hpp"
#include "xgrad/ops/reduce.hpp"

namespace xgrad::detail
{
    /// x viewed as [outer, C, inner] (channels-last: inner = 1; channels-first: outer = N).
    struct bn_layout
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

    /// float64 for float64 x, float32 otherwise.
    dtype bn_stats_dtype(dtype xdt) noexcept;

    /// A recorded identity: a view of x whose node passes its gradient unchanged to x. A
    /// backward that rebuilds a function of its inputs (the composite formula, for an order the
    /// fused kernels do not cover) builds it on these, and differentiates w.r.t. exactly these
    /// uses of the inputs.
    tensor bn_identity(const tensor& x);

    /// The checks of the gradient ops, in the contract's order, for y_backprop, x and the named
    /// per-channel tensors; returns x's layout.
    bn_layout check_bn_grad_args(const tensor& y_backprop, const tensor& x,
                                 const std::vector<std::pair<const char*, tensor>>& per_channel,
                                 const batch_norm_attrs& attrs, batch_norm_grad_version version, const char* op);
    /// check_bn_grad_args for scale, reserve_space_1 and reserve_space_2.
    bn_layout check_bn_grad(const tensor& y_backprop, const tensor& x, const tensor& scale,
                            const tensor& reserve_space_1, const tensor& reserve_space_2, const batch_norm_attrs& attrs,
                            batch_norm_grad_version version, const char* op);
    /// The checks of the forward ops (fused_batch_norm as "FusedBatchNormV3", and
    /// fused_batch_norm_relu), with `op` at the start of the messages; returns x's layout.
    bn_layout check_bn_forward(const tensor& x, const tensor& scale, const tensor& offset, const tensor& mean,
                               const tensor& variance, const batch_norm_attrs& attrs, const char* op);
    /// The layout of x for a data format already validated.
    bn_layout bn_layout_of(const tensor& x, const std::string& data_format);
    /// Checks that every per-channel tensor in `vs` is 1-D of length C with the statistics
    /// dtype, and every x-like tensor in `xs` has x's shape and dtype (second-order inputs).
    void check_bn_same(const bn_layout& layout, const tensor& x, const std::vector<std::pair<const char*, tensor>>& xs,
                       const std::vector<std::pair<const char*, tensor>>& vs, const char* op);
}
