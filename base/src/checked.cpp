// Messages of the checked size arithmetic (xgrad/checked.hpp). Kept out of line so that the
// inline fast path is a single overflow-flag test.
#include "xgrad/checked.hpp"

#include <string>

namespace xgrad::detail
{
    void throw_size_overflow(const char* what, std::int64_t a, const char* op, std::int64_t b)
    {
        throw invalid_argument(std::string(what) + ": " + std::to_string(a) + " " + op + " " + std::to_string(b) +
                               " overflows a 64-bit size");
    }

    void throw_negative_count(const char* what, std::int64_t count)
    {
        throw invalid_argument(std::string(what) + ": count " + std::to_string(count) + " is negative");
    }
}
