#pragma once
// Elementwise ops with NumPy broadcasting, and their gradients (core/src/ops/elementwise.cpp).
//
// Operands of a binary op must have the same dtype (no implicit promotion) and device;
// a double scalar operand takes the tensor's dtype. float16/bfloat16 compute in float32 and
// round the result back. int64 tensors are rejected. Shapes that do not broadcast throw
// std::invalid_argument naming both shapes.
#include <optional>

#include "xgrad/tensor.hpp"

namespace xgrad
{
    tensor add(const tensor& a, const tensor& b);
    tensor sub(const tensor& a, const tensor& b);
    tensor mul(const tensor& a, const tensor& b);
    tensor div(const tensor& a, const tensor& b);
    /// a^b. d/db uses log(a): only meaningful for a > 0.
    tensor pow(const tensor& a, const tensor& b);
    tensor pow(const tensor& a, double exponent);

    tensor neg(const tensor& x);
    tensor exp(const tensor& x);
    tensor log(const tensor& x);
    tensor sqrt(const tensor& x);
    tensor rsqrt(const tensor& x);
    tensor square(const tensor& x);
    tensor abs(const tensor& x);
    /// -1, 0 or 1. Not differentiable (its derivative is zero almost everywhere): the result
    /// never requires grad, like the comparisons.
    tensor sign(const tensor& x);
    tensor relu(const tensor& x);
    tensor sigmoid(const tensor& x);
    tensor tanh(const tensor& x);
    /// ln(1 + x), accurate for small |x| (log(1 + x) rounds 1 + x first). Gradient 1 / (1 + x).
    tensor log1p(const tensor& x);
    /// e^x - 1, accurate for small |x|. Gradient e^x.
    tensor expm1(const tensor& x);
    /// The error function. Gradient 2 / sqrt(pi) e^(-x^2).
    tensor erf(const tensor& x);

    /// x limited to [min, max] (either bound may be omitted; both given, min <= max, else
    /// xgrad::invalid_argument naming them). NaN stays NaN. The gradient passes where
    /// min <= x <= max (bounds included, as in PyTorch) and is 0 elsewhere.
    tensor clamp(const tensor& x, std::optional<double> min, std::optional<double> max);

    /// cond != 0 ? a : b, broadcasting all three. cond is any floating tensor (e.g. a mask
    /// from a comparison); gradients flow to a and b, not to cond.
    tensor where(const tensor& cond, const tensor& a, const tensor& b);

    /// Comparisons give 1 or 0 in the operands' dtype; they are not differentiable.
    tensor eq(const tensor& a, const tensor& b);
    tensor ne(const tensor& a, const tensor& b);
    tensor lt(const tensor& a, const tensor& b);
    tensor le(const tensor& a, const tensor& b);
    tensor gt(const tensor& a, const tensor& b);
    tensor ge(const tensor& a, const tensor& b);

    /// A 0-d tensor holding `value` with x's dtype and device.
    tensor scalar_like(const tensor& x, double value);
    /// The broadcast shape of a and b; throws std::invalid_argument naming both.
    shape_type broadcast_shapes(const shape_type& a, const shape_type& b);

    tensor operator+(const tensor& a, const tensor& b);
    tensor operator-(const tensor& a, const tensor& b);
    tensor operator*(const tensor& a, const tensor& b);
    tensor operator/(const tensor& a, const tensor& b);
    tensor operator-(const tensor& x);
    tensor operator+(const tensor& a, double b);
    tensor operator-(const tensor& a, double b);
    tensor operator*(const tensor& a, double b);
    tensor operator/(const tensor& a, double b);
    tensor operator+(double a, const tensor& b);
    tensor operator-(double a, const tensor& b);
    tensor operator*(double a, const tensor& b);
    tensor operator/(double a, const tensor& b);
}
