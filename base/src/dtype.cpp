#include "xgrad/dtype.hpp"

namespace xgrad
{
    std::size_t itemsize(dtype dt) noexcept
    {
        switch (dt)
        {
        case dtype::float32: return 4;
        case dtype::float64: return 8;
        case dtype::float16: return 2;
        case dtype::bfloat16: return 2;
        case dtype::int64: return 8;
        }
        return 0;
    }

    std::string_view name(dtype dt) noexcept
    {
        switch (dt)
        {
        case dtype::float32: return "float32";
        case dtype::float64: return "float64";
        case dtype::float16: return "float16";
        case dtype::bfloat16: return "bfloat16";
        case dtype::int64: return "int64";
        }
        return "unknown";
    }

    bool is_floating(dtype dt) noexcept { return dt != dtype::int64; }

    dtype compute_dtype(dtype dt) noexcept
    {
        return (dt == dtype::float16 || dt == dtype::bfloat16) ? dtype::float32 : dt;
    }

    std::ostream& operator<<(std::ostream& os, dtype dt) { return os << name(dt); }
}
