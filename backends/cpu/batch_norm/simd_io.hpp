#pragma once
// The loads and stores of the batch-norm SIMD functors (simd_impl.hpp), per architecture:
// whole and partial batches (masked at AVX-512, through a small buffer below), the 16-bit
// tensor types converted in registers (bfloat16 with integer operations or, for the
// avx512bw_bf16 tag, AVX512-BF16's vcvtneps2bf16; float16 with F16C or, at SSE2, per lane),
// and non-temporal stores. Included ONLY through simd_impl.hpp (by simd_terms.hpp), for the
// per-instruction-set translation units; the same rule holds: every helper is a template on
// the architecture (or a constant), so no translation unit can hand its copy to another.
#include <cstdint>
#include <type_traits>
#include <utility>

#include <immintrin.h>

#include "backends/cpu/batch_norm/simd.hpp"

namespace xgrad::cpu::simd
{
    namespace bn_impl
    {
        /// The xsimd architecture of a functor's tag: itself, except avx512bw_bf16, which runs
        /// xsimd::avx512bw's code (only its bfloat16 rounding differs, in pack_16).
        template <class Arch>
        struct xsimd_arch
        {
            using type = Arch;
        };
        template <>
        struct xsimd_arch<avx512bw_bf16>
        {
            using type = xsimd::avx512bw;
        };

        template <class Arch, class T>
        using batch = xsimd::batch<T, typename xsimd_arch<Arch>::type>;
        template <class Arch, class T>
        using batch_bool = xsimd::batch_bool<T, typename xsimd_arch<Arch>::type>;

        template <class Arch, class T>
        constexpr std::int64_t lanes = static_cast<std::int64_t>(batch<Arch, T>::size);

        /// f(std::integral_constant<int, I>{}) for I = 0 .. N-1, unrolled at compile time (so
        /// arrays of batches indexed by I stay in registers).
        template <class Arch, int N>
        struct unroll
        {
            template <class F, int... I>
            static void run(F& f, std::integer_sequence<int, I...>) noexcept
            {
                (f(std::integral_constant<int, I>{}), ...);
            }
            template <class F>
            static void apply(F&& f) noexcept
            {
                run(f, std::make_integer_sequence<int, N>{});
            }
        };

        /// Whether Arch is an AVX-512 one: tails are then masked loads and stores (no scalar
        /// loop, no buffer), and bfloat16 is converted 16 lanes at a time.
        template <class Arch>
        constexpr bool is_avx512 = std::is_base_of_v<xsimd::avx512f, Arch>;

        /// The mask of the first rem lanes (rem < 16). A template on the architecture, like
        /// every helper here, so no translation unit can hand its copy to another.
        template <class Arch>
        constexpr unsigned first_lanes(std::int64_t rem) noexcept
        {
            return (1u << rem) - 1u;
        }

        /// A full batch at p, or (Tail) the first rem < lanes elements padded with 0.
        template <class Arch, class T, bool Tail>
        batch<Arch, T> load(const T* p, std::int64_t rem) noexcept
        {
            if constexpr (!Tail)
                return batch<Arch, T>::load_unaligned(p);
            else if constexpr (is_avx512<Arch> && std::is_same_v<T, float>)
                return batch<Arch, T>(_mm512_maskz_loadu_ps(static_cast<__mmask16>(first_lanes<Arch>(rem)), p));
            else if constexpr (is_avx512<Arch>)
                return batch<Arch, T>(_mm512_maskz_loadu_pd(static_cast<__mmask8>(first_lanes<Arch>(rem)), p));
            else
            {
                alignas(64) T buf[lanes<Arch, T>];
                for (std::int64_t j = 0; j < lanes<Arch, T>; ++j)
                    buf[j] = j < rem ? p[j] : T(0);
                return batch<Arch, T>::load_aligned(buf);
            }
        }

