// Learning-rate schedules (xgrad/optim/lr_scheduler.hpp, reduce_lr_on_plateau.hpp): values
// against the headers' formulas, what PyTorch's sequences do not cover (past the end, the
// composites' edges, the plateau's NaN and state), and every argument error. The sequences
// against PyTorch are test_optim_torch_schedules.cpp, make_schedule's specs
// test_optim_schedule_specs.cpp, the optimizers test_optim_optimizers.cpp and
// test_optim_state.cpp (same executable, test_optim).
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <thread>
#include <vector>

#include "tests/support/check_error.hpp"
#include "xgrad/errors.hpp"
#include "xgrad/optim/lr_scheduler.hpp"
#include "xgrad/optim/reduce_lr_on_plateau.hpp"

using namespace xgrad;

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

TEST_CASE("optim: the new schedules' values, and their edges")
{
    // Hand-worked from the header's formulas.
    const optim::multi_step_lr multi(1.0, {2, 5}, 0.5);
    const std::vector<double> multi_want{1.0, 1.0, 0.5, 0.5, 0.5, 0.25, 0.25};
    for (std::size_t t = 0; t < multi_want.size(); ++t)
        CHECK(multi.lr_at(static_cast<std::int64_t>(t)) == multi_want[t]);
    CHECK(optim::multi_step_lr(0.3, {}).lr_at(100) == 0.3); // no milestone: constant
    CHECK(optim::exponential_lr(2.0, 0.5).lr_at(3) == 0.25);
    const optim::linear_lr warm(0.4, 0.25, 1.0, 3); // 0.1, 0.2, 0.3, then 0.4 for ever
    CHECK(warm.lr_at(0) == doctest::Approx(0.1).epsilon(1e-15));
    CHECK(warm.lr_at(2) == doctest::Approx(0.3).epsilon(1e-15));
    CHECK(warm.lr_at(3) == 0.4);
    CHECK(warm.lr_at(1000) == 0.4);

    // one_cycle_lr: from max_lr / div_factor up to max_lr at step pct_start total - 1, down to
    // that / final_div_factor at the last step, and nothing after it.
    optim::one_cycle_options oc;
    oc.max_lr = 1.0;
    oc.total_steps = 11;
    oc.pct_start = 0.5; // the rise ends at step 4.5
    oc.anneal_strategy = "linear";
    oc.div_factor = 10.0;
    oc.final_div_factor = 100.0;
    const optim::one_cycle_lr cycle(oc);
    CHECK(cycle.base_lr() == 0.1);
    CHECK(cycle.lr_at(0) == doctest::Approx(0.1).epsilon(1e-15));
    CHECK(cycle.lr_at(10) == doctest::Approx(0.001).epsilon(1e-15));
    CHECK(cycle.lr_at(4) == doctest::Approx(0.1 + 0.9 * 4 / 4.5).epsilon(1e-14));
    CHECK(cycle.chain(123.0, 4) == cycle.lr_at(4)); // not chainable: the rate is set
    CHECK_ERROR(cycle.lr_at(11), xgrad::invalid_argument, "one_cycle_lr", "step 11", "total_steps 11");

    // sequential_lr: schedule k counts its steps from its milestone.
    auto first = std::make_shared<optim::constant_lr>(0.5);
    auto second = std::make_shared<optim::exponential_lr>(1.0, 0.5);
    const optim::sequential_lr seq({first, second}, {3});
    const std::vector<double> seq_want{0.5, 0.5, 0.5, 1.0, 0.5, 0.25};
    for (std::size_t t = 0; t < seq_want.size(); ++t)
        CHECK(seq.lr_at(static_cast<std::int64_t>(t)) == seq_want[t]);
    CHECK(seq.base_lr() == 0.5);
    CHECK(optim::sequential_lr({second}, {}).lr_at(2) == 0.25); // one schedule: itself

    // chained_lr: factors multiply; from several threads at once each call gets its own step's rate.
    const optim::chained_lr chained({second, std::make_shared<optim::step_lr>(1.0, 2, 0.1)});
    CHECK(chained.lr_at(4) == doctest::Approx(0.0625 * 0.01).epsilon(1e-15));
    CHECK(chained.lr_at(1) == 0.5);
    std::vector<double> got(64);
    std::vector<std::thread> threads;
    for (std::size_t i = 0; i < 4; ++i)
        threads.emplace_back([&, i] {
            for (std::size_t t = i; t < got.size(); t += 4)
                got[t] = chained.lr_at(static_cast<std::int64_t>(t));
        });
    for (auto& th : threads)
        th.join();
    for (std::size_t t = 0; t < got.size(); ++t)
        CHECK(got[t] == optim::chained_lr({second, std::make_shared<optim::step_lr>(1.0, 2, 0.1)})
                            .lr_at(static_cast<std::int64_t>(t)));
}

