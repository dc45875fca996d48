#pragma once
// The per-batch pieces the batch-norm SIMD functors share: which operands a kind of sums reads,
// one batch of the operands loaded (g masked by the ReLU output y where a kernel fuses one), and
// the terms a batch adds to a kind's sums.
// Included ONLY through simd_impl.hpp by the per-instruction-set translation units
// (../simd/sse2.cpp, avx2.cpp, avx512.cpp, and avx512_bf16.cpp); every helper is a template on
// the architecture (or a constant), so no translation unit can hand its copy to another (the
// rule and its reason: simd_impl.hpp).
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
    }
}
