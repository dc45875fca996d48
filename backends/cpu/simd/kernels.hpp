#pragma once
// Internal to the CPU backend: the SIMD inner loops of the fast kernels, as xsimd functors.
//
// Each functor body is written once (simd/kernels_impl.hpp) and compiled once per instruction
// set, in its own translation unit with that instruction set's compiler flags
// (simd/sse2.cpp: the x86-64 baseline; simd/avx2.cpp: -mavx2 -mfma -mf16c; simd/avx512.cpp:
// the same plus -mavx512f -mavx512cd -mavx512bw -mavx512dq -mavx512vl). The fast kernels
// (kernels/elementwise.cpp, reduce.cpp, copy_fill.cpp) see only these declarations and the
// `extern template` lines below, so they instantiate no SIMD code themselves; they pick the
// instantiation at run time (simd_call, dispatch.hpp). This is xsimd's documented pattern for
// run-time dispatch, and it keeps AVX2 and AVX-512 instructions out of every code path a
// processor without them can reach.
//
// The functors work on one contiguous run: the output is contiguous, every input is either
// contiguous (stride 1) or a broadcast scalar (stride 0). The fast kernels do the N-d walking
// (layout.hpp), the gathering of strided operands and the threading.
#include <cstdint>

#include <xsimd/xsimd.hpp>

#include "backends/common/kernels.hpp"
#include "backends/common/optimizer_math.hpp"
#include "xgrad/half.hpp"

namespace xgrad::cpu::simd
{
    /// out[i] = op(x[i * x_stride]) for i < n; x_stride is 0 or 1.
    struct unary_fn
    {
        template <class Arch, class T>
        void operator()(Arch, T* out, const T* x, std::int64_t x_stride, std::int64_t n,
                        kernels::unary_op op) const noexcept;
    };

    /// out[i] = op(a[i * a_stride], b[i * b_stride]); strides 0 or 1; op is not pow (pow is
    /// std::pow in kernels/elementwise.cpp: xsimd has no pow that matches std::pow's accuracy and special
    /// cases).
    struct binary_fn
    {
        template <class Arch, class T>
        void operator()(Arch, T* out, const T* a, std::int64_t a_stride, const T* b, std::int64_t b_stride,
                        std::int64_t n, kernels::binary_op op) const noexcept;
    };

    /// out[i] = cond[i * c_stride] != 0 ? a[i * a_stride] : b[i * b_stride]; strides 0 or 1.
    struct where_fn
    {
        template <class Arch, class T>
        void operator()(Arch, T* out, const T* cond, std::int64_t c_stride, const T* a, std::int64_t a_stride,
                        const T* b, std::int64_t b_stride, std::int64_t n) const noexcept;
    };

    /// op over x[0..n), n >= 1, in a fixed order that depends only on n and the instruction
    /// set: four vector accumulators take consecutive batches round-robin (leftover whole
    /// batches go to the first, the padded tail to the second), then they and their lanes are
    /// combined pairwise. Sum error: each lane adds at most n / (4 W) + 3 terms (W = lanes per
    /// batch), then 2 + log2(W) pairwise levels, so
    /// |error| <= (n / (4 W) + 5 + log2 W) * u * sum |x_i|  (u = unit roundoff).
    /// max propagates NaN.
    struct reduce_contiguous_fn
    {
        template <class Arch, class T>
        T operator()(Arch, const T* x, std::int64_t n, kernels::reduce_op op) const noexcept;
    };

    /// acc[j] = op over r < nrows (in order r = 0, 1, ...) of x[row_offsets[r] + j], for
    /// j < ncols; nrows >= 1. Rows are whole vectors: this is the "reduce a leading dimension,
    /// keep a contiguous trailing one" loop, SIMD across columns instead of gathering strided
    /// columns. acc does not alias x. max propagates NaN.
    struct reduce_rows_fn
    {
        template <class Arch, class T>
        void operator()(Arch, T* acc, const T* x, const std::int64_t* row_offsets, std::int64_t nrows,
                        std::int64_t ncols, kernels::reduce_op op) const noexcept;
    };

