// The run-time choice of instruction set for the fast kernels of an XGRAD_SIMD=dispatch build
// (simd/level_scalar.cpp stands in for this file in a scalar build): what the processor and the
// OS support, the caps set by the environment variable XGRAD_SIMD and by limit_simd_level
// (simd/level.hpp), whether copies
// may use F16C, whether the batch-norm kernels may use AVX512-BF16's conversion, and whether
// the AMX tile kernels may run (amx/amx.hpp).
//
// The SIMD code is compiled per instruction set in simd/<arch>.cpp; simd_call (dispatch.hpp)
// calls the one of the level in use. Each level needs the processor's feature bits and the OS
// saving the register state that level uses (XCR0), which xsimd's CPUID check alone does not
// look at; the checks are made here, once, from CPUID directly.
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <string_view>

#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "backends/cpu/amx/amx.hpp"
#include "backends/cpu/dispatch.hpp"
#include "backends/cpu/simd/level.hpp"

namespace xgrad::cpu
{
    namespace
    {
        std::atomic<simd_level> g_limit{simd_level_max};
        std::atomic<bool> g_amx_enabled{true};
        std::atomic<bool> g_avx512_bf16_enabled{true};

        /// XCR0, the register state the OS saves on context switches (0 without OSXSAVE).
        unsigned os_saved_state() noexcept
        {
            unsigned a = 0, b = 0, c = 0, d = 0;
            if (__get_cpuid(1, &a, &b, &c, &d) == 0 || (c & bit_OSXSAVE) == 0)
                return 0;
            unsigned xcr0 = 0, high = 0;
            __asm__("xgetbv" : "=a"(xcr0), "=d"(high) : "c"(0));
            return xcr0;
        }

        /// AVX2 + FMA + F16C in the processor and the SSE and AVX state (XCR0 bits 1, 2) saved.
        bool has_avx2_fma() noexcept
        {
            unsigned a = 0, b = 0, c = 0, d = 0;
            if (__get_cpuid(1, &a, &b, &c, &d) == 0 || (c & bit_FMA) == 0 || (c & bit_F16C) == 0)
                return false;
            if (__get_cpuid_count(7, 0, &a, &b, &c, &d) == 0 || (b & bit_AVX2) == 0)
                return false;
            return (os_saved_state() & 0x6u) == 0x6u;
        }

        /// AVX-512 F, CD, BW, DQ and VL (what xsimd::avx512bw and the -mavx512* flags of
        /// simd/avx512.cpp use) and the opmask and ZMM state (XCR0 bits 5, 6, 7) saved too.
        bool has_avx512() noexcept
        {
            unsigned a = 0, b = 0, c = 0, d = 0;
            if (__get_cpuid_count(7, 0, &a, &b, &c, &d) == 0)
                return false;
            const unsigned need = bit_AVX512F | bit_AVX512CD | bit_AVX512BW | bit_AVX512DQ | bit_AVX512VL;
            return (b & need) == need && has_avx2_fma() && (os_saved_state() & 0xe6u) == 0xe6u;
        }
    }

    bool avx512_bf16_supported() noexcept
    {
        // CPUID.(7, 1):EAX bit 5; AVX512-BF16 uses no register state beyond AVX-512's.
        static const bool ok = [] {
            unsigned a = 0, b = 0, c = 0, d = 0;
            return has_avx512() && __get_cpuid_count(7, 1, &a, &b, &c, &d) != 0 && (a & (1u << 5)) != 0;
        }();
        return ok;
    }

    bool avx512_bf16_in_use() noexcept
    {
        return g_avx512_bf16_enabled.load(std::memory_order_relaxed) && simd_level_in_use() == simd_level::avx512 &&
               avx512_bf16_supported();
    }

    void limit_avx512_bf16(bool enabled) noexcept { g_avx512_bf16_enabled.store(enabled, std::memory_order_relaxed); }