TEST_CASE("optim: reduce_lr_on_plateau: NaN metrics are bad epochs, and its state round-trips or is refused")
{
    optim::plateau_options o;
    o.patience = 1;
    o.factor = 0.5;
    optim::reduce_lr_on_plateau p(0.2, o);
    CHECK(p.best() == std::numeric_limits<double>::infinity());
    CHECK(p.step(1.0) == 0.2);
    const double nan = std::numeric_limits<double>::quiet_NaN();
    CHECK(p.step(nan) == 0.2);
    CHECK(p.num_bad_epochs() == 1);
    CHECK(p.step(nan) == 0.1); // the second bad epoch passes patience 1
    CHECK(p.best() == 1.0);

    // The state as text reads back to the same doubles (0.1 is not a short binary fraction).
    optim::reduce_lr_on_plateau q(0.2, o);
    q.load_state_dict(p.state_dict());
    CHECK(q.lr() == p.lr());
    CHECK(q.best() == p.best());
    CHECK(q.last_epoch() == 3);
    optim::reduce_lr_on_plateau fresh(0.2, o);
    optim::reduce_lr_on_plateau copy(0.2, o);
    copy.load_state_dict(fresh.state_dict()); // the start's +inf best
    CHECK(copy.best() == std::numeric_limits<double>::infinity());

    auto state = p.state_dict();
    state["lr"] = "-1";
    state["num_bad_epochs"] = "2"; // > patience 1
    state.erase("best");
    state["bogus"] = "1";
    CHECK_ERROR(q.load_state_dict(state), xgrad::invalid_argument, "reduce_lr_on_plateau", "'lr'", "-1",
                "'num_bad_epochs'", "patience = 1", "'best' is missing", "unknown entry 'bogus'");
    CHECK(q.lr() == p.lr()); // unchanged
    state = p.state_dict();
    state["best"] = "-inf"; // never the best in mode min
    state["cooldown_counter"] = "1x";
    CHECK_ERROR(q.load_state_dict(state), xgrad::invalid_argument, "'best'", "'cooldown_counter'", "1x");
}

