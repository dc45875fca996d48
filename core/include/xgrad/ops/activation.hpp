#pragma once
// Smooth activation functions (core/src/ops/activation.cpp), composed from the elementwise
// ops, so their gradients of every order are those ops' (relu, sigmoid and tanh are
// elementwise primitives, xgrad/ops/elementwise.hpp). Floating dtypes only; float16 and
// bfloat16 compute in float32 as the elementwise ops do. Errors: std::invalid_argument (an
// xgrad::invalid_argument for bad values) naming the op, for a non-floating x, a beta that is
// not positive and finite, an unknown approximation.
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
}
