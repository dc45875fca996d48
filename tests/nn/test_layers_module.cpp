// The module base (xgrad::nn::module): registration order and nested names, training and
// eval modes reaching the children, zero_grad, state dicts, registration and replacement
// errors, and parameters replaced through set_parameter by an optimizer step. The batch-norm
// layers are tested in test_layers_batch_norm.cpp (same executable, test_layers).
#include <doctest/doctest.h>

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "layers_test_helpers.hpp"
#include "tests/support/check_error.hpp"
#include "xgrad/layers.hpp"
#include "xgrad/xgrad.hpp"

using namespace xgrad;
using namespace layers_test;

namespace
{
    /// A module with its own parameter and buffer and two batch-norm children.
    class small_net final : public nn::module
    {
    public:
        small_net()
        {
            register_parameter("bias", zeros({3}));
            register_buffer("steps", zeros({}, dtype::int64));
            m_bn1 = register_module("bn1", std::make_shared<nn::batch_norm2d>(3));
            m_bn2 = register_module("bn2", std::make_shared<nn::batch_norm2d>(3));
        }
        std::string_view type_name() const noexcept override { return "small_net"; }
        tensor forward(const tensor& x) override
        {
            return m_bn2->forward(m_bn1->forward(x)) + reshape(parameter("bias"), {1, 3, 1, 1});
        }
        void add_parameter(const std::string& n, const tensor& t) { register_parameter(n, t); }
        void add_buffer(const std::string& n, const tensor& t) { register_buffer(n, t); }
        void add_child(const std::string& n, std::shared_ptr<nn::module> m) { register_module(n, std::move(m)); }

        std::shared_ptr<nn::batch_norm2d> m_bn1, m_bn2;
    };
}

TEST_CASE("module: registration order, nested names, modes, zero_grad")
{
    small_net net;
    CHECK(names_of(net.named_parameters()) ==
          std::vector<std::string>{"bias", "bn1.weight", "bn1.bias", "bn2.weight", "bn2.bias"});
    CHECK(names_of(net.named_parameters(false)) == std::vector<std::string>{"bias"});
    CHECK(names_of(net.named_buffers()) == std::vector<std::string>{"steps", "bn1.running_mean", "bn1.running_var",
                                                                    "bn1.num_batches_tracked", "bn2.running_mean",
                                                                    "bn2.running_var", "bn2.num_batches_tracked"});
    CHECK(net.parameters().size() == 5);
    CHECK(net.buffers().size() == 7);
    CHECK(net.named_children().size() == 2);
    for (const tensor& p : net.parameters())
    {
        CHECK(p.requires_grad());
        CHECK(p.is_leaf());
    }
    for (const tensor& b : net.buffers())
        CHECK_FALSE(b.requires_grad());
    CHECK(net.parameter("bn2.weight").is_same(net.m_bn2->scale()));
    CHECK(net.has_buffer("bn1.running_var"));
    CHECK_FALSE(net.has_buffer("bn1.weight"));
    CHECK_FALSE(net.has_parameter("bn3.weight"));

    // Modes propagate to the children.
    CHECK(net.is_training());
    net.eval();
    CHECK_FALSE(net.is_training());
    CHECK_FALSE(net.m_bn1->is_training());
    net.train();
    CHECK(net.m_bn2->is_training());
    net.train(false);
    CHECK_FALSE(net.m_bn2->is_training());
    net.train();

    // backward reaches every parameter; zero_grad clears them all.
    generator gen(7);
    const tensor x = randn({2, 3, 2, 2}, gen);
    sum(square(net.forward(x))).backward();
    for (const tensor& p : net.parameters())
        CHECK(p.grad().defined());
    net.zero_grad();
    for (const tensor& p : net.parameters())
        CHECK_FALSE(p.grad().defined());

    // state_dict: every parameter and buffer under its full name.
    const auto sd = net.state_dict();
    CHECK(sd.size() == 12);
    CHECK(sd.count("bn2.num_batches_tracked") == 1);
    CHECK(sd.count("steps") == 1);
    CHECK(to_vector(sd.at("bn1.num_batches_tracked")) == std::vector<double>{1});
    small_net other;
    other.load_state_dict(sd);
    CHECK(to_vector(other.buffer("bn2.running_mean")) == to_vector(net.buffer("bn2.running_mean")));
}

