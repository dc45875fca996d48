#pragma once
// Shared by the batch-norm implementation files and the TensorFlow compatibility layer
// (core/src/compat/): the ops with the name, formats and argument names of their caller, the
// argument checks of the contract's section 6 (batch_norm_check.cpp) and the composite
// formulas (batch_norm_composite.cpp).
#include <vector>

#include "xgrad/ops/batch_norm.hpp"
#include "xgrad/ops/reduce.hpp"

namespace xgrad::detail
{
    /// The data formats a gradient op takes: all four, or the 4-D ones of TensorFlow's
    /// FusedBatchNormGradV2.
    enum class bn_formats
    {
        all,
        four_d
    };

    /// The names a gradient op's messages give its arguments: xgrad's own, or TensorFlow's.
    struct bn_grad_names
    {
        const char* dy;
        const char* saved_mean;
        const char* saved_var;
    };
    inline constexpr bn_grad_names native_grad_names{"dy", "saved_mean", "saved_var"};
    inline constexpr bn_grad_names tensorflow_grad_names{"y_backprop", "reserve_space_1", "reserve_space_2"};

    /// xgrad::fused_batch_norm with `op` at the start of its messages.
    batch_norm_forward_result fused_batch_norm(const tensor& x, const tensor& scale, const tensor& offset,
                                               const tensor& mean, const tensor& variance,
                                               const batch_norm_attrs& attrs, const char* op);
    /// xgrad::fused_batch_norm_grad taking the formats given, with the names given and `op` in
    /// its messages.
    batch_norm_grad_result fused_batch_norm_grad(const tensor& dy, const tensor& x, const tensor& scale,
                                                 const tensor& saved_mean, const tensor& saved_var,
                                                 const batch_norm_attrs& attrs, bn_formats formats,
                                                 const bn_grad_names& names, const char* op);

    /// The checks of the gradient ops, in the contract's order, for dy (named dy_name), x and
    /// the named per-channel tensors; returns x's layout.
    batch_norm_layout check_bn_grad_args(const tensor& dy, const tensor& x,
                                         const std::vector<std::pair<const char*, tensor>>& per_channel,
                                         const batch_norm_attrs& attrs, bn_formats formats, const char* op,
                                         const char* dy_name = native_grad_names.dy);
    /// check_bn_grad_args for scale and the saved statistics.
    batch_norm_layout check_bn_grad(const tensor& dy, const tensor& x, const tensor& scale, const tensor& saved_mean,
                                    const tensor& saved_var, const batch_norm_attrs& attrs, const char* op,
                                    bn_formats formats = bn_formats::all,
                                    const bn_grad_names& names = native_grad_names);
    /// The checks of the forward ops, with `op` at the start of the messages; returns x's layout.
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

    // --- composite formulas, written with primitive ops ---------------------------------------
    // The fused ops' oracles in the tests, and the backward of fused_batch_norm_grad_grad (the
    // third order and beyond, which has no fused op).
    /// Section 4 of the contract with xgrad's ops: dx, dscale, doffset.
    batch_norm_grad_result batch_norm_grad_composite(const tensor& dy, const tensor& x, const tensor& scale,
                                                     const tensor& saved_mean, const tensor& saved_var,
                                                     const batch_norm_attrs& attrs = {});
    /// Section 5 of the contract with xgrad's ops (training: mean and variance recomputed from x).
    batch_norm_grad_grad_result batch_norm_grad_grad_composite(const tensor& A, const tensor& a, const tensor& b,
                                                               const tensor& dy, const tensor& x, const tensor& scale,
                                                               const tensor& saved_mean, const tensor& saved_var,
                                                               const batch_norm_attrs& attrs = {});
}
