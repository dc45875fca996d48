// The learning-rate schedules against PyTorch's sequences (tests/data/torch/schedules.json,
// tools/torch_golden/schedules.py): every schedule and option, SequentialLR and
// ChainedScheduler compositions, and ReduceLROnPlateau's rates and counters, also across a
// save and restore of its state at every epoch.
//
// Tolerance 1e-12 of max(1, |rate|) (the rates are <= 1): PyTorch steps each schedule through its
// chainable form, one rounding per step (~1e-16 relative) accumulating over at most 30 steps,
// while lr_at is the closed form; the two agree to ~1e-14. A wrong phase boundary, factor or
// off-by-one step moves a rate by 1e-3 or more.
#include <doctest/doctest.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tests/support/torch_golden.hpp"
#include "xgrad/optim/lr_scheduler.hpp"
#include "xgrad/optim/reduce_lr_on_plateau.hpp"

using namespace xgrad;
using torch_golden::json;

namespace
{
    /// The xgrad schedule of a case's {"op", "options"}.
    std::shared_ptr<const optim::lr_schedule> make(const json& spec)
    {
        const std::string op = spec.at("op");
        const json& o = spec.at("options");
        const double base = o.at("base_lr");
        if (op == "step")
            return std::make_shared<optim::step_lr>(base, o.at("step_size"), o.at("gamma"));
        if (op == "cosine")
            return std::make_shared<optim::cosine_lr>(base, o.at("total"), o.at("min_lr"));
        if (op == "multistep")
            return std::make_shared<optim::multi_step_lr>(base, o.at("milestones").get<std::vector<std::int64_t>>(),
                                                          o.at("gamma"));
        if (op == "exponential")
            return std::make_shared<optim::exponential_lr>(base, o.at("gamma"));
        if (op == "linear")
            return std::make_shared<optim::linear_lr>(base, o.at("start_factor"), o.at("end_factor"),
                                                      o.at("total_iters"));
        if (op == "onecycle")
        {
            optim::one_cycle_options oc;
            oc.max_lr = o.at("max_lr");
            oc.total_steps = o.at("total_steps");
            oc.pct_start = o.at("pct_start");
            oc.anneal_strategy = o.at("anneal_strategy");
            oc.div_factor = o.at("div_factor");
            oc.final_div_factor = o.at("final_div_factor");
            oc.three_phase = o.at("three_phase");
            return std::make_shared<optim::one_cycle_lr>(oc);
        }
        std::vector<std::shared_ptr<const optim::lr_schedule>> children;
        for (const auto& c : o.at("schedules"))
            children.push_back(make(c));
        if (op == "sequential")
            return std::make_shared<optim::sequential_lr>(children,
                                                          o.at("milestones").get<std::vector<std::int64_t>>());
        REQUIRE_MESSAGE(op == "chained", "no xgrad schedule for op " << op);
        return std::make_shared<optim::chained_lr>(children);
    }

    tensor doubles(const std::vector<double>& v)
    {
        return from_host(v.data(), {static_cast<std::int64_t>(v.size())}, dtype::float64);
    }

    tensor int64s(const std::vector<std::int64_t>& v)
    {
        return from_host(v.data(), {static_cast<std::int64_t>(v.size())}, dtype::int64);
    }

    void check_plateau(const json& c)
    {
        const std::string name = c.at("name");
        const json& o = c.at("options");
        optim::plateau_options po;
        po.mode = o.at("mode");
        po.factor = o.at("factor");
        po.patience = o.at("patience");
        po.threshold = o.at("threshold");
        po.threshold_mode = o.at("threshold_mode");
        po.cooldown = o.at("cooldown");
        po.min_lr = o.at("min_lr");
        po.eps = o.at("eps");
        const auto metrics = c.at("inputs").at("metrics").at("data").get<std::vector<double>>();
        optim::reduce_lr_on_plateau plateau(o.at("base_lr"), po);
        std::vector<double> lr, best;
        std::vector<std::int64_t> bad, cooldown;
        for (std::size_t k = 0; k < metrics.size(); ++k)
        {
            const double next = plateau.step(metrics[k]);
            CHECK(next == plateau.lr());
            CHECK(plateau.last_epoch() == static_cast<std::int64_t>(k + 1));
            lr.push_back(plateau.lr());
            best.push_back(plateau.best());
            bad.push_back(plateau.num_bad_epochs());
            cooldown.push_back(plateau.cooldown_counter());
        }
        const json& out = c.at("outputs");
        torch_golden::check_close(doubles(lr), out.at("lr"), 1e-12, name + ": lr");
        torch_golden::check_close(doubles(best), out.at("best"), 0.0, name + ": best");
        CHECK(to_vector(int64s(bad)) == to_vector(torch_golden::make_tensor(out.at("num_bad_epochs"))));
        CHECK(to_vector(int64s(cooldown)) == to_vector(torch_golden::make_tensor(out.at("cooldown_counter"))));

        // A run resumed after any epoch from the saved state continues the same sequence.
        for (std::size_t stop = 0; stop < metrics.size(); ++stop)
        {
            CAPTURE(stop);
            optim::reduce_lr_on_plateau first(o.at("base_lr"), po);
            for (std::size_t k = 0; k < stop; ++k)
                first.step(metrics[k]);
            optim::reduce_lr_on_plateau resumed(o.at("base_lr"), po);
            resumed.load_state_dict(first.state_dict());
            for (std::size_t k = stop; k < metrics.size(); ++k)
                REQUIRE(resumed.step(metrics[k]) == lr[k]);
        }
    }
}

TEST_CASE("schedules: the rates equal PyTorch's lr_scheduler in float64")
{
    const auto doc = torch_golden::load("schedules.json");
    REQUIRE(doc.at("cases").size() >= 30);
    std::size_t plateaus = 0;
    for (const auto& c : doc.at("cases"))
    {
        const std::string name = c.at("name");
        INFO(name);
        if (c.at("op") == "plateau")
        {
            check_plateau(c);
            ++plateaus;
            continue;
        }
        const auto schedule = make(c);
        const json& want = c.at("outputs").at("lr");
        const auto steps = static_cast<std::int64_t>(want.at("data").size());
        std::vector<double> closed, replayed, backwards(static_cast<std::size_t>(steps));
        for (std::int64_t t = 0; t < steps; ++t)
            closed.push_back(schedule->lr_at(t));
        torch_golden::check_close(doubles(closed), want, 1e-12, name + ": lr_at");
        // The chainable form, stepped from the base rate as PyTorch steps it.
        double lr = schedule->base_lr();
        for (std::int64_t t = 0; t < steps; ++t)
            replayed.push_back(lr = schedule->chain(lr, t));
        torch_golden::check_close(doubles(replayed), want, 1e-12, name + ": chain");
        // lr_at in any order (chained_lr's cache, a resumed run) gives the same rates.
        for (std::int64_t t = steps - 1; t >= 0; --t)
            backwards[static_cast<std::size_t>(t)] = schedule->lr_at(t);
        CHECK(backwards == closed);
    }
    CHECK(plateaus >= 8);
}
