// Tests for xgrad/half.hpp: exhaustive round trips, hand-picked rounding cases, and a
// comparison of to_float16 / to_bfloat16 against a slow reference that picks the nearest
// representable value by search.
#include "xgrad/half.hpp"

#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <ios>
#include <limits>
#include <random>
#include <type_traits>

using xgrad::bfloat16_t;
using xgrad::float16_t;
using xgrad::to_bfloat16;
using xgrad::to_float;
using xgrad::to_float16;

namespace
{
    std::uint32_t bits_of(float x)
    {
        std::uint32_t u;
        std::memcpy(&u, &x, sizeof u);
        return u;
    }

    float float_of(std::uint32_t u)
    {
        float x;
        std::memcpy(&x, &u, sizeof x);
        return x;
    }

    double double_of(std::uint64_t u)
    {
        double x;
        std::memcpy(&x, &u, sizeof x);
        return x;
    }

    float16_t h16(std::uint16_t bits) { return float16_t{bits}; }
    bfloat16_t b16(std::uint16_t bits) { return bfloat16_t{bits}; }

    bool is_nan_f16(std::uint16_t b) { return (b & 0x7c00u) == 0x7c00u && (b & 0x03ffu) != 0; }
    bool is_nan_bf16(std::uint16_t b) { return (b & 0x7f80u) == 0x7f80u && (b & 0x007fu) != 0; }

    // Independent decoders (std::ldexp on the fields), valid for finite non-negative patterns.
    // The pattern one past the largest finite value (the inf pattern) decodes to the power of
    // two it would have without the special exponent: 2^16 for float16, 2^128 for bfloat16,
    // so that "round to the nearer neighbour, ties to even" also yields the overflow rule.
    double ref_value_f16(std::uint16_t b)
    {
        const int exp = (b >> 10) & 0x1f;
        const int frac = b & 0x3ff;
        if (exp == 0)
            return std::ldexp(static_cast<double>(frac), -24);
        return std::ldexp(static_cast<double>(1024 + frac), exp - 25);
    }

    double ref_value_bf16(std::uint16_t b)
    {
        const int exp = (b >> 7) & 0xff;
        const int frac = b & 0x7f;
        if (exp == 0)
            return std::ldexp(static_cast<double>(frac), -133);
        return std::ldexp(static_cast<double>(128 + frac), exp - 134);
    }

    // Nearest representable value to the finite, non-NaN x by binary search over the
    // (monotone) non-negative patterns [0, inf_bits]: find b with value(b) <= |x| <
    // value(b + 1), then pick the nearer of b and b + 1, ties to the even pattern.
    template <class Value>
    std::uint16_t ref_round(double x, std::uint16_t inf_bits, Value value)
    {
        const std::uint16_t sign = std::signbit(x) ? 0x8000 : 0;
        const double a = std::fabs(x);
        if (a >= value(inf_bits))
            return sign | inf_bits;
        std::uint32_t lo = 0, hi = inf_bits; // value(lo) <= a < value(hi)
        while (hi - lo > 1)
        {
            const std::uint32_t mid = (lo + hi) / 2;
            if (value(static_cast<std::uint16_t>(mid)) <= a)
                lo = mid;
            else
                hi = mid;
        }
        // Both differences are exact in double (see the test below for the argument).
        const double below = a - value(static_cast<std::uint16_t>(lo));
        const double above = value(static_cast<std::uint16_t>(hi)) - a;
        std::uint32_t pick;
        if (below < above)
            pick = lo;
        else if (above < below)
            pick = hi;
        else
            pick = (lo % 2 == 0) ? lo : hi;
        return static_cast<std::uint16_t>(sign | pick);
    }

    std::uint16_t ref_f16(double x) { return ref_round(x, 0x7c00, ref_value_f16); }
    std::uint16_t ref_bf16(double x) { return ref_round(x, 0x7f80, ref_value_bf16); }
}

