#pragma once
// optim::rmsprop (train/src/optim/rmsprop.cpp): PyTorch's RMSprop, with weight decay, momentum
// and the centered variant. The contract every optimizer keeps (state, steps, precision,
// errors) is optimizer.hpp's. Its step is the composite rule (no fused kernel).
// Errors: lr, momentum, weight_decay or eps negative or not finite, eps 0, alpha outside [0, 1)
// (xgrad::invalid_argument naming the option).
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "xgrad/nn/module.hpp"
#include "xgrad/optim/optimizer.hpp"

namespace xgrad::optim
{
    struct rmsprop_options
    {
        double lr = 1e-2;
        double alpha = 0.99; // the square average's smoothing
        double eps = 1e-8;
        double weight_decay = 0.0; // L2 added to the gradient
        double momentum = 0.0;
        bool centered = false;
    };

    /// PyTorch's RMSprop, per element: g += wd p; v = alpha v + (1 - alpha) g^2 (v = 0 before);
    /// centered: a = alpha a + (1 - alpha) g (a = 0 before) and d = sqrt(v - a^2) + eps, else
    /// d = sqrt(v) + eps; with momentum, b = momentum b + g / d (b = 0 before) and p -= lr b,
    /// else p -= lr g / d. State per parameter: "square_avg", with momentum "momentum_buffer",
    /// centered "grad_avg" (PyTorch's names).
    class rmsprop final : public optimizer
    {
    public:
        rmsprop(nn::module& model, const rmsprop_options& options);
        std::string_view type_name() const noexcept override { return "rmsprop"; }
        const rmsprop_options& options() const noexcept { return m_options; }

    protected:
        tensor update(const std::string& name, const tensor& p, const tensor& g, std::map<std::string, tensor>& state,
                      const hyper& h) override;
        std::vector<std::string> buffer_names() const override;

    private:
        rmsprop_options m_options;
    };
}
