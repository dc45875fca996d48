#pragma once
// The formula of every unary and binary op code (backends/common/kernels.hpp), written once for the
// backends' element-at-a-time paths: the CPU reference kernels (backends/cpu/reference/math.cpp) and
// the CUDA kernels (backends/cuda/elementwise.cpp, which compile them for the device), so both
// evaluate the same expression. The CPU's SIMD kernels have vector forms of their own, tested
// against the reference.
#include <cmath>

#include "backends/common/kernels.hpp"
#include "xgrad/dtype.hpp"
#include "xgrad/half.hpp" // XGRAD_HOST_DEVICE

namespace xgrad::kernels
{
    template <class T>
    XGRAD_HOST_DEVICE T apply(unary_op op, T x)
    {
        switch (op)
        {
        case unary_op::neg: return -x;
        case unary_op::exp: return std::exp(x);
        case unary_op::log: return std::log(x);
        case unary_op::sqrt: return std::sqrt(x);
        case unary_op::rsqrt: return T(1) / std::sqrt(x);
        case unary_op::abs: return std::fabs(x);
        case unary_op::relu: return x < T(0) ? T(0) : x;
        case unary_op::sigmoid: return x >= T(0) ? T(1) / (T(1) + std::exp(-x)) : std::exp(x) / (T(1) + std::exp(x));
        case unary_op::tanh: return std::tanh(x);
        case unary_op::log1p: return std::log1p(x);
        case unary_op::expm1: return std::expm1(x);
        case unary_op::erf: return std::erf(x);
        }
        return x;
    }

    template <class T>
    XGRAD_HOST_DEVICE T apply(binary_op op, T a, T b)
    {
        switch (op)
        {
        case binary_op::add: return a + b;
        case binary_op::sub: return a - b;
        case binary_op::mul: return a * b;
        case binary_op::div: return a / b;
        case binary_op::pow: return std::pow(a, b);
        case binary_op::eq: return a == b ? T(1) : T(0);
        case binary_op::ne: return a != b ? T(1) : T(0);
        case binary_op::lt: return a < b ? T(1) : T(0);
        case binary_op::le: return a <= b ? T(1) : T(0);
        case binary_op::gt: return a > b ? T(1) : T(0);
        case binary_op::ge: return a >= b ? T(1) : T(0);
        }
        return a;
    }

    /// Calls f(T{}) for the compute dtypes float32 and float64 (the ops layer passes only these
    /// to the math kernels).
    template <class F>
    void visit_compute(dtype dt, F&& f)
    {
        if (dt == dtype::float64)
            f(double{});
        else
            f(float{});
    }
}
