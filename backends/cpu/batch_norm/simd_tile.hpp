#pragma once
// The tile reductions' body (bn_tile_fn): per-column sums of a tile of rows, the column
// accumulators in registers where they fit, else in memory and updated a few rows at a time.
// Included ONLY through simd_impl.hpp by the per-instruction-set translation units
// (../simd/sse2.cpp, avx2.cpp, avx512.cpp, and avx512_bf16.cpp); every helper is a template on
// the architecture (or a constant), so no translation unit can hand its copy to another (the
// rule and its reason: simd_impl.hpp).
#include <cstdint>
#include <type_traits>

#include "backends/cpu/batch_norm/simd_terms.hpp"

namespace xgrad::cpu::simd
{
    namespace bn_impl
    {
        /// Column accumulators [j, j + lanes) of a tile in memory, updated with rows
        /// [row, row + NR) in order: all lanes, or (Tail) the first rem (the padding lanes are
        /// neither loaded nor stored). First: the accumulators start from 0 instead of their
        /// value in memory. The accumulators are loaded and stored once per NR rows: each
        /// column still adds its rows one at a time, in order (the same bits as NR = 1), but the
        /// loop no longer waits on a store and reload of the accumulators after every row.
        template <bn_sums Kind, bool Tail, bool First, int NR, class Arch, class T, class IO>
        void tile_update(const bn_tile<T, IO>& t, std::int64_t row, std::int64_t j, std::int64_t rem) noexcept
        {
            using B = batch<Arch, T>;
            constexpr int K = sum_count<Kind>;
            B acc[K];
            unroll<Arch, K>::apply([&](auto si) {
                constexpr int s = decltype(si)::value;
                if constexpr (First)
                    acc[s] = B(T(0));
                else
                    acc[s] = load<Arch, T, Tail>(t.acc + s * t.acc_stride + j, rem);
            });
            const B m = load<Arch, T, Tail>(t.m + j, rem);
            const B k = Kind == bn_sums::grad_out ? load<Arch, T, Tail>(t.k + j, rem) : B(T(0));
            unroll<Arch, NR>::apply([&](auto ri) {
                const std::int64_t r = row + decltype(ri)::value;
                const auto v = load_operands<Kind, Tail, Arch, T>(t.x, t.g, t.a, t.y, r * t.in_stride + j, rem);
                add_terms<Kind, Arch, T>(acc, v.x, v.g, v.a, m);
                if constexpr (Kind == bn_sums::grad_out)
                    store_io<Arch, T, Tail>(t.out + r * t.out_stride + j, B(v.g * k), rem);
            });
            unroll<Arch, K>::apply([&](auto si) {
                constexpr int s = decltype(si)::value;
                store<Arch, T, Tail>(t.acc + s * t.acc_stride + j, acc[s], rem);
            });
        }

        /// Rows [r0, r1) of a tile, NR at a time (First: r1 = r0 + NR). `t` is a copy: stores
        /// through the data pointers cannot make the compiler reload its fields.
        template <bn_sums Kind, bool First, int NR, class Arch, class T, class IO>
        void tile_rows(const bn_tile<T, IO> t, std::int64_t r0, std::int64_t r1) noexcept
        {
            constexpr std::int64_t w = lanes<Arch, T>;
            const std::int64_t full = t.ncols / w * w, rem = t.ncols - full;
            for (std::int64_t r = r0; r + NR <= r1; r += NR)
            {
                for (std::int64_t j = 0; j < full; j += w)
                    tile_update<Kind, false, First, NR, Arch, T>(t, r, j, 0);
                if (rem) // a padded batch: only its first rem lanes are loaded and stored
                    tile_update<Kind, true, First, NR, Arch, T>(t, r, full, rem);
            }
        }

