#pragma once
// Activation functions (core/src/ops/activation.cpp), composed from the elementwise ops, so
// their gradients of every order are those ops' (relu, sigmoid and tanh are elementwise
// primitives, xgrad/ops/elementwise.hpp; softmax and log_softmax are in xgrad/ops/loss.hpp).
// Each has PyTorch's torch.nn.functional meaning, including the derivative chosen at a kink
// (said per function). Floating dtypes only; float16 and bfloat16 compute in float32 as the
// elementwise ops do; NaN stays NaN. Errors: std::invalid_argument (an xgrad::invalid_argument
// for bad values) naming the op, for a non-floating x, a parameter that is not finite (or not
// positive where said), an unknown approximation.
#include <string>

#include "xgrad/tensor.hpp"

namespace xgrad
{
    /// ln(1 + e^(beta x)) / beta, computed as (relu(beta x) + log1p(e^-|beta x|)) / beta, which
    /// neither overflows nor loses the small values; PyTorch's Softplus(beta). (PyTorch returns
    /// x itself above its threshold, 20 / beta; this gives x plus the true, tiny remainder.)
    /// Gradient sigmoid(beta x), recorded as such: the composite's |x| and relu would give 0
    /// instead of 1/2 at x = 0.
    tensor softplus(const tensor& x, double beta = 1.0);
    /// x sigmoid(x) (SiLU, swish).
    tensor silu(const tensor& x);
    /// x Phi(x), Phi the standard normal CDF: approximate "none" is 0.5 x (1 + erf(x / sqrt 2))
    /// (PyTorch's default GELU), "tanh" is 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3)))
    /// (PyTorch's GELU(approximate='tanh')).
    tensor gelu(const tensor& x, const std::string& approximate = "none");
    /// x for x > 0, negative_slope * x otherwise (derivative negative_slope at 0, as PyTorch).
    tensor leaky_relu(const tensor& x, double negative_slope = 0.01);
    /// x for x > 0, alpha (e^x - 1) otherwise (derivative alpha at 0, as PyTorch).
    tensor elu(const tensor& x, double alpha = 1.0);
    /// min(max(x, 0), 6) (derivative 0 at 0 and at 6, as PyTorch).
    tensor relu6(const tensor& x);
    /// min(max(x / 6 + 1/2, 0), 1): 0 up to -3, 1 from 3 (derivative 1/6 strictly between).
    tensor hardsigmoid(const tensor& x);
    /// x hardsigmoid(x) (MobileNetV3's h-swish); derivative (2x + 3) / 6 on [-3, 3], bounds
    /// included, as PyTorch.
    tensor hardswish(const tensor& x);
}
