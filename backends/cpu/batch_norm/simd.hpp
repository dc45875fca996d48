#pragma once
// Internal to the CPU backend: the SIMD inner loops of the fast batch-norm kernels
// (kernels.cpp), as xsimd functors, following the pattern of simd/kernels.hpp: the bodies
// are written once (simd_impl.hpp) and compiled once per instruction set, in
// ../simd/sse2.cpp (the x86-64 baseline), ../simd/avx2.cpp (-mavx2 -mfma -mf16c) and
// ../simd/avx512.cpp (AVX-512 F/CD/BW/DQ/VL), plus, for bfloat16 tensors, avx512_bf16.cpp
// (the same with AVX512-BF16, architecture tag avx512bw_bf16 below).
// walk.hpp sees only these declarations and the `extern template` lines below and picks an
// instantiation at run time (bn_call: detail::simd_call of dispatch.hpp, and avx512bw_bf16
// for bfloat16 where avx512_bf16_in_use()).
//
// The functors compute in float or double (the statistics type T). 16-bit tensors are read and
// written by the functors themselves (IO = bfloat16_t or float16_t, T = float): widened in
// registers on load and rounded to nearest even once on store (bfloat16 with integer
// operations or AVX512-BF16's vcvtneps2bf16, float16 with F16C, at SSE2 with xgrad::to_float
// / to_float16 per lane).
//
// Every x-like tensor is [outer, C, inner] (backends/common/kernel_list.hpp). The functors see it in
// one of two shapes:
// - "tile" (channels-last and small inner): rows of `cols` consecutive elements, one column per
//   (channel, inner index) pair; the per-channel values are expanded to per-column arrays, and
//   the functor runs SIMD across columns while rows stream past in memory order, the column
//   sums in a small cache-resident buffer (bn_tile_fn).
// - "run" (channels-first with a long inner dimension): segments of adjacent channels, walked
//   in memory order, SIMD along each segment, per-channel values broadcast (bn_run_fn).
// Elementwise outputs are one affine function of up to three inputs (bn_affine_fn).
#include <cstdint>

#include <xsimd/xsimd.hpp>

#include "backends/cpu/simd/kernels.hpp"
#include "xgrad/half.hpp" // bfloat16_t

namespace xgrad::cpu::simd
{
    /// The architecture tag of the functors instantiated for bfloat16 tensors on processors
    /// with AVX512-BF16: xsimd::avx512bw's code, whose bfloat16 stores round with
    /// vcvtneps2bf16 instead of integer operations (simd_io.hpp's pack_16; the same bits).
    struct avx512bw_bf16 : xsimd::avx512bw
    {
    };

    /// Which per-channel sums a reduction functor forms (d = x - m; t_k the summed terms).
    enum class bn_sums : int
    {
        centred,  // 2 sums: d, d*d                            (bn_moments)
        grad,     // 2 sums: g, g*d                            (bn_grad_reduce)
        grad_out, // 2 sums: g, g*d, and out = g*k             (bn_grad_inference)
        grad_grad // 5 sums: g, g*d, A, A*d, A*g               (bn_grad_grad_reduce)
    };

    constexpr int bn_sum_count(bn_sums kind) noexcept { return kind == bn_sums::grad_grad ? 5 : 2; }

    /// A tile of nrows rows by ncols columns. Row i of input p starts at p + i * in_stride,
    /// row i of out at out + i * out_stride; m[j], k[j] are the per-column centre and output
    /// factor. What a kind does not read may be null: x and m are always read, g by grad,
    /// grad_out and grad_grad, a by grad_grad, k and out by grad_out only. Sum s of column j is
    /// assigned to acc[s * acc_stride + j]. Within a column the rows are added in order, one
    /// at a time.
    template <class T, class IO = T>
    struct bn_tile
    {
        const IO* x;
        const IO* g;
        const IO* a;
        IO* out;
        const IO* y; // not null: g is read as (y > 0 ? g : 0), a fused ReLU's backward
        std::int64_t in_stride, out_stride;
        std::int64_t nrows, ncols;
        const T* m;
        const T* k;
        T* acc;
        std::int64_t acc_stride;
    };

    /// Per-channel state of bn_run: two vector accumulators per sum, at most this many lanes.
    constexpr std::int64_t bn_state_lanes = 16;
    constexpr std::int64_t bn_run_state_size(bn_sums kind) noexcept { return 2 * bn_sum_count(kind) * bn_state_lanes; }

    /// A block of segments of n >= 1 elements, walked in memory order: for o < no, for ci < nc,
    /// segment (o, ci) of every input (and of out) starts at p + o * o_stride + ci * c_stride
    /// and belongs to the block's channel ci, whose centre and output factor are m[ci], k[ci].
    /// Channel ci's sums use two vector accumulators (whole batches of a segment alternate
    /// between them; a segment's last, partial batch goes to the second), kept in
    /// state + ci * bn_run_state_size(kind) between segments, starting from zero; at the end
    /// sums[ci * K + s] is assigned (the two added, then their lanes pairwise).
    /// See kernels.cpp for the error bound.
    template <class T, class IO = T>
    struct bn_run
    {
        const IO* x;
        const IO* g;
        const IO* a;
        IO* out;
        const IO* y; // not null: g is read as (y > 0 ? g : 0), a fused ReLU's backward
        std::int64_t o_stride, c_stride;
        std::int64_t no, nc, n;
        const T* m;
        const T* k;
        T* state;
        T* sums;
    };