    /// Max pooling's 2x2 windows of stride 2 along one output row, every tap inside the input
    /// (the kernel max_pool2d's common case): window o has the taps r0[2o], r0[2o + 1],
    /// r0[row + 2o], r0[row + 2o + 1], in that (kh, kw) order; for o < n, out[o] = their
    /// maximum and idx[o] = base + the chosen tap's offset from r0. The first maximum wins; a
    /// NaN wins over numbers (the first NaN). ASSIGNS out and idx.
    struct max_pool_2x2_row_fn
    {
        template <class Arch, class T>
        void operator()(Arch, T* out, std::int64_t* idx, const T* r0, std::int64_t row, std::int64_t base,
                        std::int64_t n) const noexcept;
    };

    /// The same windows over a whole plane whose rows are too short to fill vectors: window o
    /// (o < n) has its first tap at x[offsets[o]] and the others at offsets + 1, + row and
    /// + row + 1; out[o] = the maximum, idx[o] = base + the chosen tap's offset, by the rule
    /// above. float only (the offsets are gathered as int32). ASSIGNS out and idx.
    struct max_pool_2x2_plane_fn
    {
        template <class Arch, class T>
        void operator()(Arch, T* out, std::int64_t* idx, const T* x, const std::int32_t* offsets, std::int32_t row,
                        std::int64_t base, std::int64_t n) const noexcept;
    };

    /// Max pooling across contiguous runs of n channels (channels-last), for `windows` windows
    /// of one output row: window w reads x + w * x_step and writes out + w * out_step and
    /// idx + w * idx_step. Its tap k < ntaps (ntaps >= 1, in (kh, kw) order) reads
    /// x[w * x_step + offsets[k] + j] for channel j; out[j] = the maximum over the taps,
    /// idx[j] = base + w * x_step + offsets[k] + j for the chosen k, by the rule of
    /// max_pool_2x2_row_fn. ASSIGNS out and idx.
    struct max_pool_taps_fn
    {
        template <class Arch, class T>
        void operator()(Arch, T* out, std::int64_t out_step, std::int64_t* idx, std::int64_t idx_step, const T* x,
                        std::int64_t x_step, const std::int64_t* offsets, std::int64_t ntaps, std::int64_t base,
                        std::int64_t n, std::int64_t windows) const noexcept;
    };

    /// Max pooling's gradient along one input row (n, h) of a channels-last image whose c
    /// channels are contiguous in dx, g and idx (the kernel max_pool2d_grad's common case):
    /// for each column w < width whose window is ow = window[w] >= 0, dx[w * dx_step + j] =
    /// 0 + g[ow * g_step + j] where idx[ow * idx_step + j] == pos + w * dx_step + j (the window
    /// chose this position for channel j) and, where y is not null, y[ow * idx_step + j] > 0
    /// (the ReLU mask of a fused forward's pooled output), +0 otherwise; +0 in the columns with
    /// window[w] < 0.
    /// One call per row: the channel runs are short (32 or 64 in a small CNN), too short to
    /// pay a dispatch each. ASSIGNS the row.
    struct max_pool_grad_row_fn
    {
        template <class Arch, class T>
        void operator()(Arch, T* dx, std::int64_t dx_step, const T* g, std::int64_t g_step, const std::int64_t* idx,
                        std::int64_t idx_step, const T* y, const std::int64_t* window, std::int64_t pos,
                        std::int64_t width, std::int64_t c) const noexcept;
    };

    /// The most taps (K = c * kh * kw) the direct weight gradient below takes: it keeps a
    /// padded copy of the last columns of dw on the stack.
    constexpr std::int64_t conv_taps_max = 32;
    /// The row stride, in elements of T, that the forward's weights and bias are padded to a
    /// multiple of: a whole 64-byte vector, so that every instruction set reads whole batches.
    template <class T>
    constexpr std::int64_t conv_weight_align = 64 / static_cast<std::int64_t>(sizeof(T));

