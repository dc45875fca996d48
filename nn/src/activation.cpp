// The parameter-free layers: each a forward composed from ops.
#include "xgrad/nn/activation.hpp"

#include <algorithm>
#include <sstream>
#include <string>
#include <vector>

#include "layer_checks.hpp"
#include "xgrad/factories.hpp"
#include "xgrad/ops/activation.hpp"
#include "xgrad/ops/elementwise.hpp"
#include "xgrad/ops/loss.hpp"
#include "xgrad/ops/shape.hpp"

namespace xgrad::nn
{
    using namespace detail;

    tensor relu::forward(const tensor& x) { return xgrad::relu(x); }

    lambda::lambda(std::string name, function_type fn, std::string options)
        : m_name(std::move(name)), m_fn(std::move(fn)), m_options(std::move(options))
    {
        if (m_name.empty())
            throw xgrad::invalid_argument("lambda: the name is empty");
        if (!m_fn)
            fail("the function is empty");
    }

    std::string lambda::describe() const { return m_options.empty() ? m_name : m_name + "(" + m_options + ")"; }

    namespace
    {
        std::string number(double v)
        {
            std::ostringstream out;
            out << v;
            return out.str();
        }

        /// Checks a parameter at construction, where the op would only check it at the first
        /// forward: op(probe) with the layer's parameters throws the op's message.
        template <class F>
        lambda::function_type checked(F f)
        {
            (void)f(zeros({1}, dtype::float32));
            return f;
        }
    }

    identity::identity() : lambda("identity", [](const tensor& x) { return x; }) {}
    sigmoid::sigmoid() : lambda("sigmoid", [](const tensor& x) { return xgrad::sigmoid(x); }) {}
    tanh::tanh() : lambda("tanh", [](const tensor& x) { return xgrad::tanh(x); }) {}
    silu::silu() : lambda("silu", [](const tensor& x) { return xgrad::silu(x); }) {}
    relu6::relu6() : lambda("relu6", [](const tensor& x) { return xgrad::relu6(x); }) {}
    hardsigmoid::hardsigmoid() : lambda("hardsigmoid", [](const tensor& x) { return xgrad::hardsigmoid(x); }) {}
    hardswish::hardswish() : lambda("hardswish", [](const tensor& x) { return xgrad::hardswish(x); }) {}

    leaky_relu::leaky_relu(double s)
        : lambda("leaky_relu", checked([s](const tensor& x) { return xgrad::leaky_relu(x, s); }),
                 "negative_slope=" + number(s))
    {
    }

    elu::elu(double a) : lambda("elu", checked([a](const tensor& x) { return xgrad::elu(x, a); }), "alpha=" + number(a))
    {
    }

    gelu::gelu(std::string approximate)
        : lambda("gelu", checked([approximate](const tensor& x) { return xgrad::gelu(x, approximate); }),
                 "approximate='" + approximate + "'")
    {
    }

    softplus::softplus(double beta)
        : lambda("softplus", checked([beta](const tensor& x) { return xgrad::softplus(x, beta); }),
                 "beta=" + number(beta))
    {
    }

    softmax::softmax(std::int64_t dim)
        : lambda(
              "softmax", [dim](const tensor& x) { return xgrad::softmax(x, dim); }, "dim=" + std::to_string(dim))
    {
    }

    log_softmax::log_softmax(std::int64_t dim)
        : lambda(
              "log_softmax", [dim](const tensor& x) { return xgrad::log_softmax(x, dim); },
              "dim=" + std::to_string(dim))
    {
    }

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

    namespace
    {
        bool valid_rate(double p) { return p >= 0.0 && p < 1.0; }

        /// x times a mask of shape mask_shape (broadcast over x): keep = (u >= p) with
        /// u ~ U[0, 1), so P(keep) = 1 - p, scaled by 1 / (1 - p) so that the expectation is
        /// unchanged. The mask is a constant (no grad).
        tensor drop(const tensor& x, const shape_type& mask_shape, double p, generator& gen)
        {
            const tensor u = rand(mask_shape, gen, x.dtype(), x.device());
            const tensor keep = ge(u, scalar_like(u, p));
            return x * (keep * (1.0 / (1.0 - p)));
        }
    }

    dropout::dropout(double p, std::uint64_t seed) : m_p(p), m_gen(seed)
    {
        if (!valid_rate(p))
            fail("p must be in [0, 1), got " + std::to_string(p));
    }

    tensor dropout::forward(const tensor& x)
    {
        if (!is_training() || m_p == 0.0)
            return x;
        return drop(x, x.shape(), m_p, m_gen);
    }

    std::string dropout::describe() const { return "dropout(p=" + std::to_string(m_p) + ")"; }

    dropout2d::dropout2d(double p, std::uint64_t seed, std::string data_format)
        : m_p(p), m_gen(seed), m_format(std::move(data_format))
    {
        if (!valid_rate(p))
            fail("p must be in [0, 1), got " + std::to_string(p));
        if (m_format != "NCHW" && m_format != "NHWC")
            fail("data_format must be 'NCHW' or 'NHWC', got '" + m_format + "'");
    }

    tensor dropout2d::forward(const tensor& x)
    {
        if (!x.defined() || x.dim() != 4)
            fail("expected a 4-D " + m_format + " input, got " +
                 (x.defined() ? "shape " + shape_to_string(x.shape()) : std::string("an undefined tensor")));
        if (!is_training() || m_p == 0.0)
            return x;
        // One draw per (sample, channel), broadcast over the plane.
        const bool last = m_format == "NHWC";
        const shape_type mask{x.size(0), last ? 1 : x.size(1), 1, last ? x.size(3) : 1};
        return drop(x, mask, m_p, m_gen);
    }

    std::string dropout2d::describe() const { return "dropout2d(p=" + std::to_string(m_p) + ", " + m_format + ")"; }
}
