#pragma once
// xgrad::nn::module: the base of the neural-network layers (nn/src/module.cpp).
//
// A module owns named tensors of two kinds, registered by its subclass in its constructor:
//
// - parameters: leaf tensors that require grad (learnable weights). backward() accumulates
//   into their grad();
// - buffers: tensors that do not require grad (running statistics, counters), any dtype;
//
// and may own child modules, whose tensors it lists under "child.name" (recursively,
// "child.grandchild.name"). Every listing follows registration order: a module's own tensors
// first, then each child's, so the order is deterministic.
//
// Copies never change: data is written in place only into storage that nothing else holds (an
// optimizer's fused step, xgrad/optim/optimizer.hpp), so a state_dict() snapshot, a detached
// copy or a saved tensor of a graph keeps its values. A new value reaches a parameter in one
// of two ways:
//
// - update_parameter(name, value) gives the parameter's own handle the new data
//   (tensor::set_data): the parameter stays the same tensor, so handles held elsewhere
//   (auto w = conv->weight(), an optimizer's list, a data-parallel wrapper's hooks) see the new
//   values, and its grad() stays. This is how an optimizer step works:
//
//       {
//           xgrad::no_grad guard;                    // the update itself is not differentiated
//           for (const auto& [name, p] : m.named_parameters())
//               if (p.grad().defined())
//                   m.update_parameter(name, p - lr * p.grad());
//       }
//
//   A graph recorded before the update refuses to run backward afterwards (tensor::set_data).
// - set_parameter / set_buffer store another tensor in the slot: handles taken before keep
//   the old tensor. The layers set their running statistics so, and initialisation sets the
//   parameters so.
//
// state_dict() snapshots are unaffected by either: they share the old data, which nothing
// writes.
//
// Errors: bad names, shapes, dtypes or devices throw xgrad::invalid_argument (a
// std::invalid_argument) naming the module, the tensor and the shapes or dtypes involved.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "xgrad/errors.hpp"
#include "xgrad/tensor.hpp"

namespace xgrad::nn
{
    class module
    {
    public:
        using named_tensor_type = std::pair<std::string, tensor>;
        using named_tensors_type = std::vector<named_tensor_type>;
        using named_module_type = std::pair<std::string, std::shared_ptr<module>>;
        using named_modules_type = std::vector<named_module_type>;
        /// Full name -> tensor, parameters and buffers together.
        using state_dict_type = std::map<std::string, tensor>;

        struct load_result
        {
            /// Names the module has and the state dict lacked (only non-empty when !strict).
            std::vector<std::string> missing_keys;
            /// Names the state dict has and the module lacks (only non-empty when !strict).
            std::vector<std::string> unexpected_keys;
        };

        virtual ~module();
        // A module owns its parameters' autograd identity (their grad()), so copies would be
        // ambiguous; modules are moved, or held by shared_ptr.
        module(const module&) = delete;
        module& operator=(const module&) = delete;
        module(module&&) noexcept;
        module& operator=(module&&) noexcept;

        /// The kind of module, for messages ("module", "batch_norm2d", ...).
        virtual std::string_view type_name() const noexcept;

        // --- computation ---------------------------------------------------------------------
        /// The module's function of one tensor, composed from differentiable ops (layers
        /// never write a backward). The base throws xgrad::invalid_argument: a module without a
        /// single-input forward (a container of named parts) cannot be called.
        virtual tensor forward(const tensor& x);
        /// Calls forward(x), then this module's forward hooks in the order they were registered
        /// (see register_forward_hook). Containers call their children this way, so hooks fire
        /// for every module a model runs; calling forward() directly skips the hooks (as in
        /// PyTorch).
        tensor operator()(const tensor& x);
        /// A description for printing: one line for a layer ("conv2d(1, 32, kernel=[3, 3],
        /// ...)"); the base gives type_name() for a module without children, and for one with
        /// children type_name() followed by one "(name): <child's describe()>" line per child,
        /// nested ones indented, as PyTorch prints a module. It returns the text; print it
        /// yourself (std::cout << model.describe()).
        virtual std::string describe() const;

