// optim::sgd (see sgd.hpp): the fused step is one sgd_step pass per parameter, the composite
// rule (update) its oracle.
#include "xgrad/optim/sgd.hpp"

#include <map>
#include <string>
#include <vector>

#include "checks.hpp"
#include "xgrad/ops/elementwise.hpp"
#include "xgrad/ops/optim.hpp"

namespace xgrad::optim
{
    using namespace detail;

    namespace
    {
        /// Validates before the base is constructed, so that a bad option never yields an object.
        const sgd_options& checked(const sgd_options& o)
        {
            check_non_negative("sgd", "lr", o.lr);
            check_non_negative("sgd", "momentum", o.momentum);
            check_unit_interval("sgd", "dampening", o.dampening, true);
            check_non_negative("sgd", "weight_decay", o.weight_decay);
            if (o.nesterov && (o.momentum <= 0.0 || o.dampening != 0.0))
                fail_option("sgd", "nesterov requires momentum > 0 and dampening 0, got momentum " +
                                       number(o.momentum) + ", dampening " + number(o.dampening));
            return o;
        }
    }

    sgd::sgd(nn::module& model, const sgd_options& options) : optimizer(model, checked(options).lr), m_options(options)
    {
    }

    std::vector<std::string> sgd::buffer_names() const { return {"momentum_buffer"}; }

    std::vector<std::string> sgd::updated_buffers() const
    {
        return m_options.momentum != 0.0 ? buffer_names() : std::vector<std::string>{};
    }

    sgd_step_params sgd::coefficients(const hyper& h) const
    {
        const sgd_options& o = m_options;
        sgd_step_params c;
        c.lr = h.lr;
        c.weight_decay = h.weight_decay.value_or(o.weight_decay);
        c.momentum = o.momentum;
        c.dampening = o.dampening;
        c.nesterov = o.nesterov;
        return c;
    }

    bool sgd::fused_update(const tensor& param_out, const std::vector<tensor>& buffers_out, const tensor& param,
                           const tensor& grad, const std::vector<tensor>& buffers, const hyper& h)
    {
        const sgd_step_params c = coefficients(h);
        const bool momentum = c.momentum != 0.0;
        xgrad::sgd_step(param_out, momentum ? buffers_out[0] : tensor(), param, grad,
                        momentum && !buffers.empty() ? buffers[0] : tensor(), c);
        return true;
    }

    tensor sgd::update(const std::string&, const tensor& p, const tensor& g, std::map<std::string, tensor>& state,
                       const hyper& h)
    {
        const sgd_options& o = m_options;
        const double weight_decay = coefficients(h).weight_decay;
        tensor d = weight_decay != 0.0 ? g + p * weight_decay : g;
        if (o.momentum != 0.0)
        {
            tensor& b = state["momentum_buffer"];
            if (!b.defined())
                b = d; // tensors are immutable: sharing d's storage is safe
            else if (o.dampening == 0.0)
                b = b * o.momentum + d;
            else
                b = b * o.momentum + d * (1.0 - o.dampening);
            d = o.nesterov ? d + b * o.momentum : b;
        }
        return p - d * h.lr;
    }
}
