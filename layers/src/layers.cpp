// The thin layers: conv2d, linear, pooling, relu, flatten, dropout, sequential. Each checks
// its options once, registers its parameters, and composes its forward from ops.
#include <algorithm>
#include <cmath>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "xgrad/layers/activation.hpp"
#include "xgrad/layers/batch_norm.hpp"
#include "xgrad/layers/conv.hpp"
#include "xgrad/layers/init.hpp"
#include "xgrad/layers/pool.hpp"
#include "xgrad/layers/sequential.hpp"
#include "xgrad/ops/elementwise.hpp"
#include "xgrad/ops/matmul.hpp"
#include "xgrad/ops/shape.hpp"

namespace xgrad::nn
{
    namespace
    {
        std::string pair_to_string(const std::array<std::int64_t, 2>& p)
        {
            return "[" + std::to_string(p[0]) + ", " + std::to_string(p[1]) + "]";
        }

        void check_format(const module& m, const std::string& format)
        {
            if (format != "NCHW" && format != "NHWC")
                throw xgrad::invalid_argument(std::string(m.type_name()) +
                                              ": data_format must be \"NCHW\" or \"NHWC\", got \"" + format + "\"");
        }

        /// Rank-4 input whose channel axis (of `format`) has `channels` entries.
        void check_image_input(const module& m, const tensor& x, const std::string& format, std::int64_t channels)
        {
            if (!x.defined())
                throw xgrad::invalid_argument(std::string(m.type_name()) + ": the input is undefined");
            if (x.dim() != 4)
                throw xgrad::invalid_argument(std::string(m.type_name()) + ": expected a rank-4 " + format +
                                              " input, got shape " + shape_to_string(x.shape()));
            const std::int64_t c = x.size(format == "NCHW" ? 1 : 3);
            if (channels > 0 && c != channels)
                throw xgrad::invalid_argument(std::string(m.type_name()) + ": expected " + std::to_string(channels) +
                                              " input channels (" + format + "), got shape " +
                                              shape_to_string(x.shape()));
        }

        /// t cast to the layer's compute dtype (differentiable: the gradient is cast back), or t
        /// itself where none is set or it already has it.
        tensor in_compute_dtype(const tensor& t, const std::optional<xgrad::dtype>& dt)
        {
            return dt && t.dtype() != *dt ? xgrad::cast(t, *dt) : t;
        }
    }

    // --- conv2d -----------------------------------------------------------------------------

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

    // --- linear -----------------------------------------------------------------------------

    linear::linear(const options_type& options, generator& gen) : m_options(options)
    {
        if (options.in_features < 1 || options.out_features < 1)
            fail("in_features and out_features must be at least 1, got " + std::to_string(options.in_features) +
                 " and " + std::to_string(options.out_features));
        if (!is_floating(options.dtype))
            fail("dtype must be floating point, got " + std::string(name(options.dtype)));
        if (options.compute_dtype && !is_floating(*options.compute_dtype))
            fail("compute_dtype must be floating point, got " + std::string(name(*options.compute_dtype)));
        register_parameter("weight", zeros({options.out_features, options.in_features}, options.dtype));
        if (options.bias)
            register_parameter("bias", zeros({options.out_features}, options.dtype));
        reset_parameters(gen);
    }

    void linear::reset_parameters(generator& gen)
    {
        const shape_type wshape{m_options.out_features, m_options.in_features};
        set_parameter("weight", init::initialize(m_options.weight_init, wshape, gen, m_options.dtype));
        if (m_options.bias)
            set_parameter("bias",
                          init::fan_in_uniform({m_options.out_features}, m_options.in_features, gen, m_options.dtype));
    }

    tensor linear::forward(const tensor& x)
    {
        if (!x.defined() || x.dim() < 1 || x.size(-1) != m_options.in_features)
            fail("expected an input of shape [..., " + std::to_string(m_options.in_features) + "], got " +
                 (x.defined() ? shape_to_string(x.shape()) : std::string("an undefined tensor")));
        // matmul reads the transposed weight in place (no copy); the bias joins in the GEMM.
        const auto& cdt = m_options.compute_dtype;
        const tensor xc = in_compute_dtype(x, cdt), wt = in_compute_dtype(parameter("weight"), cdt).transpose(0, 1);
        const tensor b = m_options.bias ? in_compute_dtype(parameter("bias"), cdt) : tensor();
        if (m_options.bias && x.dim() >= 2)
            return matmul_add(xc, wt, b);
        tensor y = matmul(xc, wt);
        return m_options.bias ? y + b : y;
    }

    std::string linear::describe() const
    {
        return "linear(" + std::to_string(m_options.in_features) + ", " + std::to_string(m_options.out_features) +
               ", bias=" + (m_options.bias ? "true" : "false") +
               (m_options.compute_dtype ? ", compute_dtype=" + std::string(name(*m_options.compute_dtype)) : "") + ")";
    }

    // --- pooling ----------------------------------------------------------------------------

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

    // --- relu, flatten, dropout ---------------------------------------------------------------

    tensor relu::forward(const tensor& x) { return xgrad::relu(x); }

