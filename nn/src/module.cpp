// xgrad::nn::module (see module.hpp for the contract).
#include "xgrad/nn/module.hpp"

#include <fnmatch.h>

#include <algorithm>

#include "xgrad/autograd.hpp"

namespace xgrad::nn
{
    namespace
    {
        std::string quoted(const std::string& s) { return "'" + s + "'"; }

        /// "shape [3], dtype float32, device cpu"
        std::string describe_tensor(const tensor& t)
        {
            return "shape " + shape_to_string(t.shape()) + ", dtype " + std::string(name(t.dtype())) + ", device " +
                   to_string(t.device());
        }

        /// Empty when `value` can replace `current`; otherwise what differs.
        std::string mismatch(const tensor& current, const tensor& value)
        {
            if (!value.defined())
                return "the new value is undefined";
            if (value.shape() != current.shape())
                return "shape " + shape_to_string(value.shape()) + " does not match the module's " +
                       shape_to_string(current.shape());
            if (value.dtype() != current.dtype())
                return "dtype " + std::string(name(value.dtype())) + " does not match the module's " +
                       std::string(name(current.dtype()));
            if (value.device() != current.device())
                return "device " + to_string(value.device()) + " does not match the module's " +
                       to_string(current.device());
            return {};
        }
    }

    module::module() = default;
    module::~module() = default;
    module::module(module&&) noexcept = default;
    module& module::operator=(module&&) noexcept = default;

    std::string_view module::type_name() const noexcept { return "module"; }

    tensor module::operator()(const tensor& x)
    {
        tensor y = forward(x);
        // A copy: a hook may register or remove hooks of this module.
        const auto hooks = m_hooks;
        for (const auto& [id, hook] : hooks)
        {
            tensor replaced = hook(*this, x, y);
            if (replaced.defined())
                y = std::move(replaced);
        }
        return y;
    }

    std::int64_t module::register_forward_hook(forward_hook_type hook)
    {
        if (!hook)
            fail("register_forward_hook: the hook is empty");
        m_hooks.emplace_back(m_next_hook, std::move(hook));
        return m_next_hook++;
    }

    void module::remove_forward_hook(std::int64_t id)
    {
        const auto it = std::find_if(m_hooks.begin(), m_hooks.end(), [id](const auto& h) { return h.first == id; });
        if (it == m_hooks.end())
            fail("remove_forward_hook: no hook with id " + std::to_string(id));
        m_hooks.erase(it);
    }

    void module::apply(const std::function<void(module&)>& fn)
    {
        for (auto& [name, child] : m_children)
            child->apply(fn);
        fn(*this);
    }

    module::named_modules_type module::named_modules() const
    {
        named_modules_type out;
        for (const auto& [name, child] : m_children)
        {
            out.emplace_back(name, child);
            for (auto& [sub, m] : child->named_modules())
                out.emplace_back(name + "." + sub, m);
        }
        return out;
    }

    std::size_t module::set_requires_grad(const std::string& pattern, bool requires_grad)
    {
        std::size_t matched = 0;
        for (auto& [name, p] : named_parameters())
            if (fnmatch(pattern.c_str(), name.c_str(), 0) == 0)
            {
                p.requires_grad_(requires_grad);
                ++matched;
            }
        if (matched == 0)
            fail("set_requires_grad: no parameter name matches the pattern '" + pattern + "'");
        return matched;
    }

    tensor module::forward(const tensor&)
    {
        fail("this module has no single-input forward (it is a container of named parts)");
    }

    std::string module::describe() const
    {
        if (m_children.empty())
            return std::string(type_name());
        // As PyTorch prints a module: each child on its own line, nested ones indented.
        std::string s = std::string(type_name()) + "(\n";
        for (const auto& [n, c] : m_children)
        {
            std::string inner = c->describe();
            for (std::size_t pos = inner.find('\n'); pos != std::string::npos; pos = inner.find('\n', pos + 3))
                inner.replace(pos, 1, "\n  ");
            s += "  (" + n + "): " + inner + "\n";
        }
        return s + ")";
    }

    void module::fail(const std::string& what) const
    {
        throw xgrad::invalid_argument(std::string(type_name()) + ": " + what);
    }

    // --- registration ---------------------------------------------------------------------

    void module::check_new_name(const std::string& name) const
    {
        if (name.empty())
            fail("a parameter, buffer or child name must not be empty");
        if (name.find('.') != std::string::npos)
            fail("name " + quoted(name) + " must not contain '.' (it separates the names of nested modules)");
        const auto same = [&name](const auto& entry) { return entry.first == name; };
        const auto same_slot = [&name](const slot& s) { return s.m_name == name; };
        if (std::any_of(m_parameters.begin(), m_parameters.end(), same_slot))
            fail("a parameter named " + quoted(name) + " already exists");
        if (std::any_of(m_buffers.begin(), m_buffers.end(), same_slot))
            fail("a buffer named " + quoted(name) + " already exists");
        if (std::any_of(m_children.begin(), m_children.end(), same))
            fail("a child module named " + quoted(name) + " already exists");
    }

