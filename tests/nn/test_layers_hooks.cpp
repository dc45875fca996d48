// Module conveniences: forward hooks (also through fused runs), apply, named_modules,
// freezing by name pattern, and the summary's dry run.
#include <doctest/doctest.h>

#include <memory>
#include <string>
#include <vector>

#include "tests/support/check_error.hpp"
#include "xgrad/nn.hpp"
#include "xgrad/xgrad.hpp"

using namespace xgrad;

namespace
{
    std::shared_ptr<nn::sequential> small_cnn(generator& gen)
    {
        auto net = std::make_shared<nn::sequential>();
        net->add("conv", std::make_shared<nn::conv2d>(nn::conv2d_options(1, 4, 3), gen));
        net->add("bn", std::make_shared<nn::batch_norm2d>(4));
        net->add("relu", std::make_shared<nn::relu>());
        net->add("flatten", std::make_shared<nn::flatten>());
        net->add("fc", std::make_shared<nn::linear>(64, 3, gen));
        return net;
    }
}

TEST_CASE("forward hooks see each child's input and output, may replace it, and can be removed")
{
    generator gen(1);
    auto net = small_cnn(gen);
    const tensor x = randn({2, 1, 6, 6}, gen);
    std::vector<std::string> calls;
    const auto children = net->named_children();
    std::vector<std::int64_t> ids;
    for (const auto& [name, m] : children)
        ids.push_back(m->register_forward_hook([&calls, name = name](nn::module&, const tensor& in, const tensor& out) {
            calls.push_back(name + " " + shape_to_string(in.shape()) + " -> " + shape_to_string(out.shape()));
            return tensor();
        }));
    const tensor y = (*net)(x);
    CHECK(calls == std::vector<std::string>{"conv [2, 1, 6, 6] -> [2, 4, 4, 4]", "bn [2, 4, 4, 4] -> [2, 4, 4, 4]",
                                            "relu [2, 4, 4, 4] -> [2, 4, 4, 4]", "flatten [2, 4, 4, 4] -> [2, 64]",
                                            "fc [2, 64] -> [2, 3]"});

    // Fused batch norm + ReLU: with a hook on bn, bn's own output is formed and seen; the
    // model's output is the same function either way.
    nn::fuse(*net);
    calls.clear();
    const tensor fused_hooked = (*net)(x);
    CHECK(calls.size() == 5);
    for (std::size_t i = 0; i < children.size(); ++i)
        children[i].second->remove_forward_hook(ids[i]);
    const tensor fused = (*net)(x);
    CHECK(calls.size() == 5); // removed: nothing more recorded
    const std::vector<double> a = to_vector(fused_hooked), b = to_vector(fused);
    for (std::size_t i = 0; i < a.size(); ++i)
        CHECK(a[i] == doctest::Approx(b[i]).epsilon(1e-5));

    // A hook's result replaces the output.
    const auto id = children.back().second->register_forward_hook(
        [](nn::module&, const tensor&, const tensor& out) { return out * 0.0; });
    for (double v : to_vector((*net)(x)))
        CHECK(v == 0.0);
    CHECK_ERROR(children.back().second->remove_forward_hook(id + 1), xgrad::invalid_argument, "linear",
                "no hook with id");
    CHECK_ERROR(net->register_forward_hook(nullptr), xgrad::invalid_argument, "the hook is empty");
    (void)y;
}

TEST_CASE("apply visits children before parents; named_modules lists every descendant")
{
    generator gen(2);
    auto outer = std::make_shared<nn::sequential>();
    auto inner = outer->add("block", std::make_shared<nn::sequential>());
    inner->add("conv", std::make_shared<nn::conv2d>(nn::conv2d_options(1, 2, 3), gen));
    inner->add("relu", std::make_shared<nn::relu>());
    outer->add("fc", std::make_shared<nn::linear>(2, 2, gen));
    std::vector<std::string> order;
    outer->apply([&order](nn::module& m) { order.emplace_back(m.type_name()); });
    CHECK(order == std::vector<std::string>{"conv2d", "relu", "sequential", "linear", "sequential"});
    std::vector<std::string> names;
    for (const auto& [name, m] : outer->named_modules())
        names.push_back(name);
    CHECK(names == std::vector<std::string>{"block", "block.conv", "block.relu", "fc"});

    // Initialisation through apply: every conv2d's weight redrawn to zero.
    outer->apply([](nn::module& m) {
        if (m.type_name() == "conv2d")
            m.set_parameter("weight", zeros_like(m.parameter("weight")));
    });
    for (double v : to_vector(outer->parameter("block.conv.weight")))
        CHECK(v == 0.0);
}

TEST_CASE("set_requires_grad freezes by pattern; a frozen parameter gets no gradient")
{
    generator gen(3);
    auto net = small_cnn(gen);
    CHECK(net->set_requires_grad("conv.*", false) == 2);
    CHECK(net->set_requires_grad("*.bias", false) == 3); // conv (again), bn, fc
    CHECK(!net->parameter("conv.weight").requires_grad());
    CHECK(net->parameter("fc.weight").requires_grad());
    CHECK_ERROR(net->set_requires_grad("convv.*", false), xgrad::invalid_argument, "'convv.*'", "no parameter");

    const tensor loss = sum(square((*net)(randn({2, 1, 6, 6}, gen))));
    backward({loss});
    CHECK(!net->parameter("conv.weight").grad().defined());
    CHECK(net->parameter("fc.weight").grad().defined());
    CHECK(net->set_requires_grad("conv.weight", true) == 1);
    CHECK(net->parameter("conv.weight").requires_grad());
}

TEST_CASE("summary: output shapes from a dry run that changes nothing, parameter counts, totals")
{
    generator gen(4);
    auto net = small_cnn(gen);
    net->set_requires_grad("conv.*", false);
    const tensor mean_before = net->buffer("bn.running_mean");
    const std::string s = nn::summary(*net, zeros({1, 1, 6, 6}));
    CHECK(s.find("conv (conv2d)") != std::string::npos);
    CHECK(s.find("[1, 4, 4, 4]") != std::string::npos);
    CHECK(s.find("fc (linear)") != std::string::npos);
    CHECK(s.find("[1, 3]") != std::string::npos);
    // conv 4*1*3*3 + 4 = 40, bn 8, fc 64*3 + 3 = 195: 243 in all, 40 frozen.
    CHECK(s.find("Total params: 243") != std::string::npos);
    CHECK(s.find("Trainable params: 203") != std::string::npos);
    CHECK(s.find("Non-trainable params: 40") != std::string::npos);
    CHECK(net->is_training());
    CHECK(net->buffer("bn.running_mean").is_same(mean_before)); // eval mode: statistics untouched
    CHECK(!net->named_children()[0].second->has_forward_hooks());
    // A failing forward leaves the model as it was too.
    CHECK_THROWS_AS(nn::summary(*net, zeros({1, 2, 6, 6})), std::invalid_argument);
    CHECK(net->is_training());
    CHECK(!net->named_children()[0].second->has_forward_hooks());
}
