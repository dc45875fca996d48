// Optimizers (xgrad::optim): several steps of every SGD and Adam/AdamW variant against an
// oracle written with plain double loops over std::vector (optim_test_helpers.hpp), which
// parameters a step touches, set_lr, every option error, make_optimizer's defaults, 16-bit
// parameters, and convergence on quadratics. State dicts are tested in test_optim_state.cpp
// and learning-rate schedules in test_optim_schedules.cpp (same executable, test_optim).
#include <doctest/doctest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "optim_test_helpers.hpp"
#include "tests/support/check_error.hpp"
#include "xgrad/autograd.hpp"
#include "xgrad/errors.hpp"
#include "xgrad/factories.hpp"
#include "xgrad/nn/conv.hpp"
#include "xgrad/nn/linear.hpp"
#include "xgrad/nn/module.hpp"
#include "xgrad/ops/elementwise.hpp"
#include "xgrad/ops/reduce.hpp"
#include "xgrad/optim/adagrad.hpp"
#include "xgrad/optim/lr_scheduler.hpp"
#include "xgrad/optim/optimizer.hpp"
#include "xgrad/optim/rmsprop.hpp"

using namespace xgrad;
using namespace optim_test;

TEST_CASE("optim: sgd variants match the oracle step by step")
{
    const std::vector<std::pair<const char*, optim::sgd_options>> variants{
        {"plain", {0.1, 0.0, 0.0, 0.0, false}},         {"momentum", {0.1, 0.9, 0.0, 0.0, false}},
        {"dampening", {0.05, 0.8, 0.3, 0.0, false}},    {"nesterov", {0.1, 0.9, 0.0, 0.0, true}},
        {"weight decay", {0.1, 0.0, 0.0, 0.05, false}}, {"all", {0.03, 0.7, 0.0, 0.2, true}},
    };
    for (const auto& entry : variants)
    {
        const auto& variant = entry.first; // not a structured binding: CAPTURE uses a lambda
        const auto& options = entry.second;
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
    const tensor w0_snapshot = w0.detach(); // shares the data the step replaces
    const tensor w0_view = w0.reshape({-1});
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

    // "w" is updated in place of its handle: the handle taken before the step (as a user keeps
    // auto w = conv->weight()) is the parameter and reads the new values, a leaf that still
    // requires grad, its gradient kept until zero_grad. Before, the step replaced it with a
    // new tensor and w0 went stale. The old data itself is never written: a snapshot or a
    // view taken before keeps the old values.
    const tensor w1 = m.parameter("w");
    CHECK(w1.is_same(w0));
    CHECK(w1.is_leaf());
    CHECK(w1.requires_grad());
    CHECK(w1.grad().defined());
    CHECK(w1.version() == 1);
    CHECK(w1.dtype() == dtype::float64);
    check_close(values_type{{"w", to_vector(w0)}}, values_type{{"w", want.at("w")}}, tol64);
    CHECK(to_vector(w0_snapshot) == w0_values);
    CHECK(to_vector(w0_view) == w0_values);

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
    CHECK_ERROR(optim::sgd(m, so{0.1, 0.0, 0.0, 0.0, true}), xgrad::invalid_argument, "sgd: nesterov", "momentum > 0",
                "momentum 0");
    CHECK_ERROR(optim::sgd(m, so{0.1, 0.9, 0.1, 0.0, true}), xgrad::invalid_argument, "sgd: nesterov", "dampening 0.1");

    using ao = optim::adam_options;
    CHECK_ERROR(optim::adam(m, ao{-1.0, 0.9, 0.999, 1e-8, 0.0}), xgrad::invalid_argument, "adam: lr", "-1");
    CHECK_ERROR(optim::adam(m, ao{inf, 0.9, 0.999, 1e-8, 0.0}), xgrad::invalid_argument, "adam: lr", "inf");
    CHECK_ERROR(optim::adam(m, ao{0.1, 1.0, 0.999, 1e-8, 0.0}), xgrad::invalid_argument, "adam: beta1", "[0, 1)",
                "got 1");
    CHECK_ERROR(optim::adam(m, ao{0.1, 0.9, -0.1, 1e-8, 0.0}), xgrad::invalid_argument, "adam: beta2", "-0.1");
    CHECK_ERROR(optim::adam(m, ao{0.1, 0.9, 0.999, 0.0, 0.0}), xgrad::invalid_argument, "adam: eps", "> 0");
    CHECK_ERROR(optim::adam(m, ao{0.1, 0.9, 0.999, nan, 0.0}), xgrad::invalid_argument, "adam: eps", "nan");
    CHECK_ERROR(optim::adam(m, ao{0.1, 0.9, 0.999, 1e-8, -0.01}), xgrad::invalid_argument, "adam: weight_decay");
    CHECK_ERROR(optim::make_adamw(m, ao{0.1, 1.5, 0.999, 1e-8, 0.0}), xgrad::invalid_argument, "adamw: beta1");

    optim::sgd opt(m, so{});
    CHECK_ERROR(opt.set_lr(-0.5), xgrad::invalid_argument, "sgd: set_lr", "-0.5");
    CHECK_ERROR(opt.set_lr(inf), xgrad::invalid_argument, "sgd: set_lr", "inf");
    CHECK(opt.lr() == so{}.lr);

    CHECK_ERROR(optim::make_optimizer("lamb", m, 0.1), xgrad::invalid_argument, "unknown optimizer 'lamb'", "'sgd'",
                "'adam'", "'adamw'", "'rmsprop'", "'adagrad'");
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
    // rmsprop and adagrad: PyTorch's defaults, the options' own.
    const auto r = optim::make_optimizer("rmsprop", m, 0.003);
    const auto* rp = dynamic_cast<const optim::rmsprop*>(r.get());
    REQUIRE(rp);
    CHECK(r->lr() == 0.003);
    CHECK((rp->options().alpha == 0.99 && rp->options().eps == 1e-8 && rp->options().momentum == 0.0));
    const auto g = optim::make_optimizer("adagrad", m, 0.004);
    const auto* gp = dynamic_cast<const optim::adagrad*>(g.get());
    REQUIRE(gp);
    CHECK(g->lr() == 0.004);
    CHECK((gp->options().lr_decay == 0.0 && gp->options().eps == 1e-10 && gp->options().weight_decay == 0.0));
}

TEST_CASE("optim: float16 and bfloat16 parameters are updated in float32 and rounded once")
{
    // The result is float32 arithmetic on the 16-bit inputs, rounded to nearest once: within
    // half an ulp of the exact value, 2^-11 relative for float16 (10 stored mantissa bits) and
    // 2^-8 for bfloat16 (7 bits), plus an absolute 1e-6 that covers float32's own error
    // (a few 2^-24 of the O(1) operands) and float16's subnormal spacing (2^-24) should a
    // value land near zero. A wrong formula is off by ~1e-3 or more.
    for (const auto& [dt, half_ulp] :
         {std::pair{dtype::float16, std::ldexp(1.0, -11)}, std::pair{dtype::bfloat16, std::ldexp(1.0, -8)}})
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
            : m_a(from_host(a_values.data(), {5}, dtype::float64)), m_c(from_host(c_values.data(), {5}, dtype::float64))
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

TEST_CASE("optim: a handle kept across steps follows the parameter; a graph from before a step refuses to run")
{
    generator gen(5);
    nn::linear fc(3, 2, gen);
    const tensor w = fc.parameter("weight"); // as a LibTorch user keeps conv->weight()
    const auto opt = optim::make_optimizer("sgd", fc, 0.1);
    const tensor x = randn({4, 3}, gen);
    for (int step = 0; step < 3; ++step)
    {
        opt->zero_grad();
        sum(fc(x)).backward();
        const std::vector<double> before = to_vector(w);
        opt->step();
        // The kept handle sees every step (before, it kept the first value forever).
        CHECK(fc.parameter("weight").is_same(w));
        CHECK(to_vector(w) != before);
        CHECK(to_vector(w) == to_vector(fc.parameter("weight")));
    }
    CHECK(w.version() == 3);

    // A forward pass recorded before a step would mix old and new weights in its backward.
    opt->zero_grad();
    const tensor loss = sum(fc(x));
    sum(fc(x)).backward();
    opt->step();
    CHECK_ERROR(loss.backward(), std::runtime_error, "backward through", "given new data", "optimizer step");
    // Recorded after the step, it runs.
    opt->zero_grad();
    CHECK_NOTHROW(sum(fc(x)).backward());

    // set_data refuses what is not the same kind of tensor, and non-leaves.
    CHECK_ERROR(tensor(w).set_data(zeros({3, 2})), xgrad::invalid_argument, "set_data", "[3, 2]", "[2, 3]");
    CHECK_ERROR(tensor(w).set_data(zeros({2, 3}, dtype::float64)), xgrad::invalid_argument, "set_data", "float64");
    tensor y = w * 2.0;
    CHECK_ERROR(y.set_data(zeros({2, 3})), xgrad::invalid_argument, "set_data", "not a leaf");
    CHECK_ERROR(fc.update_parameter("weight", zeros({3})), xgrad::invalid_argument, "linear", "'weight'");
    CHECK_ERROR(fc.update_parameter("nope", zeros({3})), xgrad::invalid_argument, "linear", "'nope'");
}

TEST_CASE("optim: parameter groups scale the learning rate and replace the weight decay")
{
    for (const char* kind : {"sgd", "adamw"})
    {
        CAPTURE(kind);
        toy m;
        const values_type p0 = values_of(m);
        const auto opt = optim::make_optimizer(kind, m, 0.1);
        // No decay on the one-dimensional parameters ("b", "inner.v"); "w" at half the rate.
        CHECK(optim::one_dimensional_parameters(m) == std::vector<std::string>{"b", "inner.v"});
        opt->set_param_groups({{optim::one_dimensional_parameters(m), 1.0, 0.0}, {{"w"}, 0.5, std::nullopt}});
        const values_type g = set_grads(m, 77);
        opt->step();
        const bool sgd = std::string(kind) == "sgd";
        // One step from zero state: sgd (Nesterov, momentum 0.9, no decay by default):
        // p - lr (d + 0.9 d) with d = g; adamw (decay 0.01): p (1 - lr wd) - lr g / (|g| + eps).
        for (const auto& entry : values_of(m))
        {
            const auto& name = entry.first;
            const auto& values = entry.second;
            CAPTURE(name);
            const double lr = name == "w" ? 0.05 : 0.1;
            const double wd = sgd || name != "w" ? 0.0 : 0.01;
            for (std::size_t i = 0; i < values.size(); ++i)
            {
                const double p = p0.at(name)[i], gi = g.at(name)[i];
                const double want = sgd ? p - lr * 1.9 * gi : p * (1.0 - lr * wd) - lr * gi / (std::abs(gi) + 1e-8);
                CHECK(values[i] == doctest::Approx(want).epsilon(1e-12));
            }
        }
    }
    toy m;
    optim::sgd opt(m, optim::sgd_options{});
    CHECK_ERROR(opt.set_param_groups({{{"w", "nope"}, 1.0, {}}, {{"w"}, -1.0, -0.5}}), xgrad::invalid_argument,
                "sgd: set_param_groups", "'nope' is not a parameter", "'w' is already in group 0", "lr_factor",
                "weight_decay");
    CHECK(opt.param_groups().empty());
}

TEST_CASE("optim: gradient clipping by norm and by value")
{
    toy m;
    for (auto [n, p] : m.named_parameters())
        p.set_grad(full(p.shape(), n == "w" ? 3.0 : -4.0, dtype::float64)); // 6 threes, 7 fours
    const double norm = std::sqrt(6 * 9.0 + 7 * 16.0);
    CHECK(optim::clip_grad_norm(m, 1e9) == doctest::Approx(norm).epsilon(1e-15)); // no clipping
    CHECK(to_vector(m.parameter("w").grad())[0] == 3.0);
    CHECK(optim::clip_grad_norm(m, 2.0) == doctest::Approx(norm).epsilon(1e-15));
    const double scale = 2.0 / (norm + 1e-6);
    CHECK(to_vector(m.parameter("w").grad())[0] == doctest::Approx(3.0 * scale).epsilon(1e-15));
    CHECK(to_vector(m.parameter("inner.v").grad())[3] == doctest::Approx(-4.0 * scale).epsilon(1e-15));
    // The infinity norm, and a gradient-free parameter left alone.
    m.parameter("b").zero_grad();
    const double inf = std::numeric_limits<double>::infinity();
    CHECK(optim::clip_grad_norm(m, 0.5, inf) == doctest::Approx(4.0 * scale).epsilon(1e-15));
    CHECK_FALSE(m.parameter("b").grad().defined());

    for (tensor p : m.parameters())
    {
        // Evenly from -2 to 2.
        const double n = static_cast<double>(p.numel());
        p.set_grad(((arange(0, n, 1, dtype::float64) * (4.0 / (n - 1.0))) - 2.0).reshape(p.shape()));
    }
    optim::clip_grad_value(m, 0.5);
    for (const auto& p : m.parameters())
        for (double v : to_vector(p.grad()))
            CHECK(std::abs(v) <= 0.5);
    CHECK(to_vector(m.parameter("b").grad()) == std::vector<double>{-0.5, 0.0, 0.5});

    CHECK_ERROR(optim::clip_grad_norm(m, -1.0), xgrad::invalid_argument, "clip_grad_norm", "max_norm");
    CHECK_ERROR(optim::clip_grad_norm(m, 1.0, 0.0), xgrad::invalid_argument, "clip_grad_norm", "norm_type");
    CHECK_ERROR(optim::clip_grad_value(m, std::nan("")), xgrad::invalid_argument, "clip_grad_value");
}
