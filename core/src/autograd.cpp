// The backward engine: a topological walk of the recorded graph (Kahn's algorithm over
// dependency counts), summing the gradients that reach each node before running it.
#include "xgrad/autograd.hpp"

#include <deque>
#include <optional>
#include <stdexcept>
#include <unordered_map>
#include <unordered_set>

#include "core/src/profiler/record.hpp"
#include "detail.hpp"
#include "xgrad/errors.hpp"
#include "xgrad/factories.hpp"
#include "xgrad/ops/elementwise.hpp"
#include "xgrad/ops/shape.hpp"

namespace xgrad
{
    namespace
    {
        thread_local bool t_grad_enabled = true;

        /// The edge through which gradient flows into t: its producer's output slot, or its
        /// leaf accumulator (created on first use and shared while a graph holds it).
        edge gradient_edge(const tensor& t)
        {
            const auto& impl = t.impl();
            if (impl->m_grad_fn)
                return {impl->m_grad_fn, impl->m_output_nr};
            if (!impl->m_requires_grad)
                return {};
            auto acc = impl->m_grad_accumulator.lock();
            if (!acc)
            {
                acc = std::make_shared<accumulate_grad>(impl);
                acc->m_outputs.push_back({t.shape(), t.dtype(), t.device()});
                impl->m_grad_accumulator = acc;
            }
            return {acc, 0};
        }

        tensor_meta meta_of(const tensor& t) { return {t.shape(), t.dtype(), t.device()}; }

        std::string describe(const node& n) { return "'" + std::string(n.name()) + "'"; }
    }

    bool is_grad_enabled() noexcept { return t_grad_enabled; }
    void set_grad_enabled(bool enabled) noexcept { t_grad_enabled = enabled; }

    tensor node::unpack(const saved_tensor& s)
    {
        auto impl = std::make_shared<tensor_impl>(*s.m_data.impl());
        impl->m_grad_fn = shared_from_this();
        impl->m_output_nr = s.m_output_nr;
        impl->m_requires_grad = true;
        return tensor(std::move(impl));
    }

    /// One registered hook. The leaf's list owns it; handles hold it weakly, so a handle
    /// outliving its leaf is inert.
    struct grad_hook_handle::entry
    {
        grad_accumulated_hook_type m_fn;
        std::weak_ptr<grad_hooks> m_owner;
        bool m_removed = false;
    };

    struct grad_hooks
    {
        std::vector<std::shared_ptr<grad_hook_handle::entry>> m_entries;
    };

    void grad_hook_handle::remove() noexcept
    {
        auto e = m_entry.lock();
        if (!e || e->m_removed)
            return;
        e->m_removed = true; // a run of the hooks in progress skips it
        if (auto owner = e->m_owner.lock())
        {
            auto& v = owner->m_entries;
            for (auto it = v.begin(); it != v.end(); ++it)
                if (*it == e)
                {
                    v.erase(it);
                    break;
                }
        }
        m_entry.reset();
    }

    bool grad_hook_handle::active() const noexcept
    {
        auto e = m_entry.lock();
        return e && !e->m_removed && !e->m_owner.expired();
    }

    grad_hook_handle register_grad_accumulated_hook(const tensor& leaf, grad_accumulated_hook_type hook)
    {
        const char* what = "register_grad_accumulated_hook";
        if (!leaf.defined())
            throw xgrad::invalid_argument(std::string(what) + ": the tensor is undefined");
        if (!leaf.is_leaf())
            throw xgrad::invalid_argument(std::string(what) + ": the tensor of shape " + shape_to_string(leaf.shape()) +
                                          " is not a leaf (it has grad_fn '" + std::string(leaf.grad_fn()->name()) +
                                          "'); hooks run where gradients are accumulated, on leaves");
        if (!leaf.requires_grad())
            throw xgrad::invalid_argument(std::string(what) + ": the leaf of shape " + shape_to_string(leaf.shape()) +
                                          " does not require grad, so backward never accumulates into it");
        if (!hook)
            throw xgrad::invalid_argument(std::string(what) + ": the hook is an empty function");
        auto& hooks = leaf.impl()->m_grad_hooks;
        if (!hooks)
            hooks = std::make_shared<grad_hooks>();
        auto e = std::make_shared<grad_hook_handle::entry>();
        e->m_fn = std::move(hook);
        e->m_owner = hooks;
        hooks->m_entries.push_back(e);
        return grad_hook_handle(e);
    }

