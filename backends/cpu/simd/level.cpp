// The run-time choice of instruction set for the fast kernels of an XGRAD_SIMD=dispatch build
// (simd/level_scalar.cpp stands in for this file in a scalar build): what the processor and the
// OS support, the process-wide cap set by limit_simd_level (simd/level.hpp), and whether
// copies may use F16C.
//
// The SIMD code is compiled per instruction set in kernels_<arch>.cpp; xsimd::dispatch picks
// one at run time (simd_call, dispatch.hpp), and simd_call reaches it only when the level in
// use allows AVX2. That level also requires the OS to save the AVX register state, which
// xsimd's CPUID check alone does not look at.
#include <algorithm>
#include <atomic>

#include <cpuid.h>

#include "backends/cpu/dispatch.hpp"
#include "backends/cpu/simd/level.hpp"

namespace xgrad::cpu
{
    namespace
    {
        std::atomic<simd_level> g_limit{simd_level::avx2_fma};

        bool processor_has_f16c() noexcept
        {
            unsigned a = 0, b = 0, c = 0, d = 0;
            return __get_cpuid(1, &a, &b, &c, &d) != 0 && (c & bit_F16C) != 0;
        }

        /// Whether the OS saves the AVX register state on context switches (OSXSAVE, and XCR0
        /// enabling SSE and AVX state). AVX code needs this besides the CPUID feature bits,
        /// which are all xsimd 8.1 checks.
        bool os_saves_avx_state() noexcept
        {
            unsigned a = 0, b = 0, c = 0, d = 0;
            if (__get_cpuid(1, &a, &b, &c, &d) == 0 || (c & bit_OSXSAVE) == 0)
                return false;
            unsigned xcr0 = 0, high = 0;
            __asm__("xgetbv" : "=a"(xcr0), "=d"(high) : "c"(0));
            return (xcr0 & 0x6u) == 0x6u;
        }
    }

    bool detail::use_f16c() noexcept
    {
        static const bool has_f16c = processor_has_f16c();
        return has_f16c && simd_level_in_use() == simd_level::avx2_fma;
    }

    simd_level simd_supported() noexcept
    {
        // The test xsimd::dispatch applies when it walks simd::archs, plus the OS check.
        static const simd_level best = xsimd::available_architectures().best >= xsimd::fma3<xsimd::avx2>::version() &&
                                               os_saves_avx_state()
                                           ? simd_level::avx2_fma
                                           : simd_level::sse2;
        return best;
    }

    simd_level simd_level_in_use() noexcept
    {
        return std::min(simd_supported(), g_limit.load(std::memory_order_relaxed));
    }

    void limit_simd_level(simd_level max_level) noexcept { g_limit.store(max_level, std::memory_order_relaxed); }
}
