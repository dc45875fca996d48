#pragma once
// Internal to the backends: element conversions between the five dtypes, used by copy, fill
// and one_hot of the CPU (fast and reference alike) and of the CUDA backend; the tests check
// them against known values.
//
// - float -> float16/bfloat16: one correctly rounded step (round to nearest even), through
//   xgrad/half.hpp; float64 sources use its double overloads, so nothing rounds twice.
// - float -> int64: truncation toward zero, saturating: NaN -> 0, values >= 2^63 -> INT64_MAX,
//   values < -2^63 -> INT64_MIN (a plain cast would be undefined behaviour there).
// - int64 -> float16/bfloat16: the int64 is first rounded to double with round-to-odd, which
//   keeps the later round-to-nearest-even exact (53 >= 11 + 2 bits), so e.g.
//   2^60 + 2^52 + 1 -> bfloat16 rounds up as it must, where int64 -> double -> bfloat16 would tie.
//
// The element conversions (int64_to_double_round_odd, float_to_int64, widen, convert) are
// XGRAD_HOST_DEVICE (xgrad/half.hpp): the CUDA backend's copy and fill call these very
// functions in its kernels, so both backends convert bit for bit alike. They use only what
// device code has too: integer and IEEE operations, the round-to-nearest int64 <-> float
// conversions and truncating float -> int64 casts of C++, and ldexp by a power of two (exact).
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "xgrad/dtype.hpp"
#include "xgrad/half.hpp"

namespace xgrad::kernels::detail
{
    /// Calls f(T{}) with T the C++ element type of dt.
    template <class F>
    decltype(auto) visit_dtype(dtype dt, F&& f)
    {
        switch (dt)
        {
        case dtype::float32: return f(float{});
        case dtype::float64: return f(double{});
        case dtype::float16: return f(float16_t{});
        case dtype::bfloat16: return f(bfloat16_t{});
        case dtype::int64: break;
        }
        return f(std::int64_t{});
    }

    /// For a floating dtype: calls f(T{}, S{}) with T its element type and S the statistics
    /// type the batch-norm kernels compute in (double for float64, float otherwise).
    template <class F>
    void visit_with_stats(dtype dt, F&& f)
    {
        visit_dtype(dt, [&](auto t) {
            using T = decltype(t);
            if constexpr (!std::is_same_v<T, std::int64_t>)
            {
                using S = std::conditional_t<std::is_same_v<T, double>, double, float>;
                f(T{}, S{});
            }
        });
    }

    /// The int64 v rounded to double with round-to-odd (exact when |v| < 2^53).
    XGRAD_HOST_DEVICE inline double int64_to_double_round_odd(std::int64_t v) noexcept
    {
        const bool negative = v < 0;
        std::uint64_t mag = negative ? std::uint64_t{0} - static_cast<std::uint64_t>(v) : static_cast<std::uint64_t>(v);
        int drop = 0;
        while ((mag >> drop) >= (std::uint64_t{1} << 53))
            ++drop;
        if (drop > 0)
        {
            const bool inexact = (mag & ((std::uint64_t{1} << drop) - 1)) != 0;
            mag = (mag >> drop) | (inexact ? 1u : 0u);
        }
        const double d = std::ldexp(static_cast<double>(mag), drop);
        return negative ? -d : d;
    }

    template <class F>
    XGRAD_HOST_DEVICE std::int64_t float_to_int64(F x) noexcept
    {
        if (x != x)
            return 0;
        if (x >= F(9223372036854775808.0))
            return std::numeric_limits<std::int64_t>::max();
        if (x < F(-9223372036854775808.0))
            return std::numeric_limits<std::int64_t>::min();
        return static_cast<std::int64_t>(x);
    }

    /// The value of v as a float or double (exact for every source except int64 -> float).
    template <class Wide, class From>
    XGRAD_HOST_DEVICE Wide widen(From v) noexcept
    {
        if constexpr (std::is_same_v<From, float16_t> || std::is_same_v<From, bfloat16_t>)
            return static_cast<Wide>(to_float(v));
        else
            return static_cast<Wide>(v);
    }

    /// v converted to To (see the file comment for the rules).
    template <class To, class From>
    XGRAD_HOST_DEVICE To convert(From v) noexcept
    {
        if constexpr (std::is_same_v<To, From>)
            return v;
        else if constexpr (std::is_same_v<To, std::int64_t>)
        {
            if constexpr (std::is_same_v<From, double>)
                return float_to_int64(v);
            else
                return float_to_int64(widen<float>(v));
        }
        else if constexpr (std::is_same_v<To, float> || std::is_same_v<To, double>)
            return widen<To>(v);
        else
        {
            // To is float16_t or bfloat16_t: round once from an exact float/double source.
            auto round = [](auto wide) {
                if constexpr (std::is_same_v<To, float16_t>)
                    return to_float16(wide);
                else
                    return to_bfloat16(wide);
            };
            if constexpr (std::is_same_v<From, std::int64_t>)
                return round(int64_to_double_round_odd(v));
            else if constexpr (std::is_same_v<From, double>)
                return round(v);
            else
                return round(widen<float>(v));
        }
    }
}

namespace xgrad::cpu::detail
{
    // The CPU backend's code names these detail::... from inside xgrad::cpu.
    using namespace ::xgrad::kernels::detail;
}
