// Models built from the newer layers against the same models in PyTorch
// (tests/data/torch/models.json, tools/torch_golden/models.py): a residual network with group
// norm and SiLU, and an encoder-decoder with a transposed convolution and bilinear
// upsampling. PyTorch's state dicts load into xgrad's modules under the same names, and the
// outputs, losses and every parameter's gradient agree; then each model trains.
//
// Tolerance 1e-10 of the tensor's magnitude: float64 on both sides through about ten layers,
// each rounding its sums differently (~1e-15 relative per layer), and the normalisations
// divide by standard deviations of O(0.1-1), which can amplify the differences by an order of
// magnitude or two. A wrong name, layout or formula moves values by O(0.01) or more.
#include <doctest/doctest.h>

#include <cmath>
#include <memory>
#include <string>

#include "tests/support/check_error.hpp"
#include "tests/support/torch_golden.hpp"
#include "xgrad/nn.hpp"
#include "xgrad/xgrad.hpp"

using namespace xgrad;

namespace
{
    nn::conv2d_options conv(std::int64_t in, std::int64_t out, std::int64_t k, bool bias)
    {
        nn::conv2d_options o(in, out, k);
        o.padding = {k / 2, k / 2};
        o.bias = bias;
        o.dtype = dtype::float64;
        return o;
    }

    std::shared_ptr<nn::group_norm> gn(std::int64_t groups, std::int64_t channels)
    {
        nn::group_norm_options o(groups, channels);
        o.dtype = dtype::float64;
        return std::make_shared<nn::group_norm>(o);
    }

    /// silu(x + gn2(conv2(silu(gn1(conv1(x)))))), PyTorch's Block of models.py.
    class block final : public nn::module
    {
    public:
        block(std::int64_t c, generator& gen)
            : m_conv1(register_module("conv1", std::make_shared<nn::conv2d>(conv(c, c, 3, false), gen))),
              m_gn1(register_module("gn1", gn(2, c))),
              m_conv2(register_module("conv2", std::make_shared<nn::conv2d>(conv(c, c, 3, false), gen))),
              m_gn2(register_module("gn2", gn(2, c)))
        {
        }
        tensor forward(const tensor& x) override
        {
            return silu(x + (*m_gn2)((*m_conv2)(silu((*m_gn1)((*m_conv1)(x))))));
        }

    private:
        std::shared_ptr<nn::conv2d> m_conv1;
        std::shared_ptr<nn::group_norm> m_gn1;
        std::shared_ptr<nn::conv2d> m_conv2;
        std::shared_ptr<nn::group_norm> m_gn2;
    };

    std::shared_ptr<nn::sequential> resnet(generator& gen)
    {
        auto net = std::make_shared<nn::sequential>();
        net->add(std::make_shared<nn::conv2d>(conv(3, 8, 3, false), gen));
        net->add(gn(2, 8));
        net->add(std::make_shared<nn::silu>());
        net->add(std::make_shared<block>(8, gen));
        net->add(std::make_shared<nn::adaptive_avg_pool2d>(std::array<std::int64_t, 2>{1, 1}));
        net->add(std::make_shared<nn::flatten>());
        nn::linear_options fc(8, 4);
        fc.dtype = dtype::float64;
        net->add(std::make_shared<nn::linear>(fc, gen));
        return net;
    }

    std::shared_ptr<nn::sequential> encoder_decoder(generator& gen)
    {
        auto net = std::make_shared<nn::sequential>();
        nn::conv2d_options down = conv(1, 4, 3, true);
        down.stride = {2, 2};
        net->add(std::make_shared<nn::conv2d>(down, gen));
        net->add(gn(2, 4));
        net->add(std::make_shared<nn::silu>());
        nn::conv_transpose2d_options up(4, 4, 3);
        up.stride = {2, 2};
        up.padding = {1, 1};
        up.output_padding = {1, 1};
        up.dtype = dtype::float64;
        net->add(std::make_shared<nn::conv_transpose2d>(up, gen));
        net->add(std::make_shared<nn::silu>());
        upsample_params twice;
        twice.scale_factor = std::array<double, 2>{2.0, 2.0};
        twice.mode = "bilinear";
        net->add(std::make_shared<nn::upsample>(twice));
        net->add(std::make_shared<nn::conv2d>(conv(4, 1, 3, true), gen));
        return net;
    }

    tensor loss_of(const std::string& name, const tensor& y, const tensor& target)
    {
        return name == "encoder_decoder" ? mse_loss(y, target) : cross_entropy(y, target);
    }
}

