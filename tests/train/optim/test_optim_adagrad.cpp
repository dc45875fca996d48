// optim::adagrad: every option against its formula as plain double loops (PyTorch's Adagrad),
// step by step with a changing learning rate, its state's names, and its option errors. Its
// trajectories against PyTorch's own are in test_optim_torch_optimizers.cpp.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "optim_test_helpers.hpp"
#include "tests/support/check_error.hpp"
#include "xgrad/optim/adagrad.hpp"

using namespace xgrad;
using namespace optim_test;

namespace
{
    /// adagrad.hpp's formula, element by element in double.
    struct adagrad_oracle
    {
        optim::adagrad_options o;
        std::int64_t t = 0;
        std::map<std::string, values_type> buffers;

        void step(values_type& params, const values_type& grads, double lr)
        {
            ++t;
            const double clr = lr / (1.0 + static_cast<double>(t - 1) * o.lr_decay);
            for (const auto& [n, g] : grads)
            {
                std::vector<double>& p = params.at(n);
                std::vector<double>& sum = buffers["sum"][n];
                sum.resize(g.size(), o.initial_accumulator_value);
                for (std::size_t i = 0; i < g.size(); ++i)
                {
                    const double gi = (o.maximize ? -g[i] : g[i]) + o.weight_decay * p[i];
                    sum[i] += gi * gi;
                    p[i] -= clr * gi / (std::sqrt(sum[i]) + o.eps);
                }
            }
        }
    };
}

TEST_CASE("optim: adagrad's options match the formula step by step")
{
    const std::vector<std::pair<const char*, optim::adagrad_options>> variants{
        {"plain", {0.01, 0.0, 0.0, 0.0, 1e-10, false}},
        {"lr_decay", {0.05, 0.5, 0.0, 0.0, 1e-10, false}},
        {"weight_decay", {0.01, 0.0, 0.3, 0.0, 1e-10, false}},
        {"initial_accumulator_value", {0.01, 0.0, 0.0, 2.0, 1e-10, false}},
        {"maximize", {0.01, 0.0, 0.0, 0.0, 1e-10, true}},
        {"all", {0.02, 0.1, 0.1, 0.5, 1e-6, true}},
    };
    for (const auto& entry : variants)
    {
        const auto& options = entry.second;
        CAPTURE(std::string(entry.first));
        toy m;
        optim::adagrad opt(m, options);
        CHECK(std::string(opt.type_name()) == "adagrad");
        adagrad_oracle oracle{options, 0, {}};
        check_steps(m, opt, oracle, 300, {options.lr, options.lr, options.lr * 0.5, options.lr * 2.0, 0.0, options.lr},
                    tol64);
        // The state: the step count and each parameter's sum, by PyTorch's names.
        CHECK(opt.state_dict().size() == 1 + 3);
        CHECK(opt.state_dict().count("inner.v.sum") == 1);
        CHECK(step_in(opt.state_dict()) == 6);
    }
}

TEST_CASE("optim: adagrad maximizes: one step climbs where the plain one descends")
{
    toy up, down;
    optim::adagrad_options o;
    o.lr = 0.1;
    optim::adagrad plain(down, o);
    o.maximize = true;
    optim::adagrad ascent(up, o);
    const values_type start = values_of(up);
    set_grads(up, 7);
    set_grads(down, 7);
    ascent.step();
    plain.step();
    const values_type a = values_of(up), d = values_of(down);
    for (const auto& n : all_names)
        for (std::size_t i = 0; i < start.at(n).size(); ++i)
            CHECK(a.at(n)[i] - start.at(n)[i] == doctest::Approx(start.at(n)[i] - d.at(n)[i]).epsilon(1e-12));
}

TEST_CASE("optim: adagrad's option errors name the option")
{
    toy m;
    const auto with = [](auto set) {
        optim::adagrad_options o;
        set(o);
        return o;
    };
    const double nan = std::numeric_limits<double>::quiet_NaN();
    const double inf = std::numeric_limits<double>::infinity();
    CHECK_ERROR(optim::adagrad(m, with([](auto& o) { o.lr = -1; })), xgrad::invalid_argument, "adagrad", "lr", "-1");
    CHECK_ERROR(optim::adagrad(m, with([&](auto& o) { o.lr_decay = nan; })), xgrad::invalid_argument, "adagrad",
                "lr_decay");
    CHECK_ERROR(optim::adagrad(m, with([](auto& o) { o.weight_decay = -0.1; })), xgrad::invalid_argument,
                "weight_decay", "-0.1");
    CHECK_ERROR(optim::adagrad(m, with([&](auto& o) { o.initial_accumulator_value = inf; })), xgrad::invalid_argument,
                "initial_accumulator_value", "inf");
    CHECK_ERROR(optim::adagrad(m, with([](auto& o) { o.eps = 0.0; })), xgrad::invalid_argument, "adagrad", "eps",
                "> 0");
}
