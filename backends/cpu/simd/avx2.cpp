// The SIMD inner loops compiled for AVX2 + FMA: the functors of the fast kernels
// (simd/kernels_impl.hpp) and of the batch-norm kernels (batch_norm/simd_impl.hpp), plus F16C
// bulk float16 <-> float32 conversion (for the copy kernel). Only this file is built with -mavx2 -mfma -mf16c (plus -O2 in
// every configuration; see CMakeLists.txt); the fast kernels call into it only after checking
// the processor at run time (simd/level.cpp, simd_call in dispatch.hpp), so the library still
// runs on any x86-64 processor.
//
// Keep this file free of inline functions shared with other translation units (standard
// library helpers included): the linker may keep this file's AVX2-encoded copy of such a
// function for the whole library. The functor helpers are all templates on the architecture,
// and the two functions below use intrinsics and plain loops only.
#include "backends/cpu/batch_norm/simd_impl.hpp"
#include "backends/cpu/simd/kernels_impl.hpp"

#include <immintrin.h>

XGRAD_CPU_SIMD_INSTANTIATE(, xsimd::fma3<xsimd::avx2>)
XGRAD_CPU_BN_SIMD_INSTANTIATE(, xsimd::fma3<xsimd::avx2>)

namespace xgrad::cpu::simd
{
    // _MM_FROUND_TO_NEAREST_INT in the immediate: round to nearest even whatever MXCSR says.
    // NaNs come out quiet with the sign and top payload bits kept, as xgrad::to_float16 does.
    void f32_to_f16_f16c(std::uint16_t* out, const float* x, std::int64_t n) noexcept
    {
        std::int64_t i = 0;
        for (; i + 8 <= n; i += 8)
        {
            const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT);
            _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), h);
        }
        if (i < n)
        {
            alignas(32) float in[8] = {};
            alignas(16) std::uint16_t res[8];
            for (std::int64_t j = 0; j < n - i; ++j)
                in[j] = x[i + j];
            _mm_store_si128(reinterpret_cast<__m128i*>(res),
                            _mm256_cvtps_ph(_mm256_load_ps(in), _MM_FROUND_TO_NEAREST_INT));
            for (std::int64_t j = 0; j < n - i; ++j)
                out[i + j] = res[j];
        }
    }

    // Exact (every float16 is a float); a signalling NaN comes out quiet.
    void f16_to_f32_f16c(float* out, const std::uint16_t* x, std::int64_t n) noexcept
    {
        std::int64_t i = 0;
        for (; i + 8 <= n; i += 8)
            _mm256_storeu_ps(out + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x + i))));
        if (i < n)
        {
            alignas(16) std::uint16_t in[8] = {};
            alignas(32) float res[8];
            for (std::int64_t j = 0; j < n - i; ++j)
                in[j] = x[i + j];
            _mm256_store_ps(res, _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(in))));
            for (std::int64_t j = 0; j < n - i; ++j)
                out[i + j] = res[j];
        }
    }
}
