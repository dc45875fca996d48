#pragma once
// The direct convolution's SIMD functors' bodies (conv_taps_forward_fn,
// conv_taps_weight_grad_fn; kernels/conv.cpp): register tiles of positions by batches of output
// channels, and of taps by channels for the weight gradient.
// Included ONLY through simd/kernels_impl.hpp by the per-instruction-set translation units
// (simd/sse2.cpp, avx2.cpp, avx512.cpp); every helper is a template on the architecture, and no
// standard-library math is called (the rule and its reason: kernels_impl.hpp).
#include <algorithm>
#include <cstdint>

#include "backends/cpu/simd/batch_impl.hpp"

namespace xgrad::cpu::simd
{
    // The direct convolution's products (kernels/conv.cpp): xsimd batches across output
    // channels, each tap's input broadcast. The last o % lanes channels go through the same
    // vector code on zero-padded copies (of the weights' and bias's last columns, of dy's), so
    // a channel's result does not depend on whether it falls in a tail.
    namespace impl
    {
        /// The forward's register tile: P positions by J batches of output channels, J * P
        /// accumulators, J weight batches and one broadcast input live at once: J is 4 where
        /// there are 32 vector registers (AVX-512) and 2 where there are 16, and P at most what
        /// the registers left hold, 12 at most. Per tap, the tile makes J * P fused
        /// multiply-adds from J loads and P broadcasts: 24 from 10 at AVX-512 for 4 x 6, within
        /// the two loads per cycle that two fma units need.
        template <class Arch, class T>
        constexpr int conv_tile_vectors = sizeof(batch<Arch, T>) == 64 ? 4 : 2;
        template <class Arch, class T, int J>
        constexpr int conv_tile_positions = std::min((sizeof(batch<Arch, T>) == 64 ? 32 : 16) - J - 1, 12 * J) / J;

        /// Taps per pass over a row's positions: the pass's weights (J batches per tap) take
        /// 24 KiB, so that they stay in L1 (32-48 KiB on the machines measured) while every
        /// tile of the row uses them, beside the few input rows a tile reads. The partial sums
        /// wait in y between passes, which changes no bit (each element's fma chain runs in
        /// the same order). On the example's second convolution (288 taps, 64 channels, 14
        /// positions a row) 96 taps a pass ran 1.66-1.77 ms against 1.83 ms for one pass of all
        /// 288 (kernels_bench, AVX-512, 2 threads).
        template <class Arch, class T, int J>
        constexpr std::int64_t conv_tap_chunk = (24 << 10) / (J * static_cast<std::int64_t>(sizeof(batch<Arch, T>)));

        /// y[q * o + v * lanes + i] = init + the taps of position q (at x + q * x_step) times
        /// weight row t (w + t * w_step + v * lanes), tap by tap, for q < P, v < J; the last
        /// batch stores only its first `last` lanes. init is bias[v * lanes + i], or 0 where
        /// bias is null.
        template <class Arch, class T, int P, int J>
        void conv_taps_tile(T* y, std::int64_t o, const T* x, std::int64_t x_step, const std::int64_t* taps,
                            std::int64_t k, const T* w, std::int64_t w_step, const T* bias, std::int64_t last,
                            bool first) noexcept
        {
            using b = batch<Arch, T>;
            constexpr std::int64_t L = lanes<Arch, T>;
            b acc[P][J];
            if (first)
                for (int v = 0; v < J; ++v)
                {
                    const b init = bias != nullptr ? b::load_unaligned(bias + v * L) : b(T(0));
                    for (int q = 0; q < P; ++q)
                        acc[q][v] = init;
                }
            else
                for (int q = 0; q < P; ++q)
                    for (int v = 0; v < J; ++v)
                    {
                        if (v + 1 < J || last == L)
                            acc[q][v] = b::load_unaligned(y + q * o + v * L);
                        else
                        {
                            alignas(64) T tmp[L] = {};
                            std::copy(y + q * o + v * L, y + q * o + v * L + last, tmp);
                            acc[q][v] = b::load_aligned(tmp);
                        }
                    }
            for (std::int64_t t = 0; t < k; ++t)
            {
                b wv[J];
                for (int v = 0; v < J; ++v)
                    wv[v] = b::load_unaligned(w + t * w_step + v * L);
                const T* xt = x + taps[t];
                for (int q = 0; q < P; ++q)
                {
                    const b xv(xt[q * x_step]);
                    for (int v = 0; v < J; ++v)
                        acc[q][v] = xsimd::fma(xv, wv[v], acc[q][v]);
                }
            }
            for (int q = 0; q < P; ++q)
            {
                for (int v = 0; v + 1 < J; ++v)
                    acc[q][v].store_unaligned(y + q * o + v * L);
                if (last == L)
                    acc[q][J - 1].store_unaligned(y + q * o + (J - 1) * L);
                else
                {
                    alignas(64) T tmp[L];
                    acc[q][J - 1].store_aligned(tmp);
                    std::copy(tmp, tmp + last, y + q * o + (J - 1) * L);
                }
            }
        }

