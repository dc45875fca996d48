#pragma once
// 16-bit floating-point storage types and their conversions.
//
// float16_t holds an IEEE 754 binary16 (1 sign, 5 exponent, 10 fraction bits; subnormals down
// to 2^-24, largest finite 65504). bfloat16_t holds the top 16 bits of a binary32 (1 sign,
// 8 exponent, 7 fraction bits; same range as float). Both are plain bit containers: trivially
// copyable, 2 bytes, no arithmetic. Ops convert to float32, compute, and convert back.
//
// Conversion contract:
// - To 16 bits: round to nearest, ties to even, as one correctly rounded step from the source
//   value (the double overloads do not round through float first). Values too large for the
//   target round to +-inf (float16: |x| >= 65520, the midpoint between 65504 and 2^16). Results
//   too small become subnormals or +-0, keeping the sign. +-inf stays +-inf. NaN stays NaN: the
//   result is a quiet NaN with the input's sign and the top bits of its payload.
// - To float: exact (every float16 and bfloat16 value is a float). NaN bit patterns keep their
//   payload.
// Portable bit manipulation (std::memcpy), no intrinsics; independent of the FP environment.
#include <cstdint>
#include <cstring>
#include <type_traits>

// The conversions are usable in CUDA device code too (the CUDA backend's kernels convert with
// these very functions, so both backends round alike).
#if defined(__CUDACC__)
#define XGRAD_HOST_DEVICE __host__ __device__
#else
#define XGRAD_HOST_DEVICE
#endif

namespace xgrad
{
    /// IEEE 754 binary16, stored as its bit pattern.
    struct float16_t
    {
        std::uint16_t bits;
    };

    /// bfloat16 (the top 16 bits of an IEEE 754 binary32), stored as its bit pattern.
    struct bfloat16_t
    {
        std::uint16_t bits;
    };

    static_assert(sizeof(float16_t) == 2 && std::is_trivially_copyable_v<float16_t>);
    static_assert(sizeof(bfloat16_t) == 2 && std::is_trivially_copyable_v<bfloat16_t>);

    namespace detail
    {
        /// m / 2^shift rounded to nearest, ties to even. 1 <= shift <= 63.
        XGRAD_HOST_DEVICE inline std::uint64_t round_shift_rne(std::uint64_t m, int shift) noexcept
        {
            const std::uint64_t q = m >> shift;
            const std::uint64_t rem = m & ((std::uint64_t{1} << shift) - 1);
            const std::uint64_t half = std::uint64_t{1} << (shift - 1);
            return q + ((rem > half || (rem == half && (q & 1))) ? 1 : 0);
        }

        /// Narrows the bit pattern of a binary format with SM fraction / SE exponent bits to a
        /// 16-bit format with DM fraction / DE exponent bits, rounding to nearest even.
        ///
        /// Rounding scheme: split the source into sign, unbiased exponent e and the full
        /// significand m (implicit bit included). If the result is normal, drop SM - DM low
        /// bits of m with round_shift_rne; a carry out of the significand moves into the
        /// exponent field by plain addition, which also turns the largest finite value into
        /// inf exactly when the value is at or above the overflow midpoint. If the result is
        /// subnormal, m is shifted so that one unit is the smallest subnormal; a round-up to
        /// 2^DM lands on the smallest normal encoding, again by the layout. Source subnormals
        /// are far below the target's smallest subnormal and give +-0.
        template <int SM, int SE, int DM, int DE>
        XGRAD_HOST_DEVICE inline std::uint16_t narrow_bits(std::uint64_t bits) noexcept
        {
            static_assert(DM + DE == 15 && DE <= SE && DM < SM);
            constexpr int s_bias = (1 << (SE - 1)) - 1;
            constexpr int d_bias = (1 << (DE - 1)) - 1;
            static_assert(s_bias - 1 > d_bias + DM + 1, "source subnormals must round to 0");
            constexpr int s_emax = (1 << SE) - 1;
            constexpr std::uint16_t d_inf = static_cast<std::uint16_t>(((1 << DE) - 1) << DM);

            const auto sign = static_cast<std::uint16_t>((bits >> (SM + SE)) << 15);
            const int biased = static_cast<int>((bits >> SM) & static_cast<std::uint64_t>(s_emax));
            const std::uint64_t frac = bits & ((std::uint64_t{1} << SM) - 1);

            if (biased == s_emax)
            {
                if (frac == 0)
                    return static_cast<std::uint16_t>(sign | d_inf);
                // NaN: set the quiet bit (so a payload only in dropped low bits stays NaN).
                return static_cast<std::uint16_t>(sign | d_inf | (1u << (DM - 1)) |
                                                  static_cast<std::uint16_t>(frac >> (SM - DM)));
            }
            if (biased == 0)
                return sign;
            const int e = biased - s_bias;
            if (e > d_bias)
                return static_cast<std::uint16_t>(sign | d_inf);
            const std::uint64_t m = frac | (std::uint64_t{1} << SM);
            if (e >= 1 - d_bias)
            {
                // q in [2^DM, 2^(DM+1)]: its implicit bit adds the missing 1 to the exponent.
                const std::uint64_t q = round_shift_rne(m, SM - DM);
                return static_cast<std::uint16_t>(sign | ((static_cast<std::uint64_t>(e + d_bias - 1) << DM) + q));
            }
            // Subnormal result, in units of 2^(1 - d_bias - DM).
            const int shift = SM - DM + 1 - d_bias - e;
            if (shift > SM + 1)
                return sign; // below half the smallest subnormal
            return static_cast<std::uint16_t>(sign | round_shift_rne(m, shift));
        }