    flatten::flatten(std::int64_t start_dim, std::int64_t end_dim, std::string data_format)
        : m_start(start_dim), m_end(end_dim), m_format(std::move(data_format))
    {
        static const std::string formats[] = {"", "NCHW", "NHWC", "NCDHW", "NDHWC"};
        if (std::find(std::begin(formats), std::end(formats), m_format) == std::end(formats))
            fail("data_format must be one of '', 'NCHW', 'NHWC', 'NCDHW', 'NDHWC', got '" + m_format + "'");
        if ((m_format == "NHWC" || m_format == "NDHWC") && (m_start != 1 || m_end != -1))
            fail("a channels-last data_format (" + m_format +
                 ") is only taken in channels-first order for dimensions 1..-1, got " + std::to_string(m_start) + ".." +
                 std::to_string(m_end));
    }

    tensor flatten::forward(const tensor& x)
    {
        if (!x.defined())
            fail("the input is undefined");
        const std::int64_t r = x.dim();
        const std::int64_t s = m_start < 0 ? m_start + r : m_start, e = m_end < 0 ? m_end + r : m_end;
        if (s < 0 || e >= r || s > e)
            fail("dimensions " + std::to_string(m_start) + ".." + std::to_string(m_end) +
                 " do not fit an input of shape " + shape_to_string(x.shape()));
        tensor in = x;
        if (m_format == "NHWC" || m_format == "NDHWC")
        {
            const std::int64_t rank = static_cast<std::int64_t>(m_format.size());
            if (r != rank)
                fail("expected a " + std::to_string(rank) + "-D " + m_format + " input, got shape " +
                     shape_to_string(x.shape()));
            // [N, spatial..., C] -> [N, C, spatial...]: the features in PyTorch's order.
            std::vector<std::int64_t> order{0, rank - 1};
            for (std::int64_t d = 1; d < rank - 1; ++d)
                order.push_back(d);
            in = x.permute(order);
        }
        shape_type shape(in.shape().begin(), in.shape().begin() + s);
        std::int64_t merged = 1;
        for (std::int64_t d = s; d <= e; ++d)
            merged *= in.size(d);
        shape.push_back(merged);
        shape.insert(shape.end(), in.shape().begin() + e + 1, in.shape().end());
        return in.reshape(shape);
    }

    std::string flatten::describe() const
    {
        return "flatten(start_dim=" + std::to_string(m_start) + ", end_dim=" + std::to_string(m_end) +
               (m_format.empty() ? "" : ", " + m_format) + ")";
    }

    dropout::dropout(double p, std::uint64_t seed) : m_p(p), m_gen(seed)
    {
        if (!(p >= 0.0 && p < 1.0))
            fail("p must be in [0, 1), got " + std::to_string(p));
    }

    tensor dropout::forward(const tensor& x)
    {
        if (!is_training() || m_p == 0.0)
            return x;
        // keep = (u >= p) with u ~ U[0, 1): P(keep) = 1 - p. The mask is a constant (no grad).
        const tensor u = rand(x.shape(), m_gen, x.dtype(), x.device());
        const tensor keep = ge(u, scalar_like(u, m_p));
        return x * (keep * (1.0 / (1.0 - m_p)));
    }

    std::string dropout::describe() const { return "dropout(p=" + std::to_string(m_p) + ")"; }

    // --- sequential ---------------------------------------------------------------------------

    namespace
    {
        /// m as a batch-norm layer whose forward is batch_norm_base's (batch_norm2d and
        /// batch_norm3d are final), or null.
        batch_norm_base* fused_relu_candidate(module& m)
        {
            if (auto* b2 = dynamic_cast<batch_norm2d*>(&m))
                return b2;
            return dynamic_cast<batch_norm3d*>(&m);
        }
    }

    tensor sequential::forward(const tensor& x)
    {
        const auto children = named_children();
        if (children.empty())
            fail("forward of an empty sequential");
        tensor y = x;
        for (std::size_t i = 0; i < children.size(); ++i)
        {
            const auto& [n, c] = children[i];
            std::string where = n; // the children an error is reported in
            try
            {
                // batch_norm2d/3d then relu (then max_pool2d): one fused op (the same result,
                // see sequential.hpp).
                batch_norm_base* bn = fused_relu_candidate(*c);
                const auto child = [&](std::size_t k) {
                    return k < children.size() ? children[k].second.get() : nullptr;
                };
                auto* bn2 = dynamic_cast<batch_norm2d*>(c.get());
                const auto* pool = dynamic_cast<const max_pool2d*>(child(i + 2));
                if (bn2 && dynamic_cast<const relu*>(child(i + 1)) && pool &&
                    pool->data_format() == bn2->options().data_format)
                {
                    where = n + "' + '" + children[i + 1].first + "' + '" + children[i + 2].first;
                    y = bn2->forward_relu_max_pool(y, pool->params());
                    i += 2; // the relu and max_pool2d children are applied
                }
                else if (bn && dynamic_cast<const relu*>(child(i + 1)))
                {
                    y = bn->forward_relu(y);
                    ++i; // the relu child is applied
                }
                else
                    y = c->forward(y);
            }
            catch (const std::invalid_argument& e) // xgrad::invalid_argument included
            {
                throw xgrad::invalid_argument("sequential: in '" + where + "': " + e.what());
            }
        }
        return y;
    }

    std::int64_t count_parameters(const module& m)
    {
        std::int64_t n = 0;
        for (const auto& p : m.parameters())
            n += p.numel();
        return n;
    }
}
