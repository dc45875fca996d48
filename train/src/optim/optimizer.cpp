// The optimizer base (see optimizer.hpp for the contract): a step's checks, its two ways of
// computing the updates, the state and the parameter groups.
//
// A step runs each rule as one fused pass per parameter where the optimizer has one (sgd_step,
// adam_step of xgrad/ops/optim.hpp), in place where no one else sees the storage (see the
// header). The composite rules (update()) stay as the fused steps' oracle and as the path of
// optimizers without one: each is composed from xgrad's elementwise ops under no_grad,
// constant factors folded into doubles first and applied with the scalar operators, in the
// order the kernels' shared formula (backends/common/optimizer_math.hpp) repeats.
#include "xgrad/optim/optimizer.hpp"

#include <algorithm>
#include <cmath>
#include <optional>
#include <stdexcept>
#include <unordered_set>
#include <utility>

#include "checks.hpp"
#include "xgrad/autograd.hpp"
#include "xgrad/errors.hpp"
#include "xgrad/factories.hpp"

namespace xgrad::optim
{
    using namespace detail;
    using buffers_type = std::map<std::string, tensor>;

    // --- optimizer --------------------------------------------------------------------------

    optimizer::optimizer(nn::module& model, double lr) : m_model(&model), m_lr(lr)
    {
        // Subclasses check their options (with their own name) before this runs; this check
        // only guards other subclasses. type_name() cannot be called yet.
        check_non_negative("optimizer", "lr", lr);
    }

    optimizer::~optimizer() = default;

    void optimizer::fail(const std::string& what) const
    {
        throw xgrad::invalid_argument(std::string(type_name()) + ": " + what);
    }

    void optimizer::set_lr(double lr)
    {
        if (!(lr >= 0.0) || !std::isfinite(lr))
            fail("set_lr: lr must be a finite number >= 0, got " + number(lr));
        m_lr = lr;
    }

    void optimizer::zero_grad() { model().zero_grad(); }

    struct optimizer::pending_update
    {
        std::string m_name;
        tensor m_value;
        buffers_type m_buffers;
    };

    bool optimizer::fused_update(const tensor&, const std::vector<tensor>&, const tensor&, const tensor&,
                                 const std::vector<tensor>&, const hyper&)
    {
        return false;
    }

    void optimizer::step()
    {
        // Gradients are checked for every parameter first, so that a bad one cannot leave
        // the module half updated.
        std::vector<std::pair<std::string, tensor>> work; // (name, parameter), grad defined
        std::vector<std::string> problems;
        // A tied parameter (one tensor under several names: set_parameter with the same
        // handle, weight tying) is stepped once, under its first name, with the one gradient
        // all its uses accumulated into; stepping it per name would apply the update again.
        std::unordered_set<const tensor_impl*> seen;
        for (auto& [n, p] : model().named_parameters())
        {
            if (!p.requires_grad())
                continue;
            if (!seen.insert(p.impl().get()).second)
                continue;
            const tensor g = p.grad();
            if (!g.defined())
                continue;
            const std::string bad = mismatch(g, p);
            if (!bad.empty())
                problems.push_back("the gradient of " + quoted(n) + " " + bad);
            work.emplace_back(n, p);
        }
        if (!problems.empty())
            fail("step: " + join(problems, "; "));
        // Checked before the increment: past the bound the count would lose exactness as a
        // double and, much later, overflow (undefined behaviour, and a NaN model in practice).
        if (m_step >= max_step_count)
            fail("step: the step count is already " + std::to_string(m_step) + ", the most it can count (" +
                 std::to_string(max_step_count) + ")");

        std::vector<pending_update> updates;
        ++m_step;
        try
        {
            no_grad guard;
            std::optional<std::vector<pending_update>> fused;
            if (m_fused)
                fused = fused_updates(work);
            updates = fused ? std::move(*fused) : composite_updates(work);
        }
        catch (...)
        {
            --m_step;
            throw;
        }
        for (auto& u : updates)
        {
            model().update_parameter(u.m_name, u.m_value);
            m_state[u.m_name] = std::move(u.m_buffers);
        }
    }

    namespace
    {
        /// Whether writing into t's storage is invisible to everything but t itself: t is
        /// contiguous and its handle is the storage's only owner (no view, saved tensor or
        /// state copy shares it). Asked before any view of t is made.
        bool writable_in_place(const tensor& t) { return t.is_contiguous() && t.impl()->m_storage.use_count() == 1; }

        /// Where the new value of t goes: t's own storage when that is invisible to others,
        /// else new storage.
        tensor output_for(const tensor& t)
        {
            return writable_in_place(t) ? t.detach() : xgrad::empty(t.shape(), t.dtype(), t.device());
        }
    }

