// optim::rmsprop: every variant against its formula as plain double loops (PyTorch's RMSprop),
// step by step with a changing learning rate, its state's names, and its option errors.
#include <doctest/doctest.h>

#include <cmath>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "optim_test_helpers.hpp"
#include "tests/support/check_error.hpp"
#include "xgrad/optim/rmsprop.hpp"

using namespace xgrad;
using namespace optim_test;

namespace
{
    /// rmsprop.hpp's formula, element by element in double.
    struct rmsprop_oracle
    {
        optim::rmsprop_options o;
        std::map<std::string, values_type> buffers;

        void step(values_type& params, const values_type& grads, double lr)
        {
            for (const auto& [n, g] : grads)
            {
                std::vector<double>& p = params.at(n);
                std::vector<double>& v = buffers["square_avg"][n];
                v.resize(g.size(), 0.0);
                std::vector<double> a(g.size(), 0.0), b(g.size(), 0.0);
                if (o.centered)
                    a = buffers["grad_avg"].count(n) ? buffers["grad_avg"][n] : a;
                if (o.momentum != 0.0)
                    b = buffers["momentum_buffer"].count(n) ? buffers["momentum_buffer"][n] : b;
                for (std::size_t i = 0; i < g.size(); ++i)
                {
                    const double gi = g[i] + o.weight_decay * p[i];
                    v[i] = o.alpha * v[i] + (1.0 - o.alpha) * gi * gi;
                    double d = std::sqrt(v[i]) + o.eps;
                    if (o.centered)
                    {
                        a[i] = o.alpha * a[i] + (1.0 - o.alpha) * gi;
                        d = std::sqrt(v[i] - a[i] * a[i]) + o.eps;
                    }
                    if (o.momentum != 0.0)
                    {
                        b[i] = o.momentum * b[i] + gi / d;
                        p[i] -= lr * b[i];
                    }
                    else
                        p[i] -= lr * gi / d;
                }
                if (o.centered)
                    buffers["grad_avg"][n] = a;
                if (o.momentum != 0.0)
                    buffers["momentum_buffer"][n] = b;
            }
        }
    };
}

TEST_CASE("optim: rmsprop variants match the formula step by step")
{
    const std::vector<std::pair<const char*, optim::rmsprop_options>> variants{
        {"plain", {0.01, 0.99, 1e-8, 0.0, 0.0, false}},
        {"momentum", {0.01, 0.9, 1e-8, 0.0, 0.8, false}},
        {"centered", {0.005, 0.95, 1e-6, 0.0, 0.0, true}},
        {"all", {0.02, 0.9, 1e-7, 0.1, 0.5, true}},
    };
    for (const auto& entry : variants)
    {
        const auto& options = entry.second;
        CAPTURE(std::string(entry.first));
        toy m;
        optim::rmsprop opt(m, options);
        CHECK(std::string(opt.type_name()) == "rmsprop");
        rmsprop_oracle oracle{options, {}};
        check_steps(m, opt, oracle, 200, {options.lr, options.lr, options.lr * 0.5, options.lr * 2.0, 0.0, options.lr},
                    tol64);
        // The state: the step count and each parameter's buffers, by PyTorch's names.
        const std::size_t per_param = 1 + (options.momentum != 0.0) + options.centered;
        CHECK(opt.state_dict().size() == 1 + 3 * per_param);
        CHECK(opt.state_dict().count("inner.v.square_avg") == 1);
    }
}

TEST_CASE("optim: rmsprop's option errors name the option")
{
    toy m;
    const auto with = [](auto set) {
        optim::rmsprop_options o;
        set(o);
        return o;
    };
    CHECK_ERROR(optim::rmsprop(m, with([](auto& o) { o.lr = -1; })), xgrad::invalid_argument, "rmsprop", "lr");
    CHECK_ERROR(optim::rmsprop(m, with([](auto& o) { o.alpha = 1.0; })), xgrad::invalid_argument, "alpha");
    CHECK_ERROR(optim::rmsprop(m, with([](auto& o) { o.eps = 0.0; })), xgrad::invalid_argument, "eps");
    CHECK_ERROR(optim::rmsprop(m, with([](auto& o) { o.momentum = std::nan(""); })), xgrad::invalid_argument,
                "momentum");
    CHECK_ERROR(optim::rmsprop(m, with([](auto& o) { o.weight_decay = -0.1; })), xgrad::invalid_argument,
                "weight_decay");
}