    std::vector<tensor> accumulate_grad::apply(const std::vector<tensor>& grad_outputs)
    {
        const tensor& g = grad_outputs.at(0);
        if (!g.defined())
            return {};
        if (!m_leaf->m_grad)
            // With create_graph (grad mode on) the gradient keeps its graph so it can be
            // differentiated; otherwise it is stored cut from any graph (g may be a caller's
            // grad_outputs tensor that itself requires grad). Tensors are never modified in
            // place, so sharing g's storage is safe.
            // The stored gradient is made contiguous: optimizers and users read grad() as a
            // dense array (g may be an expanded, stride-0 view).
            m_leaf->m_grad = is_grad_enabled() ? contiguous(g).impl() : detail::raw_contiguous(g.detach()).impl();
        else
            m_leaf->m_grad = add(tensor(m_leaf->m_grad), g).impl();
        if (m_leaf->m_grad_hooks && !m_leaf->m_grad_hooks->m_entries.empty())
        {
            // A copy of the list: a hook may register or remove hooks on this leaf.
            const auto entries = m_leaf->m_grad_hooks->m_entries;
            const tensor leaf(m_leaf);
            for (const auto& e : entries)
                if (!e->m_removed)
                    e->m_fn(leaf);
        }
        return {};
    }

    namespace
    {
        // Non-recursive destruction of long graphs. Destroying a node releases its inputs'
        // nodes (through its edges and the tensors its backward captured), which may release
        // theirs, and so on: a chain of 10^5 ops would recurse 10^5 levels deep. Past a depth
        // limit, a dying node parks what it owns here instead, and the outermost destructor
        // frees the parked items one at a time. The pointer (not an object) keeps this
        // thread-local trivially destructible, so it is safe even from static destructors.
        struct graveyard
        {
            std::vector<function_node::backward_type> m_functions;
            std::vector<edge> m_edges;
        };
        thread_local graveyard* t_graveyard = nullptr;
        thread_local int t_destroy_depth = 0;
        constexpr int max_destroy_depth = 200;
    }

    function_node::~function_node()
    {
        ++t_destroy_depth;
        {
            backward_type fn = std::move(m_backward);
            std::vector<edge> edges = std::move(m_next_edges);
            if (t_destroy_depth > max_destroy_depth)
            {
                if (!t_graveyard)
                    t_graveyard = new graveyard;
                t_graveyard->m_functions.push_back(std::move(fn));
                for (auto& e : edges)
                    t_graveyard->m_edges.push_back(std::move(e));
            }
        } // below the limit, fn and edges die here, possibly destroying more nodes recursively
        if (--t_destroy_depth == 0 && t_graveyard)
        {
            ++t_destroy_depth;
            while (!t_graveyard->m_functions.empty() || !t_graveyard->m_edges.empty())
            {
                if (!t_graveyard->m_edges.empty())
                {
                    edge e = std::move(t_graveyard->m_edges.back());
                    t_graveyard->m_edges.pop_back();
                } // e dies here
                else
                {
                    backward_type fn = std::move(t_graveyard->m_functions.back());
                    t_graveyard->m_functions.pop_back();
                }
            }
            delete t_graveyard;
            t_graveyard = nullptr;
            --t_destroy_depth;
        }
    }

    std::vector<tensor> function_node::apply(const std::vector<tensor>& grad_outputs)
    {
        if (!m_backward)
            throw std::runtime_error("trying to run backward through '" + m_name +
                                     "' a second time, but its saved tensors were already freed; pass "
                                     "retain_graph = true to the first backward/grad call if you need to "
                                     "backward through the graph twice");
        for (std::size_t i = 0; i < m_leaf_versions.size(); ++i)
        {
            const auto leaf = m_leaf_versions[i].first.lock();
            if (leaf && leaf->m_version != m_leaf_versions[i].second)
                throw std::runtime_error(
                    "backward through '" + m_name +
                    "': one of its inputs was given new data (tensor::set_data, as an optimizer step does) after the "
                    "forward pass used it, so the gradient would mix old and new values; run backward before the "
                    "step, or run the forward pass again");
        }
        return m_backward(*this, grad_outputs);
    }

    saved_tensor save_output(const tensor& output, int output_nr)
    {
        saved_tensor s;
        s.m_data = output.detach();
        s.m_output_nr = output_nr;
        return s;
    }

