// optim::adam and AdamW (see adam.hpp): the fused step is one adam_step pass per parameter, the
// composite rule (update) its oracle.
#include "xgrad/optim/adam.hpp"

#include <cmath>
#include <map>
#include <memory>
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
        const adam_options& checked(const adam_options& o, bool decoupled)
        {
            const std::string_view who = decoupled ? "adamw" : "adam";
            check_non_negative(who, "lr", o.lr);
            check_unit_interval(who, "beta1", o.beta1, false);
            check_unit_interval(who, "beta2", o.beta2, false);
            if (!(o.eps > 0.0) || !std::isfinite(o.eps))
                fail_option(who, "eps must be a finite number > 0, got " + number(o.eps));
            check_non_negative(who, "weight_decay", o.weight_decay);
            return o;
        }
    }

    adam::adam(nn::module& model, const adam_options& options, bool decoupled_weight_decay)
        : optimizer(model, checked(options, decoupled_weight_decay).lr), m_options(options),
          m_decoupled(decoupled_weight_decay)
    {
    }

    std::vector<std::string> adam::buffer_names() const { return {"exp_avg", "exp_avg_sq"}; }

    adam_step_params adam::coefficients(const hyper& h) const
    {
        const adam_options& o = m_options;
        const double t = static_cast<double>(step_count());
        adam_step_params c;
        c.lr = h.lr;
        c.beta1 = o.beta1;
        c.beta2 = o.beta2;
        c.eps = o.eps;
        c.weight_decay = h.weight_decay.value_or(o.weight_decay);
        c.decoupled = m_decoupled;
        c.bias_correction1 = 1.0 - std::pow(o.beta1, t);
        c.bias_correction2 = 1.0 - std::pow(o.beta2, t);
        return c;
    }

    bool adam::fused_update(const tensor& param_out, const std::vector<tensor>& buffers_out, const tensor& param,
                            const tensor& grad, const std::vector<tensor>& buffers, const hyper& h)
    {
        const adam_step_params c = coefficients(h);
        const bool first = buffers.empty();
        xgrad::adam_step(param_out, buffers_out[0], buffers_out[1], param, grad, first ? tensor() : buffers[0],
                         first ? tensor() : buffers[1], c);
        return true;
    }

    tensor adam::update(const std::string&, const tensor& p, const tensor& g, std::map<std::string, tensor>& state,
                        const hyper& h)
    {
        // The hyperparameters and bias corrections the fused kernel gets, applied with ops.
        const adam_step_params c = coefficients(h);
        tensor base = p, grad = g;
        if (c.weight_decay != 0.0)
        {
            if (c.decoupled)
                base = p * (1.0 - c.lr * c.weight_decay);
            else
                grad = g + p * c.weight_decay;
        }
        // The buffers start at zero: b m + (1 - b) g is then exactly (1 - b) g, so the first
        // step skips the multiplication by zero.
        tensor& m = state["exp_avg"];
        tensor& v = state["exp_avg_sq"];
        const tensor scaled = grad * (1.0 - c.beta1);
        m = m.defined() ? m * c.beta1 + scaled : scaled;
        const tensor scaled_sq = grad * grad * (1.0 - c.beta2);
        v = v.defined() ? v * c.beta2 + scaled_sq : scaled_sq;

        // lr (m / c1) / (sqrt(v / c2) + eps) with the bias corrections c1, c2 folded into
        // scalars: sqrt(v / c2) = sqrt(v) / sqrt(c2).
        const tensor denom = sqrt(v) * (1.0 / std::sqrt(c.bias_correction2)) + c.eps;
        return base - m / denom * (c.lr / c.bias_correction1);
    }
}