    std::optional<std::vector<optimizer::pending_update>>
    optimizer::fused_updates(const std::vector<std::pair<std::string, tensor>>& work)
    {
        struct job
        {
            std::string name;
            hyper h;
            tensor param, grad, param_out;
            std::vector<tensor> buffers, buffers_out;
        };
        // First every output is found or allocated (allocation is the only thing that can
        // fail), then the kernels run: a failed step has written nothing that anyone sees.
        const std::vector<std::string> names = updated_buffers();
        std::vector<job> jobs;
        jobs.reserve(work.size());
        for (const auto& [n, p] : work)
        {
            job j;
            j.name = n;
            j.h = hyper_of(n);
            j.param_out = output_for(p); // before any other view of p exists
            j.param = p.detach().contiguous();
            j.grad = p.grad().detach().contiguous();
            if (const auto it = m_state.find(n); it != m_state.end())
                for (const auto& b : names)
                {
                    const tensor& t = it->second.at(b);
                    j.buffers_out.push_back(output_for(t));
                    j.buffers.push_back(t.detach().contiguous());
                }
            else
                for (std::size_t k = 0; k < names.size(); ++k)
                    j.buffers_out.push_back(xgrad::empty(p.shape(), p.dtype(), p.device()));
            jobs.push_back(std::move(j));
        }

        std::vector<pending_update> updates;
        updates.reserve(jobs.size());
        for (job& j : jobs)
        {
            if (!fused_update(j.param_out, j.buffers_out, j.param, j.grad, j.buffers, j.h))
            {
                if (!updates.empty())
                    throw std::logic_error(std::string(type_name()) +
                                           ": fused_update ran for some parameters and not for " + quoted(j.name));
                return std::nullopt;
            }
            buffers_type buffers;
            for (std::size_t k = 0; k < names.size(); ++k)
                buffers.emplace(names[k], j.buffers_out[k]);
            updates.push_back({j.name, j.param_out, std::move(buffers)});
        }
        return updates;
    }

    std::vector<optimizer::pending_update>
    optimizer::composite_updates(const std::vector<std::pair<std::string, tensor>>& work)
    {
        // The new values and buffers are all computed before any is stored: if an op throws
        // (out of memory, ...), nothing has changed.
        std::vector<pending_update> updates;
        updates.reserve(work.size());
        for (const auto& [n, p] : work)
        {
            const dtype dt = p.dtype(), cdt = compute_dtype(dt);
            // Detached handles: a gradient computed with create_graph must not pull its
            // graph into the state, and the rule must see plain values.
            tensor pc = p.detach(), gc = p.grad().detach();
            buffers_type buffers;
            if (const auto it = m_state.find(n); it != m_state.end())
                buffers = it->second;
            // 16-bit parameters: one update in float32, rounded back once at the end,
            // rather than a rounding after every op of the rule.
            if (cdt != dt)
            {
                pc = pc.to(cdt);
                gc = gc.to(cdt);
                for (auto& [b, t] : buffers)
                    t = t.to(cdt);
            }
            tensor value = update(n, pc, gc, buffers, hyper_of(n));
            if (cdt != dt)
            {
                value = value.to(dt);
                for (auto& [b, t] : buffers)
                    t = t.to(dt);
            }
            if (const std::string bad = mismatch(value, p); !bad.empty())
                throw std::logic_error(std::string(type_name()) + ": the update of " + quoted(n) + " " + bad);
            for (const auto& [b, t] : buffers)
                if (const std::string bad = mismatch(t, p); !bad.empty())
                    throw std::logic_error(std::string(type_name()) + ": buffer " + quoted(n + "." + b) + " " + bad);
            updates.push_back({n, value, std::move(buffers)});
        }
        return updates;
    }

    // --- state --------------------------------------------------------------------------------

    optimizer::state_dict_type optimizer::state_dict() const
    {
        state_dict_type out;
        const std::int64_t step = m_step;
        out.emplace("step", from_host(&step, {}, dtype::int64));
        for (const auto& [n, buffers] : m_state)
            for (const auto& [b, t] : buffers)
                out.emplace(n + "." + b, t.detach());
        return out;
    }

