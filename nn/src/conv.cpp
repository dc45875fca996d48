// nn::conv2d: checks its options once, registers its parameters, and calls xgrad::conv2d.
#include "xgrad/nn/conv.hpp"

#include <sstream>
#include <string>
#include <utility>

#include "layer_checks.hpp"
#include "xgrad/nn/init.hpp"
#include "xgrad/ops/conv.hpp"

namespace xgrad::nn
{
    using namespace detail;

    conv2d::conv2d(const options_type& options, generator& gen) : m_options(options)
    {
        const auto& o = m_options;
        check_format(*this, o.data_format);
        if (o.in_channels < 1 || o.out_channels < 1)
            fail("in_channels and out_channels must be at least 1, got " + std::to_string(o.in_channels) + " and " +
                 std::to_string(o.out_channels));
        if (o.groups < 1 || o.in_channels % o.groups != 0 || o.out_channels % o.groups != 0)
            fail("groups (" + std::to_string(o.groups) + ") must be at least 1 and divide in_channels (" +
                 std::to_string(o.in_channels) + ") and out_channels (" + std::to_string(o.out_channels) + ")");
        for (int a = 0; a < 2; ++a)
        {
            if (o.kernel_size[a] < 1 || o.stride[a] < 1 || o.dilation[a] < 1)
                fail("kernel_size " + pair_to_string(o.kernel_size) + ", stride " + pair_to_string(o.stride) +
                     " and dilation " + pair_to_string(o.dilation) + " must be at least 1");
            if (o.padding[a] < 0)
                fail("padding must not be negative, got " + pair_to_string(o.padding));
        }
        if (!is_floating(o.dtype))
            fail("dtype must be floating point, got " + std::string(name(o.dtype)));
        if (o.compute_dtype && !is_floating(*o.compute_dtype))
            fail("compute_dtype must be floating point, got " + std::string(name(*o.compute_dtype)));
        const shape_type wshape{o.out_channels, o.in_channels / o.groups, o.kernel_size[0], o.kernel_size[1]};
        register_parameter("weight", zeros(wshape, o.dtype));
        if (o.bias)
            register_parameter("bias", zeros({o.out_channels}, o.dtype));
        reset_parameters(gen);
    }

    void conv2d::reset_parameters(generator& gen)
    {
        const tensor w = parameter("weight");
        set_parameter("weight", init::initialize(m_options.weight_init, w.shape(), gen, m_options.dtype));
        if (m_options.bias)
            set_parameter("bias", init::fan_in_uniform({m_options.out_channels}, init::fans(w.shape()).first, gen,
                                                       m_options.dtype));
    }

    tensor conv2d::forward(const tensor& x)
    {
        check_image_input(*this, x, m_options.data_format, m_options.in_channels);
        conv2d_params p;
        p.stride = m_options.stride;
        p.padding = m_options.padding;
        p.dilation = m_options.dilation;
        p.groups = m_options.groups;
        const auto& cdt = m_options.compute_dtype;
        return xgrad::conv2d(in_compute_dtype(x, cdt), in_compute_dtype(parameter("weight"), cdt),
                             m_options.bias ? in_compute_dtype(parameter("bias"), cdt) : tensor(), p,
                             m_options.data_format);
    }

    std::string conv2d::describe() const
    {
        const auto& o = m_options;
        std::ostringstream s;
        s << "conv2d(" << o.in_channels << ", " << o.out_channels << ", kernel=" << pair_to_string(o.kernel_size)
          << ", stride=" << pair_to_string(o.stride) << ", padding=" << pair_to_string(o.padding);
        if (o.dilation != std::array<std::int64_t, 2>{1, 1})
            s << ", dilation=" << pair_to_string(o.dilation);
        if (o.groups != 1)
            s << ", groups=" << o.groups;
        s << ", bias=" << (o.bias ? "true" : "false") << ", " << o.data_format;
        if (o.compute_dtype)
            s << ", compute_dtype=" << name(*o.compute_dtype);
        s << ")";
        return s.str();
    }
}