    /// A direct convolution along one output row (channels-last, k >= 1 taps, o output
    /// channels) over an input already padded with zeros, so that every tap is inside it:
    /// position p's tap t is x[p * x_step + taps[t]]. The weights are k rows of w_step
    /// elements, w_step a multiple of conv_weight_align<T> and at least o; bias is null or
    /// w_step elements. The entries beyond o are read (into lanes whose results are
    /// discarded). For p < np and j < o,
    ///   y[p * o + j] = b_j + x[p * x_step + taps[0]] * w[j] + ...
    ///                      + x[p * x_step + taps[k - 1]] * w[(k - 1) * w_step + j],
    /// b_j = bias[j] (0 where bias is null), the terms added to b_j in tap order (fused
    /// multiply-adds where the instruction set has them), the same way for every j and p.
    /// ASSIGNS y.
    struct conv_taps_forward_fn
    {
        template <class Arch, class T>
        void operator()(Arch, T* y, const T* x, std::int64_t x_step, const std::int64_t* taps, const T* w,
                        std::int64_t w_step, const T* bias, std::int64_t np, std::int64_t k,
                        std::int64_t o) const noexcept;
    };

    /// The weight gradient of `rows` such rows: dw[t * o + j] += the sum over r < rows and
    /// p < np of x[r * x_row + p * x_step + taps[t]] * dy[(r * np + p) * o + j], for t < k and
    /// j < o, each dw element's terms added to it one at a time in (r, p) order (fused
    /// multiply-adds where the instruction set has them). k is at most conv_taps_max unless o
    /// is a multiple of conv_weight_align<T>: the last o % lanes channels go through a padded
    /// copy of dw's columns on the stack. ACCUMULATES into dw.
    struct conv_taps_weight_grad_fn
    {
        template <class Arch, class T>
        void operator()(Arch, T* dw, const T* x, std::int64_t x_step, const std::int64_t* taps, const T* dy,
                        std::int64_t np, std::int64_t rows, std::int64_t x_row, std::int64_t k,
                        std::int64_t o) const noexcept;
    };

    /// The kernel sgd_step (backends/common/kernel_list.hpp) on n contiguous elements of the
    /// compute type T, with its null-pointer conventions; simd/optim_impl.hpp.
    struct sgd_step_fn
    {
        template <class Arch, class T>
        void operator()(Arch, T* param_out, T* momentum_out, const T* param, const T* grad, const T* momentum,
                        std::int64_t n, const kernels::sgd_step_coefficients& c) const noexcept;
    };

    /// The kernel adam_step on n contiguous elements of the compute type T; simd/optim_impl.hpp.
    struct adam_step_fn
    {
        template <class Arch, class T>
        void operator()(Arch, T* param_out, T* exp_avg_out, T* exp_avg_sq_out, const T* param, const T* grad,
                        const T* exp_avg, const T* exp_avg_sq, std::int64_t n,
                        const kernels::adam_step_coefficients& c) const noexcept;
    };

    /// Bulk float32 <-> float16 (IEEE binary16 bit patterns) with F16C, round to nearest even;
    /// compiled in simd/avx2.cpp only: call them only when the processor has AVX2 and F16C.
    void f32_to_f16_f16c(std::uint16_t* out, const float* x, std::int64_t n) noexcept;
    void f16_to_f32_f16c(float* out, const std::uint16_t* x, std::int64_t n) noexcept;
    /// The same, 16 lanes at a time with masked tails; compiled in simd/avx512.cpp only: call
    /// them only at simd_level::avx512.
    void f32_to_f16_avx512(std::uint16_t* out, const float* x, std::int64_t n) noexcept;
    void f16_to_f32_avx512(float* out, const std::uint16_t* x, std::int64_t n) noexcept;
    /// Bulk float32 <-> bfloat16 (bit patterns), rounding as xgrad::to_bfloat16 (nearest even,
    /// subnormals kept, NaN quieted); simd/avx512.cpp only: call them only at simd_level::avx512.
    void f32_to_bf16_avx512(std::uint16_t* out, const float* x, std::int64_t n) noexcept;
    void bf16_to_f32_avx512(float* out, const std::uint16_t* x, std::int64_t n) noexcept;
}

