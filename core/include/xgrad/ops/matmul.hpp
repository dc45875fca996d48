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
}
