#pragma once
// The run reductions' body (bn_run_fn): per-channel sums over segments of contiguous elements,
// two accumulators per sum kept in a per-channel state between segments and combined, with
// their lanes, at the end.
// Included ONLY through simd_impl.hpp by the per-instruction-set translation units
// (../simd/sse2.cpp, avx2.cpp, avx512.cpp, and avx512_bf16.cpp); every helper is a template on
// the architecture (or a constant), so no translation unit can hand its copy to another (the
// rule and its reason: simd_impl.hpp).
#include <cstdint>

#include "backends/cpu/batch_norm/simd_terms.hpp"
#include "backends/cpu/simd/batch_impl.hpp" // impl::combine_lanes_pairwise

namespace xgrad::cpu::simd
{
    namespace bn_impl
    {
        /// The lanes of s summed pairwise (the fast kernels' one order, simd/batch_impl.hpp).
        template <class Arch, class T>
        T combine_lanes(const batch<Arch, T>& s) noexcept
        {
            return impl::combine_lanes_pairwise(s, [](T a, T b) { return a + b; });
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
}