TEST_CASE("optim: schedule errors")
{
    CHECK_ERROR(optim::make_schedule("bogus", 0.1, 10), xgrad::invalid_argument, "unknown schedule 'bogus'",
                "'constant'", "'step'", "'cosine'", "'onecycle'", "'plateau'");
    CHECK_ERROR(optim::make_schedule("cosine", 0.1, 0), xgrad::invalid_argument, "total_steps", "got 0");
    CHECK_ERROR(optim::step_lr(0.1, 0), xgrad::invalid_argument, "step_lr", "step_size", "got 0");
    CHECK_ERROR(optim::step_lr(0.1, 2, 0.0), xgrad::invalid_argument, "step_lr", "gamma");
    CHECK_ERROR(optim::step_lr(-0.1, 2), xgrad::invalid_argument, "step_lr", "base_lr", "-0.1");
    CHECK_ERROR(optim::cosine_lr(0.1, -3), xgrad::invalid_argument, "cosine_lr", "total_epochs", "-3");
    CHECK_ERROR(optim::cosine_lr(0.1, 10, 0.2), xgrad::invalid_argument, "cosine_lr", "min_lr", "0.2");
    CHECK_ERROR(optim::constant_lr(std::numeric_limits<double>::quiet_NaN()), xgrad::invalid_argument, "constant_lr",
                "base_lr");
    CHECK_ERROR(optim::constant_lr(0.1).lr_at(-1), xgrad::invalid_argument, "epoch", "-1");
    CHECK_ERROR(optim::cosine_lr(0.1, 5).lr_at(-2), xgrad::invalid_argument, "epoch", "-2");
    CHECK_ERROR(optim::cosine_lr(0.1, 5).chain(0.1, -2), xgrad::invalid_argument, "cosine_lr", "chain", "-2");

    CHECK_ERROR(optim::multi_step_lr(0.1, {3, 3}), xgrad::invalid_argument, "multi_step_lr", "strictly increasing",
                "3 then 3");
    CHECK_ERROR(optim::multi_step_lr(0.1, {0, 4}), xgrad::invalid_argument, "multi_step_lr", "milestones", ">= 1");
    CHECK_ERROR(optim::multi_step_lr(0.1, {2}, -0.5), xgrad::invalid_argument, "multi_step_lr", "gamma", "-0.5");
    const double inf = std::numeric_limits<double>::infinity();
    CHECK_ERROR(optim::exponential_lr(0.1, inf), xgrad::invalid_argument, "exponential_lr", "gamma", "inf");
    CHECK_ERROR(optim::linear_lr(0.1, 0.0), xgrad::invalid_argument, "linear_lr", "start_factor", "(0, 1]");
    CHECK_ERROR(optim::linear_lr(0.1, 0.5, 1.5), xgrad::invalid_argument, "linear_lr", "end_factor", "1.5");
    CHECK_ERROR(optim::linear_lr(0.1, 0.5, 1.0, 0), xgrad::invalid_argument, "linear_lr", "total_iters", "got 0");

    optim::one_cycle_options oc;
    oc.total_steps = 10;
    const auto cycle_error = [&](auto set) {
        optim::one_cycle_options o = oc;
        set(o);
        return optim::one_cycle_lr(o);
    };
    CHECK_ERROR(cycle_error([](auto& o) { o.max_lr = 0; }), xgrad::invalid_argument, "one_cycle_lr", "max_lr");
    CHECK_ERROR(cycle_error([](auto& o) { o.total_steps = 0; }), xgrad::invalid_argument, "total_steps");
    CHECK_ERROR(cycle_error([](auto& o) { o.pct_start = 1.5; }), xgrad::invalid_argument, "pct_start", "1.5");
    CHECK_ERROR(cycle_error([](auto& o) { o.anneal_strategy = "cosine"; }), xgrad::invalid_argument, "anneal_strategy",
                "'cosine'");
    CHECK_ERROR(cycle_error([](auto& o) { o.div_factor = -1; }), xgrad::invalid_argument, "div_factor");
    CHECK_ERROR(cycle_error([](auto& o) { o.final_div_factor = 0; }), xgrad::invalid_argument, "final_div_factor");
    // The rise must hold a step (PyTorch divides 0 by 0 when it ends at step 0) and leave some.
    CHECK_ERROR(cycle_error([](auto& o) { o.pct_start = 0.1; }), xgrad::invalid_argument, "pct_start * total_steps",
                "0.1 * 10");
    CHECK_ERROR(cycle_error([](auto& o) { o.pct_start = 1.0; }), xgrad::invalid_argument, "no step after the rise");
    CHECK_ERROR(cycle_error([](auto& o) {
                    o.pct_start = 0.55;
                    o.three_phase = true;
                }),
                xgrad::invalid_argument, "no step after the rise and fall");

    const std::shared_ptr<const optim::lr_schedule> c = std::make_shared<optim::constant_lr>(0.1);
    CHECK_ERROR(optim::sequential_lr({}, {}), xgrad::invalid_argument, "sequential_lr", "at least one schedule");
    CHECK_ERROR(optim::sequential_lr({c, nullptr}, {2}), xgrad::invalid_argument, "sequential_lr", "schedule 1",
                "null");
    CHECK_ERROR(optim::sequential_lr({c, c}, {}), xgrad::invalid_argument, "sequential_lr", "2 schedules",
                "0 milestones");
    CHECK_ERROR(optim::sequential_lr({c, c, c}, {4, 2}), xgrad::invalid_argument, "sequential_lr",
                "strictly increasing");
    CHECK_ERROR(optim::sequential_lr({c, c}, {0}), xgrad::invalid_argument, "sequential_lr", ">= 1");
    CHECK_ERROR(optim::chained_lr({}), xgrad::invalid_argument, "chained_lr", "at least one schedule");
    CHECK_ERROR(optim::chained_lr({nullptr}), xgrad::invalid_argument, "chained_lr", "schedule 0", "null");

    optim::plateau_options po;
    const auto plateau_error = [&](auto set) {
        optim::plateau_options o = po;
        set(o);
        return optim::reduce_lr_on_plateau(0.1, o);
    };
    CHECK_ERROR(plateau_error([](auto& o) { o.mode = "minimum"; }), xgrad::invalid_argument, "reduce_lr_on_plateau",
                "mode", "'minimum'");
    CHECK_ERROR(plateau_error([](auto& o) { o.threshold_mode = "relative"; }), xgrad::invalid_argument,
                "threshold_mode", "'relative'");
    CHECK_ERROR(plateau_error([](auto& o) { o.factor = 1.0; }), xgrad::invalid_argument, "factor", "[0, 1)");
    CHECK_ERROR(plateau_error([](auto& o) { o.patience = -1; }), xgrad::invalid_argument, "patience", "-1");
    CHECK_ERROR(plateau_error([](auto& o) { o.cooldown = -2; }), xgrad::invalid_argument, "cooldown", "-2");
    CHECK_ERROR(plateau_error([](auto& o) { o.threshold = -1e-4; }), xgrad::invalid_argument, "threshold");
    CHECK_ERROR(plateau_error([](auto& o) { o.min_lr = -1; }), xgrad::invalid_argument, "min_lr");
    CHECK_ERROR(plateau_error([&](auto& o) { o.eps = inf; }), xgrad::invalid_argument, "eps", "inf");
    CHECK_ERROR(optim::reduce_lr_on_plateau(-0.1), xgrad::invalid_argument, "reduce_lr_on_plateau", "lr", "-0.1");
}