TEST_CASE("half: storage types are two trivially copyable bytes")
{
    CHECK(sizeof(float16_t) == 2);
    CHECK(sizeof(bfloat16_t) == 2);
    CHECK(std::is_trivially_copyable_v<float16_t>);
    CHECK(std::is_trivially_copyable_v<bfloat16_t>);
}

TEST_CASE("half: to_float matches an independent decoder for every pattern")
{
    int mismatches_f16 = 0, mismatches_bf16 = 0;
    for (std::uint32_t b = 0; b <= 0xffff; ++b)
    {
        const auto bits = static_cast<std::uint16_t>(b);
        const double sign = (bits & 0x8000) ? -1.0 : 1.0;
        const std::uint16_t mag = bits & 0x7fff;

        const float f = to_float(h16(bits));
        if (mag > 0x7c00)
            mismatches_f16 += !(std::isnan(f) && std::signbit(f) == (sign < 0));
        else if (mag == 0x7c00)
            mismatches_f16 += !(std::isinf(f) && std::signbit(f) == (sign < 0));
        else
            mismatches_f16 += !(static_cast<double>(f) == sign * ref_value_f16(mag) && std::signbit(f) == (sign < 0));

        const float g = to_float(b16(bits));
        if (mag > 0x7f80)
            mismatches_bf16 += !(std::isnan(g) && std::signbit(g) == (sign < 0));
        else if (mag == 0x7f80)
            mismatches_bf16 += !(std::isinf(g) && std::signbit(g) == (sign < 0));
        else
            mismatches_bf16 += !(static_cast<double>(g) == sign * ref_value_bf16(mag) && std::signbit(g) == (sign < 0));
    }
    CHECK(mismatches_f16 == 0);
    CHECK(mismatches_bf16 == 0);
}

TEST_CASE("half: every float16 pattern round-trips through float and double")
{
    int failures = 0;
    for (std::uint32_t b = 0; b <= 0xffff; ++b)
    {
        const auto bits = static_cast<std::uint16_t>(b);
        const float f = to_float(h16(bits));
        const std::uint16_t back = to_float16(f).bits;
        const std::uint16_t back_d = to_float16(static_cast<double>(f)).bits;
        if (is_nan_f16(bits))
        {
            const bool ok = is_nan_f16(back) && is_nan_f16(back_d) && (back & 0x8000) == (bits & 0x8000) &&
                            (back_d & 0x8000) == (bits & 0x8000);
            failures += !ok;
            // A quiet NaN keeps its exact pattern.
            if (bits & 0x0200)
                failures += !(back == bits && back_d == bits);
        }
        else
            failures += !(back == bits && back_d == bits);
    }
    CHECK(failures == 0);
}

TEST_CASE("half: every bfloat16 pattern round-trips through float and double")
{
    int failures = 0;
    for (std::uint32_t b = 0; b <= 0xffff; ++b)
    {
        const auto bits = static_cast<std::uint16_t>(b);
        const float f = to_float(b16(bits));
        const std::uint16_t back = to_bfloat16(f).bits;
        const std::uint16_t back_d = to_bfloat16(static_cast<double>(f)).bits;
        if (is_nan_bf16(bits))
        {
            const bool ok = is_nan_bf16(back) && is_nan_bf16(back_d) && (back & 0x8000) == (bits & 0x8000) &&
                            (back_d & 0x8000) == (bits & 0x8000);
            failures += !ok;
            if (bits & 0x0040)
                failures += !(back == bits && back_d == bits);
        }
        else
            failures += !(back == bits && back_d == bits);
    }
    CHECK(failures == 0);
}

