// optim::rmsprop (see rmsprop.hpp): the rule written with xgrad's elementwise ops, constant
// factors folded into doubles, as the other optimizers' composite rules are.
#include "xgrad/optim/rmsprop.hpp"

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "checks.hpp"
#include "xgrad/ops/elementwise.hpp"

namespace xgrad::optim
{
    using namespace detail;

    namespace
    {
        /// Validates before the base is constructed, so that a bad option never yields an object.
        const rmsprop_options& checked(const rmsprop_options& o)
        {
            check_non_negative("rmsprop", "lr", o.lr);
            check_unit_interval("rmsprop", "alpha", o.alpha, false);
            check_non_negative("rmsprop", "weight_decay", o.weight_decay);
            check_non_negative("rmsprop", "momentum", o.momentum);
            if (!(o.eps > 0.0) || !std::isfinite(o.eps))
                fail_option("rmsprop", "eps must be a finite number > 0, got " + number(o.eps));
            return o;
        }
    }

    rmsprop::rmsprop(nn::module& model, const rmsprop_options& options)
        : optimizer(model, checked(options).lr), m_options(options)
    {
    }

    std::vector<std::string> rmsprop::buffer_names() const
    {
        std::vector<std::string> names{"square_avg"};
        if (m_options.momentum != 0.0)
            names.push_back("momentum_buffer");
        if (m_options.centered)
            names.push_back("grad_avg");
        return names;
    }

    tensor rmsprop::update(const std::string&, const tensor& p, const tensor& g, std::map<std::string, tensor>& state,
                           const hyper& h)
    {
        const rmsprop_options& o = m_options;
        const double weight_decay = h.weight_decay.value_or(o.weight_decay);
        const tensor grad = weight_decay != 0.0 ? g + p * weight_decay : g;
        // The averages start at zero: alpha 0 + (1 - alpha) x is then exactly (1 - alpha) x.
        tensor& v = state["square_avg"];
        const tensor scaled_sq = grad * grad * (1.0 - o.alpha);
        v = v.defined() ? v * o.alpha + scaled_sq : scaled_sq;
        tensor avg;
        if (o.centered)
        {
            tensor& a = state["grad_avg"];
            const tensor scaled = grad * (1.0 - o.alpha);
            a = a.defined() ? a * o.alpha + scaled : scaled;
            avg = sqrt(v - a * a) + o.eps;
        }
        else
            avg = sqrt(v) + o.eps;
        if (o.momentum != 0.0)
        {
            tensor& b = state["momentum_buffer"];
            const tensor step = grad / avg;
            b = b.defined() ? b * o.momentum + step : step;
            return p - b * h.lr;
        }
        return p - grad / avg * h.lr;
    }
}