    std::vector<std::string> optimizer::state_dict_problems(const state_dict_type& state) const
    {
        std::vector<std::string> problems;

        const auto step = state.find("step");
        if (step == state.end())
            problems.push_back("missing 'step' (an int64 tensor of shape [] counting the steps taken)");
        else if (!step->second.defined())
            problems.push_back("'step' is undefined");
        else if (step->second.dtype() != dtype::int64 || step->second.dim() != 0)
            problems.push_back("'step' must be an int64 tensor of shape [], got " + describe(step->second));
        else
        {
            std::int64_t v = 0;
            to_host(step->second, &v, dtype::int64);
            if (v < 0 || v > max_step_count)
                problems.push_back("'step' must be in [0, " + std::to_string(max_step_count) + "], got " +
                                   std::to_string(v));
        }

        std::map<std::string, tensor> params;
        for (auto& [n, p] : model().named_parameters())
            params.emplace(n, p);
        const std::vector<std::string> names = buffer_names();
        const std::string known = names.empty() ? "none" : join(names, ", ");
        std::map<std::string, std::vector<std::string>> present; // parameter -> buffers given

        for (const auto& [key, t] : state)
        {
            if (key == "step")
                continue;
            // Buffer names have no '.', so the last one separates them from the parameter's
            // full (dotted) name.
            const auto dot = key.rfind('.');
            if (dot == std::string::npos)
            {
                problems.push_back(quoted(key) + ": not 'step' nor a '<parameter>.<buffer>' name");
                continue;
            }
            const std::string pname = key.substr(0, dot), bname = key.substr(dot + 1);
            const auto p = params.find(pname);
            if (p == params.end())
            {
                problems.push_back(quoted(key) + ": the model has no parameter " + quoted(pname));
                continue;
            }
            if (std::find(names.begin(), names.end(), bname) == names.end())
            {
                problems.push_back(quoted(key) + ": unknown buffer " + quoted(bname) + " (" + std::string(type_name()) +
                                   " keeps: " + known + ")");
                continue;
            }
            present[pname].push_back(bname);
            if (const std::string bad = mismatch(t, p->second); !bad.empty())
                problems.push_back(quoted(key) + ": " + bad);
        }

        for (const auto& [pname, given] : present)
            for (const auto& b : names)
                if (std::find(given.begin(), given.end(), b) == given.end())
                    problems.push_back("parameter " + quoted(pname) + " has " + quoted(pname + "." + given.front()) +
                                       " but lacks " + quoted(pname + "." + b));
        return problems;
    }

    void optimizer::load_state_dict(const state_dict_type& state)
    {
        const std::vector<std::string> problems = state_dict_problems(state);
        if (!problems.empty())
            fail("load_state_dict: " + join(problems, "; "));

        std::map<std::string, buffers_type> loaded;
        for (const auto& [key, t] : state)
        {
            if (key == "step")
                continue;
            const auto dot = key.rfind('.');
            loaded[key.substr(0, dot)][key.substr(dot + 1)] = t.detach();
        }
        std::int64_t step = 0;
        to_host(state.at("step"), &step, dtype::int64);
        m_state = std::move(loaded);
        m_step = step;
    }

    // --- parameter groups -----------------------------------------------------------------------

    std::vector<std::string> one_dimensional_parameters(const nn::module& m)
    {
        std::vector<std::string> names;
        for (const auto& [n, p] : m.named_parameters())
            if (p.dim() <= 1)
                names.push_back(n);
        return names;
    }

    void optimizer::set_param_groups(std::vector<param_group> groups)
    {
        std::map<std::string, std::size_t> owner;
        std::vector<std::string> problems;
        for (std::size_t i = 0; i < groups.size(); ++i)
        {
            const param_group& g = groups[i];
            const std::string who = "group " + std::to_string(i) + ": ";
            if (!(g.lr_factor >= 0.0) || !std::isfinite(g.lr_factor))
                problems.push_back(who + "lr_factor must be a finite number >= 0, got " + number(g.lr_factor));
            if (g.weight_decay && (!(*g.weight_decay >= 0.0) || !std::isfinite(*g.weight_decay)))
                problems.push_back(who + "weight_decay must be a finite number >= 0, got " + number(*g.weight_decay));
            for (const auto& n : g.names)
            {
                if (!model().has_parameter(n))
                    problems.push_back(who + quoted(n) + " is not a parameter of the model");
                else if (const auto [it, inserted] = owner.emplace(n, i); !inserted)
                    problems.push_back(who + quoted(n) + " is already in group " + std::to_string(it->second));
            }
        }
        if (!problems.empty())
            fail("set_param_groups: " + join(problems, "; "));
        m_groups = std::move(groups);
    }

    optimizer::hyper optimizer::hyper_of(const std::string& name) const
    {
        for (const param_group& g : m_groups)
            if (std::find(g.names.begin(), g.names.end(), name) != g.names.end())
                return {m_lr * g.lr_factor, g.weight_decay};
        return {m_lr, std::nullopt};
    }
}
