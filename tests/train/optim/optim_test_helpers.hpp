#pragma once
// Shared by the optimizer tests (tests/train/optim/test_optim_optimizers.cpp and
// tests/train/optim/test_optim_state.cpp, one ctest executable test_optim with
// test_optim_schedules.cpp): a toy module with dotted parameter names, gradients drawn from a seed,
// the optimizers' buffers read back from their state, the oracles (the header's formulas as plain
// double loops over std::vector) and check_steps, which runs an optimizer and its oracle side by
// side.
#include <doctest/doctest.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "xgrad/factories.hpp"
#include "xgrad/nn/module.hpp"
#include "xgrad/optim/optimizer.hpp"

namespace optim_test
{
    using xgrad::dtype;
    using xgrad::generator;
    using xgrad::randn;
    using xgrad::tensor;
    using xgrad::to_host;
    using xgrad::to_vector;

    using values_type = std::map<std::string, std::vector<double>>;

    class inner_part final : public xgrad::nn::module
    {
    public:
        inner_part(dtype dt, generator& gen) { register_parameter("v", randn({4}, gen, dt)); }
        std::string_view type_name() const noexcept override { return "inner_part"; }
    };

    /// Two parameters of its own and one in a child, so that state names are dotted:
    /// "w" [2, 3], "b" [3], "inner.v" [4].
    class toy final : public xgrad::nn::module
    {
    public:
        explicit toy(dtype dt = dtype::float64, std::uint64_t seed = 1)
        {
            generator gen(seed);
            register_parameter("w", randn({2, 3}, gen, dt));
            register_parameter("b", randn({3}, gen, dt));
            register_module("inner", std::make_shared<inner_part>(dt, gen));
        }
        std::string_view type_name() const noexcept override { return "toy"; }
    };

    inline const std::vector<std::string> all_names{"w", "b", "inner.v"};

    inline values_type values_of(const xgrad::nn::module& m)
    {
        values_type out;
        for (const auto& [n, p] : m.named_parameters())
            out[n] = to_vector(p);
        return out;
    }

    /// Sets a gradient drawn from `seed` (so that it depends on the step, not on the model)
    /// on each named parameter, and returns the gradients as the parameters hold them (after
    /// rounding to their dtype).
    inline values_type set_grads(xgrad::nn::module& m, std::uint64_t seed,
                                 const std::vector<std::string>& names = all_names)
    {
        generator gen(seed);
        values_type out;
        for (const auto& n : names)
        {
            tensor p = m.parameter(n);
            const tensor g = randn(p.shape(), gen, dtype::float64).to(p.dtype());
            p.set_grad(g);
            out[n] = to_vector(g);
        }
        return out;
    }

    /// The optimizer's buffer `buffer` of every parameter that has one.
    inline values_type buffers_of(const xgrad::optim::optimizer& opt, const std::string& buffer)
    {
        values_type out;
        for (const auto& [key, t] : opt.state_dict())
        {
            const auto dot = key.rfind('.');
            if (dot != std::string::npos && key.substr(dot + 1) == buffer)
                out[key.substr(0, dot)] = to_vector(t);
        }
        return out;
    }

    /// |got - want| <= tol (|want| + 1) element by element: relative for large values, absolute
    /// (at the scale of the parameters, which are O(1)) near zero, where the oracle's and the
    /// library's different but equally exact orders of operations may differ by a few ulps of
    /// the terms that cancelled.
    inline void check_close(const values_type& got, const values_type& want, double tol)
    {
        CHECK(got.size() == want.size());
        for (const auto& entry : want)
        {
            // Named copies: doctest's macros capture them in lambdas (no structured bindings).
            const auto& n = entry.first;
            const auto& w = entry.second;
            CAPTURE(n);
            const auto it = got.find(n);
            REQUIRE(it != got.end());
            REQUIRE(it->second.size() == w.size());
            for (std::size_t i = 0; i < w.size(); ++i)
                CHECK_MESSAGE(std::abs(it->second[i] - w[i]) <= tol * (std::abs(w[i]) + 1.0),
                              "element " << i << ": got " << it->second[i] << ", want " << w[i]);
        }
    }

    // --- the oracles: the header's formulas, element by element in double -----------------
    // Each keeps its buffers by the optimizer's short names: buffers["exp_avg"]["w"].