TEST_CASE("half: float16 rounds ties to even")
{
    const float one = 1.0f;
    const float u = std::ldexp(1.0f, -11); // half an ulp of float16 at 1
    CHECK(to_float16(one).bits == 0x3c00);
    CHECK(to_float16(one + u).bits == 0x3c00);                       // tie, 1 is even
    CHECK(to_float16(one + 3 * u).bits == 0x3c02);                   // tie, 1 + 2^-9 is even
    CHECK(to_float16(one + 5 * u).bits == 0x3c02);                   // tie between 0x3c02 and 0x3c03
    CHECK(to_float16(one + 7 * u).bits == 0x3c04);                   // tie between 0x3c03 and 0x3c04
    CHECK(to_float16(std::nextafter(one + u, 2.0f)).bits == 0x3c01); // just above the tie
    CHECK(to_float16(std::nextafter(one + 3 * u, 0.0f)).bits == 0x3c01);
    CHECK(to_float16(2049.0f).bits == 0x6800); // ulp 2 at 2048: tie down to 2048
    CHECK(to_float16(2051.0f).bits == 0x6802); // tie up to 2052
    CHECK(to_float16(2050.0f).bits == 0x6801);
    CHECK(to_float16(0.1f).bits == 0x2e66); // 0.1 -> 0.0999755859375
    CHECK(to_float16(1.0f / 3.0f).bits == 0x3555);
    // Rounding up the largest fraction carries into the exponent.
    CHECK(to_float16(std::nextafter(2.0f, 0.0f)).bits == 0x4000);
}

TEST_CASE("half: bfloat16 rounds ties to even")
{
    const float u = std::ldexp(1.0f, -8); // half an ulp of bfloat16 at 1
    CHECK(to_bfloat16(1.0f).bits == 0x3f80);
    CHECK(to_bfloat16(1.0f + u).bits == 0x3f80);
    CHECK(to_bfloat16(1.0f + 3 * u).bits == 0x3f82);
    CHECK(to_bfloat16(1.0f + 5 * u).bits == 0x3f82);
    CHECK(to_bfloat16(std::nextafter(1.0f + u, 2.0f)).bits == 0x3f81);
    CHECK(to_bfloat16(std::nextafter(1.0f + 3 * u, 0.0f)).bits == 0x3f81);
    CHECK(to_bfloat16(257.0f).bits == 0x4380); // ulp 2 at 256: tie down
    CHECK(to_bfloat16(259.0f).bits == 0x4382); // tie up
    CHECK(to_bfloat16(std::nextafter(2.0f, 0.0f)).bits == 0x4000);
    CHECK(to_bfloat16(3.14159265f).bits == 0x4049);
}

TEST_CASE("half: overflow to infinity")
{
    CHECK(to_float16(65504.0f).bits == 0x7bff);
    CHECK(to_float16(65519.0f).bits == 0x7bff);
    CHECK(to_float16(std::nextafter(65520.0f, 0.0f)).bits == 0x7bff);
    CHECK(to_float16(65520.0f).bits == 0x7c00); // the midpoint rounds to inf (even)
    CHECK(to_float16(65536.0f).bits == 0x7c00);
    CHECK(to_float16(1e10f).bits == 0x7c00);
    CHECK(to_float16(-65520.0f).bits == 0xfc00);
    CHECK(to_float16(-65504.0f).bits == 0xfbff);
    CHECK(to_float16(std::numeric_limits<float>::max()).bits == 0x7c00);
    CHECK(to_float16(std::numeric_limits<float>::infinity()).bits == 0x7c00);
    CHECK(to_float16(-std::numeric_limits<float>::infinity()).bits == 0xfc00);
    CHECK(to_float16(65520.0).bits == 0x7c00);
    CHECK(to_float16(std::nextafter(65520.0, 0.0)).bits == 0x7bff);
    CHECK(to_float16(1e300).bits == 0x7c00);
    CHECK(to_float16(-std::numeric_limits<double>::infinity()).bits == 0xfc00);

    const float bf_max = float_of(0x7f7f0000u);
    const float bf_mid = float_of(0x7f7f8000u); // midpoint between bf16 max and 2^128
    CHECK(to_bfloat16(bf_max).bits == 0x7f7f);
    CHECK(to_bfloat16(std::nextafter(bf_mid, 0.0f)).bits == 0x7f7f);
    CHECK(to_bfloat16(bf_mid).bits == 0x7f80);
    CHECK(to_bfloat16(std::numeric_limits<float>::max()).bits == 0x7f80);
    CHECK(to_bfloat16(-std::numeric_limits<float>::max()).bits == 0xff80);
    CHECK(to_bfloat16(std::numeric_limits<float>::infinity()).bits == 0x7f80);
    CHECK(to_bfloat16(static_cast<double>(bf_mid)).bits == 0x7f80);
    CHECK(to_bfloat16(std::nextafter(static_cast<double>(bf_mid), 0.0)).bits == 0x7f7f);
    CHECK(to_bfloat16(1e39).bits == 0x7f80);
    CHECK(to_bfloat16(-1e300).bits == 0xff80);
}

