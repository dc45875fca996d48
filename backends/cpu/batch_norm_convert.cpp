// The 16-bit conversion of the fast batch-norm kernels (declared in batch_norm_convert.hpp):
// float16 / bfloat16 rows widened to float before the SIMD functors read them, and float
// results rounded back once. Kept out of batch_norm.cpp so the SSE2 intrinsics and the
// F16C calls live with the one concern that uses them. Built with the default flags: SSE2 is
// the x86-64 baseline; the F16C path calls simd::f16_to_f32_f16c / f32_to_f16_f16c of
// kernels_avx2.cpp only when use_f16c() (the caller's flag) is true.
#include <cstdint>
#include <type_traits>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "backends/cpu/batch_norm_convert.hpp"
#include "backends/cpu/convert.hpp"
#include "backends/cpu/simd_kernels.hpp"

namespace xgrad::cpu::bn_detail
{
    namespace
    {
        // ---------------------------------------------------------------------------------
        // 16-bit conversion of pieces (rows of n elements, `stride` apart in the tensor, packed
        // in the scratch buffer).

        /// d[j] = s[j] as float, j < n (exact).
        template <class T>
        void widen_run(float* d, const T* s, std::int64_t n, bool f16c)
        {
            std::int64_t j = 0;
            if constexpr (std::is_same_v<T, float16_t>)
            {
                if (f16c)
                    return simd::f16_to_f32_f16c(d, reinterpret_cast<const std::uint16_t*>(s), n);
            }
#if defined(__SSE2__)
            else if constexpr (std::is_same_v<T, bfloat16_t>)
            {
                // A bfloat16 is the top half of a float: interleave zeros below it.
                const __m128i zero = _mm_setzero_si128();
                for (; j + 8 <= n; j += 8)
                {
                    const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + j));
                    _mm_storeu_ps(d + j, _mm_castsi128_ps(_mm_unpacklo_epi16(zero, v)));
                    _mm_storeu_ps(d + j + 4, _mm_castsi128_ps(_mm_unpackhi_epi16(zero, v)));
                }
            }
#endif
            for (; j < n; ++j)
                d[j] = detail::widen<float>(s[j]);
        }

        /// d[j] = s[j] rounded to T (nearest even; convert.hpp's rules), j < n.
        template <class T>
        void narrow_run(T* d, const float* s, std::int64_t n, bool f16c)
        {
            std::int64_t j = 0;
            if constexpr (std::is_same_v<T, float16_t>)
            {
                if (f16c)
                    return simd::f32_to_f16_f16c(reinterpret_cast<std::uint16_t*>(d), s, n);
            }
#if defined(__SSE2__)
            else if constexpr (std::is_same_v<T, bfloat16_t>)
            {
                // xgrad::to_bfloat16, 4 lanes at a time: NaN -> (u >> 16) | 0x40 (quiet, sign and
                // top payload kept), else (u + 0x7fff + ((u >> 16) & 1)) >> 16.
                auto round4 = [](__m128i u) {
                    const __m128i hi = _mm_srli_epi32(u, 16);
                    const __m128i rounded =
                        _mm_srli_epi32(_mm_add_epi32(_mm_add_epi32(u, _mm_set1_epi32(0x7fff)),
                                                     _mm_and_si128(hi, _mm_set1_epi32(1))),
                                       16);
                    const __m128i nan = _mm_cmpgt_epi32(_mm_and_si128(u, _mm_set1_epi32(0x7fffffff)),
                                                        _mm_set1_epi32(0x7f800000));
                    const __m128i r = _mm_or_si128(_mm_and_si128(nan, _mm_or_si128(hi, _mm_set1_epi32(0x40))),
                                                   _mm_andnot_si128(nan, rounded));
                    // Sign-extend the 16-bit result so the signed saturating pack keeps its bits.
                    return _mm_srai_epi32(_mm_slli_epi32(r, 16), 16);
                };
                for (; j + 8 <= n; j += 8)
                {
                    const __m128i lo = round4(_mm_castps_si128(_mm_loadu_ps(s + j)));
                    const __m128i hi = round4(_mm_castps_si128(_mm_loadu_ps(s + j + 4)));
                    _mm_storeu_si128(reinterpret_cast<__m128i*>(d + j), _mm_packs_epi32(lo, hi));
                }
            }
#endif
            for (; j < n; ++j)
                d[j] = detail::convert<T>(s[j]);
        }
    }

    /// 16-bit conversion of rows of n elements, `stride` apart in the tensor, packed in the
    /// scratch buffer (one run when the rows are contiguous).
    template <class T>
    void widen_rows(float* dst, const T* src, std::int64_t rows, std::int64_t n, std::int64_t stride, bool f16c)
    {
        if (stride == n)
            return widen_run(dst, src, rows * n, f16c);
        for (std::int64_t r = 0; r < rows; ++r)
            widen_run(dst + r * n, src + r * stride, n, f16c);
    }

    template <class T>
    void narrow_rows(T* dst, const float* src, std::int64_t rows, std::int64_t n, std::int64_t stride, bool f16c)
    {
        if (stride == n)
            return narrow_run(dst, src, rows * n, f16c);
        for (std::int64_t r = 0; r < rows; ++r)
            narrow_run(dst + r * stride, src + r * n, n, f16c);
    }

    template void widen_rows(float*, const float16_t*, std::int64_t, std::int64_t, std::int64_t, bool);
    template void widen_rows(float*, const bfloat16_t*, std::int64_t, std::int64_t, std::int64_t, bool);
    template void narrow_rows(float16_t*, const float*, std::int64_t, std::int64_t, std::int64_t, bool);
    template void narrow_rows(bfloat16_t*, const float*, std::int64_t, std::int64_t, std::int64_t, bool);
}
