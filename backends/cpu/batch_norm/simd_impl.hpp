#pragma once
// Bodies of the batch-norm SIMD functors declared in simd.hpp. Included ONLY by the
// per-instruction-set translation units (../simd/sse2.cpp, avx2.cpp, avx512.cpp), each
// compiled with its own flags and explicitly instantiating the functors for its one
// architecture.
//
// As in simd/kernels_impl.hpp, every helper here is a template on the architecture (or a
// constant) and no standard-library function is called, so no inline function compiled with
// -mavx2 can be shared with (and picked by the linker for) code that a pre-AVX2 processor runs.
// A row or segment whose length is not a multiple of the lanes ends with a padded batch of its
// last elements (loaded in memory order, after the rest; reductions mask the padding off,
// outputs store only the real lanes), so the same vector code computes every element. (An
// earlier version ended with a whole batch overlapping the previous one, loaded first: on short
// channels-first segments, e.g. 14x14, that load jumped ahead of the hardware prefetcher and
// stalled on DRAM once per segment.)
#include <cstdint>
#include <type_traits>
#include <utility>

#include <immintrin.h>

#include "backends/cpu/batch_norm/simd.hpp"
#include "backends/cpu/batch_norm/simd_io.hpp" // batch, lanes, unroll, load/store, load_io/store_io

namespace xgrad::cpu::simd
{
    namespace bn_impl
    {
        /// The lanes of s combined pairwise (lane j with lane j + half, halving): log2(lanes)
        /// levels.
        template <class Arch, class T>
        T combine_lanes(const batch<Arch, T>& s) noexcept
        {
            constexpr std::int64_t w = lanes<Arch, T>;
            alignas(64) T v[w];
            s.store_aligned(v);
            for (std::int64_t half = w / 2; half >= 1; half /= 2)
                for (std::int64_t j = 0; j < half; ++j)
                    v[j] = v[j] + v[j + half];
            return v[0];
        }

        /// Which operands a kind reads (constants, not functions: nothing to share between the
        /// instruction-set units).
        template <bn_sums K>
        constexpr bool reads_g = K == bn_sums::grad || K == bn_sums::grad_out || K == bn_sums::grad_grad;
        template <bn_sums K>
        constexpr bool reads_a = K == bn_sums::grad_grad;
        template <bn_sums K>
        constexpr int sum_count = bn_sum_count(K);

        /// Adds one batch of terms to the kind's accumulators (d = x - m).
        template <bn_sums Kind, class Arch, class T>
        void add_terms(batch<Arch, T>* acc, const batch<Arch, T>& x, const batch<Arch, T>& g, const batch<Arch, T>& a,
                       const batch<Arch, T>& m) noexcept
        {
            if constexpr (Kind == bn_sums::centred)
            {
                const batch<Arch, T> d = x - m;
                acc[0] += d;
                acc[1] = xsimd::fma(d, d, acc[1]);
            }
            else if constexpr (Kind == bn_sums::grad || Kind == bn_sums::grad_out)
            {
                acc[0] += g;
                acc[1] = xsimd::fma(g, batch<Arch, T>(x - m), acc[1]);
            }
            else
            {
                const batch<Arch, T> d = x - m;
                acc[0] += g;
                acc[1] = xsimd::fma(g, d, acc[1]);
                acc[2] += a;
                acc[3] = xsimd::fma(a, d, acc[3]);
                acc[4] = xsimd::fma(a, g, acc[4]);
            }
        }

        /// The operands of one batch (g, a zero when the kind does not read them).
        template <class Arch, class T>
        struct operands
        {
            batch<Arch, T> x, g, a;
        };

        /// g read as (y > 0 ? g : 0) when y is not null (NaN in y masks).
        template <class Arch, class T, bool Tail, class IO>
        batch<Arch, T> load_g(const IO* g, const IO* y, std::int64_t i, std::int64_t rem) noexcept
        {
            const batch<Arch, T> v = load_io<Arch, T, Tail>(g + i, rem);
            if (!y)
                return v;
            const batch<Arch, T> zero(T(0));
            return xsimd::select(load_io<Arch, T, Tail>(y + i, rem) > zero, v, zero);
        }