TEST_CASE("half: subnormals")
{
    const float tiny = std::ldexp(1.0f, -24); // smallest float16 subnormal
    CHECK(to_float(h16(0x0001)) == tiny);
    CHECK(to_float(h16(0x03ff)) == 1023 * tiny);
    CHECK(to_float(h16(0x0400)) == std::ldexp(1.0f, -14));
    CHECK(to_float(h16(0x8001)) == -tiny);
    CHECK(to_float16(tiny).bits == 0x0001);
    CHECK(to_float16(-tiny).bits == 0x8001);
    CHECK(to_float16(1023 * tiny).bits == 0x03ff);
    CHECK(to_float16(0.5f * tiny).bits == 0x0000); // tie, 0 is even
    CHECK(to_float16(-0.5f * tiny).bits == 0x8000);
    CHECK(to_float16(std::nextafter(0.5f * tiny, 1.0f)).bits == 0x0001);
    CHECK(to_float16(1.5f * tiny).bits == 0x0002); // tie, 2 is even
    CHECK(to_float16(2.5f * tiny).bits == 0x0002);
    CHECK(to_float16(3.5f * tiny).bits == 0x0004);
    CHECK(to_float16(1023.5f * tiny).bits == 0x0400); // rounds up into the smallest normal
    CHECK(to_float16(std::nextafter(1023.5f * tiny, 0.0f)).bits == 0x03ff);
    CHECK(to_float16(1e-30f).bits == 0x0000);
    CHECK(to_float16(1e-40f).bits == 0x0000); // float subnormal
    CHECK(to_float16(-1e-40f).bits == 0x8000);
    CHECK(to_float16(std::ldexp(1.0, -25)).bits == 0x0000);
    CHECK(to_float16(std::ldexp(1.0, -25) + std::ldexp(1.0, -60)).bits == 0x0001);
    CHECK(to_float16(4.9e-324).bits == 0x0000); // double subnormal

    // bfloat16 shares float's exponent range, including float subnormals.
    CHECK(to_float(b16(0x0001)) == std::ldexp(1.0f, -133));
    CHECK(to_bfloat16(std::ldexp(1.0f, -133)).bits == 0x0001);
    CHECK(to_bfloat16(float_of(0x00012345u)).bits == 0x0001);
    CHECK(to_bfloat16(float_of(0x00018000u)).bits == 0x0002); // tie, up to even
    CHECK(to_bfloat16(float_of(0x00028000u)).bits == 0x0002); // tie, down to even
    CHECK(to_bfloat16(float_of(0x007fffffu)).bits == 0x0080); // carries into the smallest normal
    CHECK(to_bfloat16(float_of(0x00008000u)).bits == 0x0000);
    CHECK(to_bfloat16(float_of(0x80008001u)).bits == 0x8001);
    CHECK(to_bfloat16(std::ldexp(1.0, -134)).bits == 0x0000);
    CHECK(to_bfloat16(std::ldexp(3.0, -134)).bits == 0x0002);
    CHECK(to_bfloat16(std::ldexp(1.0, -134) + std::ldexp(1.0, -170)).bits == 0x0001);
    CHECK(to_bfloat16(1e-300).bits == 0x0000);
}

