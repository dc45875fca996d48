#pragma once
// Internal to the CPU backend (and its tests): which instruction set the fast kernels use.
//
// The fast kernels pick the best compiled instruction set the processor has (xsimd::dispatch
// over fma3<avx2> and sse2). limit_simd_level caps that choice at run time, so the tests can
// check the SSE2 code on an AVX2 machine; it is also a debugging switch. At the `scalar` level
// the dispatch (core/src/dispatch.cpp) serves the xgrad::cpu::reference table instead of the
// fast kernels. In a build configured with XGRAD_SIMD=scalar the level is always `scalar`.
#include <cstdint>

namespace xgrad::cpu
{
    /// Ordered: a higher level uses a wider instruction set.
    enum class simd_level : std::uint8_t
    {
        scalar,  // the reference kernels (single-threaded plain loops), chosen by the dispatch
        sse2,    // xsimd::sse2, every x86-64 processor
        avx2_fma // xsimd::fma3<xsimd::avx2> (plus F16C for float16 <-> float32 copies)
    };

    /// The best level this build and this processor support.
    simd_level simd_supported() noexcept;
    /// The level the kernels use now: the smaller of simd_supported() and the current limit.
    simd_level simd_level_in_use() noexcept;
    /// Caps the level for subsequent kernel calls (process-wide; default: no cap). Not meant to
    /// change while kernels run on other threads.
    void limit_simd_level(simd_level max_level) noexcept;
}