    struct sgd_oracle
    {
        xgrad::optim::sgd_options o;
        std::map<std::string, values_type> buffers;

        void step(values_type& params, const values_type& grads, double lr)
        {
            for (const auto& [n, g] : grads)
            {
                std::vector<double>& p = params.at(n);
                values_type& momentum = buffers["momentum_buffer"];
                const bool first = momentum.find(n) == momentum.end();
                std::vector<double>& b = momentum[n];
                b.resize(g.size());
                for (std::size_t i = 0; i < g.size(); ++i)
                {
                    double d = g[i] + o.weight_decay * p[i];
                    if (o.momentum != 0.0)
                    {
                        b[i] = first ? d : o.momentum * b[i] + (1.0 - o.dampening) * d;
                        d = o.nesterov ? d + o.momentum * b[i] : b[i];
                    }
                    p[i] -= lr * d;
                }
            }
            if (o.momentum == 0.0) // plain SGD keeps no buffer
                buffers.clear();
        }
    };

    struct adam_oracle
    {
        xgrad::optim::adam_options o;
        bool decoupled = false;
        std::int64_t t = 0; // one count for the optimizer, as the header states
        std::map<std::string, values_type> buffers;

        void step(values_type& params, const values_type& grads, double lr)
        {
            ++t;
            const double c1 = 1.0 - std::pow(o.beta1, static_cast<double>(t));
            const double c2 = 1.0 - std::pow(o.beta2, static_cast<double>(t));
            for (const auto& [n, g] : grads)
            {
                std::vector<double>& p = params.at(n);
                std::vector<double>& m = buffers["exp_avg"][n];
                std::vector<double>& v = buffers["exp_avg_sq"][n];
                m.resize(g.size(), 0.0);
                v.resize(g.size(), 0.0);
                for (std::size_t i = 0; i < g.size(); ++i)
                {
                    double gi = g[i];
                    if (decoupled)
                        p[i] *= 1.0 - lr * o.weight_decay;
                    else
                        gi += o.weight_decay * p[i];
                    m[i] = o.beta1 * m[i] + (1.0 - o.beta1) * gi;
                    v[i] = o.beta2 * v[i] + (1.0 - o.beta2) * gi * gi;
                    p[i] -= lr * (m[i] / c1) / (std::sqrt(v[i] / c2) + o.eps);
                }
            }
        }
    };

    /// One step per entry of `lrs` (set with set_lr) of `opt` and of the oracle on the same
    /// gradients (drawn from seed, seed + 1, ...), comparing the parameters and every buffer
    /// after each step.
    template <class Oracle>
    void check_steps(xgrad::nn::module& m, xgrad::optim::optimizer& opt, Oracle& oracle, std::uint64_t seed,
                     const std::vector<double>& lrs, double tol)
    {
        values_type want = values_of(m);
        for (std::size_t k = 0; k < lrs.size(); ++k)
        {
            CAPTURE(k);
            opt.set_lr(lrs[k]);
            CHECK(opt.lr() == lrs[k]);
            const std::int64_t before = opt.step_count();
            const values_type g = set_grads(m, seed + k);
            opt.step();
            oracle.step(want, g, lrs[k]);
            CHECK(opt.step_count() == before + 1);
            check_close(values_of(m), want, tol);
            for (const auto& [b, values] : oracle.buffers)
                check_close(buffers_of(opt, b), values, tol);
        }
        // Parameters and buffers keep the parameters' dtype.
        for (const auto& [key, t] : opt.state_dict())
            if (key != "step")
                CHECK(t.dtype() == m.parameter(key.substr(0, key.rfind('.'))).dtype());
    }

    // Tolerance of the float64 comparisons: each step is at most ~15 roundings of O(1)
    // quantities (2^-53 ~ 1.1e-16 each), and errors carried from earlier steps are not
    // amplified (the updates are contractions or small corrections), so after six steps the
    // difference is below ~1e-14; 1e-12 leaves margin, while a wrong formula (a missing
    // bias correction, a misplaced lr or weight decay) changes results by ~1e-3 or more.
    inline constexpr double tol64 = 1e-12;

    inline std::int64_t step_in(const xgrad::optim::optimizer::state_dict_type& state)
    {
        std::int64_t v = -1;
        to_host(state.at("step"), &v, dtype::int64);
        return v;
    }
}