TEST_CASE("half: signed zero and negative values")
{
    CHECK(to_float16(0.0f).bits == 0x0000);
    CHECK(to_float16(-0.0f).bits == 0x8000);
    CHECK(to_float16(-0.0).bits == 0x8000);
    CHECK(to_bfloat16(-0.0f).bits == 0x8000);
    CHECK(to_bfloat16(-0.0).bits == 0x8000);
    CHECK(std::signbit(to_float(h16(0x8000))));
    CHECK(to_float(h16(0x8000)) == 0.0f);
    CHECK(std::signbit(to_float(b16(0x8000))));
    CHECK(to_float16(-1e-10f).bits == 0x8000);
    CHECK(to_bfloat16(-1e-300).bits == 0x8000);

    CHECK(to_float16(-1.5f).bits == 0xbe00);
    CHECK(to_float16(-2.0f).bits == 0xc000);
    CHECK(to_float16(-(1.0f + 3 * std::ldexp(1.0f, -11))).bits == 0xbc02);
    CHECK(to_float16(-(1.0f + std::ldexp(1.0f, -11))).bits == 0xbc00);
    CHECK(to_float(h16(0xc500)) == -5.0f);
    CHECK(to_bfloat16(-1.5f).bits == 0xbfc0);
    CHECK(to_bfloat16(-(1.0f + 3 * std::ldexp(1.0f, -8))).bits == 0xbf82);
    CHECK(to_float(b16(0xc0a0)) == -5.0f);
}

TEST_CASE("half: NaN stays a quiet NaN with its sign")
{
    const float qnan = std::numeric_limits<float>::quiet_NaN();
    CHECK(is_nan_f16(to_float16(qnan).bits));
    CHECK(is_nan_bf16(to_bfloat16(qnan).bits));
    CHECK(std::isnan(to_float(to_float16(qnan))));
    CHECK(std::isnan(to_float(to_bfloat16(qnan))));

    // Payloads only in the bits the conversion drops must not turn into inf.
    for (std::uint32_t payload : {0x1u, 0x7fu, 0x1fffu, 0xffffu, 0x400000u, 0x3fffffu})
    {
        for (std::uint32_t sign : {0u, 0x80000000u})
        {
            const float nan = float_of(sign | 0x7f800000u | payload);
            REQUIRE(std::isnan(nan));
            const std::uint16_t h = to_float16(nan).bits;
            const std::uint16_t b = to_bfloat16(nan).bits;
            CHECK(is_nan_f16(h));
            CHECK((h & 0x0200) != 0); // quiet
            CHECK((h & 0x8000) == (sign >> 16));
            CHECK(is_nan_bf16(b));
            CHECK((b & 0x0040) != 0);
            CHECK((b & 0x8000) == (sign >> 16));
        }
    }
    for (std::uint64_t payload : {0x1ull, 0xffffffffull, 0x8000000000000ull, 0xfffffffffffffull})
    {
        for (std::uint64_t sign : {0ull, 0x8000000000000000ull})
        {
            const double nan = double_of(sign | 0x7ff0000000000000ull | payload);
            REQUIRE(std::isnan(nan));
            const std::uint16_t h = to_float16(nan).bits;
            const std::uint16_t b = to_bfloat16(nan).bits;
            CHECK(is_nan_f16(h));
            CHECK((h & 0x8000) == (sign >> 48));
            CHECK(is_nan_bf16(b));
            CHECK((b & 0x8000) == (sign >> 48));
        }
    }
}