        template <bn_sums Kind, bool Tail, class Arch, class T, class IO>
        operands<Arch, T> load_operands(const IO* x, const IO* g, const IO* a, const IO* y, std::int64_t i,
                                        std::int64_t rem) noexcept
        {
            const batch<Arch, T> zero(T(0));
            return {load_io<Arch, T, Tail>(x + i, rem), reads_g<Kind> ? load_g<Arch, T, Tail>(g, y, i, rem) : zero,
                    reads_a<Kind> ? load_io<Arch, T, Tail>(a + i, rem) : zero};
        }

        /// Lanes first .. lanes-1 (negated: the real lanes 0 .. first-1 of a padded batch).
        template <class Arch, class T>
        batch_bool<Arch, T> lanes_from(std::int64_t first) noexcept
        {
            alignas(64) T idx[lanes<Arch, T>];
            for (std::int64_t j = 0; j < lanes<Arch, T>; ++j)
                idx[j] = static_cast<T>(j);
            return batch<Arch, T>::load_aligned(idx) >= batch<Arch, T>(static_cast<T>(first));
        }

        /// add_terms for the lanes in `keep` only (the others add exactly 0).
        template <bn_sums Kind, class Arch, class T>
        void add_terms_masked(batch<Arch, T>* acc, const operands<Arch, T>& v, const batch<Arch, T>& m,
                              const batch_bool<Arch, T>& keep) noexcept
        {
            using B = batch<Arch, T>;
            constexpr int K = sum_count<Kind>;
            const B zero(T(0));
            B part[K];
            unroll<Arch, K>::apply([&](auto si) { part[decltype(si)::value] = zero; });
            add_terms<Kind, Arch, T>(part, v.x, v.g, v.a, m);
            unroll<Arch, K>::apply([&](auto si) {
                constexpr int s = decltype(si)::value;
                acc[s] += xsimd::select(keep, part[s], zero);
            });
        }

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

        /// One segment of n >= 1 elements at base into the accumulators acc0, acc1: whole
        /// batches alternate between them; if n is not a multiple of the lanes, the segment ends
        /// with a padded batch of its last n % lanes elements into acc1, the padding masked off
        /// by `keep`.
        template <bn_sums Kind, class Arch, class T, class IO>
        void run_segment(const bn_run<T, IO>& r, std::int64_t base, batch<Arch, T>* acc0, batch<Arch, T>* acc1,
                         const batch<Arch, T>& m, const batch<Arch, T>& k, const batch_bool<Arch, T>& keep) noexcept
        {
            using B = batch<Arch, T>;
            constexpr std::int64_t w = lanes<Arch, T>;
            const std::int64_t full = r.n / w * w, rem = r.n - full;
            auto out = [&](std::int64_t i, const B& g) {
                if constexpr (Kind == bn_sums::grad_out)
                    store_io<Arch, T, false>(r.out + i, B(g * k), 0);
            };
            std::int64_t i = 0;
            for (; i + 2 * w <= full; i += 2 * w)
            {
                const auto v0 = load_operands<Kind, false, Arch, T>(r.x, r.g, r.a, r.y, base + i, 0);
                const auto v1 = load_operands<Kind, false, Arch, T>(r.x, r.g, r.a, r.y, base + i + w, 0);
                add_terms<Kind, Arch, T>(acc0, v0.x, v0.g, v0.a, m);
                add_terms<Kind, Arch, T>(acc1, v1.x, v1.g, v1.a, m);
                out(base + i, v0.g);
                out(base + i + w, v1.g);
            }
            if (i < full)
            {
                const auto v = load_operands<Kind, false, Arch, T>(r.x, r.g, r.a, r.y, base + i, 0);
                add_terms<Kind, Arch, T>(acc0, v.x, v.g, v.a, m);
                out(base + i, v.g);
            }
            if (rem)
            {
                // A padded batch of the last rem elements (loaded in memory order, after the
                // rest), its padding masked off.
                const auto v = load_operands<Kind, true, Arch, T>(r.x, r.g, r.a, r.y, base + full, rem);
                add_terms_masked<Kind, Arch, T>(acc1, v, m, keep);
                if constexpr (Kind == bn_sums::grad_out)
                    store_io<Arch, T, true>(r.out + base + full, B(v.g * k), rem);
            }
        }