    bool any_requires_grad(const std::vector<tensor>& inputs)
    {
        if (!is_grad_enabled())
            return false;
        for (const auto& t : inputs)
            if (t.defined() && t.requires_grad())
                return true;
        return false;
    }

    namespace
    {
        /// The profiler's bytes of an op: its defined inputs and outputs, numel * itemsize each;
        /// 0 for a view (every output shares an input's storage: nothing was moved).
        std::int64_t moved_bytes(const std::vector<tensor>& inputs, const std::vector<tensor>& outputs)
        {
            bool view = !outputs.empty();
            for (const tensor& y : outputs)
            {
                bool shared = false;
                for (const tensor& x : inputs)
                    shared = shared || (x.defined() && y.defined() && x.impl()->m_storage == y.impl()->m_storage);
                view = view && shared;
            }
            if (view)
                return 0;
            std::int64_t bytes = 0;
            for (const std::vector<tensor>* ts : {&inputs, &outputs})
                for (const tensor& t : *ts)
                    if (t.defined())
                        bytes += t.numel() * static_cast<std::int64_t>(itemsize(t.dtype()));
            return bytes;
        }
    }

    void record(std::string name, const std::vector<tensor>& inputs, const std::vector<tensor>& outputs,
                function_node::backward_type backward)
    {
        if (profiler::enabled())
            profiler::detail::note_bytes(moved_bytes(inputs, outputs));
        if (!any_requires_grad(inputs))
            return;
        auto n = std::make_shared<function_node>(std::move(name), std::move(backward));
        n->m_next_edges.reserve(inputs.size());
        for (const auto& t : inputs)
        {
            n->m_next_edges.push_back(t.defined() ? gradient_edge(t) : edge{});
            // Only a leaf's data can be replaced (set_data), so only leaves need a version.
            if (t.defined() && !t.impl()->m_grad_fn)
                n->m_leaf_versions.emplace_back(t.impl(), t.impl()->m_version);
        }
        n->m_outputs.reserve(outputs.size());
        for (std::size_t i = 0; i < outputs.size(); ++i)
        {
            const auto& impl = outputs[i].impl();
            n->m_outputs.push_back(meta_of(outputs[i]));
            if (!is_floating(impl->m_dtype))
                continue;
            impl->m_grad_fn = n;
            impl->m_output_nr = static_cast<int>(i);
            impl->m_requires_grad = true;
        }
    }

    namespace
    {
        /// One run of the engine, shared by grad() and backward().
        struct graph_task
        {
            // capture[node] = list of (output slot, index into the result) for grad()
            std::unordered_map<node*, std::vector<std::pair<int, std::size_t>>> m_captures;
            std::vector<tensor> m_captured;
            bool m_accumulate = false; // backward(): write leaves' grad
            bool m_retain = false;

            std::unordered_map<node*, int> m_dependencies;
            std::unordered_set<node*> m_needed;
            std::unordered_map<node*, std::vector<tensor>> m_buffers;

            /// Marks every node from which a capture (grad) or an accumulator (backward) is
            /// reachable. An explicit stack (post-order) instead of recursion: graphs of
            /// hundreds of thousands of ops must not exhaust the call stack.
            void mark(const std::vector<edge>& roots)
            {
                struct frame
                {
                    node* n;
                    std::size_t next;
                };
                std::unordered_set<node*> seen;
                std::vector<frame> stack;
                for (const auto& r : roots)
                {
                    if (!seen.insert(r.fn.get()).second)
                        continue;
                    stack.push_back({r.fn.get(), 0});
                    while (!stack.empty())
                    {
                        node* n = stack.back().n;
                        const std::size_t i = stack.back().next++;
                        if (i < n->m_next_edges.size())
                        {
                            node* child = n->m_next_edges[i].fn.get();
                            if (child && seen.insert(child).second)
                                stack.push_back({child, 0});
                            continue;
                        }
                        bool needed = m_captures.count(n) > 0 ||
                                      (m_accumulate && dynamic_cast<accumulate_grad*>(n) != nullptr);
                        for (const auto& e : n->m_next_edges)
                            needed = needed || (e.valid() && m_needed.count(e.fn.get()) > 0);
                        if (needed)
                            m_needed.insert(n);
                        stack.pop_back();
                    }
                }
            }