// One line per functor, element type and instruction set; `EXTERN` is `extern` for the
// declarations below and empty for the definitions in kernels_<arch>.cpp.
#define XGRAD_CPU_SIMD_INSTANTIATE_TYPE(EXTERN, ARCH, T)                                                               \
    EXTERN template void xgrad::cpu::simd::unary_fn::operator()<ARCH, T>(                                              \
        ARCH, T*, const T*, std::int64_t, std::int64_t, xgrad::kernels::unary_op) const noexcept;                      \
    EXTERN template void xgrad::cpu::simd::binary_fn::operator()<ARCH, T>(ARCH, T*, const T*, std::int64_t, const T*,  \
                                                                          std::int64_t, std::int64_t,                  \
                                                                          xgrad::kernels::binary_op) const noexcept;   \
    EXTERN template void xgrad::cpu::simd::where_fn::operator()<ARCH, T>(ARCH, T*, const T*, std::int64_t, const T*,   \
                                                                         std::int64_t, const T*, std::int64_t,         \
                                                                         std::int64_t) const noexcept;                 \
    EXTERN template T xgrad::cpu::simd::reduce_contiguous_fn::operator()<ARCH, T>(                                     \
        ARCH, const T*, std::int64_t, xgrad::kernels::reduce_op) const noexcept;                                       \
    EXTERN template void xgrad::cpu::simd::reduce_rows_fn::operator()<ARCH, T>(                                        \
        ARCH, T*, const T*, const std::int64_t*, std::int64_t, std::int64_t, xgrad::kernels::reduce_op)                \
        const noexcept;                                                                                                \
    EXTERN template void xgrad::cpu::simd::max_pool_2x2_row_fn::operator()<ARCH, T>(                                   \
        ARCH, T*, std::int64_t*, const T*, std::int64_t, std::int64_t, std::int64_t) const noexcept;                   \
    EXTERN template void xgrad::cpu::simd::max_pool_2x2_plane_fn::operator()<ARCH, T>(                                 \
        ARCH, T*, std::int64_t*, const T*, const std::int32_t*, std::int32_t, std::int64_t, std::int64_t)              \
        const noexcept;                                                                                                \
    EXTERN template void xgrad::cpu::simd::max_pool_taps_fn::operator()<ARCH, T>(                                      \
        ARCH, T*, std::int64_t, std::int64_t*, std::int64_t, const T*, std::int64_t, const std::int64_t*,              \
        std::int64_t, std::int64_t, std::int64_t, std::int64_t) const noexcept;                                        \
    EXTERN template void xgrad::cpu::simd::max_pool_grad_row_fn::operator()<ARCH, T>(                                  \
        ARCH, T*, std::int64_t, const T*, std::int64_t, const std::int64_t*, std::int64_t, const T*,                   \
        const std::int64_t*, std::int64_t, std::int64_t, std::int64_t) const noexcept;                                 \
    EXTERN template void xgrad::cpu::simd::conv_taps_forward_fn::operator()<ARCH, T>(                                  \
        ARCH, T*, const T*, std::int64_t, const std::int64_t*, const T*, std::int64_t, const T*, std::int64_t,         \
        std::int64_t, std::int64_t) const noexcept;                                                                    \
    EXTERN template void xgrad::cpu::simd::conv_taps_weight_grad_fn::operator()<ARCH, T>(                              \
        ARCH, T*, const T*, std::int64_t, const std::int64_t*, const T*, std::int64_t, std::int64_t, std::int64_t,     \
        std::int64_t, std::int64_t) const noexcept;