        /// `r` is a copy: stores through the data pointers cannot make the compiler reload it.
        template <bn_sums Kind, class Arch, class T, class IO>
        void run(const bn_run<T, IO> r) noexcept
        {
            using B = batch<Arch, T>;
            constexpr std::int64_t w = lanes<Arch, T>;
            constexpr int K = sum_count<Kind>;
            constexpr std::int64_t state = 2 * sum_count<Kind> * bn_state_lanes;
            static_assert(w <= bn_state_lanes, "bn_state_lanes too small for this architecture");
            const B zero(T(0));
            for (std::int64_t ci = 0; ci < r.nc; ++ci)
                for (int s = 0; s < 2 * K; ++s)
                    zero.store_unaligned(r.state + ci * state + s * bn_state_lanes);
            const auto keep = !lanes_from<Arch, T>(r.n % w); // the lanes of a padded last batch
            // A block's segments of one outer index lie together (span bytes), the next outer
            // index's far away (C * inner elements on). Spans of a few KiB end before the
            // hardware prefetchers ramp up on them (the 784-byte segments of 14x14 images), so
            // the lines of the outer index `ahead` on are requested while this one is summed,
            // each segment requesting its share of them: the channels-first training gradient
            // of 14x14 images ran 1.07-1.14x faster with the lines of the outer index two ahead
            // requested at once (float32, 1 and 2 threads; bfloat16 1.05-1.11x), and 1.03-1.10x
            // faster again with the requests four ahead and spread over the segments (issued
            // at once, the 74 requests of a bfloat16 block stalled the reduction: perf put two
            // thirds of its samples on them). Longer spans are left to the hardware: requesting
            // a whole row of a wide item slowed the inference gradient of 28x28 images by a fifth.
            constexpr std::int64_t ahead = 4;
            const std::int64_t span = ((r.nc - 1) * r.c_stride + r.n) * static_cast<std::int64_t>(sizeof(IO));
            const bool prefetch = r.no > ahead && span <= 4096 &&
                                  r.o_stride * static_cast<std::int64_t>(sizeof(IO)) > span;
            const IO* const inputs[] = {r.x, reads_g<Kind> ? r.g : nullptr, reads_a<Kind> ? r.a : nullptr};
            for (std::int64_t o = 0; o < r.no; ++o)
                for (std::int64_t ci = 0; ci < r.nc; ++ci)
                {
                    if (prefetch && o + ahead < r.no)
                    {
                        // Segment ci's share of the span: lines [b0, b1), the last segment's
                        // share running to the span's end.
                        const std::int64_t b0 = span * ci / r.nc / 64 * 64;
                        const std::int64_t b1 = ci + 1 == r.nc ? span : span * (ci + 1) / r.nc / 64 * 64;
                        for (const IO* in : inputs)
                            if (in)
                            {
                                const char* first = reinterpret_cast<const char*>(in + (o + ahead) * r.o_stride);
                                for (std::int64_t b = b0; b < b1; b += 64)
                                    __builtin_prefetch(first + b);
                            }
                    }
                    T* st = r.state + ci * state;
                    B acc0[K], acc1[K];
                    unroll<Arch, K>::apply([&](auto si) {
                        constexpr int s = decltype(si)::value;
                        acc0[s] = B::load_unaligned(st + s * bn_state_lanes);
                        acc1[s] = B::load_unaligned(st + (K + s) * bn_state_lanes);
                    });
                    const B m(r.m[ci]);
                    const B k = Kind == bn_sums::grad_out ? B(r.k[ci]) : zero;
                    const std::int64_t base = o * r.o_stride + ci * r.c_stride;
                    run_segment<Kind, Arch, T, IO>(r, base, acc0, acc1, m, k, keep);
                    unroll<Arch, K>::apply([&](auto si) {
                        constexpr int s = decltype(si)::value;
                        acc0[s].store_unaligned(st + s * bn_state_lanes);
                        acc1[s].store_unaligned(st + (K + s) * bn_state_lanes);
                    });
                }
            for (std::int64_t ci = 0; ci < r.nc; ++ci)
            {
                const T* st = r.state + ci * state;
                for (int s = 0; s < K; ++s)
                {
                    const B sum = B::load_unaligned(st + s * bn_state_lanes) +
                                  B::load_unaligned(st + (K + s) * bn_state_lanes);
                    r.sums[ci * K + s] = combine_lanes<Arch, T>(sum);
                }
            }
        }