        /// One tile of 1 <= n <= M positions, n chosen at run time.
        template <class Arch, class T, int J, int M>
        void conv_taps_tail(std::int64_t n, T* y, std::int64_t o, const T* x, std::int64_t x_step,
                            const std::int64_t* taps, std::int64_t k, const T* w, std::int64_t w_step, const T* bias,
                            std::int64_t last, bool first) noexcept
        {
            if constexpr (M >= 1)
            {
                if (n == M)
                    conv_taps_tile<Arch, T, M, J>(y, o, x, x_step, taps, k, w, w_step, bias, last, first);
                else
                    conv_taps_tail<Arch, T, J, M - 1>(n, y, o, x, x_step, taps, k, w, w_step, bias, last, first);
            }
        }

        /// Positions [0, np) over J batches of channels: whole tiles, then one narrower tile.
        template <class Arch, class T, int J>
        void conv_taps_columns(T* y, std::int64_t o, const T* x, std::int64_t x_step, const std::int64_t* taps,
                               std::int64_t k, const T* w, std::int64_t w_step, const T* bias, std::int64_t np,
                               std::int64_t last) noexcept
        {
            // A row's positions go in tiles of nearly equal size, at most P: with tiles of P and
            // one short tile, the example's 14-position rows left 2-position tiles, whose few
            // independent fma chains run at half speed (22% of its input gradient's time in a
            // profile, for 1/7 of the work).
            constexpr int P = conv_tile_positions<Arch, T, J>;
            constexpr std::int64_t chunk = conv_tap_chunk<Arch, T, J>;
            const std::int64_t tiles = (np + P - 1) / P;
            for (std::int64_t t0 = 0; t0 < k; t0 += chunk)
            {
                const std::int64_t kc = std::min(chunk, k - t0);
                const T* wc = w + t0 * w_step;
                const std::int64_t* tc = taps + t0;
                for (std::int64_t p = 0, tile = 0; p < np; ++tile)
                {
                    const std::int64_t n = (np - p + (tiles - tile) - 1) / (tiles - tile);
                    conv_taps_tail<Arch, T, J, P>(n, y + p * o, o, x + p * x_step, x_step, tc, kc, wc, w_step, bias,
                                                  last, t0 == 0);
                    p += n;
                }
            }
        }

