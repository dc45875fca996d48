// make_schedule and make_plateau (xgrad/optim/lr_scheduler.hpp, reduce_lr_on_plateau.hpp): each
// name with its defaults and with every key set, the warm-up any of them takes, and the errors
// for unknown names and keys and malformed values, each naming the schedule and the key.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <memory>
#include <string>

#include "tests/support/check_error.hpp"
#include "xgrad/errors.hpp"
#include "xgrad/optim/lr_scheduler.hpp"
#include "xgrad/optim/reduce_lr_on_plateau.hpp"

using namespace xgrad;

namespace
{
    /// Whether a and b give the same rates over steps [0, steps).
    bool same_rates(const optim::lr_schedule& a, const optim::lr_schedule& b, std::int64_t steps)
    {
        for (std::int64_t t = 0; t < steps; ++t)
            if (a.lr_at(t) != b.lr_at(t))
                return false;
        return true;
    }
}

TEST_CASE("make_schedule: the defaults of each name over the run")
{
    CHECK(same_rates(*optim::make_schedule("constant", 0.1, 20), optim::constant_lr(0.1), 20));
    CHECK(same_rates(*optim::make_schedule("step", 0.1, 20), optim::step_lr(0.1, 6, 0.1), 20));
    CHECK(same_rates(*optim::make_schedule("multistep", 0.1, 20), optim::multi_step_lr(0.1, {10, 15}, 0.1), 20));
    CHECK(same_rates(*optim::make_schedule("multistep", 0.1, 1), optim::multi_step_lr(0.1, {1, 2}, 0.1), 1));
    const auto e = optim::make_schedule("exponential", 0.1, 20);
    CHECK(e->lr_at(20) == doctest::Approx(0.001).epsilon(1e-13)); // a hundredth at the end
    CHECK(same_rates(*optim::make_schedule("linear", 0.1, 20), optim::linear_lr(0.1, 1.0, 0.0, 20), 20));
    CHECK(same_rates(*optim::make_schedule("cosine", 0.1, 20), optim::cosine_lr(0.1, 20, 0.0), 20));
    optim::one_cycle_options oc;
    oc.max_lr = 0.1;
    oc.total_steps = 20;
    CHECK(same_rates(*optim::make_schedule("onecycle", 0.1, 20), optim::one_cycle_lr(oc), 20));
    CHECK(optim::schedule_name("cosine:min_lr=0.1") == "cosine");
    CHECK(optim::schedule_name("plateau") == "plateau");
}

TEST_CASE("make_schedule: every key, and a warm-up before any schedule")
{
    CHECK(same_rates(*optim::make_schedule("step:step_size=4,gamma=0.5", 0.2, 20), optim::step_lr(0.2, 4, 0.5), 20));
    CHECK(same_rates(*optim::make_schedule("multistep:milestones=3/7/12,gamma=0.2", 0.2, 20),
                     optim::multi_step_lr(0.2, {3, 7, 12}, 0.2), 20));
    CHECK(same_rates(*optim::make_schedule("exponential:gamma=0.9", 0.2, 20), optim::exponential_lr(0.2, 0.9), 20));
    CHECK(same_rates(*optim::make_schedule("linear:start_factor=0.5,end_factor=0.25,total_iters=4", 0.2, 20),
                     optim::linear_lr(0.2, 0.5, 0.25, 4), 20));
    CHECK(same_rates(*optim::make_schedule("cosine:min_lr=0.01", 0.2, 20), optim::cosine_lr(0.2, 20, 0.01), 20));
    optim::one_cycle_options oc;
    oc.max_lr = 0.5;
    oc.total_steps = 30;
    oc.pct_start = 0.25;
    oc.anneal_strategy = "linear";
    oc.div_factor = 10;
    oc.final_div_factor = 100;
    oc.three_phase = true;
    CHECK(same_rates(*optim::make_schedule("onecycle:max_lr=0.5,pct_start=0.25,anneal=linear,div_factor=10,"
                                           "final_div_factor=100,three_phase=1",
                                           0.2, 30),
                     optim::one_cycle_lr(oc), 30));

    // warmup=N: a linear ramp from warmup_factor over N steps, then the schedule over the rest
    // with its defaults counted from there (cosine reaches 0 at the run's end).
    const auto w = optim::make_schedule("cosine:warmup=5,warmup_factor=0.2", 1.0, 25);
    const optim::sequential_lr want(
        {std::make_shared<optim::linear_lr>(1.0, 0.2, 1.0, 5), std::make_shared<optim::cosine_lr>(1.0, 20, 0.0)}, {5});
    CHECK(same_rates(*w, want, 25));
    CHECK(w->lr_at(0) == 0.2);
    CHECK(w->lr_at(5) == 1.0);
    CHECK(w->lr_at(25) == 0.0);
    const auto ws = optim::make_schedule("step:warmup=3", 1.0, 12); // step_size (12 - 3) / 3
    CHECK(ws->lr_at(0) == 0.1);
    CHECK(ws->lr_at(3 + 2) == 1.0);
    CHECK(ws->lr_at(3 + 3) == doctest::Approx(0.1).epsilon(1e-15));
}

