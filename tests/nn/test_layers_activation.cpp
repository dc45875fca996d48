// The parameter-free modules of nn/include/xgrad/nn/activation.hpp: each activation module is
// its op with the module's options, parameters are checked at construction, and dropout2d
// drops whole channels in both layouts.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "tests/support/check_error.hpp"
#include "xgrad/nn.hpp"
#include "xgrad/xgrad.hpp"

using namespace xgrad;

namespace
{
    double max_abs_diff(const tensor& a, const tensor& b)
    {
        const std::vector<double> x = to_vector(a), y = to_vector(b);
        REQUIRE(x.size() == y.size());
        double d = 0.0;
        for (std::size_t i = 0; i < x.size(); ++i)
            d = std::max(d, std::abs(x[i] - y[i]));
        return d;
    }
}

TEST_CASE("activation modules apply their op with their options")
{
    generator gen(7);
    const tensor x = randn({2, 3, 4}, gen, dtype::float64) * 3.0;
    struct row
    {
        std::shared_ptr<nn::module> layer;
        tensor expected;
        const char* description;
    };
    const row rows[] = {
        {std::make_shared<nn::identity>(), x, "identity"},
        {std::make_shared<nn::sigmoid>(), sigmoid(x), "sigmoid"},
        {std::make_shared<nn::tanh>(), xgrad::tanh(x), "tanh"},
        {std::make_shared<nn::silu>(), silu(x), "silu"},
        {std::make_shared<nn::relu6>(), relu6(x), "relu6"},
        {std::make_shared<nn::hardsigmoid>(), hardsigmoid(x), "hardsigmoid"},
        {std::make_shared<nn::hardswish>(), hardswish(x), "hardswish"},
        {std::make_shared<nn::leaky_relu>(0.2), leaky_relu(x, 0.2), "leaky_relu(negative_slope=0.2)"},
        {std::make_shared<nn::elu>(0.5), elu(x, 0.5), "elu(alpha=0.5)"},
        {std::make_shared<nn::gelu>("tanh"), gelu(x, "tanh"), "gelu(approximate='tanh')"},
        {std::make_shared<nn::softplus>(2.0), softplus(x, 2.0), "softplus(beta=2)"},
        {std::make_shared<nn::softmax>(-1), softmax(x, -1), "softmax(dim=-1)"},
        {std::make_shared<nn::log_softmax>(1), log_softmax(x, 1), "log_softmax(dim=1)"},
    };
    for (const row& r : rows)
    {
        INFO(r.description);
        CHECK(max_abs_diff((*r.layer)(x), r.expected) == 0.0);
        CHECK(r.layer->describe() == r.description);
        CHECK(r.layer->parameters().empty());
    }
    // Gradients flow through a module as through its op.
    const tensor xg = x.detach().requires_grad_(true);
    const tensor via_module = grad({sum(nn::hardswish()(xg))}, {xg})[0];
    const tensor via_op = grad({sum(hardswish(xg))}, {xg})[0];
    CHECK(max_abs_diff(via_module, via_op) == 0.0);
}

TEST_CASE("activation modules refuse bad parameters when built, naming the op")
{
    CHECK_ERROR(nn::leaky_relu(std::nan("")), std::invalid_argument, "leaky_relu", "negative_slope");
    CHECK_ERROR(nn::elu(HUGE_VAL), std::invalid_argument, "elu", "alpha");
    CHECK_ERROR(nn::gelu("fast"), std::invalid_argument, "gelu", "'fast'");
    CHECK_ERROR(nn::softplus(0.0), std::invalid_argument, "softplus", "beta");
    CHECK_ERROR(nn::lambda("", [](const tensor& t) { return t; }), xgrad::invalid_argument, "name");
    CHECK_ERROR(nn::lambda("f", nullptr), xgrad::invalid_argument, "f: the function is empty");
    CHECK_ERROR(nn::softmax(3)(zeros({2, 3})), std::invalid_argument, "softmax");
}

TEST_CASE("a lambda module wraps a function of one's own")
{
    nn::lambda twice(
        "twice", [](const tensor& t) { return t * 2.0; }, "factor=2");
    const tensor x = full({3}, 1.5, dtype::float64);
    CHECK(to_vector(twice(x)) == std::vector<double>{3.0, 3.0, 3.0});
    CHECK(twice.type_name() == "twice");
    CHECK(twice.describe() == "twice(factor=2)");
}

TEST_CASE("dropout2d zeroes whole channels in training, in both layouts, and is the identity in eval")
{
    const double p = 0.5;
    for (const char* format : {"NCHW", "NHWC"})
    {
        INFO(format);
        const bool last = std::string(format) == "NHWC";
        const shape_type shape = last ? shape_type{8, 5, 6, 16} : shape_type{8, 16, 5, 6};
        const tensor x = full(shape, 1.0, dtype::float64);
        nn::dropout2d drop(p, 11, format);
        const std::vector<double> y = to_vector(drop(x));
        // Every (n, c) plane is all 0 or all 1 / (1 - p).
        std::int64_t dropped = 0;
        for (std::int64_t n = 0; n < 8; ++n)
            for (std::int64_t c = 0; c < 16; ++c)
            {
                std::vector<double> plane;
                for (std::int64_t h = 0; h < 5; ++h)
                    for (std::int64_t w = 0; w < 6; ++w)
                        plane.push_back(last ? y[((n * 5 + h) * 6 + w) * 16 + c] : y[((n * 16 + c) * 5 + h) * 6 + w]);
                const double v = plane.front();
                CHECK((v == 0.0 || v == 1.0 / (1.0 - p)));
                for (double e : plane)
                    CHECK(e == v);
                dropped += v == 0.0;
            }
        // 128 planes, each dropped with probability 1/2: 64 +- 8 (one standard deviation is
        // sqrt(128 / 4) = 5.7); outside [34, 94] has probability below 1e-7.
        CHECK(dropped >= 34);
        CHECK(dropped <= 94);
        drop.eval();
        CHECK(max_abs_diff(drop(x), x) == 0.0);
        drop.train();
        drop.reseed(11);
        const std::vector<double> again = to_vector(drop(x));
        CHECK(again == y);
    }
    CHECK_ERROR(nn::dropout2d(1.0), xgrad::invalid_argument, "dropout2d", "[0, 1)");
    CHECK_ERROR(nn::dropout2d(0.5, 0, "NDHWC"), xgrad::invalid_argument, "dropout2d", "'NDHWC'");
    CHECK_ERROR(nn::dropout2d()(zeros({2, 3, 4})), xgrad::invalid_argument, "dropout2d", "4-D", "[2, 3, 4]");
}
