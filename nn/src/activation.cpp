// nn::relu, nn::flatten and nn::dropout: each a forward composed from ops.
#include "xgrad/nn/activation.hpp"

#include <algorithm>
#include <string>
#include <vector>

#include "layer_checks.hpp"
#include "xgrad/factories.hpp"
#include "xgrad/ops/elementwise.hpp"
#include "xgrad/ops/shape.hpp"

namespace xgrad::nn
{
    using namespace detail;

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
}