TEST_CASE("make_plateau: defaults and keys")
{
    const auto d = optim::make_plateau("plateau", 0.3);
    CHECK(d->lr() == 0.3);
    CHECK(d->options().mode == "min");
    CHECK(d->options().patience == 10);
    const auto p = optim::make_plateau(
        "plateau:mode=max,factor=0.5,patience=2,threshold=0.01,threshold_mode=abs,cooldown=1,min_lr=0.001,eps=1e-9",
        0.3);
    const optim::plateau_options& o = p->options();
    CHECK(o.mode == "max");
    CHECK(o.factor == 0.5);
    CHECK(o.patience == 2);
    CHECK(o.threshold == 0.01);
    CHECK(o.threshold_mode == "abs");
    CHECK(o.cooldown == 1);
    CHECK(o.min_lr == 0.001);
    CHECK(o.eps == 1e-9);
}

TEST_CASE("make_schedule and make_plateau: errors name the schedule and the key")
{
    CHECK_ERROR(optim::make_schedule("cosine:min=0.1", 0.1, 10), xgrad::invalid_argument, "make_schedule", "cosine",
                "unknown parameter 'min'", "min_lr", "warmup");
    CHECK_ERROR(optim::make_schedule("constant:gamma=0.1", 0.1, 10), xgrad::invalid_argument, "constant",
                "unknown parameter 'gamma'");
    CHECK_ERROR(optim::make_schedule("onecycle:warmup=2", 0.1, 10), xgrad::invalid_argument, "onecycle",
                "unknown parameter 'warmup'");
    CHECK_ERROR(optim::make_schedule("step:gamma=0.1x", 0.1, 10), xgrad::invalid_argument, "step", "gamma",
                "'0.1x' is not a number");
    CHECK_ERROR(optim::make_schedule("step:gamma= 0.1", 0.1, 10), xgrad::invalid_argument, "gamma", "not a number");
    CHECK_ERROR(optim::make_schedule("step:step_size=2.5", 0.1, 10), xgrad::invalid_argument, "step_size",
                "'2.5' is not an integer");
    CHECK_ERROR(optim::make_schedule("multistep:milestones=2//5", 0.1, 10), xgrad::invalid_argument, "milestones",
                "'' is not an integer");
    CHECK_ERROR(optim::make_schedule("step:gamma=0.1,gamma=0.2", 0.1, 10), xgrad::invalid_argument,
                "gamma is given twice");
    CHECK_ERROR(optim::make_schedule("step:gamma", 0.1, 10), xgrad::invalid_argument, "'gamma' is not KEY=VALUE");
    CHECK_ERROR(optim::make_schedule("step:", 0.1, 10), xgrad::invalid_argument, "'' is not KEY=VALUE");
    CHECK_ERROR(optim::make_schedule("onecycle:three_phase=yes", 0.1, 10), xgrad::invalid_argument, "three_phase",
                "'yes'");
    CHECK_ERROR(optim::make_schedule("cosine:warmup=10", 0.1, 10), xgrad::invalid_argument, "cosine", "warmup",
                "[0, 10)", "got 10");
    CHECK_ERROR(optim::make_schedule("cosine:warmup=-1", 0.1, 10), xgrad::invalid_argument, "warmup", "got -1");
    CHECK_ERROR(optim::make_schedule("cosine:warmup=2,warmup_factor=0", 0.1, 10), xgrad::invalid_argument,
                "warmup_factor", "(0, 1]");
    // Values out of range: the schedule's own errors, naming it and the parameter.
    CHECK_ERROR(optim::make_schedule("cosine:min_lr=0.5", 0.1, 10), xgrad::invalid_argument, "cosine_lr", "min_lr");
    CHECK_ERROR(optim::make_schedule("multistep:milestones=5/3", 0.1, 10), xgrad::invalid_argument, "multi_step_lr",
                "strictly increasing");
    CHECK_ERROR(optim::make_schedule("onecycle:anneal=cosine", 0.1, 10), xgrad::invalid_argument, "one_cycle_lr",
                "anneal_strategy");
    CHECK_ERROR(optim::make_schedule("plateau", 0.1, 10), xgrad::invalid_argument, "make_schedule", "'plateau'",
                "make_plateau");
    CHECK_ERROR(optim::make_plateau("cosine", 0.1), xgrad::invalid_argument, "make_plateau", "'cosine'",
                "not 'plateau'");
    CHECK_ERROR(optim::make_plateau("plateau:patience=two", 0.1), xgrad::invalid_argument, "make_plateau", "plateau",
                "patience", "'two' is not an integer");
    CHECK_ERROR(optim::make_plateau("plateau:warmup=1", 0.1), xgrad::invalid_argument, "unknown parameter 'warmup'",
                "cooldown");
    CHECK_ERROR(optim::make_plateau("plateau:factor=2", 0.1), xgrad::invalid_argument, "reduce_lr_on_plateau",
                "factor");
}