        /// A coefficient of bn_affine: per element (PerElem) or one broadcast value.
        template <class Arch, class T, bool PerElem>
        struct coef
        {
            const T* p;
            batch<Arch, T> value;

            template <bool Tail>
            batch<Arch, T> at(std::int64_t i, std::int64_t rem) const noexcept
            {
                if constexpr (PerElem)
                    return load<Arch, T, Tail>(p + i, rem);
                else
                    return value;
            }
        };

        /// Rows of n elements; a row whose length is not a multiple of the lanes ends with a
        /// padded batch of its last n % lanes elements (the same arithmetic, only the real
        /// lanes stored).
        template <bool HA, bool HG, bool HX, bool PerElem, class Arch, class T, class IO>
        void affine(const bn_affine<T, IO> p) noexcept
        {
            using B = batch<Arch, T>;
            using C = coef<Arch, T, PerElem>;
            constexpr std::int64_t w = lanes<Arch, T>;
            C c[7];
            // The batch of elements [i, i + lanes) (or the first rem of them) of the row at o.
            auto eval = [&](auto tail, std::int64_t o, std::int64_t i, std::int64_t rem) {
                constexpr bool Tail = decltype(tail)::value;
                B r = c[6].template at<Tail>(i, rem);
                if constexpr (HX)
                    r = xsimd::fma(c[4].template at<Tail>(i, rem),
                                   B(load_io<Arch, T, Tail>(p.x + o + i, rem) - c[5].template at<Tail>(i, rem)), r);
                if constexpr (HG)
                    r = xsimd::fma(c[2].template at<Tail>(i, rem),
                                   B(load_g<Arch, T, Tail>(p.g, p.y, o + i, rem) - c[3].template at<Tail>(i, rem)), r);
                if constexpr (HA)
                    r = xsimd::fma(c[0].template at<Tail>(i, rem),
                                   B(load_io<Arch, T, Tail>(p.a + o + i, rem) - c[1].template at<Tail>(i, rem)), r);
                return r;
            };
            const B zero(T(0));
            auto finish = [&](const B& r) { return p.relu ? xsimd::select(r < zero, zero, r) : r; };
            // Short rows far apart (a channel's segments of 14x14 images, 784 bytes of float32
            // C * 784 bytes apart) end before the hardware prefetchers ramp up on them, and each
            // row's first loads and its partial first and last output lines (stored through the
            // cache, so read for ownership) then waited on memory, stalling the store buffer
            // behind them. So the row `ahead` on is requested while this one is computed: its
            // inputs, and for streamed outputs those two lines, for writing. With these requests
            // and bn_run's, the channels-first training gradient of 14x14 images ran 1.02-1.14x
            // faster in float32 and 1.16-1.23x in bfloat16 (the same benchmark binary against
            // the previous library, alternating in both orders, 1 and 2 threads). Rows of 28x28
            // images (3136 and 1568 bytes) were no faster with them (0.93-0.99, the first try),
            // so rows longer than 1 KiB are left to the hardware.
            constexpr std::int64_t ahead = 4;
            const bool prefetch = !PerElem && p.nrows > ahead && p.n * static_cast<std::int64_t>(sizeof(IO)) <= 1024;
            const IO* const inputs[] = {HX ? p.x : nullptr, HG ? p.g : nullptr, HA ? p.a : nullptr};
            for (std::int64_t row = 0; row < p.nrows; ++row)
            {
                const std::int64_t o = row * p.stride, co = row * p.coef_row_stride;
                if (prefetch && row + ahead < p.nrows)
                {
                    const std::int64_t o2 = o + ahead * p.stride;
                    for (const IO* in : inputs)
                        if (in)
                        {
                            const auto first = reinterpret_cast<std::uintptr_t>(in + o2) / 64 * 64;
                            const auto end = reinterpret_cast<std::uintptr_t>(in + o2 + p.n);
                            for (std::uintptr_t b = first; b < end; b += 64)
                                __builtin_prefetch(reinterpret_cast<const void*>(b));
                        }
                    if (p.stream)
                    {
                        __builtin_prefetch(p.out + o2, 1);
                        __builtin_prefetch(p.out + o2 + p.n - 1, 1);
                    }
                }
                for (int q = 0; q < 7; ++q)
                    c[q] = C{p.coef[q] + co, PerElem ? B(T(0)) : B(p.coef[q][co])};
                // Elements [i0, i1) through the cache: whole batches, then a padded one.
                auto plain = [&](std::int64_t i0, std::int64_t i1) {
                    std::int64_t i = i0;
                    for (; i + w <= i1; i += w)
                        store_io<Arch, T, false>(p.out + o + i, finish(eval(std::false_type{}, o, i, 0)), 0);
                    if (i < i1) // a padded batch of the last elements
                        store_io<Arch, T, true>(p.out + o + i, finish(eval(std::true_type{}, o, i, i1 - i)), i1 - i);
                };
                if (!p.stream)
                {
                    plain(0, p.n);
                    continue;
                }
                // Streamed: only whole 64-byte lines take non-temporal stores. A line written
                // partly through the cache and partly around it (a 32-byte 16-bit batch beside
                // another row's elements) is written back piecemeal: that ran the bfloat16
                // channels-first training gradient of 14x14 images 2x slower. So a row stores
                // its elements before its first line boundary and after its last one through
                // the cache, and streams the whole lines between (a channels-first segment of
                // 196 floats starts at 16-byte steps). Elementwise: the same bits whatever the
                // split.
                constexpr std::int64_t line = 64 / static_cast<std::int64_t>(sizeof(IO));
                static_assert(line % w == 0, "a line holds whole batches");
                const auto addr = reinterpret_cast<std::uintptr_t>(p.out + o);
                const std::int64_t head = addr % sizeof(IO) != 0 ? p.n
                                                                 : std::int64_t((64 - addr % 64) % 64 / sizeof(IO));
                const std::int64_t body_end = head >= p.n ? p.n : head + (p.n - head) / line * line;
                const std::int64_t body_begin = std::min(head, body_end);
                plain(0, body_begin);
                for (std::int64_t i = body_begin; i < body_end; i += w)
                    store_stream_io<Arch, T>(p.out + o + i, finish(eval(std::false_type{}, o, i, 0)));
                plain(body_end, p.n);
            }
        }