        template <class Arch, class T, bool Tail>
        void store(T* p, const batch<Arch, T>& v, std::int64_t rem) noexcept
        {
            if constexpr (!Tail)
                v.store_unaligned(p);
            else if constexpr (is_avx512<Arch> && std::is_same_v<T, float>)
                _mm512_mask_storeu_ps(p, static_cast<__mmask16>(first_lanes<Arch>(rem)), v);
            else if constexpr (is_avx512<Arch>)
                _mm512_mask_storeu_pd(p, static_cast<__mmask8>(first_lanes<Arch>(rem)), v);
            else
            {
                alignas(64) T buf[lanes<Arch, T>];
                v.store_aligned(buf);
                for (std::int64_t j = 0; j < rem; ++j)
                    p[j] = buf[j];
            }
        }

        /// load / store for the tensors' own type IO: IO = T as they are; IO = bfloat16 (T =
        /// float) widened in registers (a bfloat16 is the top half of a float) and rounded back
        /// to nearest even with xgrad::to_bfloat16's rules (NaN -> (u >> 16) | 0x40, quiet, sign
        /// and top payload kept; else (u + 0x7fff + ((u >> 16) & 1)) >> 16).
        template <class Arch, class T, bool Tail, class IO>
        batch<Arch, T> load_io(const IO* p, std::int64_t rem) noexcept
        {
            if constexpr (std::is_same_v<IO, T>)
                return load<Arch, T, Tail>(p, rem);
            else if constexpr (std::is_same_v<IO, float16_t>)
            {
                // float16: the F16C conversion (exact; a signalling NaN comes out quiet, as
                // xgrad::to_float gives), 16 lanes with a masked tail at AVX-512; at SSE2, which
                // has no F16C, xgrad::to_float per lane.
                static_assert(std::is_same_v<T, float>, "float16 tensors with float arithmetic");
                constexpr std::int64_t w = lanes<Arch, T>;
                if constexpr (is_avx512<Arch>)
                {
                    const __m256i h = Tail ? _mm256_maskz_loadu_epi16(static_cast<__mmask16>(first_lanes<Arch>(rem)), p)
                                           : _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
                    return batch<Arch, T>(_mm512_cvtph_ps(h));
                }
                else if constexpr (w == 8)
                {
                    alignas(16) std::uint16_t buf[8] = {};
                    const void* u = p;
                    if constexpr (Tail)
                    {
                        __builtin_memcpy(buf, p, static_cast<unsigned long>(rem) * sizeof(IO));
                        u = buf;
                    }
                    return batch<Arch, T>(_mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(u))));
                }
                else
                {
                    alignas(16) float buf[4] = {};
                    for (std::int64_t j = 0; j < (Tail ? rem : 4); ++j)
                        buf[j] = xgrad::to_float(p[j]);
                    return batch<Arch, T>::load_aligned(buf);
                }
            }
            else
            {
                static_assert(std::is_same_v<T, float> && sizeof(IO) == 2, "bfloat16 tensors with float arithmetic");
                constexpr std::int64_t w = lanes<Arch, T>;
                if constexpr (is_avx512<Arch>)
                {
                    const __m256i h = Tail ? _mm256_maskz_loadu_epi16(static_cast<__mmask16>(first_lanes<Arch>(rem)), p)
                                           : _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
                    return batch<Arch, T>(_mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16)));
                }
                else
                {
                    const void* u = p;
                    alignas(64) std::uint16_t buf[8] = {};
                    if constexpr (Tail)
                    {
                        __builtin_memcpy(buf, p, static_cast<unsigned long>(rem) * sizeof(IO));
                        u = buf;
                    }
                    if constexpr (w == 8)
                    {
                        const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(u));
                        return batch<Arch, T>(_mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16)));
                    }
                    else
                    {
                        const __m128i h = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(u));
                        return batch<Arch, T>(_mm_castsi128_ps(_mm_unpacklo_epi16(_mm_setzero_si128(), h)));
                    }
                }
            }
        }

        /// 16 floats rounded to bfloat16 (in a __m256i) with integer operations, as
        /// xgrad::to_bfloat16: NaN -> (u >> 16) | 0x40; else (u + 0x7fff + ((u >> 16) & 1)) >> 16.
        template <class Arch>
        __m256i round_bf16_avx512(__m512 v) noexcept
        {
            const __m512i x = _mm512_castps_si512(v);
            const __m512i hi = _mm512_srli_epi32(x, 16);
            const __m512i rounded = _mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(x, _mm512_set1_epi32(0x7fff)),
                                                                       _mm512_and_si512(hi, _mm512_set1_epi32(1))),
                                                      16);
            const __mmask16 nan = _mm512_cmpgt_epi32_mask(_mm512_and_si512(x, _mm512_set1_epi32(0x7fffffff)),
                                                          _mm512_set1_epi32(0x7f800000));
            const __m512i r = _mm512_mask_blend_epi32(nan, rounded, _mm512_or_si512(hi, _mm512_set1_epi32(0x40)));
            return _mm512_cvtepi32_epi16(r); // every lane fits in 16 bits
        }

        template <class Arch>
        [[gnu::noinline, gnu::cold]] __m256i round_bf16_avx512_cold(__m512 v) noexcept
        {
            return round_bf16_avx512<Arch>(v);
        }

        /// A batch of floats as 16-bit values (AVX-512: 16 in a __m256i; AVX2: 8 in the low
        /// 128 bits), rounded to nearest even as xgrad::to_float16 / to_bfloat16 round: float16
        /// whatever MXCSR says (the immediate), NaNs quiet with sign and top payload kept.
        template <class Arch, class IO>
        auto pack_16(const batch<Arch, float>& v) noexcept
        {
            if constexpr (std::is_same_v<IO, float16_t>)
            {
                if constexpr (is_avx512<Arch>)
                    return _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT);
                else
                    return _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT);
            }
            else if constexpr (std::is_same_v<Arch, avx512bw_bf16>)
            {
                // vcvtneps2bf16 rounds as round_bf16_avx512 does (same NaN rule, Intel SDM),
                // except that it reads a subnormal input as zero; a batch with one (rare: below
                // 2^-126) takes the integer way, out of line: inlined here, that code's
                // constants held registers the tile loops need (the channels-last training
                // gradient ran 5-9% slower than with the integer rounding alone).
                const __m512i x = _mm512_castps_si512(v);
                const __mmask16 tiny = _mm512_testn_epi32_mask(x, _mm512_set1_epi32(0x7f800000));
                if (__builtin_expect(_mm512_mask_test_epi32_mask(tiny, x, _mm512_set1_epi32(0x007fffff)) == 0, 1))
                    return (__m256i)_mm512_cvtneps_pbh(v);
                return round_bf16_avx512_cold<Arch>(v);
            }
            else if constexpr (is_avx512<Arch>)
                return round_bf16_avx512<Arch>(v);
            else
            {
                const __m256i x = _mm256_castps_si256(v);
                const __m256i hi = _mm256_srli_epi32(x, 16);
                const __m256i rounded =
                    _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(x, _mm256_set1_epi32(0x7fff)),
                                                       _mm256_and_si256(hi, _mm256_set1_epi32(1))),
                                      16);
                const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(x, _mm256_set1_epi32(0x7fffffff)),
                                                       _mm256_set1_epi32(0x7f800000));
                const __m256i r = _mm256_blendv_epi8(rounded, _mm256_or_si256(hi, _mm256_set1_epi32(0x40)), nan);
                // packus works within each 128-bit lane: take the low 64 bits of both lanes.
                return _mm256_castsi256_si128(_mm256_permute4x64_epi64(_mm256_packus_epi32(r, r), 0x08));
            }
        }

        template <class Arch, class T, bool Tail, class IO>
        void store_io(IO* p, const batch<Arch, T>& v, std::int64_t rem) noexcept
        {
            constexpr std::int64_t w = lanes<Arch, T>;
            if constexpr (std::is_same_v<IO, T>)
                store<Arch, T, Tail>(p, v, rem);
            else if constexpr (is_avx512<Arch>)
            {
                const __m256i packed = pack_16<Arch, IO>(v);
                if constexpr (Tail)
                    _mm256_mask_storeu_epi16(p, static_cast<__mmask16>(first_lanes<Arch>(rem)), packed);
                else
                    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), packed);
            }
            else if constexpr (w == 8)
            {
                const __m128i packed = pack_16<Arch, IO>(v);
                if constexpr (Tail)
                {
                    alignas(16) std::uint16_t buf[8];
                    _mm_store_si128(reinterpret_cast<__m128i*>(buf), packed);
                    __builtin_memcpy(p, buf, static_cast<unsigned long>(rem) * sizeof(IO));
                }
                else
                    _mm_storeu_si128(reinterpret_cast<__m128i*>(p), packed);
            }
            else if constexpr (std::is_same_v<IO, float16_t>)
            {
                // SSE2 has no F16C: xgrad::to_float16 per lane.
                alignas(16) float buf[4];
                v.store_aligned(buf);
                for (std::int64_t j = 0; j < (Tail ? rem : 4); ++j)
                    p[j] = xgrad::to_float16(buf[j]);
            }
            else
            {
                alignas(64) std::uint16_t buf[8];
                void* u = Tail ? static_cast<void*>(buf) : static_cast<void*>(p);
                const __m128i x = _mm_castps_si128(v);
                const __m128i hi = _mm_srli_epi32(x, 16);
                const __m128i rounded = _mm_srli_epi32(
                    _mm_add_epi32(_mm_add_epi32(x, _mm_set1_epi32(0x7fff)), _mm_and_si128(hi, _mm_set1_epi32(1))), 16);
                const __m128i nan = _mm_cmpgt_epi32(_mm_and_si128(x, _mm_set1_epi32(0x7fffffff)),
                                                    _mm_set1_epi32(0x7f800000));
                const __m128i r = _mm_or_si128(_mm_and_si128(nan, _mm_or_si128(hi, _mm_set1_epi32(0x40))),
                                               _mm_andnot_si128(nan, rounded));
                // Sign-extend the 16-bit results so the signed saturating pack keeps their bits.
                const __m128i packed = _mm_packs_epi32(_mm_srai_epi32(_mm_slli_epi32(r, 16), 16), r);
                _mm_storel_epi64(reinterpret_cast<__m128i*>(u), packed);
                if constexpr (Tail)
                    __builtin_memcpy(p, buf, static_cast<unsigned long>(rem) * sizeof(IO));
            }
        }

        /// A full batch stored at p with a non-temporal store when p is batch-aligned (else an
        /// ordinary store).
        template <class Arch, class T>
        void store_stream(T* p, const batch<Arch, T>& v) noexcept
        {
            constexpr std::size_t bytes = sizeof(T) * static_cast<std::size_t>(lanes<Arch, T>);
            if (reinterpret_cast<std::uintptr_t>(p) % bytes != 0)
                return v.store_unaligned(p);
            if constexpr (bytes == 64 && std::is_same_v<T, float>)
                _mm512_stream_ps(p, v);
            else if constexpr (bytes == 64)
                _mm512_stream_pd(p, v);
            else if constexpr (bytes == 32 && std::is_same_v<T, float>)
                _mm256_stream_ps(p, v);
            else if constexpr (bytes == 32)
                _mm256_stream_pd(p, v);
            else if constexpr (bytes == 16 && std::is_same_v<T, float>)
                _mm_stream_ps(p, v);
            else if constexpr (bytes == 16)
                _mm_stream_pd(p, v);
            else
                v.store_unaligned(p);
        }

        /// store_stream for tensors of IO: a full batch, converted as store_io converts, stored
        /// with a non-temporal store when p is aligned to the batch's bytes (16-bit batches:
        /// 32 bytes at AVX-512, 16 at AVX2; at SSE2 an ordinary store).
        template <class Arch, class T, class IO>
        void store_stream_io(IO* p, const batch<Arch, T>& v) noexcept
        {
            constexpr std::int64_t w = lanes<Arch, T>;
            if constexpr (std::is_same_v<IO, T>)
                store_stream<Arch, T>(p, v);
            else if constexpr (is_avx512<Arch> || w == 8)
            {
                if (reinterpret_cast<std::uintptr_t>(p) % (sizeof(IO) * w) != 0)
                    return store_io<Arch, T, false>(p, v, 0);
                if constexpr (is_avx512<Arch>)
                    _mm256_stream_si256(reinterpret_cast<__m256i*>(p), pack_16<Arch, IO>(v));
                else
                    _mm_stream_si128(reinterpret_cast<__m128i*>(p), pack_16<Arch, IO>(v));
            }
            else
                store_io<Arch, T, false>(p, v, 0);
        }
    }
}
