#pragma once
// Internal to the CPU backend (and its tests): which instruction set the fast kernels use.
//
// The fast kernels pick the best compiled instruction set the processor (and the OS) supports:
// AVX-512, AVX2 + FMA or SSE2 (simd_call, dispatch.hpp). limit_simd_level caps that choice at
// run time, so the tests can check the SSE2 and AVX2 code on an AVX-512 machine; it is also a
// debugging switch. At the `scalar` level
// the dispatch (core/src/dispatch.cpp) serves the xgrad::cpu::reference table instead of the
// fast kernels. In a build configured with XGRAD_SIMD=scalar the level is always `scalar`.
#include <cstdint>

namespace xgrad::cpu
{
    /// Ordered: a higher level uses a wider instruction set.
    enum class simd_level : std::uint8_t
    {
        scalar,   // the reference kernels (single-threaded plain loops), chosen by the dispatch
        sse2,     // xsimd::sse2, every x86-64 processor
        avx2_fma, // xsimd::fma3<xsimd::avx2> (plus F16C for float16 <-> float32 copies)
        avx512    // xsimd::avx512bw: AVX-512 F, CD, BW, DQ and VL (plus FMA and F16C), masked tails
    };

    /// The highest level any build knows (the default cap).
    constexpr simd_level simd_level_max = simd_level::avx512;

    /// "scalar", "sse2", "avx2_fma" or "avx512".
    constexpr const char* simd_level_name(simd_level level) noexcept
    {
        switch (level)
        {
        case simd_level::scalar: return "scalar";
        case simd_level::sse2: return "sse2";
        case simd_level::avx2_fma: return "avx2_fma";
        case simd_level::avx512: return "avx512";
        }
        return "?";
    }

    /// The best level this build and this processor support.
    simd_level simd_supported() noexcept;
    /// The cap the environment sets: XGRAD_SIMD=avx512 | avx2 (or avx2_fma) | sse2 | scalar
    /// (dispatch or unset: none), read once. For measuring a lower level on a processor that
    /// has a higher one without rebuilding (as the bench's --simd flag does for its own runs);
    /// limit_simd_level cannot raise the level above it.
    simd_level simd_environment_cap() noexcept;
    /// The level the kernels use now: the smallest of simd_supported(), the environment's cap
    /// and the current limit.
    simd_level simd_level_in_use() noexcept;
    /// Caps the level for subsequent kernel calls (process-wide; default: no cap). Not meant to
    /// change while kernels run on other threads.
    void limit_simd_level(simd_level max_level) noexcept;

    /// Whether the processor has AVX512-BF16 (vcvtneps2bf16, float32 -> bfloat16) besides the
    /// extensions of the avx512 level. False in a scalar build and off x86-64.
    bool avx512_bf16_supported() noexcept;
    /// avx512_bf16_supported(), the level in use is avx512 (so XGRAD_SIMD and limit_simd_level
    /// below it turn it off too), and limit_avx512_bf16 has not turned it off. The batch-norm
    /// kernels then round their bfloat16 outputs with vcvtneps2bf16 (same bits: see
    /// batch_norm/simd_io.hpp).
    bool avx512_bf16_in_use() noexcept;
    /// Turns those conversions off (false) or back on (true) for later calls, process-wide: the
    /// tests compare both ways of rounding on the same processor. Not meant to change while
    /// kernels run.
    void limit_avx512_bf16(bool enabled) noexcept;
}