TEST_CASE("module: registration and replacement errors")
{
    small_net net;
    CHECK_ERROR(net.add_parameter("bias", zeros({3})), xgrad::invalid_argument, "small_net", "'bias'", "exists");
    CHECK_ERROR(net.add_buffer("bn1", zeros({3})), xgrad::invalid_argument, "'bn1'", "child");
    CHECK_ERROR(net.add_parameter("a.b", zeros({3})), xgrad::invalid_argument, "'a.b'", "'.'");
    CHECK_ERROR(net.add_parameter("", zeros({3})), xgrad::invalid_argument, "empty");
    CHECK_ERROR(net.add_parameter("labels", zeros({3}, dtype::int64)), xgrad::invalid_argument, "int64");
    CHECK_ERROR(net.add_parameter("none", tensor()), xgrad::invalid_argument, "'none'", "defined");
    CHECK_ERROR(net.add_child("null", nullptr), xgrad::invalid_argument, "null");
    CHECK_ERROR(net.parameter("bn1.nope"), xgrad::invalid_argument, "'bn1.nope'");
    CHECK_ERROR(net.buffer("bias"), xgrad::invalid_argument, "'bias'");

    CHECK_ERROR(net.set_parameter("bn1.weight", ones({4})), xgrad::invalid_argument, "small_net", "'bn1.weight'", "[4]",
                "[3]");
    CHECK_ERROR(net.set_parameter("bias", zeros({3}, dtype::float64)), xgrad::invalid_argument, "'bias'", "float64",
                "float32");
    CHECK_ERROR(net.set_parameter("nope", zeros({3})), xgrad::invalid_argument, "'nope'");
    CHECK_ERROR(net.set_buffer("steps", zeros({})), xgrad::invalid_argument, "'steps'", "float32", "int64");
    const tensor w = ones({3}).requires_grad_();
    CHECK_ERROR(net.set_parameter("bias", w * 2.0), xgrad::invalid_argument, "'bias'", "leaf", "mul");
}

TEST_CASE("module: an optimizer step replaces parameters through set_parameter")
{
    nn::batch_norm2d bn(3);
    generator gen(11);
    const tensor x = randn({4, 3, 2, 2}, gen);
    const tensor w = randn({4, 3, 2, 2}, gen);
    const tensor old_scale = bn.scale();
    sum(bn(x) * w).backward();
    {
        no_grad guard;
        for (const auto& [n, p] : bn.named_parameters())
            bn.set_parameter(n, p - 0.1 * p.grad());
    }
    const tensor s = bn.scale();
    CHECK_FALSE(s.is_same(old_scale));
    CHECK(s.is_leaf());
    CHECK(s.requires_grad());
    CHECK_FALSE(s.grad().defined());
    check_close(s, to_vector(old_scale - 0.1 * old_scale.grad()), 0);
    sum(bn(x) * w).backward();
    CHECK(bn.scale().grad().defined());

    // A frozen parameter stays frozen across a replacement.
    tensor frozen = bn.offset();
    frozen.requires_grad_(false);
    {
        no_grad guard;
        bn.set_parameter("bias", frozen + 1.0);
    }
    CHECK_FALSE(bn.offset().requires_grad());
}

TEST_CASE("module: describe() lists a custom module's children, nested ones indented")
{
    small_net net;
    const std::string bn = nn::batch_norm2d(3).describe();
    // Before, a custom module described itself as its type name alone.
    CHECK(net.describe() == "small_net(\n  (bn1): " + bn + "\n  (bn2): " + bn + "\n)");
    auto outer = std::make_shared<nn::sequential>();
    outer->add("block", std::make_shared<small_net>());
    outer->add("relu", std::make_shared<nn::relu>());
    CHECK(outer->describe() ==
          "sequential(\n  (block): small_net(\n    (bn1): " + bn + "\n    (bn2): " + bn + "\n  )\n  (relu): relu\n)");
    CHECK(nn::relu().describe() == "relu");
}