        XGRAD_HOST_DEVICE inline std::uint32_t float_bits(float x) noexcept
        {
            std::uint32_t u;
            std::memcpy(&u, &x, sizeof u);
            return u;
        }

        XGRAD_HOST_DEVICE inline std::uint64_t double_bits(double x) noexcept
        {
            std::uint64_t u;
            std::memcpy(&u, &x, sizeof u);
            return u;
        }

        XGRAD_HOST_DEVICE inline float float_from_bits(std::uint32_t u) noexcept
        {
            float x;
            std::memcpy(&x, &u, sizeof x);
            return x;
        }
    }

    XGRAD_HOST_DEVICE inline float16_t to_float16(float x) noexcept
    {
        return {detail::narrow_bits<23, 8, 10, 5>(detail::float_bits(x))};
    }

    XGRAD_HOST_DEVICE inline float16_t to_float16(double x) noexcept
    {
        return {detail::narrow_bits<52, 11, 10, 5>(detail::double_bits(x))};
    }

    XGRAD_HOST_DEVICE inline bfloat16_t to_bfloat16(float x) noexcept
    {
        const std::uint32_t u = detail::float_bits(x);
        if ((u & 0x7fffffffu) > 0x7f800000u) // NaN: quiet it, keep the sign and top payload
            return {static_cast<std::uint16_t>((u >> 16) | 0x0040u)};
        // Same layout as float with 16 fewer fraction bits: adding 0x7fff plus the lowest kept
        // bit rounds to nearest even, carrying into the exponent (and up to inf) as needed.
        // Subnormals need no special case.
        const std::uint32_t rounded = u + 0x7fffu + ((u >> 16) & 1u);
        return {static_cast<std::uint16_t>(rounded >> 16)};
    }

    XGRAD_HOST_DEVICE inline bfloat16_t to_bfloat16(double x) noexcept
    {
        return {detail::narrow_bits<52, 11, 7, 8>(detail::double_bits(x))};
    }

    XGRAD_HOST_DEVICE inline float to_float(float16_t h) noexcept
    {
        const std::uint32_t sign = static_cast<std::uint32_t>(h.bits & 0x8000u) << 16;
        const std::uint32_t exp = (h.bits >> 10) & 0x1fu;
        const std::uint32_t frac = h.bits & 0x3ffu;
        if (exp == 0x1f) // inf or NaN; the payload moves to the top of the float fraction
            return detail::float_from_bits(sign | 0x7f800000u | (frac << 13));
        if (exp == 0)
        {
            // Zero or subnormal: frac * 2^-24, exact in float.
            const float magnitude = static_cast<float>(frac) * 0x1p-24f;
            return detail::float_from_bits(sign | detail::float_bits(magnitude));
        }
        return detail::float_from_bits(sign | ((exp + 112u) << 23) | (frac << 13));
    }

    XGRAD_HOST_DEVICE inline float to_float(bfloat16_t h) noexcept
    {
        return detail::float_from_bits(static_cast<std::uint32_t>(h.bits) << 16);
    }
}
