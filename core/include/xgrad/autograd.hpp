#pragma once
// The define-by-run autodiff engine.
//
// Every differentiable op that sees an input requiring grad (while grad mode is on) records a
// `node` holding what its backward needs, linked by `edge`s to the nodes that produced its
// inputs (or to a leaf's accumulate node). `grad` and `backward` walk that graph from the
// outputs in dependency order. A node's backward is written with xgrad's own differentiable
// ops, so with create_graph = true the backward pass is itself recorded and can be
// differentiated again, to any order.
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "xgrad/tensor.hpp"

namespace xgrad
{
    class node;

    /// Where the gradient of one op input goes: slot `input_nr` of node `fn`, where `fn` is the
    /// node that produced the input and `input_nr` is which of its outputs the input is (for
    /// a leaf: its accumulate_grad node, slot 0). A null fn marks an input that needs no
    /// gradient.
    struct edge
    {
        std::shared_ptr<node> fn;
        int input_nr = 0;
        bool valid() const noexcept { return static_cast<bool>(fn); }
    };

    /// An op's output saved for its own backward, without the reference cycle that capturing
    /// the output itself would create (output -> grad_fn -> saved output). `node::unpack`
    /// re-attaches it to its node. (Inputs need no such care: ops capture them directly.)
    struct saved_tensor
    {
        tensor m_data;       // shares the output's storage; no autograd metadata
        int m_output_nr = 0; // which output of the saving node
    };

    /// Shape, dtype and device of one output of a node: what a missing gradient is filled with.
    struct tensor_meta
    {
        shape_type m_shape;
        xgrad::dtype m_dtype = xgrad::dtype::float32;
        xgrad::device m_device;
    };

    class node : public std::enable_shared_from_this<node>
    {
    public:
        virtual ~node() = default;
        virtual std::string_view name() const = 0;
        /// Gradients w.r.t. each input (entries may be undefined when the input needs none),
        /// given one gradient per output (undefined outputs are filled with zeros before).
        virtual std::vector<tensor> apply(const std::vector<tensor>& grad_outputs) = 0;
        /// Frees the saved tensors after a backward that did not retain the graph.
        virtual void release_saved() {}

        /// Whether input i's gradient is wanted (its edge leads somewhere).
        bool needs_input_grad(std::size_t i) const noexcept
        {
            return i < m_next_edges.size() && m_next_edges[i].valid();
        }
        /// A saved output re-attached to this node, so that a backward run with create_graph
        /// differentiates through it.
        tensor unpack(const saved_tensor& s);

        std::vector<edge> m_next_edges;
        std::vector<tensor_meta> m_outputs;
    };

    /// Accumulates incoming gradient into a leaf's `grad()`, then runs the leaf's
    /// gradient-accumulation hooks (register_grad_accumulated_hook).
    class accumulate_grad final : public node
    {
    public:
        explicit accumulate_grad(std::shared_ptr<tensor_impl> leaf) : m_leaf(std::move(leaf)) {}
        std::string_view name() const override { return "accumulate_grad"; }
        std::vector<tensor> apply(const std::vector<tensor>& grad_outputs) override;
        const std::shared_ptr<tensor_impl>& leaf() const noexcept { return m_leaf; }

    private:
        std::shared_ptr<tensor_impl> m_leaf;
    };

    /// The node most ops record: a name and a backward function. Saved tensors live in the
    /// function's captures and are freed with it by release_saved().
    class function_node final : public node
    {
    public:
        using backward_type = std::function<std::vector<tensor>(function_node&, const std::vector<tensor>&)>;
        function_node(std::string name, backward_type backward)
            : m_name(std::move(name)), m_backward(std::move(backward))
        {
        }
        /// Frees long chains of nodes without deep recursion.
        ~function_node() override;
        std::string_view name() const override { return m_name; }
        /// Runs the backward function; throws std::runtime_error when a leaf input was given
        /// new data (tensor::set_data) after the op recorded it.
        std::vector<tensor> apply(const std::vector<tensor>& grad_outputs) override;
        void release_saved() override { m_backward = nullptr; }

        /// The leaf inputs and their versions when the op ran (set by record()).
        std::vector<std::pair<std::weak_ptr<tensor_impl>, std::uint64_t>> m_leaf_versions;

    private:
        std::string m_name;
        backward_type m_backward;
    };

    // --- grad mode -------------------------------------------------------------------------
    bool is_grad_enabled() noexcept;
    void set_grad_enabled(bool enabled) noexcept;

    /// RAII: sets grad mode (graph recording) in this thread for its lifetime, then restores
    /// the previous mode.
    class grad_mode_guard
    {
    public:
        explicit grad_mode_guard(bool enabled) noexcept : m_prev(is_grad_enabled()) { set_grad_enabled(enabled); }
        ~grad_mode_guard() { set_grad_enabled(m_prev); }
        grad_mode_guard(const grad_mode_guard&) = delete;
        grad_mode_guard& operator=(const grad_mode_guard&) = delete;

