#pragma once
// Optimizers (namespace xgrad::optim; train/src/optim/): the base every optimizer derives from,
// with one header and one source per optimizer (sgd.hpp, adam.hpp; xgrad/optim.hpp includes
// them all).
//
// An optimizer updates the parameters of one module. A step computes each new parameter under
// no_grad and gives it to the parameter with module::update_parameter (see module.hpp): the
// parameters stay the same tensors, so handles to them stay valid and see the new values, and
// their grad() stays until zero_grad(). A graph recorded before a step refuses to run backward
// after it. Parameters and their state are found by their full names, which is also how the
// state is saved in a checkpoint.
//
// How a step runs (the built-in optimizers): one fused pass per parameter (xgrad::sgd_step /
// adam_step, xgrad/ops/optim.hpp) reads the parameter, its gradient and its buffers and writes the new
// ones. It writes into the parameter's and the buffers' own storage when nothing else holds
// that storage (no view, no saved tensor of a live graph, no state_dict() copy, no tensor
// given to load_state_dict still held by the caller), which is the usual case in a training
// loop: such a step allocates no tensor storage. Storage that something else holds is never
// written: the step then gives the parameter (or buffer) new storage, so every earlier copy
// keeps its values. Either way the parameter's version is incremented, exactly as if new data
// had been given. set_fused(false) runs the composite rule instead (the update written with
// xgrad's elementwise ops, a dozen passes and temporaries for Adam): the fused kernels' oracle,
// with the same bits wherever the processor's fast kernel does not fuse a multiply-add.
//
// State (state_dict): a map from names to tensors, the same on every run with the same seed:
//   "step"                     int64, shape []: the number of steps taken, in
//                              [0, optimizer::max_step_count];
//   "<parameter>.<buffer>"     the per-parameter buffers, created on the first step that sees
//                              the parameter's gradient (SGD: "momentum_buffer"; Adam/AdamW:
//                              "exp_avg", "exp_avg_sq"), same shape/dtype/device as the parameter.
// Hyperparameters are options, not state; the learning rate may be changed between steps
// with set_lr (that is what the schedulers do).
//
// Parameters without a gradient (grad() undefined) are skipped, as in PyTorch. Parameters
// whose requires_grad is false are skipped. A tied parameter (one tensor under several names,
// as weight tying makes it) is stepped once per step, under its first name in
// named_parameters() order, with the gradient all its uses accumulated; its state is kept
// under that name only. A step is all or nothing: if it throws, no
// parameter, buffer or step count has changed.
//
// Precision: float32 and float64 parameters are updated in their own dtype. float16 and
// bfloat16 parameters, gradients and buffers are converted to float32, updated there, and the
// new parameter and buffers rounded back once (the buffers are stored in the parameter's
// dtype, so resuming from a state_dict is exact).
//
// Errors: bad options (lr < 0, momentum < 0, dampening outside [0, 1], betas outside [0, 1),
// eps <= 0, weight_decay < 0, any of them NaN or infinite, nesterov without momentum or with
// dampening) and bad state in load_state_dict (unknown names, missing or malformed "step", a
// "step" outside [0, max_step_count], a shape/dtype/device differing from the parameter's, a
// parameter with only some of its buffers) throw xgrad::invalid_argument naming the option or
// the entry; so does step() when a gradient's shape, dtype or device differs from its
// parameter's, or when the step count is already max_step_count (before anything changes).
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "xgrad/nn/module.hpp"
#include "xgrad/tensor.hpp"

namespace xgrad::optim
{
    /// Hyperparameters for some of the parameters (PyTorch's parameter groups): the
    /// parameters named, by full name, learn at lr_factor times the optimizer's learning rate
    /// (so schedules, which set that rate, move every group together) and with their own weight
    /// decay when it is given. The usual use: no weight decay on biases and batch-norm
    /// parameters (one_dimensional_parameters).
    struct param_group
    {
        std::vector<std::string> names;
        double lr_factor = 1.0;
        std::optional<double> weight_decay;
    };

    /// The full names of m's parameters with at most one dimension: biases and batch-norm
    /// weights, which weight decay is usually not applied to.
    std::vector<std::string> one_dimensional_parameters(const nn::module& m);

    class optimizer
    {
    public:
        using state_dict_type = std::map<std::string, tensor>;

        /// The most steps an optimizer counts: 2^53, the largest count a double (which the
        /// update rules compute with, e.g. Adam's bias correction) holds exactly, and far
        /// below where the int64 counter would overflow.
        static constexpr std::int64_t max_step_count = std::int64_t{1} << 53;

        virtual ~optimizer();
        optimizer(const optimizer&) = delete;
        optimizer& operator=(const optimizer&) = delete;

        /// "sgd", "adam", "adamw".
        virtual std::string_view type_name() const noexcept = 0;

        /// Whether steps run the fused kernel (true, the default) or the composite rule (see
        /// the file comment). An optimizer without a fused kernel always runs its composite
        /// rule.
        void set_fused(bool on) noexcept { m_fused = on; }
        bool fused() const noexcept { return m_fused; }

        /// One update of every parameter that has a gradient. Throws xgrad::invalid_argument,
        /// changing nothing, when step_count() is already max_step_count.
        void step();
        /// Clears the gradients of the module's parameters.
        void zero_grad();

        double lr() const noexcept { return m_lr; }
        void set_lr(double lr);