    tensor module::register_parameter(std::string name, const tensor& value)
    {
        check_new_name(name);
        if (!value.defined())
            fail("parameter " + quoted(name) + " must be a defined tensor");
        if (!is_floating(value.dtype()))
            fail("parameter " + quoted(name) + " must be floating point, got dtype " +
                 std::string(xgrad::name(value.dtype())));
        tensor p = value.detach();
        p.requires_grad_(true);
        m_parameters.push_back({std::move(name), p});
        return p;
    }

    tensor module::register_buffer(std::string name, const tensor& value)
    {
        check_new_name(name);
        if (!value.defined())
            fail("buffer " + quoted(name) + " must be a defined tensor");
        tensor b = value.detach();
        m_buffers.push_back({std::move(name), b});
        return b;
    }

    bool module::contains(const module* m) const noexcept
    {
        if (m == this)
            return true;
        for (const auto& [n, c] : m_children)
            if (c->contains(m))
                return true;
        return false;
    }

    void module::add_child(std::string name, std::shared_ptr<module> child)
    {
        check_new_name(name);
        if (!child)
            fail("child module " + quoted(name) + " is null");
        if (child->contains(this))
            fail("child module " + quoted(name) + " contains this module (modules must form a tree)");
        m_children.emplace_back(std::move(name), std::move(child));
    }

    // --- listing --------------------------------------------------------------------------

    void module::collect(named_tensors_type& out, const std::string& prefix, bool params, bool recurse) const
    {
        for (const slot& s : params ? m_parameters : m_buffers)
            out.emplace_back(prefix + s.m_name, s.m_value);
        if (recurse)
            for (const auto& [n, c] : m_children)
                c->collect(out, prefix + n + ".", params, true);
    }

    module::named_tensors_type module::named_parameters(bool recurse) const
    {
        named_tensors_type out;
        collect(out, "", true, recurse);
        return out;
    }

    module::named_tensors_type module::named_buffers(bool recurse) const
    {
        named_tensors_type out;
        collect(out, "", false, recurse);
        return out;
    }

    std::vector<tensor> module::parameters(bool recurse) const
    {
        std::vector<tensor> out;
        for (auto& [n, t] : named_parameters(recurse))
            out.push_back(t);
        return out;
    }

    std::vector<tensor> module::buffers(bool recurse) const
    {
        std::vector<tensor> out;
        for (auto& [n, t] : named_buffers(recurse))
            out.push_back(t);
        return out;
    }

    module::named_modules_type module::named_children() const { return m_children; }

    // --- structure ------------------------------------------------------------------------

    void module::replace_child(const std::string& name, std::shared_ptr<module> child)
    {
        const auto it = std::find_if(m_children.begin(), m_children.end(),
                                     [&name](const named_module_type& entry) { return entry.first == name; });
        if (it == m_children.end())
            fail("replace_child: no direct child module named " + quoted(name));
        if (!child)
            fail("replace_child: the new child module " + quoted(name) + " is null");
        if (child->contains(this))
            fail("replace_child: the new child module " + quoted(name) +
                 " contains this module (modules must form a tree)");
        it->second = child;
        child_replaced(name, child);
    }

    void module::child_replaced(const std::string&, const std::shared_ptr<module>&) {}

    // --- access by name -------------------------------------------------------------------

    const module::slot* module::find(const std::string& name, bool params) const
    {
        const auto dot = name.find('.');
        if (dot == std::string::npos)
        {
            for (const slot& s : params ? m_parameters : m_buffers)
                if (s.m_name == name)
                    return &s;
            return nullptr;
        }
        const std::string head = name.substr(0, dot);
        for (const auto& [n, c] : m_children)
            if (n == head)
                return c->find(name.substr(dot + 1), params);
        return nullptr;
    }

    module::slot* module::find(const std::string& name, bool params)
    {
        return const_cast<slot*>(static_cast<const module*>(this)->find(name, params));
    }

    bool module::has_parameter(const std::string& name) const { return find(name, true) != nullptr; }
    bool module::has_buffer(const std::string& name) const { return find(name, false) != nullptr; }

    tensor module::parameter(const std::string& name) const
    {
        if (const slot* s = find(name, true))
            return s->m_value;
        fail("no parameter named " + quoted(name));
    }