TEST_CASE("a residual network with group norm and SiLU, and an encoder-decoder, equal PyTorch's and train")
{
    const auto doc = torch_golden::load("models.json");
    REQUIRE(doc.at("cases").size() == 2);
    for (const auto& c : doc.at("cases"))
    {
        const std::string name = c.at("name");
        INFO(name);
        generator gen(1);
        const auto net = name == "encoder_decoder" ? encoder_decoder(gen) : resnet(gen);
        nn::module::state_dict_type state;
        for (const auto& [key, t] : c.at("state").items())
            state[key] = torch_golden::make_tensor(t);
        net->load_state_dict(state); // strict: the names are PyTorch's
        const tensor x = torch_golden::input(c, "x"), target = torch_golden::input(c, "target");
        const tensor y = (*net)(x);
        torch_golden::check_close(y, c.at("outputs").at("y"), 1e-10, "y");
        const tensor loss = loss_of(name, y, target);
        torch_golden::check_close(loss, c.at("outputs").at("loss"), 1e-10, "loss");
        const auto params = net->named_parameters();
        std::vector<tensor> ps;
        for (const auto& [key, p] : params)
            ps.push_back(p);
        const std::vector<tensor> g = grad({loss}, ps);
        REQUIRE(c.at("grads").size() == params.size());
        for (std::size_t i = 0; i < params.size(); ++i)
            torch_golden::check_close(g[i], c.at("grads").at(params[i].first), 1e-10, "d loss / d " + params[i].first);

        // Plain gradient descent on the one batch: the loss must fall well below its start.
        const double start = to_vector(loss)[0];
        double last = start;
        for (int step = 0; step < 30; ++step)
        {
            const tensor l = loss_of(name, (*net)(x), target);
            last = to_vector(l)[0];
            const std::vector<tensor> gs = grad({l}, ps);
            no_grad guard;
            for (std::size_t i = 0; i < ps.size(); ++i)
                net->update_parameter(params[i].first, ps[i] - gs[i] * 0.1);
        }
        CHECK(last < 0.5 * start);
    }
}

TEST_CASE("conv_transpose2d and upsample layers call their ops; weight() and bias() are the parameters")
{
    generator gen(5);
    nn::conv_transpose2d_options o(4, 6, {3, 2});
    o.stride = {2, 1};
    o.output_padding = {1, 0};
    o.groups = 2;
    nn::conv_transpose2d up(o, gen);
    CHECK(up.weight().shape() == shape_type{4, 3, 3, 2});
    CHECK(up.bias().shape() == shape_type{6});
    CHECK(up.describe() == "conv_transpose2d(4, 6, kernel=[3, 2], stride=[2, 1], padding=[0, 0], "
                           "output_padding=[1, 0], groups=2, bias=true, NCHW)");
    const tensor x = randn({2, 4, 3, 3}, gen);
    conv_transpose2d_params p;
    p.stride = {2, 1};
    p.output_padding = {1, 0};
    p.groups = 2;
    const tensor want = conv_transpose2d(x, up.weight(), up.bias(), p);
    CHECK(to_vector(up(x)) == to_vector(want));
    // PyTorch's initialisation bound: 1 / sqrt(fan_in), fan_in = weight.size(1) * KH * KW = 18.
    for (double b : to_vector(up.bias()))
        CHECK(std::abs(b) <= 1.0 / std::sqrt(18.0));
    o.output_padding = {2, 0};
    CHECK_ERROR(nn::conv_transpose2d(o, gen), xgrad::invalid_argument, "conv_transpose2d", "output_padding");

    nn::conv2d c(nn::conv2d_options(3, 5, 3), gen);
    CHECK(c.weight().is_same(c.parameter("weight")));
    CHECK(c.bias().is_same(c.parameter("bias")));
    nn::linear_options lo(3, 2);
    lo.bias = false;
    nn::linear fc(lo, gen);
    CHECK(fc.weight().shape() == shape_type{2, 3});
    CHECK(!fc.bias().defined());

    upsample_params u;
    u.size = std::array<std::int64_t, 2>{5, 7};
    nn::upsample resize(u, "NHWC");
    CHECK(resize(zeros({1, 2, 3, 4})).shape() == shape_type{1, 5, 7, 4});
    CHECK(resize.describe() == "upsample(size=[5, 7], mode='nearest', NHWC)");
    u.mode = "area";
    CHECK_ERROR(nn::upsample(u), xgrad::invalid_argument, "upsample", "\"area\"");
}
