#include "xgrad/device.hpp"

#include <charconv>
#include <stdexcept>

#include "xgrad/errors.hpp"

namespace xgrad
{
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