// bfloat16: channels-last max pooling and its gradient (compared as floats, elements copied).
#define XGRAD_CPU_SIMD_INSTANTIATE_BF16(EXTERN, ARCH)                                                                  \
    EXTERN template void xgrad::cpu::simd::max_pool_taps_fn::operator()<ARCH, xgrad::bfloat16_t>(                      \
        ARCH, xgrad::bfloat16_t*, std::int64_t, std::int64_t*, std::int64_t, const xgrad::bfloat16_t*, std::int64_t,   \
        const std::int64_t*, std::int64_t, std::int64_t, std::int64_t, std::int64_t) const noexcept;                   \
    EXTERN template void xgrad::cpu::simd::max_pool_grad_row_fn::operator()<ARCH, xgrad::bfloat16_t>(                  \
        ARCH, xgrad::bfloat16_t*, std::int64_t, const xgrad::bfloat16_t*, std::int64_t, const std::int64_t*,           \
        std::int64_t, const xgrad::bfloat16_t*, const std::int64_t*, std::int64_t, std::int64_t, std::int64_t)         \
        const noexcept;

#define XGRAD_CPU_SIMD_INSTANTIATE(EXTERN, ARCH)                                                                       \
    XGRAD_CPU_SIMD_INSTANTIATE_TYPE(EXTERN, ARCH, float)                                                               \
    XGRAD_CPU_SIMD_INSTANTIATE_TYPE(EXTERN, ARCH, double)                                                              \
    XGRAD_CPU_SIMD_INSTANTIATE_BF16(EXTERN, ARCH)

XGRAD_CPU_SIMD_INSTANTIATE(extern, xsimd::sse2)
XGRAD_CPU_SIMD_INSTANTIATE(extern, xsimd::fma3<xsimd::avx2>)
XGRAD_CPU_SIMD_INSTANTIATE(extern, xsimd::avx512bw)

// The optimizer functors, instantiated in translation units of their own (simd/optim_sse2.cpp,
// simd/optim_avx2.cpp, simd/optim_avx512.cpp), built with -ffp-contract=off so that no product and sum fuse into an
// fma: their bits must be the reference kernels' (backends/common/optimizer_math.hpp).
#define XGRAD_CPU_OPTIM_SIMD_INSTANTIATE_TYPE(EXTERN, ARCH, T)                                                         \
    EXTERN template void xgrad::cpu::simd::sgd_step_fn::operator()<ARCH, T>(                                           \
        ARCH, T*, T*, const T*, const T*, const T*, std::int64_t, const xgrad::kernels::sgd_step_coefficients&)        \
        const noexcept;                                                                                                \
    EXTERN template void xgrad::cpu::simd::adam_step_fn::operator()<ARCH, T>(                                          \
        ARCH, T*, T*, T*, const T*, const T*, const T*, const T*, std::int64_t,                                        \
        const xgrad::kernels::adam_step_coefficients&) const noexcept;

#define XGRAD_CPU_OPTIM_SIMD_INSTANTIATE(EXTERN, ARCH)                                                                 \
    XGRAD_CPU_OPTIM_SIMD_INSTANTIATE_TYPE(EXTERN, ARCH, float)                                                         \
    XGRAD_CPU_OPTIM_SIMD_INSTANTIATE_TYPE(EXTERN, ARCH, double)

XGRAD_CPU_OPTIM_SIMD_INSTANTIATE(extern, xsimd::sse2)
XGRAD_CPU_OPTIM_SIMD_INSTANTIATE(extern, xsimd::fma3<xsimd::avx2>)
XGRAD_CPU_OPTIM_SIMD_INSTANTIATE(extern, xsimd::avx512bw)