        /// affine for per-column coefficients (the tile shape) and rows of at most NB batches
        /// (the last partial when Tail): each batch's coefficients are loaded into registers once
        /// for all rows instead of once per row. The same expression per element, so the same
        /// bits.
        template <bool HA, bool HG, bool HX, int NB, bool Tail, class Arch, class T, class IO>
        void affine_regs(const bn_affine<T, IO> p) noexcept
        {
            using B = batch<Arch, T>;
            constexpr std::int64_t w = lanes<Arch, T>;
            const std::int64_t rem = p.n - (NB - 1) * w;
            B c[NB][7];
            unroll<Arch, NB>::apply([&](auto bi) {
                constexpr int b = decltype(bi)::value;
                constexpr bool tail = Tail && b == NB - 1;
                for (int q = 0; q < 7; ++q)
                    c[b][q] = load<Arch, T, tail>(p.coef[q] + b * w, rem);
            });
            const B zero(T(0));
            for (std::int64_t row = 0; row < p.nrows; ++row)
            {
                const std::int64_t o = row * p.stride;
                unroll<Arch, NB>::apply([&](auto bi) {
                    constexpr int b = decltype(bi)::value;
                    constexpr bool tail = Tail && b == NB - 1;
                    const std::int64_t i = o + b * w;
                    B r = c[b][6];
                    if constexpr (HX)
                        r = xsimd::fma(c[b][4], B(load_io<Arch, T, tail>(p.x + i, rem) - c[b][5]), r);
                    if constexpr (HG)
                        r = xsimd::fma(c[b][2], B(load_g<Arch, T, tail>(p.g, p.y, i, rem) - c[b][3]), r);
                    if constexpr (HA)
                        r = xsimd::fma(c[b][0], B(load_io<Arch, T, tail>(p.a + i, rem) - c[b][1]), r);
                    if (p.relu)
                        r = xsimd::select(r < zero, zero, r);
                    if (!tail && p.stream)
                        return store_stream_io<Arch, T>(p.out + i, r);
                    store_io<Arch, T, tail>(p.out + i, r, rem);
                });
            }
        }