        /// A tile of at most NB batches of columns (the last one partial when Tail, rem lanes)
        /// with every column accumulator in a register for the whole tile: rows stream past in
        /// memory order and nothing is stored until the end. The same per-column order as
        /// tile_rows (rows in order, one at a time), so the same bits.
        template <bn_sums Kind, int NB, bool Tail, class Arch, class T, class IO>
        void tile_regs(const bn_tile<T, IO> t) noexcept
        {
            using B = batch<Arch, T>;
            constexpr int K = sum_count<Kind>;
            constexpr std::int64_t w = lanes<Arch, T>;
            const std::int64_t rem = t.ncols - (NB - 1) * w;
            B acc[NB][K], m[NB], k[NB];
            unroll<Arch, NB>::apply([&](auto bi) {
                constexpr int b = decltype(bi)::value;
                constexpr bool tail = Tail && b == NB - 1;
                unroll<Arch, K>::apply([&](auto si) {
                    constexpr int s = decltype(si)::value;
                    acc[b][s] = B(T(0));
                });
                m[b] = load<Arch, T, tail>(t.m + b * w, rem);
                k[b] = Kind == bn_sums::grad_out ? load<Arch, T, tail>(t.k + b * w, rem) : B(T(0));
            });
            for (std::int64_t r = 0; r < t.nrows; ++r)
                unroll<Arch, NB>::apply([&](auto bi) {
                    constexpr int b = decltype(bi)::value;
                    constexpr bool tail = Tail && b == NB - 1;
                    const auto v = load_operands<Kind, tail, Arch, T>(t.x, t.g, t.a, t.y, r * t.in_stride + b * w, rem);
                    add_terms<Kind, Arch, T>(acc[b], v.x, v.g, v.a, m[b]);
                    if constexpr (Kind == bn_sums::grad_out)
                        store_io<Arch, T, tail>(t.out + r * t.out_stride + b * w, B(v.g * k[b]), rem);
                });
            unroll<Arch, NB>::apply([&](auto bi) {
                constexpr int b = decltype(bi)::value;
                constexpr bool tail = Tail && b == NB - 1;
                unroll<Arch, K>::apply([&](auto si) {
                    constexpr int s = decltype(si)::value;
                    store<Arch, T, tail>(t.acc + s * t.acc_stride + b * w, acc[b][s], rem);
                });
            });
        }

        /// tile_regs for ncols <= NB batches when NB * K accumulators fit the register file
        /// (32 vector registers with AVX-512: up to 8 batches of two sums, the per-column
        /// centres and factors then reloaded from the stack; 16 below, leaving room for the
        /// operands); false when they do not (the caller then keeps the accumulators in memory).
        template <bn_sums Kind, class Arch, class T, class IO>
        bool tile_in_registers(const bn_tile<T, IO>& t) noexcept
        {
            constexpr std::int64_t w = lanes<Arch, T>;
            constexpr int K = sum_count<Kind>;
            constexpr int max_acc = is_avx512<Arch> ? 20 : 8;
            constexpr int max_nb = is_avx512<Arch> && K == 2 ? 8 : 4;
            const std::int64_t nb = (t.ncols + w - 1) / w;
            if (nb < 1 || nb > max_nb || nb * K > (max_nb == 8 ? 16 : max_acc))
                return false;
            const bool tail = t.ncols % w != 0;
            auto go = [&](auto nbc) {
                constexpr int NB = decltype(nbc)::value;
                if constexpr (NB <= max_nb && NB * K <= (max_nb == 8 ? 16 : max_acc))
                {
                    if (tail)
                        tile_regs<Kind, NB, true, Arch, T>(t);
                    else
                        tile_regs<Kind, NB, false, Arch, T>(t);
                }
            };
            switch (nb)
            {
            case 1: go(std::integral_constant<int, 1>{}); break;
            case 2: go(std::integral_constant<int, 2>{}); break;
            case 3: go(std::integral_constant<int, 3>{}); break;
            case 4: go(std::integral_constant<int, 4>{}); break;
            case 5: go(std::integral_constant<int, 5>{}); break;
            case 6: go(std::integral_constant<int, 6>{}); break;
            case 7: go(std::integral_constant<int, 7>{}); break;
            default: go(std::integral_constant<int, 8>{}); break;
            }
            return true;
        }

        /// Rows stream past, four at a time (each column batch of the four rows, then the next
        /// batch); the column accumulators live in t.acc (a few KB, cache-resident) and each
        /// column adds its rows in order, one at a time. A row whose length is
        /// not a multiple of the lanes ends with a padded batch (partial loads and stores of
        /// the inputs, outputs and column accumulators).
        template <bn_sums Kind, class Arch, class T, class IO>
        void tile(const bn_tile<T, IO>& t) noexcept
        {
            if (t.nrows <= 0 || tile_in_registers<Kind, Arch, T>(t))
                return;
            // The first row assigns the accumulators; then four rows per accumulator load and
            // store, then the last few one at a time.
            tile_rows<Kind, true, 1, Arch, T>(t, 0, 1);
            constexpr int NR = 4;
            const std::int64_t whole = 1 + (t.nrows - 1) / NR * NR;
            tile_rows<Kind, false, NR, Arch, T>(t, 1, whole);
            tile_rows<Kind, false, 1, Arch, T>(t, whole, t.nrows);
        }
    }

    template <class Arch, class T, class IO>
    void bn_tile_fn::operator()(Arch, const bn_tile<T, IO>* tile, bn_sums kind) const noexcept
    {
        switch (kind)
        {
        case bn_sums::centred: return bn_impl::tile<bn_sums::centred, Arch, T, IO>(*tile);
        case bn_sums::grad: return bn_impl::tile<bn_sums::grad, Arch, T, IO>(*tile);
        case bn_sums::grad_out: return bn_impl::tile<bn_sums::grad_out, Arch, T, IO>(*tile);
        case bn_sums::grad_grad: return bn_impl::tile<bn_sums::grad_grad, Arch, T, IO>(*tile);
        }
    }
}
