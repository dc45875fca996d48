// The SIMD inner loops compiled for AVX-512 (F, CD, BW, DQ, VL, with FMA and F16C): the functors
// of the fast kernels (simd/kernels_impl.hpp) and of the batch-norm kernels
// (batch_norm/simd_impl.hpp), for xsimd::avx512bw, plus 16-lane float16 <-> float32 bulk
// conversion. Only this file (and simd/optim_avx512.cpp) is built with the AVX-512 flags (see
// CMakeLists.txt); the fast kernels call into it only at simd_level::avx512, which
// simd/level.cpp grants only when the processor has those extensions and the OS saves the
// opmask and ZMM registers.
//
// The same rule as in simd/avx2.cpp: no inline function shared with other translation units.
#include "backends/cpu/batch_norm/simd_impl.hpp"
#include "backends/cpu/simd/kernels_impl.hpp"

#include <immintrin.h>

XGRAD_CPU_SIMD_INSTANTIATE(, xsimd::avx512bw)
XGRAD_CPU_BN_SIMD_INSTANTIATE(, xsimd::avx512bw)

namespace xgrad::cpu::simd
{
    // The tail is one masked load and store: no scalar loop. Rounding as in simd/avx2.cpp.
    void f32_to_f16_avx512(std::uint16_t* out, const float* x, std::int64_t n) noexcept
    {
        std::int64_t i = 0;
        for (; i + 16 <= n; i += 16)
            _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i),
                                _mm512_cvtps_ph(_mm512_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT));
        if (i < n)
        {
            const __mmask16 m = static_cast<__mmask16>((1u << (n - i)) - 1u);
            _mm256_mask_storeu_epi16(out + i, m,
                                     _mm512_cvtps_ph(_mm512_maskz_loadu_ps(m, x + i), _MM_FROUND_TO_NEAREST_INT));
        }
    }

    void f16_to_f32_avx512(float* out, const std::uint16_t* x, std::int64_t n) noexcept
    {
        std::int64_t i = 0;
        for (; i + 16 <= n; i += 16)
            _mm512_storeu_ps(out + i, _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + i))));
        if (i < n)
        {
            const __mmask16 m = static_cast<__mmask16>((1u << (n - i)) - 1u);
            _mm512_mask_storeu_ps(out + i, m, _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, x + i)));
        }
    }
}
