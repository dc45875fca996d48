#pragma once
// Matrix products (core/src/ops/matmul.cpp), through the backend's GEMM: OpenBLAS on the CPU
// (the scalar reference loop when the backend is built with XGRAD_SIMD=scalar).
#include "xgrad/tensor.hpp"

namespace xgrad
{
    /// NumPy matmul semantics: [..., m, k] @ [..., k, n] -> [..., m, n] with broadcast batch
    /// dimensions; a 1-D left operand is a row vector and a 1-D right operand a column vector
    /// (the added dimension is removed from the result). Throws std::invalid_argument naming
    /// both shapes when the inner dimensions differ or batch dimensions do not broadcast, and
    /// naming the dtypes when they differ.
    tensor matmul(const tensor& a, const tensor& b);

    /// a @ b + c in one GEMM (beta = 1 over c broadcast to the product's shape): what
    /// `matmul(a, b) + c` computes, without the separate pass over the product, for a bias
    /// (conv2d and nn::linear use it). a [..., m, k] and b [..., k, n] have at least two
    /// dimensions each (batch dimensions broadcast as in matmul); c broadcasts to the product's
    /// shape [..., m, n] without enlarging it ([n] for a bias per column, [m, 1] per row). c
    /// is one more term of each dot product's sum, added once, at a point of the sum that the
    /// GEMM chooses (it may block k), so the result is matmul(a, b) + c up to the rounding of a
    /// sum of k + 1 terms, not bitwise. Differentiable in a, b and c to every order (dc is the incoming
    /// gradient summed to c's shape). Throws std::invalid_argument naming the shapes when an
    /// operand has fewer than two dimensions, the inner dimensions differ, the batch dimensions
    /// do not broadcast, or c does not broadcast to the product's shape, and naming the dtypes or
    /// devices when the three differ.
    tensor matmul_add(const tensor& a, const tensor& b, const tensor& c);
}
