#pragma once
// Command-line values of the example programs, parsed whole and range-checked
// (examples/common/cli.cpp), so that a value no flag accepts is refused with a message naming
// the flag, the value and the range instead of wrapping or being cut short.
//
// Each function throws xgrad::invalid_argument "<flag> expects <what> in <range>, got
// '<value>'" for anything but a plain decimal number in the range: an empty value, spaces, a
// '+' sign, trailing characters, a value outside the range or outside the type altogether
// (9223372036854775807 for a flag whose range ends at 1000000), a '-' for an unsigned flag
// (so --seed -1 is refused rather than read as 2^64 - 1). The programs print the message with
// their usage and exit with status 2.
#include <cstdint>
#include <string>

namespace xgrad::examples
{
    /// `value` as an integer in [low, high].
    std::int64_t parse_int_flag(const std::string& flag, const std::string& value, std::int64_t low, std::int64_t high);
    /// `value` as an unsigned integer in [low, high]; no sign is accepted.
    std::uint64_t parse_uint_flag(const std::string& flag, const std::string& value, std::uint64_t low,
                                  std::uint64_t high);
    /// `value` as a finite number in (0, high]: decimal or exponent notation ("2e-3").
    double parse_positive_flag(const std::string& flag, const std::string& value, double high);
}
