#pragma once
// The kernel set every backend implements, with identical signatures in `xgrad::cpu` and (later)
// `xgrad::cuda`. This header holds the shared vocabulary (op codes) and the contract; each
// backend declares the same free functions in its own namespace (backends/cpu/cpu_kernels.hpp),
// and core/src/dispatch.cpp is the one place that picks a backend for a device.
//
// Contract shared by every kernel:
// - Outputs come first, then inputs, then sizes. Pointers point at element 0 of a (possibly
//   strided) view; `shape` has `ndim` extents and every `*_strides` array has `ndim` entries,
//   counted in elements (not bytes). A stride may be 0 (a broadcast input); strides are never
//   negative. `ndim` may be 0 (one element).
// - Kernels ASSIGN into their outputs; none accumulates. Output views never overlap inputs
//   unless they are the identical view (same pointer and strides), which is allowed.
// - Math kernels (unary, binary, where, reduce, matmul) take dtype float32 or float64 only;
//   the ops layer converts float16/bfloat16 to float32 before calling them. `copy` and `fill`
//   take every dtype. Kernels do not validate their arguments (the ops layer checks shapes and dtypes
//   first), except where a backend's own limit is narrower than this contract (the CPU GEMM
//   takes int dimensions and throws std::invalid_argument beyond INT_MAX).
// - CPU kernels parallelise over the framework's thread pool; results do not depend on the
//   number of threads except where documented (none at present: reductions use a fixed
//   blocking independent of the thread count).
#include <cstdint>

namespace xgrad::kernels
{
    enum class unary_op : std::uint8_t
    {
        neg,     // -x
        exp,     // e^x
        log,     // ln x
        sqrt,    // sqrt(x)
        rsqrt,   // 1/sqrt(x)
        abs,     // |x|
        relu,    // max(x, 0)   (relu(NaN) = NaN)
        sigmoid, // 1/(1+e^-x), computed without overflow for large |x|
        tanh     // tanh x
    };

    enum class binary_op : std::uint8_t
    {
        add,
        sub,
        mul,
        div,
        pow, // a^b, as std::pow
        eq,  // comparisons produce 1 or 0 in the operand dtype
        ne,
        lt,
        le,
        gt,
        ge
    };

    enum class reduce_op : std::uint8_t
    {
        sum, // sum of an empty range is 0
        max  // max propagates NaN; the ops layer rejects empty ranges
    };
}