    private:
        bool m_prev;
    };

    /// RAII: disables graph recording in this thread for its lifetime.
    class no_grad : public grad_mode_guard
    {
    public:
        no_grad() noexcept : grad_mode_guard(false) {}
    };

    /// RAII: enables graph recording in this thread for its lifetime.
    class enable_grad : public grad_mode_guard
    {
    public:
        enable_grad() noexcept : grad_mode_guard(true) {}
    };

    // --- recording (used by ops) -------------------------------------------------------------
    /// Saves an op output for its own backward (see saved_tensor); call before record().
    saved_tensor save_output(const tensor& output, int output_nr = 0);
    /// True when an op with these inputs must record a node: grad mode is on and some input
    /// requires grad.
    bool any_requires_grad(const std::vector<tensor>& inputs);
    /// Links `outputs` (produced from `inputs`) into the graph through a new function_node
    /// running `backward`. Does nothing when !any_requires_grad(inputs). Outputs that are not
    /// floating point never require grad.
    void record(std::string name, const std::vector<tensor>& inputs, const std::vector<tensor>& outputs,
                function_node::backward_type backward);

    // --- gradient-accumulation hooks --------------------------------------------------------
    // A hook registered on a leaf runs inside backward(), right after the leaf's grad() was
    // updated: what a data-parallel wrapper needs to start reducing a gradient while the rest
    // of the backward pass goes on.
    //
    // When it runs: once per backward() call (or tensor::backward) per leaf that the outputs
    // depend on, with grad() already holding the sum of the gradients of every path to the
    // leaf. The engine sums the gradients arriving along each incoming edge (a leaf used twice
    // in the graph, or given twice among the outputs) before it accumulates, so a hook never
    // sees a partial sum of one backward; a second backward() runs it again (grad() then holds
    // both). A leaf reached only through inputs whose backward gave no gradient is not
    // accumulated and its hooks do not run. grad() (the function) writes no leaf's grad() and
    // runs no hook. With create_graph
    // the hook runs in grad mode, and grad() is the differentiable sum.
    //
    // The hook receives the leaf (a handle to the same tensor). It must not capture that leaf
    // itself: the leaf owns its hooks, so the capture would keep the leaf alive forever. Hooks
    // run in registration order, on the thread running backward; one registered or removed by
    // a hook takes effect from the next accumulation (a removed hook that has not run yet does
    // not run). An exception thrown by a hook propagates out of backward(), whose remaining
    // leaves are then not accumulated. Registering, removing and backward() on the same leaf
    // must not race (like any change to a tensor's autograd metadata).
    //
    // A leaf without hooks pays one pointer test per accumulation.
    using grad_accumulated_hook_type = std::function<void(const tensor& leaf)>;

    /// Removes the hook it was returned for. Copyable; destroying a handle leaves the hook in
    /// place (call remove()).
    class grad_hook_handle
    {
    public:
        grad_hook_handle() = default;
        /// Unregisters the hook. Idempotent; a no-op for an empty handle or a dead leaf.
        void remove() noexcept;
        /// True while the hook is registered on a live leaf.
        bool active() const noexcept;

        struct entry;
        explicit grad_hook_handle(std::weak_ptr<entry> e) noexcept : m_entry(std::move(e)) {}

    private:
        std::weak_ptr<entry> m_entry;
    };

    /// Registers `hook` on `leaf`: a defined leaf tensor (no grad_fn) that requires grad, and a
    /// non-empty function; anything else throws xgrad::invalid_argument naming what was wrong.
    /// The hook belongs to this tensor (this tensor_impl): a new value stored in the leaf's
    /// place (module::set_parameter, an optimizer step) has no hooks.
    grad_hook_handle register_grad_accumulated_hook(const tensor& leaf, grad_accumulated_hook_type hook);

    // --- running backward ------------------------------------------------------------------
    /// Gradients of `outputs` w.r.t. `inputs`, like torch.autograd.grad. grad_outputs defaults
    /// to ones for one-element outputs (required otherwise). retain_graph defaults to
    /// create_graph. With create_graph the returned gradients are part of a new graph and can
    /// be differentiated again. An input that the outputs do not depend on throws unless
    /// allow_unused, in which case its gradient is undefined.
    std::vector<tensor> grad(const std::vector<tensor>& outputs, const std::vector<tensor>& inputs,
                             const std::vector<tensor>& grad_outputs = {},
                             std::optional<bool> retain_graph = std::nullopt, bool create_graph = false,
                             bool allow_unused = false);

    /// Accumulates gradients of `outputs` into the grad() of every leaf they depend on.
    void backward(const std::vector<tensor>& outputs, const std::vector<tensor>& grad_outputs = {},
                  std::optional<bool> retain_graph = std::nullopt, bool create_graph = false);
}
