#pragma once
// The affine outputs' body (bn_affine_fn): out = up to three (input - centre) * factor terms
// plus a constant, optionally through a ReLU, with coefficients per element or broadcast, and
// non-temporal stores of whole cache lines where the output is streamed.
// Included ONLY through simd_impl.hpp by the per-instruction-set translation units
// (../simd/sse2.cpp, avx2.cpp, avx512.cpp, and avx512_bf16.cpp); every helper is a template on
// the architecture (or a constant), so no translation unit can hand its copy to another (the
// rule and its reason: simd_impl.hpp).
#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "backends/cpu/batch_norm/simd_terms.hpp" // load_g, and simd_io.hpp's loads and stores

namespace xgrad::cpu::simd
{
    namespace bn_impl
    {
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
