// Optimizers and learning-rate schedules (xgrad::optim): several steps of every SGD and
// Adam/AdamW variant against an oracle written here with plain double loops over
// std::vector, which parameters a step touches, the state_dict round trip (a resumed run is
// bit-identical to an uninterrupted one), every load_state_dict and option error, 32- and
// 16-bit parameters, convergence on quadratics, and the schedules' values.
#include <doctest/doctest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "check_error.hpp"
#include "xgrad/autograd.hpp"
#include "xgrad/errors.hpp"
#include "xgrad/factories.hpp"
#include "xgrad/layers/module.hpp"
#include "xgrad/ops/elementwise.hpp"
#include "xgrad/ops/reduce.hpp"
#include "xgrad/optim/lr_scheduler.hpp"
#include "xgrad/optim/optimizer.hpp"

using namespace xgrad;

namespace
{
    using values_type = std::map<std::string, std::vector<double>>;

    class inner_part final : public nn::module
    {
    public:
        inner_part(dtype dt, generator& gen) { register_parameter("v", randn({4}, gen, dt)); }
        std::string_view type_name() const noexcept override { return "inner_part"; }
    };

    /// Two parameters of its own and one in a child, so that state names are dotted:
    /// "w" [2, 3], "b" [3], "inner.v" [4].
    class toy final : public nn::module
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

    const std::vector<std::string> all_names{"w", "b", "inner.v"};

    values_type values_of(const nn::module& m)
    {
        values_type out;
        for (const auto& [n, p] : m.named_parameters())
            out[n] = to_vector(p);
        return out;
    }

    /// Sets a gradient drawn from `seed` (so that it depends on the step, not on the model)
    /// on each named parameter, and returns the gradients as the parameters hold them (after
    /// rounding to their dtype).
    values_type set_grads(nn::module& m, std::uint64_t seed, const std::vector<std::string>& names = all_names)
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
    values_type buffers_of(const optim::optimizer& opt, const std::string& buffer)
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

    /// Every entry of the optimizer's state, "step" included, as float64 values.
    values_type state_values(const optim::optimizer& opt)
    {
        values_type out;
        for (const auto& [key, t] : opt.state_dict())
            out[key] = to_vector(t);
        return out;
    }