    bool amx_supported() noexcept
    {
        static const bool ok = [] {
            unsigned a = 0, b = 0, c = 0, d = 0;
            // CPUID.(7, 0):EDX bit 22 AMX-BF16, bit 24 AMX-TILE.
            if (!has_avx512() || __get_cpuid_count(7, 0, &a, &b, &c, &d) == 0 || (d & (1u << 22)) == 0 ||
                (d & (1u << 24)) == 0)
                return false;
            // XCR0 bits 17 and 18: the OS saves the tile configuration and data.
            if ((os_saved_state() & 0x60000u) != 0x60000u)
                return false;
            // Linux hands the 8 KiB of tile data to a process only on request (arch_prctl
            // ARCH_REQ_XCOMP_PERM for feature 18, XTILEDATA); until then a tile instruction
            // faults. The request is made once and holds for every thread of the process.
            constexpr long arch_req_xcomp_perm = 0x1023, arch_get_xcomp_perm = 0x1022, xtiledata = 18;
            if (syscall(SYS_arch_prctl, arch_req_xcomp_perm, xtiledata) != 0)
                return false;
            unsigned long long granted = 0;
            return syscall(SYS_arch_prctl, arch_get_xcomp_perm, &granted) == 0 && (granted >> xtiledata & 1u) != 0;
        }();
        return ok;
    }

    bool amx_in_use() noexcept
    {
        return g_amx_enabled.load(std::memory_order_relaxed) && simd_level_in_use() == simd_level::avx512 &&
               amx_supported();
    }

    void limit_amx(bool enabled) noexcept { g_amx_enabled.store(enabled, std::memory_order_relaxed); }

    bool detail::use_f16c() noexcept
    {
        // Both levels are granted only with F16C (has_avx2_fma).
        return simd_level_in_use() >= simd_level::avx2_fma;
    }

    void detail::f32_to_f16_hw(std::uint16_t* out, const float* x, std::int64_t n) noexcept
    {
        if (simd_level_in_use() == simd_level::avx512)
            return simd::f32_to_f16_avx512(out, x, n);
        simd::f32_to_f16_f16c(out, x, n);
    }

    void detail::f16_to_f32_hw(float* out, const std::uint16_t* x, std::int64_t n) noexcept
    {
        if (simd_level_in_use() == simd_level::avx512)
            return simd::f16_to_f32_avx512(out, x, n);
        simd::f16_to_f32_f16c(out, x, n);
    }

    simd_level simd_supported() noexcept
    {
        static const simd_level best = has_avx512()     ? simd_level::avx512
                                       : has_avx2_fma() ? simd_level::avx2_fma
                                                        : simd_level::sse2;
        return best;
    }

    simd_level simd_environment_cap() noexcept
    {
        // Read once, on first use (not at static initialisation, whose order across files is
        // unspecified). An unknown value is said once on stderr and ignored: this runs inside
        // noexcept kernel dispatch, where there is no caller to throw to.
        static const simd_level cap = [] {
            const char* v = std::getenv("XGRAD_SIMD");
            if (v == nullptr || *v == '\0')
                return simd_level_max;
            const std::string_view s(v);
            if (s == "dispatch" || s == "avx512")
                return simd_level::avx512;
            if (s == "avx2_fma" || s == "avx2")
                return simd_level::avx2_fma;
            if (s == "sse2")
                return simd_level::sse2;
            if (s == "scalar")
                return simd_level::scalar;
            std::fprintf(stderr,
                         "xgrad: XGRAD_SIMD=%s is not one of avx512, avx2 (avx2_fma), sse2, scalar, dispatch: "
                         "ignored\n",
                         v);
            return simd_level_max;
        }();
        return cap;
    }

    simd_level simd_level_in_use() noexcept
    {
        return std::min({simd_supported(), simd_environment_cap(), g_limit.load(std::memory_order_relaxed)});
    }

    void limit_simd_level(simd_level max_level) noexcept { g_limit.store(max_level, std::memory_order_relaxed); }
}
