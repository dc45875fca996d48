#pragma once
// Layer, group and instance normalisation (core/src/ops/norm.cpp), PyTorch's functional forms,
// each composed from the fused batch norm: x is reshaped so that the groups normalised together
// are the batch norm's channels, normalised in training mode with unit scale and zero offset
// (the batch norm's statistics are then the group's mean and biased variance), reshaped back
// and given its affine parameters. So the values are the batch norm's, and the gradients of
// every order are its gradients (a fused first and second order, the composite beyond).
//
// dtypes: x float16, bfloat16, float32 or float64 (16-bit x normalised with float32
// statistics, as the batch norm does); weight and bias, when given, x's dtype and device.
// eps: finite and >= 0, used as a float (the batch norm's epsilon attribute).
// Errors: xgrad::invalid_argument naming the function and what was wrong (x undefined or not
// floating, shapes, the group count, weight or bias of another shape, dtype or device, eps).
#include <cstdint>

#include "xgrad/tensor.hpp"

namespace xgrad
{
    /// Normalises x over its last normalized_shape.size() dimensions, which must equal
    /// normalized_shape (non-empty): y = (x - mean) / sqrt(var + eps) * weight + bias, with the
    /// mean and biased variance of each slice; weight and bias (optional, undefined to leave
    /// them out) have shape normalized_shape. torch.nn.functional.layer_norm.
    tensor layer_norm(const tensor& x, const shape_type& normalized_shape, const tensor& weight = {},
                      const tensor& bias = {}, double eps = 1e-5);

    /// x of shape [N, C, ...] (rank 2 or more, channels first) with its C channels cut into
    /// num_groups groups of C / num_groups (num_groups must divide C): each sample's group is
    /// normalised over its channels and every position, then y = x_hat * weight + bias per
    /// channel (weight, bias: [C], optional). torch.nn.functional.group_norm.
    tensor group_norm(const tensor& x, std::int64_t num_groups, const tensor& weight = {}, const tensor& bias = {},
                      double eps = 1e-5);

    /// group_norm with one group per channel: each sample's channel normalised over its
    /// positions (rank 3 or more). torch.nn.functional.instance_norm without running statistics.
    tensor instance_norm(const tensor& x, const tensor& weight = {}, const tensor& bias = {}, double eps = 1e-5);
}