    /// For nrows rows of n elements, row r of out and of every input at p + r * stride:
    /// out[i] = cA*(a[i] - mA) + cG*(g[i] - mG) + cX*(x[i] - mX) + cK for i < n, with the terms
    /// of null inputs left out. The coefficients are coef[0..6] = cA, mA, cG, mG, cX, mX, cK,
    /// each an array read at coef[q][r * coef_row_stride + i * coef_stride]: per column
    /// (coef_stride 1, coef_row_stride 0: the tile shape) or one value per row (coef_stride 0,
    /// coef_row_stride 1: the run shape, a row being a channel's segment). Evaluated as
    /// fma(cA, a - mA, fma(cG, g - mG, fma(cX, x - mX, cK))), the same for every element
    /// whatever its position in a batch. relu: the result r is stored as (r < 0 ? 0 : r) (NaN
    /// kept). stream: non-temporal stores (16-bit outputs too, except at SSE2), for outputs
    /// larger than the cache: no read for ownership, no eviction of the inputs. The general
    /// loop streams each row's whole 64-byte lines and stores its elements before its first
    /// line boundary and after its last one through the cache; rows of per-column coefficients
    /// short enough for their coefficients to stay in registers (at most 4 batches) stream
    /// whole batches at batch-aligned addresses, so a caller streams those only when they are
    /// whole, line-aligned lines (a line written partly each way is written back piecemeal). The
    /// caller issues the store fence (_mm_sfence) once its calls are done, before the data is
    /// handed to another thread.
    template <class T, class IO = T>
    struct bn_affine
    {
        IO* out;
        const IO* a;
        const IO* g;
        const IO* x;
        const IO* y; // not null: g is read as (y > 0 ? g : 0), a fused ReLU's backward
        const T* coef[7];
        std::int64_t coef_stride, coef_row_stride;
        std::int64_t nrows, n, stride;
        bool relu, stream;
    };

    struct bn_tile_fn
    {
        template <class Arch, class T, class IO>
        void operator()(Arch, const bn_tile<T, IO>* tile, bn_sums kind) const noexcept;
    };

    /// Writes out when kind is grad_out.
    struct bn_run_fn
    {
        template <class Arch, class T, class IO>
        void operator()(Arch, const bn_run<T, IO>* run, bn_sums kind) const noexcept;
    };

    struct bn_affine_fn
    {
        template <class Arch, class T, class IO>
        void operator()(Arch, const bn_affine<T, IO>* p) const noexcept;
    };
}

// One line per functor, element type and instruction set; `EXTERN` is `extern` for the
// declarations below and empty for the definitions in ../simd_<arch>.cpp. IO is the type of
// the x-like tensors the functor reads and writes: T itself, or bfloat16 for T = float
// (converted in registers on load and rounded to nearest even on store).
#define XGRAD_CPU_BN_SIMD_INSTANTIATE_TYPE(EXTERN, ARCH, T, IO)                                                        \
    EXTERN template void xgrad::cpu::simd::bn_tile_fn::operator()<ARCH, T, IO>(                                        \
        ARCH, const xgrad::cpu::simd::bn_tile<T, IO>*, xgrad::cpu::simd::bn_sums) const noexcept;                      \
    EXTERN template void xgrad::cpu::simd::bn_run_fn::operator()<ARCH, T, IO>(                                         \
        ARCH, const xgrad::cpu::simd::bn_run<T, IO>*, xgrad::cpu::simd::bn_sums) const noexcept;                       \
    EXTERN template void xgrad::cpu::simd::bn_affine_fn::operator()<ARCH, T, IO>(                                      \
        ARCH, const xgrad::cpu::simd::bn_affine<T, IO>*) const noexcept;

#define XGRAD_CPU_BN_SIMD_INSTANTIATE(EXTERN, ARCH)                                                                    \
    XGRAD_CPU_BN_SIMD_INSTANTIATE_TYPE(EXTERN, ARCH, float, float)                                                     \
    XGRAD_CPU_BN_SIMD_INSTANTIATE_TYPE(EXTERN, ARCH, double, double)                                                   \
    XGRAD_CPU_BN_SIMD_INSTANTIATE_TYPE(EXTERN, ARCH, float, xgrad::bfloat16_t)                                         \
    XGRAD_CPU_BN_SIMD_INSTANTIATE_TYPE(EXTERN, ARCH, float, xgrad::float16_t)

XGRAD_CPU_BN_SIMD_INSTANTIATE(extern, xsimd::sse2)
XGRAD_CPU_BN_SIMD_INSTANTIATE(extern, xsimd::fma3<xsimd::avx2>)
XGRAD_CPU_BN_SIMD_INSTANTIATE(extern, xsimd::avx512bw)
XGRAD_CPU_BN_SIMD_INSTANTIATE_TYPE(extern, xgrad::cpu::simd::avx512bw_bf16, float, xgrad::bfloat16_t)
