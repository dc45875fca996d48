#pragma once
// The vector types every SIMD functor body of the fast kernels is written in: impl::batch, the
// xsimd batch of T for an architecture, impl::lanes, its element count, and
// impl::combine_lanes_pairwise, the one order in which a batch's lanes are combined.
// Included ONLY through simd/kernels_impl.hpp by the per-instruction-set translation units
// (simd/sse2.cpp, avx2.cpp, avx512.cpp); every helper is a template on the architecture, and no
// standard-library math is called (the rule and its reason: kernels_impl.hpp).
#include <cstdint>

#include "backends/cpu/simd/kernels.hpp"

namespace xgrad::cpu::simd
{
    namespace impl
    {
        template <class Arch, class T>
        using batch = xsimd::batch<T, Arch>;

        template <class Arch, class T>
        constexpr std::int64_t lanes = static_cast<std::int64_t>(batch<Arch, T>::size);

        /// The lanes of s (any xsimd batch B) combined pairwise by op: lane j with lane j + half,
        /// halving, log2(size) levels. Every reduction of the fast kernels ends here, so they
        /// all add their lanes in one documented order.
        template <class B, class Op>
        typename B::value_type combine_lanes_pairwise(const B& s, Op op) noexcept
        {
            using T = typename B::value_type;
            constexpr std::int64_t w = static_cast<std::int64_t>(B::size);
            alignas(64) T v[w];
            s.store_aligned(v);
            for (std::int64_t half = w / 2; half >= 1; half /= 2)
                for (std::int64_t j = 0; j < half; ++j)
                    v[j] = op(v[j], v[j + half]);
            return v[0];
        }
    }
}
