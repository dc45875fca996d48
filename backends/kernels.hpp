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
// - The window kernels (unfold2d, fold2d) take every floating dtype and copy elements
//   without converting them; fold2d sums 16-bit values in float32 and rounds once.
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

    /// The geometry of a 2-D sliding window over an [n, c, h, w] input (unfold2d, fold2d).
    /// Window (oh, ow), tap (kh, kw) reads input row oh * sh - ph + kh * dh and column
    /// ow * sw - pw + kw * dw; positions outside [0, h) x [0, w) are padding. The ops layer
    /// guarantees kh, kw, sh, sw, dh, dw >= 1, ph, pw >= 0, and oh, ow the output extents of
    /// that window (every index computed from these fits in int64).
    struct window2d_dims
    {
        std::int64_t n, c, h, w;
        std::int64_t kh, kw; // kernel
        std::int64_t sh, sw; // stride
        std::int64_t ph, pw; // padding
        std::int64_t dh, dw; // dilation
        std::int64_t oh, ow; // output extents
    };
}