TEST_CASE("half: the double overloads round once, not through float")
{
    // Just above a float16 tie; rounding to float first lands exactly on the tie, which then
    // goes to even (down). The direct conversion must go up.
    const double above_tie = 1.0 + std::ldexp(1.0, -11) + std::ldexp(1.0, -40);
    REQUIRE(static_cast<float>(above_tie) == 1.0f + std::ldexp(1.0f, -11));
    CHECK(to_float16(static_cast<float>(above_tie)).bits == 0x3c00);
    CHECK(to_float16(above_tie).bits == 0x3c01);
    CHECK(to_float16(-above_tie).bits == 0xbc01);

    // Just below a tie that float rounding turns into the tie, which then goes up to even.
    const double below_tie = 1.0 + 3 * std::ldexp(1.0, -11) - std::ldexp(1.0, -40);
    REQUIRE(static_cast<float>(below_tie) == 1.0f + 3 * std::ldexp(1.0f, -11));
    CHECK(to_float16(static_cast<float>(below_tie)).bits == 0x3c02);
    CHECK(to_float16(below_tie).bits == 0x3c01);

    // Near overflow: float rounds 65520 - 2^-20 up to 65520 (-> inf); it is finite.
    const double below_overflow = 65520.0 - std::ldexp(1.0, -20);
    REQUIRE(static_cast<float>(below_overflow) == 65520.0f);
    CHECK(to_float16(below_overflow).bits == 0x7bff);

    // Subnormal float16 tie: 2.5 units rounds to 2 through float, to 3 directly.
    const double sub = std::ldexp(2.5, -24) + std::ldexp(1.0, -60);
    REQUIRE(static_cast<float>(sub) == std::ldexp(2.5f, -24));
    CHECK(to_float16(static_cast<float>(sub)).bits == 0x0002);
    CHECK(to_float16(sub).bits == 0x0003);
    CHECK(to_float16(std::ldexp(1.5, -24) - std::ldexp(1.0, -60)).bits == 0x0001);

    const double bf_above = 1.0 + std::ldexp(1.0, -8) + std::ldexp(1.0, -40);
    REQUIRE(static_cast<float>(bf_above) == 1.0f + std::ldexp(1.0f, -8));
    CHECK(to_bfloat16(static_cast<float>(bf_above)).bits == 0x3f80);
    CHECK(to_bfloat16(bf_above).bits == 0x3f81);
    const double bf_below = 1.0 + 3 * std::ldexp(1.0, -8) - std::ldexp(1.0, -40);
    CHECK(to_bfloat16(static_cast<float>(bf_below)).bits == 0x3f82);
    CHECK(to_bfloat16(bf_below).bits == 0x3f81);
}