    /// |got - want| <= tol (|want| + 1) element by element: relative for large values, absolute
    /// (at the scale of the parameters, which are O(1)) near zero, where the oracle's and the
    /// library's different but equally exact orders of operations may differ by a few ulps of
    /// the terms that cancelled.
    void check_close(const values_type& got, const values_type& want, double tol)
    {
        CHECK(got.size() == want.size());
        for (const auto& [n, w] : want)
        {
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
        optim::sgd_options o;
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
        optim::adam_options o;
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
    void check_steps(nn::module& m, optim::optimizer& opt, Oracle& oracle, std::uint64_t seed,
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
    constexpr double tol64 = 1e-12;

    tensor int64_scalar(std::int64_t v) { return from_host(&v, {}, dtype::int64); }

    std::int64_t step_in(const optim::optimizer::state_dict_type& state)
    {
        std::int64_t v = -1;
        to_host(state.at("step"), &v, dtype::int64);
        return v;
    }
}

TEST_CASE("optim: sgd variants match the oracle step by step")
{
    const std::vector<std::pair<const char*, optim::sgd_options>> variants{
        {"plain", {0.1, 0.0, 0.0, 0.0, false}},        {"momentum", {0.1, 0.9, 0.0, 0.0, false}},
        {"dampening", {0.05, 0.8, 0.3, 0.0, false}},   {"nesterov", {0.1, 0.9, 0.0, 0.0, true}},
        {"weight decay", {0.1, 0.0, 0.0, 0.05, false}}, {"all", {0.03, 0.7, 0.0, 0.2, true}},
    };
    for (const auto& [variant, options] : variants)
    {
        CAPTURE(std::string(variant));
        toy m;
        optim::sgd opt(m, options);
        CHECK(std::string(opt.type_name()) == "sgd");
        sgd_oracle oracle{options, {}};
        check_steps(m, opt, oracle, 100, std::vector<double>(6, options.lr), tol64);
        // Plain SGD keeps no buffer: the state is the step count alone.
        CHECK(opt.state_dict().size() == (options.momentum == 0.0 ? 1u : 4u));
    }
}

TEST_CASE("optim: adam and adamw match the oracle step by step")
{
    struct variant
    {
        const char* name;
        optim::adam_options options;
        bool decoupled;
        dtype dt = dtype::float64;
        double tol = tol64;
    };
    // float32: rounding at 2^-24 ~ 6e-8 relative, ~15 roundings of O(1) values per step, and
    // m / sqrt(v) is O(1) with a relative error of a few 1e-7, scaled by lr; over six steps the
    // error stays below ~1e-6 (|p| + 1), so 1e-5 has margin while a wrong formula is off by
    // ~1e-3. The oracle starts from the float32 values and gradients, exactly.
    const std::vector<variant> variants{
        {"adam", {0.01, 0.9, 0.999, 1e-8, 0.0}, false},
        {"adam betas eps", {0.02, 0.8, 0.99, 1e-3, 0.0}, false},
        {"adam weight decay", {0.01, 0.9, 0.999, 1e-8, 0.1}, false},
        {"adamw", {0.01, 0.9, 0.999, 1e-8, 0.1}, true},
        {"adamw beta1 0", {0.05, 0.0, 0.9, 1e-6, 0.3}, true},
        {"adam float32", {0.01, 0.9, 0.999, 1e-8, 0.1}, false, dtype::float32, 1e-5},
        {"adamw float32", {0.01, 0.9, 0.999, 1e-8, 0.1}, true, dtype::float32, 1e-5},
    };
    for (const auto& var : variants)
    {
        CAPTURE(std::string(var.name));
        toy m(var.dt);
        std::unique_ptr<optim::optimizer> opt = var.decoupled ? optim::make_adamw(m, var.options)
                                                              : std::make_unique<optim::adam>(m, var.options);
        CHECK(std::string(opt->type_name()) == (var.decoupled ? "adamw" : "adam"));
        adam_oracle oracle{var.options, var.decoupled, 0, {}};
        check_steps(m, *opt, oracle, 200, std::vector<double>(6, var.options.lr), var.tol);
    }
}

TEST_CASE("optim: a step updates only the parameters that require grad and have one")
{
    toy m;
    m.parameter("inner.v").requires_grad_(false); // frozen, though it is given a gradient below
    const tensor w0 = m.parameter("w"), b0 = m.parameter("b"), v0 = m.parameter("inner.v");
    const std::vector<double> w0_values = to_vector(w0);
    optim::adam_options o;
    o.lr = 0.01;
    optim::adam opt(m, o);
    adam_oracle oracle{o, false, 0, {}};
    values_type want = values_of(m);

    values_type g = set_grads(m, 300, {"w", "inner.v"});
    g.erase("inner.v");
    opt.step();
    oracle.step(want, g, o.lr);
    check_close(values_of(m), want, tol64);
    CHECK(m.parameter("b").is_same(b0));
    CHECK(m.parameter("inner.v").is_same(v0));
    CHECK_FALSE(m.parameter("inner.v").requires_grad());

    // The new "w" is a fresh leaf that requires grad, with no gradient yet; the old value is
    // unchanged (tensors are immutable).
    const tensor w1 = m.parameter("w");
    CHECK_FALSE(w1.is_same(w0));
    CHECK(w1.is_leaf());
    CHECK(w1.requires_grad());
    CHECK_FALSE(w1.grad().defined());
    CHECK(w1.dtype() == dtype::float64);
    CHECK(to_vector(w0) == w0_values);

    auto state = opt.state_dict();
    CHECK(state.size() == 3);
    CHECK(state.count("w.exp_avg") == 1);
    CHECK(state.count("w.exp_avg_sq") == 1);
    CHECK(step_in(state) == 1);

    // "b" gets its first gradient at step 2: its buffers start at zero and its bias
    // correction uses the optimizer's step count, 2 (the oracle counts steps the same way).
    g = set_grads(m, 301, {"w", "b"});
    opt.step();
    oracle.step(want, g, o.lr);
    check_close(values_of(m), want, tol64);
    for (const auto& [b, values] : oracle.buffers)
        check_close(buffers_of(opt, b), values, tol64);

    // A step with no gradient anywhere changes no parameter but still counts.
    opt.zero_grad();
    for (const auto& n : all_names)
        CHECK_FALSE(m.parameter(n).grad().defined());
    const tensor w2 = m.parameter("w");
    opt.step();
    CHECK(m.parameter("w").is_same(w2));
    CHECK(opt.step_count() == 3);
}

TEST_CASE("optim: set_lr changes the next step")
{
    toy m;
    const optim::sgd_options o{0.1, 0.5, 0.0, 0.0, false};
    optim::sgd opt(m, o);
    sgd_oracle oracle{o, {}};
    check_steps(m, opt, oracle, 400, {0.1, 0.1, 0.02, 0.0, 0.3}, tol64);
}

TEST_CASE("optim: state_dict then load_state_dict resumes bit-identically")
{
    const auto run = [](const std::string& kind, bool interrupted) {
        const auto make = [&kind](nn::module& model) -> std::unique_ptr<optim::optimizer> {
            if (kind == "sgd")
                return std::make_unique<optim::sgd>(model, optim::sgd_options{0.05, 0.9, 0.0, 0.01, true});
            return optim::make_adamw(model, optim::adam_options{0.01, 0.9, 0.999, 1e-8, 0.05});
        };
        auto m = std::make_unique<toy>();
        auto opt = make(*m);
        for (std::uint64_t k = 0; k < 6; ++k)
        {
            if (interrupted && k == 3)
            {
                // A new model (other initial values) and a new optimizer, loaded from the
                // saved states: only the state dicts carry the run over.
                const auto model_state = m->state_dict();
                const auto opt_state = opt->state_dict();
                CHECK(step_in(opt_state) == 3);
                CHECK(opt_state.at("step").dim() == 0);
                auto m2 = std::make_unique<toy>(dtype::float64, 77);
                m2->load_state_dict(model_state);
                auto opt2 = make(*m2);
                opt2->load_state_dict(opt_state);
                CHECK(opt2->step_count() == 3);
                opt = std::move(opt2);
                m = std::move(m2);
            }
            set_grads(*m, 500 + k);
            opt->step();
        }
        return std::pair{values_of(*m), state_values(*opt)};
    };
    for (const std::string kind : {"sgd", "adamw"})
    {
        CAPTURE(kind);
        const auto straight = run(kind, false), resumed = run(kind, true);
        CHECK(straight.second.size() == 1 + (kind == "sgd" ? 3 : 6));
        CHECK(straight.first == resumed.first); // exact equality of every value
        CHECK(straight.second == resumed.second);
    }
}

TEST_CASE("optim: load_state_dict lists every problem and changes nothing")
{
    toy m;
    optim::adam opt(m, optim::adam_options{});
    for (std::uint64_t k = 0; k < 2; ++k)
    {
        set_grads(m, 600 + k);
        opt.step();
    }
    const auto good = opt.state_dict();
    const values_type good_values = state_values(opt);
    REQUIRE(good.size() == 7);

    auto bad = good;
    bad.erase("step");                                            // 1 missing step
    bad["nope.exp_avg"] = zeros({3}, dtype::float64);             // 2 unknown parameter
    bad["w.momentum_buffer"] = zeros({2, 3}, dtype::float64);     // 3 unknown buffer
    bad["junk"] = zeros({}, dtype::float64);                      // 4 neither step nor p.b
    bad["b.exp_avg"] = zeros({4}, dtype::float64);                // 5 wrong shape
    bad["inner.v.exp_avg_sq"] = zeros({4}, dtype::float32);       // 6 wrong dtype
    bad["w.exp_avg_sq"] = tensor();                               // 7 undefined
    bad.erase("inner.v.exp_avg");                                 // 8 only some buffers
    CHECK(opt.state_dict_problems(bad).size() == 8);
    CHECK_ERROR(opt.load_state_dict(bad), xgrad::invalid_argument, "adam: load_state_dict", "missing 'step'",
                "'nope.exp_avg': the model has no parameter 'nope'",
                "'w.momentum_buffer': unknown buffer 'momentum_buffer' (adam keeps: exp_avg, exp_avg_sq)",
                "'junk'", "'b.exp_avg': has shape [4]", "the parameter has shape [3]", "dtype float32",
                "'w.exp_avg_sq': the tensor is undefined",
                "parameter 'inner.v' has 'inner.v.exp_avg_sq' but lacks 'inner.v.exp_avg'");

    const auto with_step = [&good](const tensor& step) {
        auto s = good;
        s["step"] = step;
        return s;
    };
    CHECK_ERROR(opt.load_state_dict(with_step(zeros({}, dtype::float64))), xgrad::invalid_argument,
                "'step' must be an int64 tensor of shape []", "dtype float64");
    CHECK_ERROR(opt.load_state_dict(with_step(zeros({1}, dtype::int64))), xgrad::invalid_argument,
                "'step' must be an int64 tensor of shape []", "shape [1]");
    CHECK_ERROR(opt.load_state_dict(with_step(int64_scalar(-1))), xgrad::invalid_argument,
                "'step' must be >= 0, got -1");
    CHECK_ERROR(opt.load_state_dict(with_step(tensor())), xgrad::invalid_argument, "'step' is undefined");

    // Another optimizer's state: sgd keeps only momentum buffers.
    toy m2;
    optim::sgd sgd_opt(m2, optim::sgd_options{0.1, 0.9, 0.0, 0.0, false});
    CHECK_ERROR(sgd_opt.load_state_dict(good), xgrad::invalid_argument, "sgd: load_state_dict",
                "'w.exp_avg': unknown buffer 'exp_avg' (sgd keeps: momentum_buffer)");

    // Nothing changed: same step count, same state.
    CHECK(opt.step_count() == 2);
    CHECK(state_values(opt) == good_values);
}

TEST_CASE("optim: load_state_dict accepts state without some parameters")
{
    toy m;
    optim::adam_options o;
    o.lr = 0.02;
    optim::adam opt(m, o);
    set_grads(m, 700);
    opt.step();

    // Drop "b": it continues as if it had never been updated, with fresh buffers.
    auto state = opt.state_dict();
    state.erase("b.exp_avg");
    state.erase("b.exp_avg_sq");
    CHECK(opt.state_dict_problems(state).empty());
    toy resumed_model;
    resumed_model.load_state_dict(m.state_dict());
    optim::adam resumed(resumed_model, o);
    resumed.load_state_dict(state);
    CHECK(resumed.state_dict().count("b.exp_avg") == 0);

    adam_oracle oracle{o, false, 1, {}};
    for (const std::string n : {"w", "inner.v"})
        for (const std::string b : {"exp_avg", "exp_avg_sq"})
            oracle.buffers[b][n] = to_vector(state.at(n + "." + b));
    check_steps(resumed_model, resumed, oracle, 701, {o.lr, o.lr}, tol64);

    // Only "step" (a fresh optimizer's state) loads too.
    optim::adam fresh(resumed_model, o);
    fresh.load_state_dict({{"step", int64_scalar(5)}});
    CHECK(fresh.step_count() == 5);
    CHECK(fresh.state_dict().size() == 1);
}

TEST_CASE("optim: bad options are rejected, naming the option")
{
    toy m;
    const double nan = std::numeric_limits<double>::quiet_NaN();
    const double inf = std::numeric_limits<double>::infinity();
    using so = optim::sgd_options;
    CHECK_ERROR(optim::sgd(m, so{-0.1, 0.0, 0.0, 0.0, false}), xgrad::invalid_argument, "sgd: lr", "-0.1");
    CHECK_ERROR(optim::sgd(m, so{nan, 0.0, 0.0, 0.0, false}), xgrad::invalid_argument, "sgd: lr", "nan");
    CHECK_ERROR(optim::sgd(m, so{0.1, -0.5, 0.0, 0.0, false}), xgrad::invalid_argument, "sgd: momentum", "-0.5");
    CHECK_ERROR(optim::sgd(m, so{0.1, 0.9, 1.5, 0.0, false}), xgrad::invalid_argument, "sgd: dampening", "[0, 1]");
    CHECK_ERROR(optim::sgd(m, so{0.1, 0.9, 0.0, -1.0, false}), xgrad::invalid_argument, "sgd: weight_decay", "-1");
    CHECK_ERROR(optim::sgd(m, so{0.1, 0.0, 0.0, 0.0, true}), xgrad::invalid_argument, "sgd: nesterov",
                "momentum > 0", "momentum 0");
    CHECK_ERROR(optim::sgd(m, so{0.1, 0.9, 0.1, 0.0, true}), xgrad::invalid_argument, "sgd: nesterov",
                "dampening 0.1");

    using ao = optim::adam_options;
    CHECK_ERROR(optim::adam(m, ao{-1.0, 0.9, 0.999, 1e-8, 0.0}), xgrad::invalid_argument, "adam: lr", "-1");
    CHECK_ERROR(optim::adam(m, ao{inf, 0.9, 0.999, 1e-8, 0.0}), xgrad::invalid_argument, "adam: lr", "inf");
    CHECK_ERROR(optim::adam(m, ao{0.1, 1.0, 0.999, 1e-8, 0.0}), xgrad::invalid_argument, "adam: beta1",
                "[0, 1)", "got 1");
    CHECK_ERROR(optim::adam(m, ao{0.1, 0.9, -0.1, 1e-8, 0.0}), xgrad::invalid_argument, "adam: beta2", "-0.1");
    CHECK_ERROR(optim::adam(m, ao{0.1, 0.9, 0.999, 0.0, 0.0}), xgrad::invalid_argument, "adam: eps", "> 0");
    CHECK_ERROR(optim::adam(m, ao{0.1, 0.9, 0.999, nan, 0.0}), xgrad::invalid_argument, "adam: eps", "nan");
    CHECK_ERROR(optim::adam(m, ao{0.1, 0.9, 0.999, 1e-8, -0.01}), xgrad::invalid_argument, "adam: weight_decay");
    CHECK_ERROR(optim::make_adamw(m, ao{0.1, 1.5, 0.999, 1e-8, 0.0}), xgrad::invalid_argument, "adamw: beta1");

    optim::sgd opt(m, so{});
    CHECK_ERROR(opt.set_lr(-0.5), xgrad::invalid_argument, "sgd: set_lr", "-0.5");
    CHECK_ERROR(opt.set_lr(inf), xgrad::invalid_argument, "sgd: set_lr", "inf");
    CHECK(opt.lr() == so{}.lr);

    CHECK_ERROR(optim::make_optimizer("rmsprop", m, 0.1), xgrad::invalid_argument, "unknown optimizer 'rmsprop'",
                "'sgd'", "'adam'", "'adamw'");
    CHECK_ERROR(optim::make_optimizer("SGD", m, 0.1), xgrad::invalid_argument, "'SGD'");
    CHECK_ERROR(optim::make_optimizer("adam", m, -0.1), xgrad::invalid_argument, "adam: lr");
}

TEST_CASE("optim: make_optimizer gives the training example's defaults")
{
    toy m;
    const auto s = optim::make_optimizer("sgd", m, 0.05);
    const auto* sp = dynamic_cast<const optim::sgd*>(s.get());
    REQUIRE(sp);
    CHECK(s->lr() == 0.05);
    CHECK((sp->options().momentum == 0.9 && sp->options().nesterov && sp->options().dampening == 0.0));

    for (const auto& [kind, decay] : {std::pair{"adam", 0.0}, std::pair{"adamw", 0.01}})
    {
        const auto a = optim::make_optimizer(kind, m, 0.002);
        CHECK(std::string(a->type_name()) == kind);
        const auto* ap = dynamic_cast<const optim::adam*>(a.get());
        REQUIRE(ap);
        CHECK(ap->options().lr == 0.002);
        CHECK(ap->options().weight_decay == decay);
        CHECK((ap->options().beta1 == 0.9 && ap->options().beta2 == 0.999 && ap->options().eps == 1e-8));
    }
}

TEST_CASE("optim: float16 and bfloat16 parameters are updated in float32 and rounded once")
{
    // The result is float32 arithmetic on the 16-bit inputs, rounded to nearest once: within
    // half an ulp of the exact value, 2^-11 relative for float16 (10 stored mantissa bits) and
    // 2^-8 for bfloat16 (7 bits), plus an absolute 1e-6 that covers float32's own error
    // (a few 2^-24 of the O(1) operands) and float16's subnormal spacing (2^-24) should a
    // value land near zero. A wrong formula is off by ~1e-3 or more.
    for (const auto& [dt, half_ulp] : {std::pair{dtype::float16, std::ldexp(1.0, -11)},
                                       std::pair{dtype::bfloat16, std::ldexp(1.0, -8)}})
    {
        const std::string dtype_name(name(dt));
        CAPTURE(dtype_name);
        toy m(dt);
        optim::adam_options o;
        o.lr = 0.05;
        optim::adam opt(m, o);
        adam_oracle oracle{o, false, 0, {}};
        values_type want = values_of(m);
        const values_type g = set_grads(m, 900);
        opt.step();
        oracle.step(want, g, o.lr);
        const values_type got = values_of(m);
        for (const auto& [n, w] : want)
            for (std::size_t i = 0; i < w.size(); ++i)
                CHECK(std::abs(got.at(n)[i] - w[i]) <= half_ulp * std::abs(w[i]) + 1e-6);
        for (const auto& [key, t] : opt.state_dict())
            CHECK(t.dtype() == (key == "step" ? dtype::int64 : dt));
        for (const auto& [n, p] : m.named_parameters())
            CHECK(p.dtype() == dt);
    }
}

namespace
{
    /// f(x) = sum_i a_i (x_i - c_i)^2 with curvatures 2 a_i from 2 to 20.
    class bowl final : public nn::module
    {
    public:
        bowl()
            : m_a(from_host(a_values.data(), {5}, dtype::float64)),
              m_c(from_host(c_values.data(), {5}, dtype::float64))
        {
            register_parameter("x", zeros({5}, dtype::float64));
        }
        std::string_view type_name() const noexcept override { return "bowl"; }
        tensor loss() const { return sum(m_a * square(parameter("x") - m_c)); }

        static constexpr std::array<double, 5> a_values{1.0, 2.5, 4.0, 7.0, 10.0};
        static constexpr std::array<double, 5> c_values{1.5, -2.0, 0.25, 3.0, -0.75};

    private:
        tensor m_a, m_c;
    };

    double distance_to_minimum(const bowl& b)
    {
        const std::vector<double> x = to_vector(b.parameter("x"));
        double worst = 0.0;
        for (std::size_t i = 0; i < x.size(); ++i)
            worst = std::max(worst, std::abs(x[i] - bowl::c_values[i]));
        return worst;
    }
}

TEST_CASE("optim: minimising a quadratic converges")
{
    SUBCASE("sgd with momentum")
    {
        // Heavy ball on curvatures h in [2, 20] with lr 0.05 (lr h in [0.1, 1]) and momentum
        // 0.9: lr h < (1 + sqrt(0.9))^2 ~ 3.8 for every h, so each coordinate's error
        // contracts by sqrt(0.9) ~ 0.949 per step (up to a polynomial factor): after 600 steps
        // from a distance of 3, below 3 * 0.949^600 * 600 ~ 5e-11. The tolerance 1e-8 allows
        // for that and rounding.
        bowl b;
        optim::sgd opt(b, optim::sgd_options{0.05, 0.9, 0.0, 0.0, false});
        for (int k = 0; k < 600; ++k)
        {
            opt.zero_grad();
            b.loss().backward();
            opt.step();
        }
        CHECK(distance_to_minimum(b) < 1e-8);
    }
    SUBCASE("adam with a cosine schedule")
    {
        // Far from the minimum Adam moves each coordinate by about lr per step (0.1 here, so
        // the distance of at most 3 is covered in well under 100 steps). Near it the gradients
        // shrink while v still remembers the earlier large ones (beta2 = 0.999 forgets over
        // ~1000 steps), so Adam acts as gradient descent with the small per-coordinate steps
        // lr / sqrt(v_hat), which contracts geometrically; the cosine schedule damps the
        // oscillation that a constant lr would leave. 500 steps to within 1e-6 asks for that
        // convergence with orders of margin, and fails for a wrong rule or a step that never
        // shrinks.
        bowl b;
        optim::adam_options o;
        o.lr = 0.1;
        optim::adam opt(b, o);
        const optim::cosine_lr schedule(o.lr, 500);
        for (std::int64_t k = 0; k < 500; ++k)
        {
            opt.set_lr(schedule.lr_at(k));
            opt.zero_grad();
            b.loss().backward();
            opt.step();
        }
        CHECK(distance_to_minimum(b) < 1e-6);
    }
}

TEST_CASE("optim: learning-rate schedules")
{
    // Expected values worked out by hand from the header's formulas.
    const optim::step_lr step(0.1, 3, 0.5);
    const std::vector<double> step_want{0.1, 0.1, 0.1, 0.05, 0.05, 0.05, 0.025};
    for (std::size_t e = 0; e < step_want.size(); ++e)
        CHECK(step.lr_at(static_cast<std::int64_t>(e)) == doctest::Approx(step_want[e]).epsilon(1e-15));

    const optim::cosine_lr cosine(0.1, 10, 0.01);
    CHECK(cosine.lr_at(0) == 0.1);
    CHECK(cosine.lr_at(5) == doctest::Approx(0.055).epsilon(1e-14)); // midpoint: (0.1 + 0.01) / 2
    CHECK(cosine.lr_at(10) == 0.01);
    CHECK(cosine.lr_at(11) == 0.01);
    CHECK(cosine.lr_at(1000) == 0.01);
    for (std::int64_t e = 1; e <= 10; ++e)
        CHECK(cosine.lr_at(e) < cosine.lr_at(e - 1));
    // A quarter of the way: cos(pi / 4) = sqrt(2) / 2.
    const optim::cosine_lr quarter(1.0, 4);
    CHECK(quarter.lr_at(1) == doctest::Approx((1.0 + std::sqrt(0.5)) / 2.0).epsilon(1e-14));

    const optim::constant_lr constant(0.3);
    CHECK(constant.lr_at(0) == 0.3);
    CHECK(constant.lr_at(123) == 0.3);

    // By name: "step" divides by 10 every total / 3 epochs (at least every epoch).
    const auto s9 = optim::make_schedule("step", 0.1, 9);
    CHECK(s9->lr_at(2) == 0.1);
    CHECK(s9->lr_at(3) == doctest::Approx(0.01).epsilon(1e-15));
    const auto s2 = optim::make_schedule("step", 0.1, 2);
    CHECK(s2->lr_at(1) == doctest::Approx(0.01).epsilon(1e-15));
    const auto c = optim::make_schedule("cosine", 0.2, 8);
    CHECK(c->lr_at(0) == 0.2);
    CHECK(c->lr_at(4) == doctest::Approx(0.1).epsilon(1e-14));
    CHECK(c->lr_at(8) == 0.0);
    CHECK(optim::make_schedule("constant", 0.4, 5)->lr_at(4) == 0.4);
}

TEST_CASE("optim: schedule errors")
{
    CHECK_ERROR(optim::make_schedule("linear", 0.1, 10), xgrad::invalid_argument, "unknown schedule 'linear'",
                "'constant'", "'step'", "'cosine'");
    CHECK_ERROR(optim::make_schedule("cosine", 0.1, 0), xgrad::invalid_argument, "total_epochs", "got 0");
    CHECK_ERROR(optim::step_lr(0.1, 0), xgrad::invalid_argument, "step_lr", "step_size", "got 0");
    CHECK_ERROR(optim::step_lr(0.1, 2, 0.0), xgrad::invalid_argument, "step_lr", "gamma");
    CHECK_ERROR(optim::step_lr(-0.1, 2), xgrad::invalid_argument, "step_lr", "base_lr", "-0.1");
    CHECK_ERROR(optim::cosine_lr(0.1, -3), xgrad::invalid_argument, "cosine_lr", "total_epochs", "-3");
    CHECK_ERROR(optim::cosine_lr(0.1, 10, 0.2), xgrad::invalid_argument, "cosine_lr", "min_lr", "0.2");
    CHECK_ERROR(optim::constant_lr(std::numeric_limits<double>::quiet_NaN()), xgrad::invalid_argument,
                "constant_lr", "base_lr");
    CHECK_ERROR(optim::constant_lr(0.1).lr_at(-1), xgrad::invalid_argument, "epoch", "-1");
    CHECK_ERROR(optim::cosine_lr(0.1, 5).lr_at(-2), xgrad::invalid_argument, "epoch", "-2");
}