    tensor module::buffer(const std::string& name) const
    {
        if (const slot* s = find(name, false))
            return s->m_value;
        fail("no buffer named " + quoted(name));
    }

    module::slot& module::replaceable(const std::string& name, const tensor& value, bool params, const char* what)
    {
        slot* s = find(name, params);
        if (!s)
            fail(std::string(what) + ": no " + (params ? "parameter" : "buffer") + " named " + quoted(name));
        const std::string bad = mismatch(s->m_value, value);
        if (!bad.empty())
            fail(std::string(what) + " " + quoted(name) + ": " + bad);
        return *s;
    }

    void module::set_parameter(const std::string& name, const tensor& value)
    {
        slot& s = replaceable(name, value, true, "set_parameter");
        if (!value.is_leaf())
            fail("set_parameter " + quoted(name) + ": the new value must be a leaf tensor, got the output of '" +
                 std::string(value.grad_fn()->name()) + "' (compute it under no_grad, or detach() it)");
        tensor p = value;
        p.requires_grad_(s.m_value.requires_grad());
        s.m_value = p;
    }

    void module::update_parameter(const std::string& name, const tensor& value)
    {
        replaceable(name, value, true, "update_parameter").m_value.set_data(value);
    }

    void module::set_buffer(const std::string& name, const tensor& value)
    {
        replaceable(name, value, false, "set_buffer").m_value = value.detach();
    }

    // --- mode and gradients ---------------------------------------------------------------

    void module::train(bool on)
    {
        m_training = on;
        for (auto& [n, c] : m_children)
            c->train(on);
    }

    void module::to(device dev)
    {
        for (auto& [n, p] : named_parameters())
            if (p.device() != dev)
            {
                tensor moved = p.detach().to(dev);
                slot* s = find(n, true);
                moved.requires_grad_(p.requires_grad());
                s->m_value = moved;
            }
        for (auto& [n, b] : named_buffers())
            if (b.device() != dev)
                find(n, false)->m_value = b.to(dev);
        notify_moved(dev);
    }

    void module::moved_to(device) {}

    void module::notify_moved(device dev)
    {
        moved_to(dev);
        for (auto& [n, c] : m_children)
            c->notify_moved(dev);
    }

    void module::zero_grad()
    {
        for (auto& [n, p] : named_parameters())
            p.zero_grad();
    }

    // --- serialisation --------------------------------------------------------------------

    module::state_dict_type module::state_dict() const
    {
        state_dict_type out;
        for (const auto& [n, t] : named_parameters())
            out.emplace(n, t.detach());
        for (const auto& [n, t] : named_buffers())
            out.emplace(n, t.detach());
        return out;
    }

    module::load_result module::load_state_dict(const state_dict_type& state, bool strict)
    {
        const named_tensors_type params = named_parameters(), bufs = named_buffers();
        load_result result;
        std::vector<std::string> problems;
        std::map<std::string, bool> known; // full name -> is a parameter
        for (const auto& [n, t] : params)
            known.emplace(n, true);
        for (const auto& [n, t] : bufs)
            known.emplace(n, false);

        for (const auto* list : {&params, &bufs})
            for (const auto& [n, current] : *list)
            {
                const auto it = state.find(n);
                if (it == state.end())
                {
                    result.missing_keys.push_back(n);
                    continue;
                }
                const std::string bad = mismatch(current, it->second);
                if (!bad.empty())
                    problems.push_back(quoted(n) + ": " +
                                       (it->second.defined() ? "the state dict has " + describe_tensor(it->second) +
                                                                   ", the module has " + describe_tensor(current)
                                                             : std::string("the state dict's tensor is undefined")));
            }
        for (const auto& [n, t] : state)
            if (known.find(n) == known.end())
                result.unexpected_keys.push_back(n);

        std::string message;
        const auto join = [](const std::vector<std::string>& names) {
            std::string s;
            for (const auto& n : names)
                s += (s.empty() ? "" : ", ") + quoted(n);
            return s;
        };
        if (strict && !result.missing_keys.empty())
            message += "; missing from the state dict: " + join(result.missing_keys);
        if (strict && !result.unexpected_keys.empty())
            message += "; not in the module: " + join(result.unexpected_keys);
        for (const auto& p : problems)
            message += "; " + p;
        if (!message.empty())
            fail("load_state_dict: " + message.substr(2));

        for (const auto& [n, is_param] : known)
        {
            const auto it = state.find(n);
            if (it == state.end())
                continue;
            if (is_param)
                set_parameter(n, it->second.detach()); // a fresh leaf sharing the state's storage
            else
                set_buffer(n, it->second);
        }
        return result;
    }
}
