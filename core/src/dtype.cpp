#include "xgrad/dtype.hpp"

#include <charconv>
#include <stdexcept>

#include "xgrad/errors.hpp"

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

    device parse_device(std::string_view text)
    {
        if (text == "cpu")
            return cpu_device;
        if (text.substr(0, 4) == "cuda")
        {
            if (text.size() == 4)
                return {device_type::cuda, 0};
            if (text[4] == ':' && text.size() > 5)
            {
                int index = -1;
                auto [ptr, ec] = std::from_chars(text.data() + 5, text.data() + text.size(), index);
                if (ec == std::errc() && ptr == text.data() + text.size() && index >= 0)
                    return {device_type::cuda, index};
            }
        }
        throw xgrad::invalid_argument("unknown device '" + std::string(text) + "': expected 'cpu', 'cuda' or 'cuda:N'");
    }

    std::string to_string(const device& d)
    {
        if (d.type == device_type::cpu)
            return "cpu";
        return "cuda:" + std::to_string(d.index);
    }

    std::ostream& operator<<(std::ostream& os, const device& d) { return os << to_string(d); }
}
