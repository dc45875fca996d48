#pragma once
// optim::adagrad (train/src/optim/adagrad.cpp): PyTorch's Adagrad, with learning-rate decay,
// weight decay, an initial accumulator value and maximize. The contract every optimizer keeps
// (state, steps, precision, errors) is optimizer.hpp's. Its step is the composite rule (no fused
// kernel).
// Errors: lr, lr_decay, weight_decay or initial_accumulator_value negative or not finite, eps
// not a finite number > 0 (xgrad::invalid_argument naming the option). PyTorch also takes eps
// = 0, which divides 0 by 0 wherever the accumulated sum is still 0.
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "xgrad/nn/module.hpp"
#include "xgrad/optim/optimizer.hpp"

namespace xgrad::optim
{
    struct adagrad_options
    {
        double lr = 1e-2;
        double lr_decay = 0.0;
        double weight_decay = 0.0; // L2 added to the gradient
        double initial_accumulator_value = 0.0;
        double eps = 1e-10;
        bool maximize = false; // ascend the objective: the gradient's sign flipped
    };

    /// PyTorch's Adagrad, per element, at step t (1 on the first): g = -g when maximize; g += wd
    /// p; sum += g^2 (sum = initial_accumulator_value before); p -= lr / (1 + (t - 1) lr_decay)
    /// g / (sqrt(sum) + eps). State per parameter: "sum" (PyTorch's name). t is the optimizer's
    /// step count (the state's one "step"): PyTorch counts steps per parameter, which differs
    /// only for a parameter that has gone without a gradient on some steps (see adam.hpp).
    class adagrad final : public optimizer
    {
    public:
        adagrad(nn::module& model, const adagrad_options& options);
        std::string_view type_name() const noexcept override { return "adagrad"; }
        const adagrad_options& options() const noexcept { return m_options; }

    protected:
        tensor update(const std::string& name, const tensor& p, const tensor& g, std::map<std::string, tensor>& state,
                      const hyper& h) override;
        std::vector<std::string> buffer_names() const override;

    private:
        adagrad_options m_options;
    };
}