        /// NT taps of the weight gradient over JV batches of channels: dw[i * dw_step + v *
        /// lanes] += the sum over r < rows and p < np of x[r * x_row + p * x_step + taps[i]] *
        /// dy[(r * np + p) * dy_step + v * lanes], (r, p) in order, for i < NT and v < JV. The
        /// NT * JV accumulators stay in registers for all the rows, and are that many
        /// independent fma chains.
        template <class Arch, class T, int NT, int JV>
        void conv_taps_grad_tile(T* dw, std::int64_t dw_step, const T* x, std::int64_t x_step, const std::int64_t* taps,
                                 const T* dy, std::int64_t dy_step, std::int64_t np, std::int64_t rows,
                                 std::int64_t x_row) noexcept
        {
            constexpr std::int64_t w = lanes<Arch, T>;
            batch<Arch, T> acc[NT][JV];
            std::int64_t off[NT];
            for (int i = 0; i < NT; ++i)
            {
                off[i] = taps[i];
                for (int v = 0; v < JV; ++v)
                    acc[i][v] = batch<Arch, T>::load_unaligned(dw + i * dw_step + v * w);
            }
            for (std::int64_t r = 0; r < rows; ++r)
                for (std::int64_t p = 0; p < np; ++p)
                {
                    batch<Arch, T> d[JV];
                    for (int v = 0; v < JV; ++v)
                        d[v] = batch<Arch, T>::load_unaligned(dy + (r * np + p) * dy_step + v * w);
                    const T* xp = x + r * x_row + p * x_step;
                    for (int i = 0; i < NT; ++i)
                    {
                        const batch<Arch, T> xv(xp[off[i]]);
                        for (int v = 0; v < JV; ++v)
                            acc[i][v] = xsimd::fma(xv, d[v], acc[i][v]);
                    }
                }
            for (int i = 0; i < NT; ++i)
                for (int v = 0; v < JV; ++v)
                    acc[i][v].store_unaligned(dw + i * dw_step + v * w);
        }

        /// Every tap over JV batches of channels, in tiles of nearly equal size of at most 8
        /// taps (6 for two batches where there are only 16 vector registers).
        template <class Arch, class T, int JV>
        void conv_taps_grad_column(T* dw, std::int64_t dw_step, const T* x, std::int64_t x_step,
                                   const std::int64_t* taps, std::int64_t k, const T* dy, std::int64_t dy_step,
                                   std::int64_t np, std::int64_t rows, std::int64_t x_row) noexcept
        {
            constexpr std::int64_t most = JV == 1 || sizeof(batch<Arch, T>) == 64 ? 8 : 6;
            const std::int64_t tiles = (k + most - 1) / most;
            for (std::int64_t t0 = 0, tile = 0; t0 < k; ++tile)
            {
                const std::int64_t nt = (k - t0 + (tiles - tile) - 1) / (tiles - tile);
                T* d = dw + t0 * dw_step;
                const std::int64_t* tp = taps + t0;
                switch (nt)
                {
                case 1:
                    conv_taps_grad_tile<Arch, T, 1, JV>(d, dw_step, x, x_step, tp, dy, dy_step, np, rows, x_row);
                    break;
                case 2:
                    conv_taps_grad_tile<Arch, T, 2, JV>(d, dw_step, x, x_step, tp, dy, dy_step, np, rows, x_row);
                    break;
                case 3:
                    conv_taps_grad_tile<Arch, T, 3, JV>(d, dw_step, x, x_step, tp, dy, dy_step, np, rows, x_row);
                    break;
                case 4:
                    conv_taps_grad_tile<Arch, T, 4, JV>(d, dw_step, x, x_step, tp, dy, dy_step, np, rows, x_row);
                    break;
                case 5:
                    conv_taps_grad_tile<Arch, T, 5, JV>(d, dw_step, x, x_step, tp, dy, dy_step, np, rows, x_row);
                    break;
                case 6:
                    conv_taps_grad_tile<Arch, T, 6, JV>(d, dw_step, x, x_step, tp, dy, dy_step, np, rows, x_row);
                    break;
                case 7:
                    conv_taps_grad_tile<Arch, T, 7, JV>(d, dw_step, x, x_step, tp, dy, dy_step, np, rows, x_row);
                    break;
                default:
                    conv_taps_grad_tile<Arch, T, 8, JV>(d, dw_step, x, x_step, tp, dy, dy_step, np, rows, x_row);
                    break;
                }
                t0 += nt;
            }
        }
    }

