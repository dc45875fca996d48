// The optimizers' fused step (one sgd_step / adam_step kernel pass per parameter) against
// their composite rule (set_fused(false), the update written with xgrad's elementwise ops,
// kept as the fused step's oracle), and where the fused step writes:
// - the same bits as the composite rule, step after step, for every SGD and Adam/AdamW variant,
//   parameter groups, parameters that first get a gradient at a later step, and every dtype
//   (16-bit ones updated in float32 and rounded once, as both paths do);
// - in a training loop (forward, backward, step) no step after the first gives a parameter or
//   buffer new storage: the data pointers stay, while the versions count every step;
// - storage that something else holds (a state_dict() copy, a view of a parameter, a tensor
//   given to load_state_dict) is never written: those keep their values, and the parameter
//   gets new storage with the composite rule's values.
// Exact equality is the right test: both paths run the same IEEE operations in the same order
// (backends/common/optimizer_math.hpp), and the CPU's fast kernels are built without fma
// contraction (their own test compares them with the reference kernels bit for bit).
#include <doctest/doctest.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "optim_test_helpers.hpp"
#include "xgrad/autograd.hpp"
#include "xgrad/factories.hpp"
#include "xgrad/nn/conv.hpp"
#include "xgrad/nn/module.hpp"
#include "xgrad/ops/elementwise.hpp"
#include "xgrad/ops/reduce.hpp"
#include "xgrad/optim/optimizer.hpp"

using namespace xgrad;
using namespace optim_test;

namespace
{
    using make_fn = std::function<std::unique_ptr<optim::optimizer>(nn::module&)>;

    struct config
    {
        const char* name;
        make_fn make;
    };

    make_fn sgd_with(optim::sgd_options o)
    {
        return [o](nn::module& m) { return std::make_unique<optim::sgd>(m, o); };
    }

    make_fn adam_with(double lr, double decay, bool decoupled, bool groups = false)
    {
        return [=](nn::module& m) {
            optim::adam_options o;
            o.lr = lr;
            o.weight_decay = decay;
            auto opt = std::make_unique<optim::adam>(m, o, decoupled);
            if (groups)
                opt->set_param_groups({{{"b", "inner.v"}, 0.5, 0.0}});
            return opt;
        };
    }

    const std::vector<config> configs{
        {"sgd", sgd_with({0.1, 0.0, 0.0, 0.0, false})},
        {"sgd weight decay", sgd_with({0.1, 0.0, 0.0, 0.05, false})},
        {"sgd momentum", sgd_with({0.1, 0.9, 0.0, 0.0, false})},
        {"sgd dampening", sgd_with({0.05, 0.8, 0.3, 0.0, false})},
        {"sgd nesterov, decay", sgd_with({0.03, 0.7, 0.0, 0.2, true})},
        {"adam", adam_with(1e-2, 0.0, false)},
        {"adam L2", adam_with(1e-2, 0.1, false)},
        {"adamw", adam_with(3e-3, 0.01, true)},
        {"adamw, groups", adam_with(0.01, 0.05, true, true)},
    };

    /// Every tensor of the optimizer's state, as values.
    values_type state_values(const optim::optimizer& opt)
    {
        values_type out;
        for (const auto& [k, t] : opt.state_dict())
            out[k] = to_vector(t);
        return out;
    }

    void* storage_of(const tensor& t) { return t.impl()->m_storage->data(); }

    /// The data pointers of every parameter and buffer, taken without keeping any copy.
    std::map<std::string, void*> pointers(const nn::module& m, const optim::optimizer& opt)
    {
        std::map<std::string, void*> out;
        for (const auto& [n, p] : m.named_parameters())
            out[n] = storage_of(p);
        for (const auto& [k, t] : opt.state_dict())
            if (k != "step")
                out[k] = storage_of(t);
        return out;
    }
}

TEST_CASE("optim: the fused step gives the composite rule's bits")
{
    for (const dtype dt : {dtype::float64, dtype::float32, dtype::float16, dtype::bfloat16})
        for (const config& c : configs)
        {
            INFO("dtype ", name(dt), ", ", std::string(c.name));
            toy fused_model(dt), composite_model(dt);
            auto fused = c.make(fused_model), composite = c.make(composite_model);
            CHECK(fused->fused());
            composite->set_fused(false);
            for (std::uint64_t step = 1; step <= 6; ++step)
            {
                // "inner.v" first gets a gradient at step 3: its buffers start then.
                const std::vector<std::string> names = step < 3 ? std::vector<std::string>{"w", "b"} : all_names;
                set_grads(fused_model, 100 + step, names);
                set_grads(composite_model, 100 + step, names);
                fused->step();
                composite->step();
                CHECK(values_of(fused_model) == values_of(composite_model));
                CHECK(state_values(*fused) == state_values(*composite));
            }
        }
}

TEST_CASE("optim: in a training loop the fused step writes into the parameters' and buffers' own storage")
{
    generator gen(7);
    nn::conv2d_options o(2, 3, 3);
    o.padding = {1, 1};
    nn::conv2d conv(o, gen);
    for (const char* which : {"sgd", "adamw"})
    {
        INFO(std::string(which));
        auto opt = optim::make_optimizer(which, conv, 0.01);
        const tensor x = randn({4, 2, 5, 5}, gen);
        std::map<std::string, void*> first;
        std::uint64_t version = conv.parameter("weight").version();
        for (int step = 0; step < 5; ++step)
        {
            opt->zero_grad();
            const tensor loss = sum(conv.forward(x) * conv.forward(x));
            loss.backward();
            opt->step();
            CHECK(conv.parameter("weight").version() == ++version);
            if (step == 0)
                first = pointers(conv, *opt); // the buffers exist from the first step on
            else
                CHECK(pointers(conv, *opt) == first);
        }
        CHECK(first.size() == (std::string(which) == "sgd" ? 4u : 6u));
    }
}

TEST_CASE("optim: storage that something else holds is never written")
{
    for (const config& c : configs)
    {
        INFO(std::string(c.name));
        toy model(dtype::float32), twin(dtype::float32);
        auto opt = c.make(model), oracle = c.make(twin);
        oracle->set_fused(false);
        auto step_both = [&](std::uint64_t seed) {
            set_grads(model, seed);
            set_grads(twin, seed);
            opt->step();
            oracle->step();
            CHECK(values_of(model) == values_of(twin));
            CHECK(state_values(*opt) == state_values(*oracle));
        };
        step_both(1);

        // A state_dict() copy and a view of a parameter, held across a step.
        const auto snapshot = opt->state_dict();
        const values_type snapshot_values = state_values(*opt);
        const tensor w_view = model.parameter("w").reshape({6});
        const std::vector<double> w_before = to_vector(w_view);
        step_both(2);
        for (const auto& [k, t] : snapshot)
            CHECK(to_vector(t) == snapshot_values.at(k));
        CHECK(to_vector(w_view) == w_before);
        CHECK(storage_of(model.parameter("w")) != storage_of(w_view));
        CHECK(to_vector(model.parameter("w")) != w_before);

        // State given to load_state_dict stays the caller's: the next steps leave it alone.
        auto given = opt->state_dict();
        const values_type given_values = state_values(*opt);
        opt->load_state_dict(given);
        step_both(3);
        step_both(4);
        for (const auto& [k, t] : given)
            CHECK(to_vector(t) == given_values.at(k));
    }
}
