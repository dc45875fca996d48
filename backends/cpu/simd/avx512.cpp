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

    // bfloat16 by integer rounding, as xgrad::to_bfloat16: the lowest kept bit plus 0x7fff added
    // (nearest even, carrying into the exponent), NaN quieted with its sign and top payload.
    // (AVX512-BF16's vcvtneps2bf16 would flush subnormals, which to_bfloat16 keeps.)
    void f32_to_bf16_avx512(std::uint16_t* out, const float* x, std::int64_t n) noexcept
    {
        const __m512i one = _mm512_set1_epi32(1), bias = _mm512_set1_epi32(0x7fff), quiet = _mm512_set1_epi32(0x40);
        for (std::int64_t i = 0; i < n; i += 16)
        {
            const __mmask16 m = n - i >= 16 ? __mmask16(0xffff) : static_cast<__mmask16>((1u << (n - i)) - 1u);
            const __m512 v = _mm512_maskz_loadu_ps(m, x + i);
            const __m512i u = _mm512_castps_si512(v);
            const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), one);
            __m512i r = _mm512_srli_epi32(_mm512_add_epi32(u, _mm512_add_epi32(lsb, bias)), 16);
            r = _mm512_mask_or_epi32(r, _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q), _mm512_srli_epi32(u, 16), quiet);
            _mm256_mask_storeu_epi16(out + i, m, _mm512_cvtepi32_epi16(r));
        }
    }

    void bf16_to_f32_avx512(float* out, const std::uint16_t* x, std::int64_t n) noexcept
    {
        for (std::int64_t i = 0; i < n; i += 16)
        {
            const __mmask16 m = n - i >= 16 ? __mmask16(0xffff) : static_cast<__mmask16>((1u << (n - i)) - 1u);
            const __m512i u = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, x + i));
            _mm512_mask_storeu_ps(out + i, m, _mm512_castsi512_ps(_mm512_slli_epi32(u, 16)));
        }
    }
}
