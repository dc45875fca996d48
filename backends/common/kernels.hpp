#pragma once
// The vocabulary every backend shares: the op codes and the window geometry, and the contract
// every kernel keeps. The kernels themselves, their signatures and their own contracts are in
// backends/common/kernel_list.hpp; each backend declares them from that list in its own
// namespace, and core/src/dispatch.cpp is the one place that picks a backend for a device.
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
//   number of threads except where documented: reductions use a fixed blocking independent of
//   the thread count; the one exception is a CPU matmul whose single product has more columns
//   than rows and is split into column blocks over the threads (backends/cpu/kernels/
//   matmul.cpp), which may differ in the last bits between thread counts, as OpenBLAS's own
//   threading does (row splits are exact).
// - The window kernels (unfold2d, fold2d) take every floating dtype and copy elements
//   without converting them; fold2d sums 16-bit values in float32 and rounds once.
#include <cstdint>

#include "xgrad/half.hpp" // XGRAD_HOST_DEVICE

/// The op codes of the elementwise and reduction kernels, each list X(name) in enum order. A
/// new op code joins its list here, gets its formula in backends/common/op_math.hpp, and its
/// row in the tests' op table (tests/support/op_cases.hpp), which a test checks against these lists.
/// Unary: neg -x; exp e^x; log ln x; sqrt; rsqrt 1/sqrt(x); abs |x|; relu max(x, 0) with
/// relu(NaN) = NaN; sigmoid 1/(1+e^-x), without overflow for large |x|; tanh; log1p ln(1+x)
/// and expm1 e^x-1, accurate near 0 where the composites lose every digit; erf, the error
/// function.
#define XGRAD_UNARY_OPS(X)                                                                                             \
    X(neg) X(exp) X(log) X(sqrt) X(rsqrt) X(abs) X(relu) X(sigmoid) X(tanh) X(log1p) X(expm1) X(erf)
/// Binary: add, sub, mul, div; pow a^b as std::pow; comparisons give 1 or 0 in the operand dtype.
#define XGRAD_BINARY_OPS(X) X(add) X(sub) X(mul) X(div) X(pow) X(eq) X(ne) X(lt) X(le) X(gt) X(ge)
/// Reductions: sum (of an empty range: 0); max (propagates NaN; the ops layer rejects empty
/// ranges).
#define XGRAD_REDUCE_OPS(X) X(sum) X(max)

namespace xgrad::kernels
{
#define XGRAD_OP_ENUMERATOR(name) name,
#define XGRAD_OP_ONE(name) +1
    enum class unary_op : std::uint8_t
    {
        XGRAD_UNARY_OPS(XGRAD_OP_ENUMERATOR)
    };
    enum class binary_op : std::uint8_t
    {
        XGRAD_BINARY_OPS(XGRAD_OP_ENUMERATOR)
    };
    enum class reduce_op : std::uint8_t
    {
        XGRAD_REDUCE_OPS(XGRAD_OP_ENUMERATOR)
    };
    /// How many op codes each list has (op codes are 0 .. count - 1).
    constexpr int unary_op_count = 0 XGRAD_UNARY_OPS(XGRAD_OP_ONE);
    constexpr int binary_op_count = 0 XGRAD_BINARY_OPS(XGRAD_OP_ONE);
    constexpr int reduce_op_count = 0 XGRAD_REDUCE_OPS(XGRAD_OP_ONE);
#undef XGRAD_OP_ONE
#undef XGRAD_OP_ENUMERATOR

#define XGRAD_OP_NAME(name) #name,
    /// The op codes' names, indexed by op code.
    constexpr const char* unary_op_names[] = {XGRAD_UNARY_OPS(XGRAD_OP_NAME)};
    constexpr const char* binary_op_names[] = {XGRAD_BINARY_OPS(XGRAD_OP_NAME)};
    constexpr const char* reduce_op_names[] = {XGRAD_REDUCE_OPS(XGRAD_OP_NAME)};
#undef XGRAD_OP_NAME

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

    /// Whether no two windows of d share an input position: each stride is at least the
    /// window's extent, (k - 1) * dilation + 1, in both axes (the usual 2x2 pool of stride 2).
    XGRAD_HOST_DEVICE inline bool windows_disjoint(const window2d_dims& d)
    {
        return d.sh >= (d.kh - 1) * d.dh + 1 && d.sw >= (d.kw - 1) * d.dw + 1;
    }

    /// Along one axis of disjoint windows: the window o < out that reads input position i
    /// (0 <= i) as one of its taps, i = o * stride - pad + k * dilation with k < kernel, or -1
    /// when no window reads it (a gap between windows, or past the last). Disjoint windows
    /// make o = (i + pad) / stride the only candidate.
    XGRAD_HOST_DEVICE inline std::int64_t disjoint_window_of(std::int64_t i, std::int64_t stride, std::int64_t pad,
                                                             std::int64_t dilation, std::int64_t kernel,
                                                             std::int64_t out)
    {
        const std::int64_t t = i + pad, o = t / stride, r = t - o * stride;
        return o < out && r % dilation == 0 && r / dilation < kernel ? o : -1;
    }
}