        // --- listing (recurse = false: this module's own tensors only) ----------------------
        std::vector<tensor> parameters(bool recurse = true) const;
        named_tensors_type named_parameters(bool recurse = true) const;
        std::vector<tensor> buffers(bool recurse = true) const;
        named_tensors_type named_buffers(bool recurse = true) const;
        /// The direct children, in registration order.
        named_modules_type named_children() const;
        /// Every descendant under its full name ("block.conv1"), in pre-order (a module before
        /// its children, children in registration order); this module itself is not listed.
        named_modules_type named_modules() const;

        // --- hooks and traversal ----------------------------------------------------------------
        /// hook(module, input, output) runs after forward when the module is called. It may
        /// return a defined tensor, which replaces the output (for the later hooks too), or an
        /// undefined one to keep it. Returns an id for remove_forward_hook. A hook on a child
        /// of a fused run (nn::fuse) makes the container run that run's children one by one,
        /// since the fused op never forms the child's own output.
        using forward_hook_type = std::function<tensor(module&, const tensor& input, const tensor& output)>;
        std::int64_t register_forward_hook(forward_hook_type hook);
        /// Removes the hook `id` from this module; throws xgrad::invalid_argument naming the id
        /// when it has no such hook.
        void remove_forward_hook(std::int64_t id);
        bool has_forward_hooks() const noexcept { return !m_hooks.empty(); }
        /// Calls fn on every descendant, children before their parent, then on this module
        /// (PyTorch's Module.apply): for initialisation, e.g. redrawing every conv2d's weight.
        void apply(const std::function<void(module&)>& fn);
        /// Sets requires_grad on every parameter whose full name matches the shell-style
        /// pattern (fnmatch: `*` and `?` match any characters, dots included; "layer1.*",
        /// "*.bias"), to freeze (false) or unfreeze (true) them. Returns how many matched.
        /// Throws xgrad::invalid_argument naming the pattern when none does, so that a typo
        /// cannot leave a model silently unfrozen. A frozen parameter gets no grad(), and the
        /// optimizers leave it unchanged.
        std::size_t set_requires_grad(const std::string& pattern, bool requires_grad);

        // --- structure -----------------------------------------------------------------------
        /// Replaces the direct child `name` by `child` in the same place, so the registration
        /// order and every other name stay as they were (the new child's own tensors are listed
        /// under "name." instead of the old one's). This is how convert_sync_batch_norm swaps
        /// layers in a built model. Throws xgrad::invalid_argument naming this module and the
        /// name when there is no direct child `name`, when `child` is null, or when `child`
        /// contains this module (modules must form a tree); nothing changes then. Afterwards
        /// calls child_replaced(name, child).
        void replace_child(const std::string& name, std::shared_ptr<module> child);

        // --- access by full name ("scale", "block.bn.running_mean") --------------------------
        bool has_parameter(const std::string& name) const;
        bool has_buffer(const std::string& name) const;
        /// Throws xgrad::invalid_argument naming the module and the name when there is none.
        tensor parameter(const std::string& name) const;
        tensor buffer(const std::string& name) const;

        /// Replaces parameter `name` by `value`, which must be a defined leaf tensor (no
        /// grad_fn: compute it under no_grad, or detach() it) with the same shape, dtype and
        /// device as the current value. The module stores this very handle, as its new
        /// parameter, and gives it the requires_grad flag of the value it replaces (true unless
        /// the parameter was frozen with requires_grad_(false)); its grad() is value's own
        /// (none, for a value just computed).
        /// Because the handle itself is stored, a function of `value` computed through the
        /// module is differentiable w.r.t. `value` (gradcheck through a layer relies on this).
        void set_parameter(const std::string& name, const tensor& value);
        /// Gives parameter `name` the data of `value` (tensor::set_data) without replacing the
        /// parameter: same handle, same requires_grad, grad() kept. value: the parameter's shape,
        /// dtype and device, any tensor (only its data is taken). Throws xgrad::invalid_argument
        /// naming the module and the parameter otherwise, or when there is no such parameter.
        void update_parameter(const std::string& name, const tensor& value);
        /// Replaces buffer `name` by value.detach(), which must have the same shape, dtype and
        /// device as the current value.
        void set_buffer(const std::string& name, const tensor& value);