// The reference compares |x| - value(lo) with value(hi) - |x| in double. Both are exact:
// the neighbours are multiples of the 16-bit format's spacing at |x|, which is at least the
// source's ulp at |x|, so each difference is a multiple of that ulp and smaller than |x|.
TEST_CASE("half: float conversions agree with a search-based reference")
{
    std::mt19937_64 rng(20240611);
    int f16_failures = 0, bf16_failures = 0, double_agree_failures = 0;
    int samples = 0;

    auto check_float = [&](float x) {
        if (std::isnan(x))
            return;
        ++samples;
        const std::uint16_t h = to_float16(x).bits;
        const std::uint16_t b = to_bfloat16(x).bits;
        if (h != ref_f16(x))
        {
            if (++f16_failures <= 5)
                MESSAGE("float16 mismatch for float bits 0x" << std::hex << bits_of(x) << ": got 0x" << h << ", want 0x"
                                                             << ref_f16(x));
        }
        if (b != ref_bf16(x))
        {
            if (++bf16_failures <= 5)
                MESSAGE("bfloat16 mismatch for float bits 0x" << std::hex << bits_of(x) << ": got 0x" << b
                                                              << ", want 0x" << ref_bf16(x));
        }
        // float -> double is exact, so both overloads must agree.
        double_agree_failures += (to_float16(static_cast<double>(x)).bits != h) +
                                 (to_bfloat16(static_cast<double>(x)).bits != b);
    };

    // Uniform over all bit patterns (covers overflow, float subnormals, huge/tiny values).
    for (int i = 0; i < 100000; ++i)
        check_float(float_of(static_cast<std::uint32_t>(rng())));
    // Exponents around float16's range: biased float exponents 95..145.
    for (int i = 0; i < 150000; ++i)
    {
        const auto r = static_cast<std::uint32_t>(rng());
        const std::uint32_t exp = 95 + static_cast<std::uint32_t>(rng() % 51);
        check_float(float_of((r & 0x807fffffu) | (exp << 23)));
    }
    // Exactly at, and one float ulp either side of, the midpoints between neighbours.
    for (int i = 0; i < 50000; ++i)
    {
        const auto hb = static_cast<std::uint16_t>(rng() % 0x7c00);
        const auto mid16 = static_cast<float>((ref_value_f16(hb) + ref_value_f16(hb + 1)) / 2);
        const auto bb = static_cast<std::uint16_t>(rng() % 0x7f80);
        const auto midb = static_cast<float>((ref_value_bf16(bb) + ref_value_bf16(bb + 1)) / 2);
        for (float m : {mid16, midb})
        {
            const float s = (rng() & 1) ? -m : m;
            check_float(s);
            check_float(std::nextafter(s, 0.0f));
            check_float(std::nextafter(s, 2 * s));
        }
    }
    CHECK(samples > 300000);
    CHECK(f16_failures == 0);
    CHECK(bf16_failures == 0);
    CHECK(double_agree_failures == 0);
}

TEST_CASE("half: double conversions agree with a search-based reference")
{
    std::mt19937_64 rng(77);
    int f16_failures = 0, bf16_failures = 0, samples = 0;

    auto check_double = [&](double x) {
        if (std::isnan(x))
            return;
        ++samples;
        const std::uint16_t h = to_float16(x).bits;
        const std::uint16_t b = to_bfloat16(x).bits;
        if (h != ref_f16(x) && ++f16_failures <= 5)
            MESSAGE("float16 mismatch for double " << x << ": got " << h << ", want " << ref_f16(x));
        if (b != ref_bf16(x) && ++bf16_failures <= 5)
            MESSAGE("bfloat16 mismatch for double " << x << ": got " << b << ", want " << ref_bf16(x));
    };

    for (int i = 0; i < 50000; ++i)
        check_double(double_of(rng()));
    for (int i = 0; i < 100000; ++i)
    {
        // Biased double exponents 1023-40 .. 1023+17 (float16) and 1023-140 .. 1023+129 (bf16).
        const std::uint64_t r = rng();
        const std::uint64_t e16 = 1023 - 40 + rng() % 58;
        const std::uint64_t eb = 1023 - 140 + rng() % 270;
        check_double(double_of((r & 0x800fffffffffffffull) | (e16 << 52)));
        check_double(double_of((r & 0x800fffffffffffffull) | (eb << 52)));
    }
    for (int i = 0; i < 50000; ++i)
    {
        const auto hb = static_cast<std::uint16_t>(rng() % 0x7c00);
        const double mid16 = (ref_value_f16(hb) + ref_value_f16(hb + 1)) / 2;
        const auto bb = static_cast<std::uint16_t>(rng() % 0x7f80);
        const double midb = (ref_value_bf16(bb) + ref_value_bf16(bb + 1)) / 2;
        for (double m : {mid16, midb})
        {
            const double s = (rng() & 1) ? -m : m;
            check_double(s);
            check_double(std::nextafter(s, 0.0));
            check_double(std::nextafter(s, 2 * s));
        }
    }
    CHECK(samples > 300000);
    CHECK(f16_failures == 0);
    CHECK(bf16_failures == 0);
}
