// nn::conv2d and nn::conv_transpose2d: check their options once, register their parameters,
// and call their op; nn::upsample calls xgrad::upsample.
#include "xgrad/nn/conv.hpp"

#include <algorithm>
#include <array>
#include <sstream>
#include <string>
#include <utility>

#include "layer_checks.hpp"
#include "xgrad/nn/init.hpp"
#include "xgrad/ops/conv.hpp"
#include "xgrad/ops/upsample.hpp"

namespace xgrad::nn
{
    using namespace detail;

    namespace
    {
        /// The option checks conv2d and conv_transpose2d share, naming the layer.
        void check_options(const module& m, const conv2d_options& o)
        {
            const auto fail = [&m](const std::string& what) {
                throw xgrad::invalid_argument(std::string(m.type_name()) + ": " + what);
            };
            check_format(m, o.data_format);
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
        }

        /// A convolution's weight drawn by its scheme and its bias (undefined without one)
        /// U(-1/sqrt(fan_in), 1/sqrt(fan_in)), fan_in from the weight's shape as PyTorch
        /// computes it.
        std::pair<tensor, tensor> draw_conv(const conv2d_options& o, const shape_type& shape, generator& gen)
        {
            tensor w = init::initialize(o.weight_init, shape, gen, o.dtype);
            tensor b = o.bias ? init::fan_in_uniform({o.out_channels}, init::fans(shape).first, gen, o.dtype)
                              : tensor();
            return {w, b};
        }

        /// "(in, out, kernel=..., stride=..., padding=...[, extra][, dilation][, groups], bias=, layout)"
        std::string describe_conv(const char* type, const conv2d_options& o, const std::string& extra)
        {
            std::ostringstream s;
            s << type << "(" << o.in_channels << ", " << o.out_channels << ", kernel=" << pair_to_string(o.kernel_size)
              << ", stride=" << pair_to_string(o.stride) << ", padding=" << pair_to_string(o.padding) << extra;
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

    namespace
    {
        /// The window fields both convolution ops take, from the layer's options.
        template <class Params>
        Params window_params(const conv2d_options& o)
        {
            Params p;
            p.stride = o.stride;
            p.padding = o.padding;
            p.dilation = o.dilation;
            p.groups = o.groups;
            return p;
        }

        /// x, weight and bias (undefined without one) checked and cast to the compute dtype.
        std::array<tensor, 3> operands(const module& m, const tensor& x, const conv2d_options& o)
        {
            check_image_input(m, x, o.data_format, o.in_channels);
            const auto& cdt = o.compute_dtype;
            return {in_compute_dtype(x, cdt), in_compute_dtype(m.parameter("weight"), cdt),
                    o.bias ? in_compute_dtype(m.parameter("bias"), cdt) : tensor()};
        }
    }

    conv2d::conv2d(const options_type& options, generator& gen) : m_options(options)
    {
        const auto& o = m_options;
        check_options(*this, o);
        const shape_type wshape{o.out_channels, o.in_channels / o.groups, o.kernel_size[0], o.kernel_size[1]};
        register_parameter("weight", zeros(wshape, o.dtype));
        if (o.bias)
            register_parameter("bias", zeros({o.out_channels}, o.dtype));
        reset_parameters(gen);
    }

    void conv2d::reset_parameters(generator& gen)
    {
        const auto [w, b] = draw_conv(m_options, parameter("weight").shape(), gen);
        set_parameter("weight", w);
        if (b.defined())
            set_parameter("bias", b);
    }

    tensor conv2d::forward(const tensor& x)
    {
        const auto [in, w, b] = operands(*this, x, m_options);
        return xgrad::conv2d(in, w, b, window_params<conv2d_params>(m_options), m_options.data_format);
    }

    std::string conv2d::describe() const { return describe_conv("conv2d", m_options, ""); }

    conv_transpose2d::conv_transpose2d(const options_type& options, generator& gen) : m_options(options)
    {
        const auto& o = m_options;
        check_options(*this, o);
        for (int a = 0; a < 2; ++a)
            if (o.output_padding[a] < 0 || o.output_padding[a] >= std::max(o.stride[a], o.dilation[a]))
                fail("output_padding must be in [0, max(stride, dilation)) in each axis, got " +
                     pair_to_string(o.output_padding));
        const shape_type wshape{o.in_channels, o.out_channels / o.groups, o.kernel_size[0], o.kernel_size[1]};
        register_parameter("weight", zeros(wshape, o.dtype));
        if (o.bias)
            register_parameter("bias", zeros({o.out_channels}, o.dtype));
        reset_parameters(gen);
    }

    void conv_transpose2d::reset_parameters(generator& gen)
    {
        const auto [w, b] = draw_conv(m_options, parameter("weight").shape(), gen);
        set_parameter("weight", w);
        if (b.defined())
            set_parameter("bias", b);
    }

    tensor conv_transpose2d::forward(const tensor& x)
    {
        const auto [in, w, b] = operands(*this, x, m_options);
        auto p = window_params<conv_transpose2d_params>(m_options);
        p.output_padding = m_options.output_padding;
        return xgrad::conv_transpose2d(in, w, b, p, m_options.data_format);
    }

    std::string conv_transpose2d::describe() const
    {
        const auto& op = m_options.output_padding;
        return describe_conv("conv_transpose2d", m_options,
                             op == std::array<std::int64_t, 2>{0, 0} ? "" : ", output_padding=" + pair_to_string(op));
    }

    upsample::upsample(upsample_params params, std::string data_format)
        : m_params(std::move(params)), m_format(std::move(data_format))
    {
        check_format(*this, m_format);
        // The op checks the params; a 1x1 probe image raises its messages now, not at the first
        // forward (a size or factor that empties a 1x1 image is invalid for every image).
        (void)xgrad::upsample(zeros({1, 1, 1, 1}), m_params, m_format);
    }

    tensor upsample::forward(const tensor& x) { return xgrad::upsample(x, m_params, m_format); }

    std::string upsample::describe() const
    {
        std::ostringstream s;
        s << "upsample(";
        if (m_params.size)
            s << "size=" << pair_to_string(*m_params.size);
        else
            s << "scale_factor=[" << (*m_params.scale_factor)[0] << ", " << (*m_params.scale_factor)[1] << "]";
        s << ", mode='" << m_params.mode << "'";
        if (m_params.align_corners)
            s << ", align_corners=true";
        s << ", " << m_format << ")";
        return s.str();
    }
}
