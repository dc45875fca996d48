#pragma once
// optim::sgd (train/src/optim/sgd.cpp): PyTorch's SGD with momentum, dampening, Nesterov and
// weight decay. The contract every optimizer keeps (state, steps, precision, errors) is
// optimizer.hpp's; the state holds "<parameter>.momentum_buffer" when momentum != 0.
// Errors: lr, momentum or weight_decay negative or not finite, dampening outside [0, 1],
// nesterov without momentum or with dampening (xgrad::invalid_argument naming the option).
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "xgrad/nn/module.hpp"
#include "xgrad/ops/optim.hpp"
#include "xgrad/optim/optimizer.hpp"

namespace xgrad::optim
{
    struct sgd_options
    {
        double lr = 0.01;
        double momentum = 0.0;
        double dampening = 0.0;
        double weight_decay = 0.0; // L2 added to the gradient
        bool nesterov = false;
    };

    /// PyTorch's SGD: g += wd p; b = momentum b + (1 - dampening) g (b = g on the first step);
    /// g = nesterov ? g + momentum b : b; p -= lr g. With momentum 0 there is no buffer and
    /// the step is p -= lr g.
    class sgd final : public optimizer
    {
    public:
        sgd(nn::module& model, const sgd_options& options);
        std::string_view type_name() const noexcept override { return "sgd"; }
        const sgd_options& options() const noexcept { return m_options; }

    protected:
        tensor update(const std::string& name, const tensor& p, const tensor& g, std::map<std::string, tensor>& state,
                      const hyper& h) override;
        std::vector<std::string> buffer_names() const override;
        std::vector<std::string> updated_buffers() const override;
        bool fused_update(const tensor& param_out, const std::vector<tensor>& buffers_out, const tensor& param,
                          const tensor& grad, const std::vector<tensor>& buffers, const hyper& h) override;

    private:
        /// The rule's hyperparameters for one parameter, as both the composite rule and the
        /// fused kernel read them.
        sgd_step_params coefficients(const hyper& h) const;
        sgd_options m_options;
    };
}