        // --- mode ----------------------------------------------------------------------------
        /// Sets training mode (true) or evaluation mode (false) on this module and all its
        /// descendants. Modules start in training mode.
        void train(bool on = true);
        void eval() { train(false); }
        bool is_training() const noexcept { return m_training; }

        // --- device --------------------------------------------------------------------------
        /// Moves every parameter and buffer (recursively) to `dev` (a no-op for tensors
        /// already there). Parameters stay leaves that require grad; their grad() is cleared.
        /// Throws when the device is not available in this build or at run time. Then calls
        /// moved_to(dev) on this module and every descendant.
        void to(device dev);

        // --- gradients -----------------------------------------------------------------------
        /// Clears the grad() of every parameter (recursively).
        void zero_grad();

        // --- serialisation -------------------------------------------------------------------
        /// Every parameter and buffer (recursively) under its full name, as detached handles
        /// sharing storage with the module's values.
        state_dict_type state_dict() const;
        /// Replaces every parameter and buffer by the state dict's value under its full name.
        /// Checks everything before changing anything: a name of the module missing from
        /// `state` or (when strict) a name in `state` the module does not have, an undefined
        /// tensor, or a shape, dtype or device differing from the module's value throws one
        /// xgrad::invalid_argument listing every problem, and the module is left unchanged.
        /// When !strict, missing and unexpected names are allowed and returned. Loaded values
        /// share storage with `state` (tensors are immutable) but are fresh leaves: loading the
        /// same state into two modules gives them independent parameters.
        load_result load_state_dict(const state_dict_type& state, bool strict = true);

    protected:
        module();

        /// Called by to(dev) after the parameters and buffers moved: a module that keeps other
        /// device state (constants, its options' device) moves it here. Default: nothing.
        virtual void moved_to(device dev);

        /// Called by replace_child after the swap. A module that also keeps its own pointer to a
        /// child (to call it in forward) overrides this to update that pointer; one that reaches
        /// its children through named_children(), as nn::sequential does, needs nothing.
        /// Default: nothing.
        virtual void child_replaced(const std::string& name, const std::shared_ptr<module>& child);

        /// Throws xgrad::invalid_argument("<type_name()>: <what>").
        [[noreturn]] void fail(const std::string& what) const;

        /// Adds parameter `name`: a fresh leaf sharing value's storage, requiring grad. value
        /// must be a defined floating-point tensor. Returns the stored handle. The name must
        /// be non-empty, contain no '.', and not be used by a parameter, buffer or child.
        tensor register_parameter(std::string name, const tensor& value);
        /// Adds buffer `name`: value.detach() (a defined tensor of any dtype). Returns it.
        tensor register_buffer(std::string name, const tensor& value);
        /// Adds a child module (not null, and not this module or one of its ancestors).
        template <class M>
        std::shared_ptr<M> register_module(std::string name, std::shared_ptr<M> child)
        {
            add_child(std::move(name), child);
            return child;
        }

    private:
        void notify_moved(device dev);

        struct slot
        {
            std::string m_name;
            tensor m_value;
        };

        void add_child(std::string name, std::shared_ptr<module> child);
        void check_new_name(const std::string& name) const;
        bool contains(const module* m) const noexcept;
        void collect(named_tensors_type& out, const std::string& prefix, bool params, bool recurse) const;
        /// The slot `name` whose value `value` may replace (same shape, dtype, device); throws
        /// naming `what`, the name and the difference otherwise.
        slot& replaceable(const std::string& name, const tensor& value, bool params, const char* what);
        /// The slot of full name `name` (in this module or a descendant), or null.
        slot* find(const std::string& name, bool params);
        const slot* find(const std::string& name, bool params) const;

        std::vector<slot> m_parameters;
        std::vector<slot> m_buffers;
        named_modules_type m_children;
        bool m_training = true;
        std::vector<std::pair<std::int64_t, forward_hook_type>> m_hooks;
        std::int64_t m_next_hook = 0;
    };
}
