#pragma once
// Gathering and scattering by int64 positions (core/src/ops/index.cpp): a pair of adjoint
// linear primitives, each the other's gradient, so that an op composed from them (max
// pooling) has gradients of every order.
//
// Positions index x's elements in row-major order (x.reshape({-1})), whatever x's strides.
// Errors (std::invalid_argument, an xgrad::invalid_argument for all but an undefined operand,
// naming the op, the position and the value): idx not int64, a non-floating x or g, a
// position outside [0, numel).
#include "xgrad/tensor.hpp"

namespace xgrad
{
    /// out[i...] = x.reshape({-1})[idx[i...]]: shape of idx, dtype of x. Gradient: put_add.
    tensor take(const tensor& x, const tensor& idx);
    /// zeros(shape), then g[i...] added at row-major position idx[i...] (g and idx of one
    /// shape; repeated positions add up, in row-major order of idx). Gradient w.r.t. g: take.
    tensor put_add(const tensor& g, const tensor& idx, const shape_type& shape);
}