            void add_to_buffer(node* n, int slot, const tensor& g)
            {
                auto& buf = m_buffers[n];
                if (buf.empty())
                    buf.resize(n->m_outputs.size());
                tensor& dst = buf.at(static_cast<std::size_t>(slot));
                dst = dst.defined() ? add(dst, g) : g;
            }

            /// Runs the backward pass; with create_graph the backward ops are recorded (grad
            /// mode on), otherwise they run under no_grad.
            void run(const std::vector<edge>& roots, const std::vector<tensor>& root_grads, bool create_graph)
            {
                grad_mode_guard mode(create_graph);
                run_nodes(roots, root_grads);
            }

            void run_nodes(const std::vector<edge>& roots, const std::vector<tensor>& root_grads)
            {
                mark(roots);
                for (node* n : m_needed)
                    for (const auto& e : n->m_next_edges)
                        if (e.valid() && m_needed.count(e.fn.get()))
                            ++m_dependencies[e.fn.get()];

                std::vector<std::shared_ptr<node>> keep_alive; // nodes stay alive while queued
                for (std::size_t i = 0; i < roots.size(); ++i)
                    if (m_needed.count(roots[i].fn.get()))
                    {
                        add_to_buffer(roots[i].fn.get(), roots[i].input_nr, root_grads[i]);
                        keep_alive.push_back(roots[i].fn);
                    }

                std::deque<std::shared_ptr<node>> ready;
                std::unordered_set<node*> queued;
                for (const auto& r : roots)
                    if (m_needed.count(r.fn.get()) && m_dependencies[r.fn.get()] == 0 &&
                        queued.insert(r.fn.get()).second)
                        ready.push_back(r.fn);

                while (!ready.empty())
                {
                    std::shared_ptr<node> n = ready.front();
                    ready.pop_front();
                    std::vector<tensor> grads = std::move(m_buffers[n.get()]);
                    m_buffers.erase(n.get());
                    grads.resize(n->m_outputs.size());

                    if (auto it = m_captures.find(n.get()); it != m_captures.end())
                        for (auto [slot, index] : it->second)
                        {
                            const tensor& g = grads.at(static_cast<std::size_t>(slot));
                            tensor& dst = m_captured[index];
                            if (g.defined())
                                dst = dst.defined() ? add(dst, g) : g;
                        }

                    if (dynamic_cast<accumulate_grad*>(n.get()))
                    {
                        if (m_accumulate)
                            n->apply(grads);
                        continue;
                    }

                    bool wanted = false;
                    for (const auto& e : n->m_next_edges)
                        wanted = wanted || (e.valid() && m_needed.count(e.fn.get()));
                    if (!wanted)
                        continue; // only a capture point: its backward did not run, so its
                                  // saved tensors stay for a later backward through it

                    for (std::size_t i = 0; i < grads.size(); ++i)
                        if (!grads[i].defined())
                        {
                            const auto& m = n->m_outputs.at(i);
                            grads[i] = zeros(m.m_shape, m.m_dtype, m.m_device);
                        }

                    std::vector<tensor> input_grads;
                    {
                        // The profiler's row for this node's rule; what it runs counts as backward.
                        const profiler::detail::backward_phase in_backward;
                        std::optional<profiler::detail::timed> timing;
                        if (profiler::enabled())
                            timing.emplace(std::string(n->name()) + "_backward", profiler::kind::op);
                        input_grads = n->apply(grads);
                    }
                    if (!m_retain)
                        n->release_saved();
                    if (input_grads.size() != n->m_next_edges.size())
                        throw std::logic_error("backward of " + describe(*n) + " returned " +
                                               std::to_string(input_grads.size()) + " gradients for " +
                                               std::to_string(n->m_next_edges.size()) + " inputs");

                    for (std::size_t i = 0; i < input_grads.size(); ++i)
                    {
                        const edge& e = n->m_next_edges[i];
                        if (!e.valid() || !m_needed.count(e.fn.get()))
                            continue;
                        const tensor& g = input_grads[i];
                        if (g.defined())
                        {
                            const auto& m = e.fn->m_outputs.at(static_cast<std::size_t>(e.input_nr));
                            if (g.shape() != m.m_shape || g.dtype() != m.m_dtype)
                                throw std::logic_error(
                                    "backward of " + describe(*n) + " gave input " + std::to_string(i) +
                                    " a gradient of shape " + shape_to_string(g.shape()) + " and dtype " +
                                    std::string(name(g.dtype())) + ", expected " + shape_to_string(m.m_shape) +
                                    " and " + std::string(name(m.m_dtype)));
                            add_to_buffer(e.fn.get(), e.input_nr, g);
                        }
                        if (--m_dependencies[e.fn.get()] == 0 && queued.insert(e.fn.get()).second)
                            ready.push_back(e.fn);
                    }
                }
            }
        };

