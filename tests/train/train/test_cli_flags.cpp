// The example programs' numeric flags (examples/common/cli.hpp): every value outside the
// flag's range, or not a plain decimal number, is refused with a message naming the flag, the
// value and the range; nothing wraps or is cut short.
#include <doctest/doctest.h>

#include <cstdint>
#include <string>

#include "examples/common/cli.hpp"
#include "tests/support/check_error.hpp"
#include "xgrad/errors.hpp"

using namespace xgrad::examples;

TEST_CASE("cli: integers in range are read whole")
{
    CHECK(parse_int_flag("--epochs", "1", 1, 1000000) == 1);
    CHECK(parse_int_flag("--epochs", "1000000", 1, 1000000) == 1000000);
    CHECK(parse_int_flag("--x", "-5", -10, 10) == -5);
    CHECK(parse_int_flag("--limit", "9223372036854775807", 0, INT64_MAX) == INT64_MAX);
    CHECK(parse_uint_flag("--seed", "0", 0, UINT64_MAX) == 0);
    CHECK(parse_uint_flag("--seed", "18446744073709551615", 0, UINT64_MAX) == UINT64_MAX);
}

TEST_CASE("cli: integers out of range or malformed are refused, naming flag, value and range")
{
    // Beyond the range, and beyond int64 altogether: never wrapped into a small or negative value.
    CHECK_ERROR(parse_int_flag("--epochs", "9223372036854775807", 1, 1000000), xgrad::invalid_argument,
                "--epochs expects an integer in [1, 1000000], got '9223372036854775807'");
    CHECK_ERROR(parse_int_flag("--epochs", "99999999999999999999", 1, 1000000), xgrad::invalid_argument, "--epochs",
                "[1, 1000000]", "'99999999999999999999'");
    CHECK_ERROR(parse_int_flag("--epochs", "0", 1, 1000000), xgrad::invalid_argument, "--epochs", "got '0'");
    CHECK_ERROR(parse_int_flag("--limit", "-1", 0, INT64_MAX), xgrad::invalid_argument,
                "--limit expects an integer in [0, 9223372036854775807], got '-1'");
    CHECK_ERROR(parse_int_flag("--limit", "-9223372036854775809", 0, INT64_MAX), xgrad::invalid_argument,
                "got '-9223372036854775809'");
    // Not a plain decimal integer.
    for (const char* bad : {"", " 5", "5 ", "+5", "5x", "0x10", "1e3", "2.0", "--", "five"})
    {
        const std::string got = std::string("got '") + bad + "'";
        CHECK_ERROR(parse_int_flag("--batch-size", bad, 1, 1000000), xgrad::invalid_argument,
                    "--batch-size expects an integer in [1, 1000000]", got.c_str());
    }
    // Unsigned: a sign is refused rather than wrapped to 2^64 - 1, as strtoull would.
    CHECK_ERROR(parse_uint_flag("--seed", "-1", 0, UINT64_MAX), xgrad::invalid_argument,
                "--seed expects an integer in [0, 18446744073709551615], got '-1'");
    CHECK_ERROR(parse_uint_flag("--seed", "18446744073709551616", 0, UINT64_MAX), xgrad::invalid_argument, "--seed",
                "got '18446744073709551616'");
    CHECK_ERROR(parse_uint_flag("--seed", "-0", 0, UINT64_MAX), xgrad::invalid_argument, "got '-0'");
}

TEST_CASE("cli: positive numbers")
{
    CHECK(parse_positive_flag("--lr", "2e-3", 1000) == doctest::Approx(0.002));
    CHECK(parse_positive_flag("--lr", "0.5", 1000) == 0.5);
    CHECK(parse_positive_flag("--lr", "1000", 1000) == 1000);
    for (const char* bad : {"0", "-1", "1001", "1e400", "1e-400", "inf", "nan", "-inf", "", " 1", "1 ", "1x", "x"})
    {
        const std::string got = std::string("got '") + bad + "'";
        CHECK_ERROR(parse_positive_flag("--lr", bad, 1000), xgrad::invalid_argument,
                    "--lr expects a number in (0, 1000]", got.c_str());
    }
}
