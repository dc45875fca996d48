// The pooling layers: max, average and adaptive average pooling over the ops of xgrad/ops/pool.hpp.
#include "xgrad/nn/pool.hpp"

#include <sstream>
#include <string>
#include <utility>

#include "layer_checks.hpp"
#include "xgrad/ops/pool.hpp"

namespace xgrad::nn
{
    using namespace detail;

    namespace
    {
        pool2d_params square_pool(std::int64_t k)
        {
            pool2d_params p;
            p.kernel = {k, k};
            return p;
        }

        std::string describe_pool(std::string_view name, const pool2d_params& p, const std::string& format)
        {
            std::string s = std::string(name) + "(kernel=" + pair_to_string(p.kernel) +
                            ", stride=" + pair_to_string(p.stride.value_or(p.kernel)) +
                            ", padding=" + pair_to_string(p.padding);
            return s + ", " + format + ")";
        }
    }

    max_pool2d::max_pool2d(const pool2d_params& params, std::string data_format)
        : m_params(params), m_format(std::move(data_format))
    {
        check_format(*this, m_format);
    }
    max_pool2d::max_pool2d(std::int64_t kernel, std::string data_format)
        : max_pool2d(square_pool(kernel), std::move(data_format))
    {
    }
    tensor max_pool2d::forward(const tensor& x)
    {
        check_image_input(*this, x, m_format, 0);
        return xgrad::max_pool2d(x, m_params, m_format);
    }
    std::string max_pool2d::describe() const { return describe_pool("max_pool2d", m_params, m_format); }

    avg_pool2d::avg_pool2d(const pool2d_params& params, std::string data_format)
        : m_params(params), m_format(std::move(data_format))
    {
        check_format(*this, m_format);
    }
    avg_pool2d::avg_pool2d(std::int64_t kernel, std::string data_format)
        : avg_pool2d(square_pool(kernel), std::move(data_format))
    {
    }
    tensor avg_pool2d::forward(const tensor& x)
    {
        check_image_input(*this, x, m_format, 0);
        return xgrad::avg_pool2d(x, m_params, m_format);
    }
    std::string avg_pool2d::describe() const { return describe_pool("avg_pool2d", m_params, m_format); }

    adaptive_avg_pool2d::adaptive_avg_pool2d(std::array<std::int64_t, 2> output_size, std::string data_format)
        : m_output_size(output_size), m_format(std::move(data_format))
    {
        check_format(*this, m_format);
        if (output_size[0] < 1 || output_size[1] < 1)
            fail("output_size must be at least [1, 1], got " + pair_to_string(output_size));
    }
    tensor adaptive_avg_pool2d::forward(const tensor& x)
    {
        check_image_input(*this, x, m_format, 0);
        return xgrad::adaptive_avg_pool2d(x, m_output_size, m_format);
    }
    std::string adaptive_avg_pool2d::describe() const
    {
        return "adaptive_avg_pool2d(output_size=" + pair_to_string(m_output_size) + ", " + m_format + ")";
    }
}