        /// affine_regs when the row fits NB <= 4 batches whose coefficients fit the registers
        /// (the used ones: 1 + 2 per input), else the general loop.
        template <bool HA, bool HG, bool HX, class Arch, class T, class IO>
        void affine_per_column(const bn_affine<T, IO>& p) noexcept
        {
            constexpr std::int64_t w = lanes<Arch, T>;
            constexpr int used = 1 + 2 * (int(HA) + int(HG) + int(HX));
            constexpr int max_coef = is_avx512<Arch> ? 24 : 10;
            const std::int64_t nb = (p.n + w - 1) / w;
            const bool tail = p.n % w != 0;
            bool done = false;
            auto go = [&](auto nbc) {
                constexpr int NB = decltype(nbc)::value;
                if constexpr (NB * used <= max_coef)
                {
                    if (tail)
                        affine_regs<HA, HG, HX, NB, true, Arch, T, IO>(p);
                    else
                        affine_regs<HA, HG, HX, NB, false, Arch, T, IO>(p);
                    done = true;
                }
            };
            switch (nb)
            {
            case 1: go(std::integral_constant<int, 1>{}); break;
            case 2: go(std::integral_constant<int, 2>{}); break;
            case 3: go(std::integral_constant<int, 3>{}); break;
            case 4: go(std::integral_constant<int, 4>{}); break;
            default: break;
            }
            if (!done)
                affine<HA, HG, HX, true, Arch, T, IO>(p);
        }

        template <bool HA, bool HG, bool HX, class Arch, class T, class IO>
        void affine_stride(const bn_affine<T, IO>& p) noexcept
        {
            if (p.coef_stride != 0 && p.coef_row_stride == 0)
                affine_per_column<HA, HG, HX, Arch, T, IO>(p);
            else if (p.coef_stride != 0)
                affine<HA, HG, HX, true, Arch, T, IO>(p);
            else
                affine<HA, HG, HX, false, Arch, T, IO>(p);
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

    template <class Arch, class T, class IO>
    void bn_run_fn::operator()(Arch, const bn_run<T, IO>* run, bn_sums kind) const noexcept
    {
        switch (kind)
        {
        case bn_sums::centred: return bn_impl::run<bn_sums::centred, Arch, T, IO>(*run);
        case bn_sums::grad: return bn_impl::run<bn_sums::grad, Arch, T, IO>(*run);
        case bn_sums::grad_out: return bn_impl::run<bn_sums::grad_out, Arch, T, IO>(*run);
        case bn_sums::grad_grad: return bn_impl::run<bn_sums::grad_grad, Arch, T, IO>(*run);
        }
    }

    template <class Arch, class T, class IO>
    void bn_affine_fn::operator()(Arch, const bn_affine<T, IO>* p) const noexcept
    {
        const int present = (p->a ? 4 : 0) | (p->g ? 2 : 0) | (p->x ? 1 : 0);
        switch (present)
        {
        case 0: return bn_impl::affine_stride<false, false, false, Arch, T, IO>(*p);
        case 1: return bn_impl::affine_stride<false, false, true, Arch, T, IO>(*p);
        case 2: return bn_impl::affine_stride<false, true, false, Arch, T, IO>(*p);
        case 3: return bn_impl::affine_stride<false, true, true, Arch, T, IO>(*p);
        case 4: return bn_impl::affine_stride<true, false, false, Arch, T, IO>(*p);
        case 5: return bn_impl::affine_stride<true, false, true, Arch, T, IO>(*p);
        case 6: return bn_impl::affine_stride<true, true, false, Arch, T, IO>(*p);
        default: return bn_impl::affine_stride<true, true, true, Arch, T, IO>(*p);
        }
    }
}
