// Optimizer trajectories against PyTorch's (tests/data/torch/optimizers.json,
// tools/torch_golden/optimizers.py): Adagrad with each of its options and RMSprop's variants,
// six steps in float64 from the same parameter and gradients, with the learning rate changed
// between steps, comparing the parameter and every state buffer (by PyTorch's names) after each.
//
// Tolerance 1e-12 of the tensor's magnitude: a step is about ten roundings of O(1) values on
// each side (PyTorch's addcmul/addcdiv may fuse a multiply-add that xgrad rounds twice), and the
// rules damp rather than amplify earlier differences (the step is g / sqrt(sum of g^2) or of its
// average), so after six steps the two differ by ~1e-15. A misplaced decay, a sum started from
// the wrong value or a step count off by one moves values by 1e-3 or more.
#include <doctest/doctest.h>

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tests/support/torch_golden.hpp"
#include "xgrad/nn/module.hpp"
#include "xgrad/optim/adagrad.hpp"
#include "xgrad/optim/rmsprop.hpp"

using namespace xgrad;
using torch_golden::json;

namespace
{
    /// One parameter "p", given.
    class holder final : public nn::module
    {
    public:
        explicit holder(const tensor& p) { register_parameter("p", p); }
        std::string_view type_name() const noexcept override { return "holder"; }
    };

    /// Row k of a stored tensor [steps, ...], as a stored tensor [...].
    json row(const json& t, std::size_t k)
    {
        auto shape = t.at("shape").get<std::vector<std::int64_t>>();
        shape.erase(shape.begin());
        std::size_t n = 1;
        for (const std::int64_t d : shape)
            n *= static_cast<std::size_t>(d);
        const json& data = t.at("data");
        json r = {{"dtype", t.at("dtype")}, {"shape", shape}, {"data", json::array()}};
        for (std::size_t i = k * n; i < (k + 1) * n; ++i)
            r["data"].push_back(data.at(i));
        return r;
    }

    std::unique_ptr<optim::optimizer> make(const std::string& op, const json& o, nn::module& m)
    {
        if (op == "adagrad")
        {
            optim::adagrad_options a;
            a.lr = o.at("lr");
            a.lr_decay = o.at("lr_decay");
            a.weight_decay = o.at("weight_decay");
            a.initial_accumulator_value = o.at("initial_accumulator_value");
            a.eps = o.at("eps");
            a.maximize = o.at("maximize");
            return std::make_unique<optim::adagrad>(m, a);
        }
        REQUIRE_MESSAGE(op == "rmsprop", "no xgrad optimizer for op " << op);
        optim::rmsprop_options r;
        r.lr = o.at("lr");
        r.alpha = o.at("alpha");
        r.eps = o.at("eps");
        r.weight_decay = o.at("weight_decay");
        r.momentum = o.at("momentum");
        r.centered = o.at("centered");
        return std::make_unique<optim::rmsprop>(m, r);
    }
}

TEST_CASE("optimizers: adagrad and rmsprop trajectories equal PyTorch's in float64")
{
    const auto doc = torch_golden::load("optimizers.json");
    REQUIRE(doc.at("cases").size() >= 12);
    for (const auto& c : doc.at("cases"))
    {
        const std::string name = c.at("name");
        INFO(name);
        holder m(torch_golden::input(c, "param"));
        const auto opt = make(c.at("op"), c.at("options"), m);
        const json& grads = c.at("inputs").at("grads");
        const auto lrs = c.at("inputs").at("lrs").at("data").get<std::vector<double>>();
        const json& out = c.at("outputs");
        for (std::size_t k = 0; k < lrs.size(); ++k)
        {
            const std::string at = name + " step " + std::to_string(k + 1);
            opt->set_lr(lrs[k]);
            m.parameter("p").set_grad(torch_golden::make_tensor(row(grads, k)));
            opt->step();
            const auto state = opt->state_dict();
            for (auto it = out.begin(); it != out.end(); ++it)
            {
                const std::string key = it.key() == "param" ? "" : "p." + it.key();
                const tensor got = key.empty() ? m.parameter("p") : state.count(key) ? state.at(key) : tensor();
                REQUIRE_MESSAGE(got.defined(), at << ": no state '" << key << "'");
                torch_golden::check_close(got, row(it.value(), k), 1e-12, at + ": " + it.key());
            }
            // "step" and the buffers PyTorch keeps, no more.
            CHECK(state.size() == out.size());
        }
    }
}
