#pragma once
// Reductions over axes, with keepdim, and their gradients (core/src/ops/reduce.cpp).
//
// `axes` may hold negative indices (counted from the end); an empty list reduces every axis.
// An axis out of range or listed twice throws std::invalid_argument naming it and the shape.
// float16/bfloat16 accumulate in float32.
#include <vector>

#include "xgrad/tensor.hpp"

namespace xgrad
{
    using axes_type = std::vector<std::int64_t>;

    tensor sum(const tensor& x, const axes_type& axes = {}, bool keepdim = false);
    tensor mean(const tensor& x, const axes_type& axes = {}, bool keepdim = false);
    /// Maximum over axes. Where several elements tie for the maximum, the gradient is shared
    /// equally between them (the subgradient that keeps max symmetric). Reducing an axis of
    /// extent 0 throws.
    tensor max(const tensor& x, const axes_type& axes = {}, bool keepdim = false);
    /// The index of the maximum of x along `dim` (negative counts from the end), as int64, with
    /// `dim` kept as extent 1 when keepdim. Where several elements tie, the first wins; a NaN
    /// counts as the maximum (the first NaN wins), as in torch.argmax. Any dtype; a 0-d x gives
    /// 0. Not differentiable: the result never requires grad. Throws xgrad::invalid_argument
    /// when x is undefined, `dim` is out of range, or x's extent along `dim` is 0.
    tensor argmax(const tensor& x, std::int64_t dim = -1, bool keepdim = false);
    /// The index of the minimum, as argmax is of the maximum (the first minimum wins; a NaN
    /// counts as the minimum, the first NaN winning, as in torch.argmin). It is argmax of -x
    /// for floating x (negation is exact), and of ~x (-x - 1, which cannot overflow) for int64
    /// x, whose values make a round trip through the host. Errors as argmax's, naming argmin.
    tensor argmin(const tensor& x, std::int64_t dim = -1, bool keepdim = false);
    /// Sums x down to `shape`, the inverse of broadcasting (x's shape must broadcast from it).
    tensor sum_to(const tensor& x, const shape_type& shape);
}
