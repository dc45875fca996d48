// optim::adagrad (see adagrad.hpp): the rule written with xgrad's elementwise ops, constant
// factors folded into doubles, as the other optimizers' composite rules are.
#include "xgrad/optim/adagrad.hpp"

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
        const adagrad_options& checked(const adagrad_options& o)
        {
            check_non_negative("adagrad", "lr", o.lr);
            check_non_negative("adagrad", "lr_decay", o.lr_decay);
            check_non_negative("adagrad", "weight_decay", o.weight_decay);
            check_non_negative("adagrad", "initial_accumulator_value", o.initial_accumulator_value);
            check_positive("adagrad", "eps", o.eps);
            return o;
        }
    }

    adagrad::adagrad(nn::module& model, const adagrad_options& options)
        : optimizer(model, checked(options).lr), m_options(options)
    {
    }

    std::vector<std::string> adagrad::buffer_names() const { return {"sum"}; }

    tensor adagrad::update(const std::string&, const tensor& p, const tensor& g, std::map<std::string, tensor>& state,
                           const hyper& h)
    {
        const adagrad_options& o = m_options;
        const tensor ascent = o.maximize ? -g : g;
        const double weight_decay = h.weight_decay.value_or(o.weight_decay);
        const tensor grad = weight_decay != 0.0 ? ascent + p * weight_decay : ascent;
        // The sum is created on the parameter's first update, from the initial value PyTorch
        // fills it with at construction (0 + g^2 is exactly g^2).
        tensor& sum = state["sum"];
        const tensor square = grad * grad;
        if (sum.defined())
            sum = sum + square;
        else
            sum = o.initial_accumulator_value != 0.0 ? square + o.initial_accumulator_value : square;
        const double clr = h.lr / (1.0 + static_cast<double>(step_count() - 1) * o.lr_decay);
        return p - grad / (sqrt(sum) + o.eps) * clr;
    }
}
