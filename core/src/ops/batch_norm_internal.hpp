#pragma once
// Shared by the batch-norm implementation files: the argument checks of the contract's
// section 6 (defined in batch_norm_check.cpp) and the composite formulas (batch_norm_composite.cpp).
#include <vector>

#include "xgrad/ops/batch_norm.hpp"
#include "xgrad/ops/reduce.hpp"

namespace xgrad::detail
{
    /// The checks of the gradient ops, in the contract's order, for y_backprop, x and the named
    /// per-channel tensors; returns x's layout.
    batch_norm_layout check_bn_grad_args(const tensor& y_backprop, const tensor& x,
                                         const std::vector<std::pair<const char*, tensor>>& per_channel,
                                         const batch_norm_attrs& attrs, batch_norm_grad_version version,
                                         const char* op);
    /// check_bn_grad_args for scale, reserve_space_1 and reserve_space_2.
    batch_norm_layout check_bn_grad(const tensor& y_backprop, const tensor& x, const tensor& scale,
                                    const tensor& reserve_space_1, const tensor& reserve_space_2,
                                    const batch_norm_attrs& attrs, batch_norm_grad_version version, const char* op);
    /// The checks of the forward ops (fused_batch_norm as "FusedBatchNormV3", and
    /// fused_batch_norm_relu), with `op` at the start of the messages; returns x's layout.
    batch_norm_layout check_bn_forward(const tensor& x, const tensor& scale, const tensor& offset, const tensor& mean,
                                       const tensor& variance, const batch_norm_attrs& attrs, const char* op);
    /// The checks of x alone (defined, rank, data_format, channels, dtype); returns its layout.
    batch_norm_layout check_bn_input(const tensor& x, const batch_norm_attrs& attrs, const char* op);
    /// The layout of x for a data format already validated.
    batch_norm_layout bn_layout_of(const tensor& x, const std::string& data_format);
    /// Checks that every per-channel tensor in `vs` is 1-D of length C with the statistics
    /// dtype, and every x-like tensor in `xs` has x's shape and dtype (second-order inputs).
    void check_bn_same(const batch_norm_layout& layout, const tensor& x,
                       const std::vector<std::pair<const char*, tensor>>& xs,
                       const std::vector<std::pair<const char*, tensor>>& vs, const char* op);
}
