// Command-line values (see cli.hpp). std::from_chars parses integers: it takes no spaces and
// no '+', reports values outside the type instead of saturating or wrapping as strtoull does
// for "-1", and needs no locale.
#include "cli.hpp"

#include <cctype>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <sstream>
#include <system_error>

#include "xgrad/errors.hpp"

namespace xgrad::examples
{
    namespace
    {
        template <class T>
        [[noreturn]] void refuse(const std::string& flag, const std::string& value, T low, T high)
        {
            throw xgrad::invalid_argument(flag + " expects an integer in [" + std::to_string(low) + ", " +
                                          std::to_string(high) + "], got '" + value + "'");
        }

        template <class T>
        T parse_integer(const std::string& flag, const std::string& value, T low, T high)
        {
            T n{};
            const char* first = value.data();
            const char* last = first + value.size();
            const auto [end, ec] = std::from_chars(first, last, n);
            if (value.empty() || ec != std::errc() || end != last || n < low || n > high)
                refuse(flag, value, low, high);
            return n;
        }
    }

    std::int64_t parse_int_flag(const std::string& flag, const std::string& value, std::int64_t low, std::int64_t high)
    {
        return parse_integer<std::int64_t>(flag, value, low, high);
    }

    std::uint64_t parse_uint_flag(const std::string& flag, const std::string& value, std::uint64_t low,
                                  std::uint64_t high)
    {
        return parse_integer<std::uint64_t>(flag, value, low, high);
    }

    double parse_positive_flag(const std::string& flag, const std::string& value, double high)
    {
        // strtod skips leading spaces and accepts "inf" and "nan"; the first check and the range
        // check refuse them.
        char* end = nullptr;
        errno = 0;
        const double d = value.empty() || std::isspace(static_cast<unsigned char>(value[0]))
                             ? std::nan("")
                             : std::strtod(value.c_str(), &end);
        if (end != value.c_str() + value.size() || errno == ERANGE || !std::isfinite(d) || !(d > 0) || !(d <= high))
        {
            std::ostringstream range;
            range << "(0, " << high << "]";
            throw xgrad::invalid_argument(flag + " expects a number in " + range.str() + ", got '" + value + "'");
        }
        return d;
    }
}
