// nn::layer_norm, nn::group_norm and nn::instance_norm2d: their options checked once, their parameters registered,
// and forward one call of the op.
#include "xgrad/nn/norm.hpp"

#include <cmath>
#include <sstream>
#include <string>

#include "xgrad/factories.hpp"
#include "xgrad/ops/norm.hpp"

namespace xgrad::nn
{
    namespace
    {
        std::string eps_text(double eps)
        {
            std::ostringstream s;
            s << eps;
            return s.str();
        }

        bool bad_eps(double eps) { return !(eps >= 0.0) || !std::isfinite(eps); }
    }

    layer_norm::layer_norm(const options_type& options) : m_options(options)
    {
        const auto& o = m_options;
        bool positive = !o.normalized_shape.empty();
        for (const std::int64_t e : o.normalized_shape)
            positive = positive && e >= 1;
        if (!positive)
            fail("normalized_shape must be non-empty with every extent at least 1, got " +
                 shape_to_string(o.normalized_shape));
        if (bad_eps(o.eps))
            fail("eps must be a finite number >= 0, got " + eps_text(o.eps));
        if (!is_floating(o.dtype))
            fail("dtype must be floating point, got " + std::string(name(o.dtype)));
        if (o.elementwise_affine)
        {
            register_parameter("weight", ones(o.normalized_shape, o.dtype));
            if (o.bias)
                register_parameter("bias", zeros(o.normalized_shape, o.dtype));
        }
    }

    tensor layer_norm::forward(const tensor& x)
    {
        const auto& o = m_options;
        const tensor w = o.elementwise_affine ? parameter("weight") : tensor();
        const tensor b = o.elementwise_affine && o.bias ? parameter("bias") : tensor();
        return xgrad::layer_norm(x, o.normalized_shape, w, b, o.eps);
    }

    std::string layer_norm::describe() const
    {
        return "layer_norm(" + shape_to_string(m_options.normalized_shape) + ", eps=" + eps_text(m_options.eps) +
               ", elementwise_affine=" + (m_options.elementwise_affine ? "true" : "false") + ")";
    }

    group_norm::group_norm(const options_type& options) : m_options(options)
    {
        const auto& o = m_options;
        if (o.num_groups < 1 || o.num_channels < 1 || o.num_channels % o.num_groups != 0)
            fail("num_groups (" + std::to_string(o.num_groups) + ") must be at least 1 and divide num_channels (" +
                 std::to_string(o.num_channels) + ")");
        if (bad_eps(o.eps))
            fail("eps must be a finite number >= 0, got " + eps_text(o.eps));
        if (!is_floating(o.dtype))
            fail("dtype must be floating point, got " + std::string(name(o.dtype)));
        if (o.affine)
        {
            register_parameter("weight", ones({o.num_channels}, o.dtype));
            register_parameter("bias", zeros({o.num_channels}, o.dtype));
        }
    }

    tensor group_norm::forward(const tensor& x)
    {
        const auto& o = m_options;
        if (!x.defined() || x.dim() < 2 || x.size(1) != o.num_channels)
            fail("expected an input [N, " + std::to_string(o.num_channels) + ", ...], got " +
                 (x.defined() ? shape_to_string(x.shape()) : std::string("an undefined tensor")));
        return xgrad::group_norm(x, o.num_groups, o.affine ? parameter("weight") : tensor(),
                                 o.affine ? parameter("bias") : tensor(), o.eps);
    }

    std::string group_norm::describe() const
    {
        return "group_norm(" + std::to_string(m_options.num_groups) + ", " + std::to_string(m_options.num_channels) +
               ", eps=" + eps_text(m_options.eps) + ", affine=" + (m_options.affine ? "true" : "false") + ")";
    }

    instance_norm2d::instance_norm2d(const options_type& options) : m_options(options)
    {
        const auto& o = m_options;
        if (o.num_features < 1)
            fail("num_features must be at least 1, got " + std::to_string(o.num_features));
        if (bad_eps(o.eps))
            fail("eps must be a finite number >= 0, got " + eps_text(o.eps));
        if (!is_floating(o.dtype))
            fail("dtype must be floating point, got " + std::string(name(o.dtype)));
        if (o.affine)
        {
            register_parameter("weight", ones({o.num_features}, o.dtype));
            register_parameter("bias", zeros({o.num_features}, o.dtype));
        }
    }

    tensor instance_norm2d::forward(const tensor& x)
    {
        const auto& o = m_options;
        if (!x.defined() || x.dim() != 4 || x.size(1) != o.num_features)
            fail("expected an input [N, " + std::to_string(o.num_features) + ", H, W], got " +
                 (x.defined() ? shape_to_string(x.shape()) : std::string("an undefined tensor")));
        return xgrad::instance_norm(x, o.affine ? parameter("weight") : tensor(),
                                    o.affine ? parameter("bias") : tensor(), o.eps);
    }

    std::string instance_norm2d::describe() const
    {
        return "instance_norm2d(" + std::to_string(m_options.num_features) + ", eps=" + eps_text(m_options.eps) +
               ", affine=" + (m_options.affine ? "true" : "false") + ")";
    }
}
