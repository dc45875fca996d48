#pragma once
// optim::adam (train/src/optim/adam.cpp): PyTorch's Adam and AdamW. The contract every
// optimizer keeps (state, steps, precision, errors) is optimizer.hpp's; the state holds
// "<parameter>.exp_avg" and "<parameter>.exp_avg_sq".
// Errors: lr or weight_decay negative or not finite, betas outside [0, 1), eps not a finite
// number > 0 (xgrad::invalid_argument naming the option).
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "xgrad/nn/module.hpp"
#include "xgrad/ops/optim.hpp"
#include "xgrad/optim/optimizer.hpp"

namespace xgrad::optim
{
    struct adam_options
    {
        double lr = 1e-3;
        double beta1 = 0.9;
        double beta2 = 0.999;
        double eps = 1e-8;
        double weight_decay = 0.0; // adam: L2 added to the gradient; adamw: decoupled decay
    };

    /// PyTorch's Adam (decoupled = false) and AdamW (decoupled = true):
    /// m = b1 m + (1 - b1) g; v = b2 v + (1 - b2) g^2; p -= lr (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps),
    /// with AdamW first applying p *= 1 - lr wd. The buffers start at zero. t is the
    /// optimizer's step count (the state has one "step"): a parameter that first gets a
    /// gradient at step t > 1 is bias-corrected with that t, where PyTorch, which counts steps
    /// per parameter, would use 1. Models whose parameters all get a gradient every step
    /// (the usual case) see no difference.
    class adam final : public optimizer
    {
    public:
        adam(nn::module& model, const adam_options& options, bool decoupled_weight_decay = false);
        std::string_view type_name() const noexcept override { return m_decoupled ? "adamw" : "adam"; }
        const adam_options& options() const noexcept { return m_options; }

    protected:
        tensor update(const std::string& name, const tensor& p, const tensor& g, std::map<std::string, tensor>& state,
                      const hyper& h) override;
        std::vector<std::string> buffer_names() const override;
        bool fused_update(const tensor& param_out, const std::vector<tensor>& buffers_out, const tensor& param,
                          const tensor& grad, const std::vector<tensor>& buffers, const hyper& h) override;

    private:
        /// The rule's hyperparameters and bias corrections for one parameter at the current
        /// step, as both the composite rule and the fused kernel read them.
        adam_step_params coefficients(const hyper& h) const;
        adam_options m_options;
        bool m_decoupled;
    };

    /// AdamW: adam with decoupled weight decay, with `options` as given. (PyTorch's AdamW
    /// default weight decay, 0.01, is what make_optimizer("adamw", ...) uses.)
    std::unique_ptr<optimizer> make_adamw(nn::module& model, adam_options options);
}