        /// Validates outputs and grad_outputs; returns the root edges and their gradients.
        void prepare_roots(const std::vector<tensor>& outputs, const std::vector<tensor>& grad_outputs,
                           std::vector<edge>& roots, std::vector<tensor>& root_grads, const char* caller)
        {
            if (outputs.empty())
                throw xgrad::invalid_argument(std::string(caller) + ": no outputs given");
            if (!grad_outputs.empty() && grad_outputs.size() != outputs.size())
                throw xgrad::invalid_argument(std::string(caller) + ": got " + std::to_string(grad_outputs.size()) +
                                              " grad_outputs for " + std::to_string(outputs.size()) + " outputs");
            for (std::size_t i = 0; i < outputs.size(); ++i)
            {
                const tensor& out = outputs[i];
                detail::check_defined(out, caller);
                if (!out.requires_grad())
                    throw std::runtime_error(std::string(caller) + ": output " + std::to_string(i) +
                                             " does not require grad and has no grad_fn");
                tensor g = grad_outputs.empty() ? tensor() : grad_outputs[i];
                if (!g.defined())
                {
                    if (out.numel() != 1)
                        throw std::runtime_error(std::string(caller) +
                                                 ": grad can be implicitly created only for "
                                                 "one-element outputs; output " +
                                                 std::to_string(i) + " has shape " + shape_to_string(out.shape()) +
                                                 ", so pass grad_outputs");
                    g = ones(out.shape(), out.dtype(), out.device());
                }
                else if (g.shape() != out.shape() || g.dtype() != out.dtype() || g.device() != out.device())
                    throw xgrad::invalid_argument(
                        std::string(caller) + ": grad_outputs[" + std::to_string(i) + "] has shape " +
                        shape_to_string(g.shape()) + ", dtype " + std::string(name(g.dtype())) + " and device " +
                        to_string(g.device()) + ", but output " + std::to_string(i) + " has shape " +
                        shape_to_string(out.shape()) + ", dtype " + std::string(name(out.dtype())) + " and device " +
                        to_string(out.device()));
                roots.push_back(gradient_edge(out));
                root_grads.push_back(g);
            }
        }
    }

    std::vector<tensor> grad(const std::vector<tensor>& outputs, const std::vector<tensor>& inputs,
                             const std::vector<tensor>& grad_outputs, std::optional<bool> retain_graph,
                             bool create_graph, bool allow_unused)
    {
        std::vector<edge> roots;
        std::vector<tensor> root_grads;
        prepare_roots(outputs, grad_outputs, roots, root_grads, "grad");

        graph_task task;
        task.m_retain = retain_graph.value_or(create_graph);
        task.m_captured.resize(inputs.size());
        std::vector<edge> input_edges;
        for (std::size_t i = 0; i < inputs.size(); ++i)
        {
            detail::check_defined(inputs[i], "grad");
            if (!inputs[i].requires_grad())
                throw std::runtime_error("grad: input " + std::to_string(i) + " does not require grad");
            input_edges.push_back(gradient_edge(inputs[i]));
            task.m_captures[input_edges.back().fn.get()].push_back({input_edges.back().input_nr, i});
        }
        task.run(roots, root_grads, create_graph);
        for (std::size_t i = 0; i < inputs.size(); ++i)
            if (!task.m_captured[i].defined() && !allow_unused)
                throw std::runtime_error("grad: input " + std::to_string(i) +
                                         " was not used in the graph of the outputs (pass allow_unused = true "
                                         "to get an undefined gradient instead)");
        return task.m_captured;
    }

    void backward(const std::vector<tensor>& outputs, const std::vector<tensor>& grad_outputs,
                  std::optional<bool> retain_graph, bool create_graph)
    {
        std::vector<edge> roots;
        std::vector<tensor> root_grads;
        prepare_roots(outputs, grad_outputs, roots, root_grads, "backward");
        graph_task task;
        task.m_accumulate = true;
        task.m_retain = retain_graph.value_or(create_graph);
        task.run(roots, root_grads, create_graph);
    }
}
