// Optimizer state (xgrad::optim): the state_dict round trip (a resumed run is bit-identical
// to an uninterrupted one), every load_state_dict error listed at once with nothing changed,
// and state without some parameters. Shared helpers: optim_test_helpers.hpp (same executable,
// test_optim).
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "optim_test_helpers.hpp"
#include "tests/support/check_error.hpp"
#include "xgrad/errors.hpp"
#include "xgrad/factories.hpp"
#include "xgrad/nn/module.hpp"
#include "xgrad/optim/optimizer.hpp"

using namespace xgrad;
using namespace optim_test;

namespace
{
    /// Every entry of the optimizer's state, "step" included, as float64 values.
    values_type state_values(const optim::optimizer& opt)
    {
        values_type out;
        for (const auto& [key, t] : opt.state_dict())
            out[key] = to_vector(t);
        return out;
    }

    tensor int64_scalar(std::int64_t v) { return from_host(&v, {}, dtype::int64); }
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
    bad.erase("step");                                        // 1 missing step
    bad["nope.exp_avg"] = zeros({3}, dtype::float64);         // 2 unknown parameter
    bad["w.momentum_buffer"] = zeros({2, 3}, dtype::float64); // 3 unknown buffer
    bad["junk"] = zeros({}, dtype::float64);                  // 4 neither step nor p.b
    bad["b.exp_avg"] = zeros({4}, dtype::float64);            // 5 wrong shape
    bad["inner.v.exp_avg_sq"] = zeros({4}, dtype::float32);   // 6 wrong dtype
    bad["w.exp_avg_sq"] = tensor();                           // 7 undefined
    bad.erase("inner.v.exp_avg");                             // 8 only some buffers
    CHECK(opt.state_dict_problems(bad).size() == 8);
    CHECK_ERROR(opt.load_state_dict(bad), xgrad::invalid_argument, "adam: load_state_dict", "missing 'step'",
                "'nope.exp_avg': the model has no parameter 'nope'",
                "'w.momentum_buffer': unknown buffer 'momentum_buffer' (adam keeps: exp_avg, exp_avg_sq)", "'junk'",
                "'b.exp_avg': has shape [4]", "the parameter has shape [3]", "dtype float32",
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
                "'step' must be in [0, 9007199254740992], got -1");
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

TEST_CASE("optim: the step count stays within what a step can count")
{
    // A loaded counter the next step would overflow is refused, naming the range.
    toy m;
    optim::adam opt(m, optim::adam_options{});
    const std::int64_t most = std::int64_t{1} << 53; // the largest count a double holds exactly
    CHECK_ERROR(opt.load_state_dict({{"step", int64_scalar(INT64_MAX)}}), xgrad::invalid_argument,
                "'step' must be in [0, 9007199254740992], got 9223372036854775807");
    CHECK_ERROR(opt.load_state_dict({{"step", int64_scalar(most + 1)}}), xgrad::invalid_argument,
                "got 9007199254740993");
    CHECK(opt.step_count() == 0);

    // At the largest count, a step refuses to take place and changes nothing.
    opt.load_state_dict({{"step", int64_scalar(most)}});
    set_grads(m, 800);
    const auto before = state_values(opt);
    const std::vector<double> w = to_vector(m.parameter("w"));
    CHECK_ERROR(opt.step(), xgrad::invalid_argument, "adam: step", "9007199254740992");
    CHECK(opt.step_count() == most);
    CHECK(state_values(opt) == before);
    CHECK(to_vector(m.parameter("w")) == w);

    // One below it, the step is taken and its update is finite.
    opt.load_state_dict({{"step", int64_scalar(most - 1)}});
    opt.step();
    CHECK(opt.step_count() == most);
    for (const double v : to_vector(m.parameter("w")))
        CHECK(std::isfinite(v));
}