        /// Replaces the parameter groups (none at first: every parameter takes the options as
        /// they are). Throws xgrad::invalid_argument, changing nothing, for a name that is not
        /// a parameter of the model, a parameter in two groups, or an lr_factor or weight_decay
        /// that is negative, NaN or infinite. Groups are hyperparameters, not state: a
        /// checkpoint does not hold them, and a resumed run sets them again.
        void set_param_groups(std::vector<param_group> groups);
        const std::vector<param_group>& param_groups() const noexcept { return m_groups; }
        std::int64_t step_count() const noexcept { return m_step; }

        /// Copies of the state (detached tensors sharing storage; tensors are immutable).
        state_dict_type state_dict() const;
        /// Replaces the state. Checks everything first and throws listing every problem,
        /// leaving the optimizer unchanged. State for a parameter of the model that `state`
        /// lacks is allowed: that parameter has not been updated yet, and its buffers start
        /// afresh on its next update.
        void load_state_dict(const state_dict_type& state);
        /// What load_state_dict would reject in `state`, one line per problem (empty when it
        /// would load), checked against the model's current parameters. Lets a caller check
        /// a whole checkpoint before changing anything.
        std::vector<std::string> state_dict_problems(const state_dict_type& state) const;

        nn::module& model() const noexcept { return *m_model; }

    protected:
        /// `model` must outlive the optimizer.
        optimizer(nn::module& model, double lr);

        /// The hyperparameters of one parameter's update: the learning rate (lr() times its
        /// group's factor) and the weight decay (its group's, else the options').
        struct hyper
        {
            double lr = 0.0;
            std::optional<double> weight_decay; // unset: the optimizer's own option
        };

        /// The update rule for one parameter with gradient g; `state` holds its buffers by
        /// short name ("exp_avg"), empty before the parameter's first update, and the rule
        /// stores the new buffers there. Runs under no_grad with p, g and the buffers detached
        /// and in the same compute dtype (float32 or float64); m_step is already incremented
        /// (1 on the first step). Returns the new value, of p's shape, dtype and device.
        virtual tensor update(const std::string& name, const tensor& p, const tensor& g,
                              std::map<std::string, tensor>& state, const hyper& h) = 0;
        /// The short names of the per-parameter buffers this optimizer keeps (no '.'); a
        /// parameter's state holds all of them or none.
        virtual std::vector<std::string> buffer_names() const = 0;

        /// The buffers a step writes (a subset of buffer_names(), in a fixed order; SGD
        /// without momentum keeps none). Default: buffer_names().
        virtual std::vector<std::string> updated_buffers() const { return buffer_names(); }

        /// The fused form of update(): writes the new parameter into param_out and the new
        /// buffers into buffers_out (in updated_buffers() order) from param, grad and buffers
        /// (the same order; empty before the parameter's first update). Every tensor is
        /// contiguous, of the parameter's shape, dtype and device, and an output is either its
        /// input itself (the same storage) or overlaps nothing; m_step is already incremented.
        /// Returns false, writing nothing, when the optimizer has no fused kernel (the default):
        /// the step then runs update().
        virtual bool fused_update(const tensor& param_out, const std::vector<tensor>& buffers_out, const tensor& param,
                                  const tensor& grad, const std::vector<tensor>& buffers, const hyper& h);

        /// Throws xgrad::invalid_argument("<type_name()>: <what>").
        [[noreturn]] void fail(const std::string& what) const;

    private:
        hyper hyper_of(const std::string& name) const;
        /// The two ways of computing a step's updates, (name, parameter) pairs with gradients.
        struct pending_update;
        std::vector<pending_update> composite_updates(const std::vector<std::pair<std::string, tensor>>& work);
        /// nullopt when this optimizer has no fused kernel (fused_update returned false).
        std::optional<std::vector<pending_update>>
        fused_updates(const std::vector<std::pair<std::string, tensor>>& work);

        bool m_fused = true;
        nn::module* m_model;
        double m_lr;
        std::int64_t m_step = 0;
        std::map<std::string, std::map<std::string, tensor>> m_state; // parameter -> buffers
        std::vector<param_group> m_groups;
    };

    /// Scales every gradient of m's parameters by max_norm / (total + 1e-6) when their total
    /// norm (the norm_type-norm of all gradients together; norm_type may be infinity) exceeds
    /// max_norm, as torch.nn.utils.clip_grad_norm_ does; returns the total norm before
    /// clipping (NaN or infinite when a gradient is, and the gradients are then scaled by
    /// NaN, as PyTorch's default does: check the result). Throws xgrad::invalid_argument for
    /// max_norm negative or not finite, or norm_type not positive.
    double clip_grad_norm(nn::module& m, double max_norm, double norm_type = 2.0);
    /// Clamps every gradient of m's parameters to [-clip_value, clip_value]
    /// (torch.nn.utils.clip_grad_value_). Throws xgrad::invalid_argument for clip_value
    /// negative or not finite.
    void clip_grad_value(nn::module& m, double clip_value);

    /// Creates an optimizer by name ("sgd", "adam", "adamw", "rmsprop", "adagrad") with the
    /// given learning rate and the defaults of the training example (sgd: momentum 0.9,
    /// nesterov; adam: betas 0.9, 0.999, eps 1e-8, no weight decay; adamw: the same with weight
    /// decay 0.01; rmsprop and adagrad: PyTorch's defaults). Throws
    /// xgrad::invalid_argument naming the name and the choices otherwise, or naming the
    /// learning rate when it is negative, NaN or infinite.
    std::unique_ptr<optimizer> make_optimizer(const std::string& name, nn::module& model, double lr);
}

// The optimizers that were declared here before each got a header of its own, so that code
// including this header alone keeps compiling (each includes this header first).
#include "xgrad/optim/adam.hpp"
#include "xgrad/optim/sgd.hpp"