    template <class Arch, class T>
    void conv_taps_forward_fn::operator()(Arch, T* y, const T* x, std::int64_t x_step, const std::int64_t* taps,
                                          const T* w, std::int64_t w_step, const T* bias, std::int64_t np,
                                          std::int64_t k, std::int64_t o) const noexcept
    {
        constexpr std::int64_t L = impl::lanes<Arch, T>;
        constexpr int JM = impl::conv_tile_vectors<Arch, T>;
        const std::int64_t vectors = (o + L - 1) / L;
        for (std::int64_t j = 0; j < vectors; j += JM)
        {
            const std::int64_t nj = std::min<std::int64_t>(JM, vectors - j);
            const std::int64_t last = j + nj == vectors ? o - (vectors - 1) * L : L;
            T* yj = y + j * L;
            const T* wj = w + j * L;
            const T* bj = bias != nullptr ? bias + j * L : nullptr;
            if (nj == 1)
                impl::conv_taps_columns<Arch, T, 1>(yj, o, x, x_step, taps, k, wj, w_step, bj, np, last);
            else if (nj == 2)
                impl::conv_taps_columns<Arch, T, 2>(yj, o, x, x_step, taps, k, wj, w_step, bj, np, last);
            else if constexpr (JM == 4)
            {
                if (nj == 3)
                    impl::conv_taps_columns<Arch, T, 3>(yj, o, x, x_step, taps, k, wj, w_step, bj, np, last);
                else
                    impl::conv_taps_columns<Arch, T, 4>(yj, o, x, x_step, taps, k, wj, w_step, bj, np, last);
            }
        }
    }

    template <class Arch, class T>
    void conv_taps_weight_grad_fn::operator()(Arch, T* dw, const T* x, std::int64_t x_step, const std::int64_t* taps,
                                              const T* dy, std::int64_t np, std::int64_t rows, std::int64_t x_row,
                                              std::int64_t k, std::int64_t o) const noexcept
    {
        constexpr std::int64_t lanes = impl::lanes<Arch, T>;
        const std::int64_t full = o / lanes * lanes, rem = o - full;
        std::int64_t j = 0;
        for (; j + 2 * lanes <= full; j += 2 * lanes)
            impl::conv_taps_grad_column<Arch, T, 2>(dw + j, o, x, x_step, taps, k, dy + j, o, np, rows, x_row);
        if (j < full)
            impl::conv_taps_grad_column<Arch, T, 1>(dw + j, o, x, x_step, taps, k, dy + j, o, np, rows, x_row);
        if (rem == 0)
            return;
        // The last channels: dw's and dy's columns padded with zeros, dy 64 positions of a row
        // at a time (the positions still in order, so each sum's order is unchanged).
        constexpr std::int64_t piece = 64;
        alignas(64) T dwt[conv_taps_max * lanes];
        alignas(64) T dyt[piece * lanes];
        for (std::int64_t t = 0; t < k; ++t)
            for (std::int64_t i = 0; i < lanes; ++i)
                dwt[t * lanes + i] = i < rem ? dw[t * o + full + i] : T(0);
        for (std::int64_t r = 0; r < rows; ++r)
            for (std::int64_t p = 0; p < np; p += piece)
            {
                const std::int64_t n = std::min<std::int64_t>(piece, np - p);
                const T* dyr = dy + (r * np + p) * o;
                for (std::int64_t q = 0; q < n; ++q)
                    for (std::int64_t i = 0; i < lanes; ++i)
                        dyt[q * lanes + i] = i < rem ? dyr[q * o + full + i] : T(0);
                impl::conv_taps_grad_column<Arch, T, 1>(dwt, lanes, x + r * x_row + p * x_step, x_step, taps, k, dyt,
                                                        lanes, n, 1, 0);
            }
        for (std::int64_t t = 0; t < k; ++t)
            for (std::int64_t i = 0; i < rem; ++i)
                dw[t * o + full + i] = dwt[t * lanes + i];
    }
}
