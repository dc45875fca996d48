#pragma once
// The vector types every SIMD functor body of the fast kernels is written in: impl::batch, the
// xsimd batch of T for an architecture, and impl::lanes, its element count.
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
    }
}
