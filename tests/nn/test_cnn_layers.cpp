// The CNN layers (xgrad::nn::conv2d, linear, pooling, relu, flatten, dropout, sequential) and
// weight initialisation: each layer against the op or hand computation it stands for, the
// statistics of the initialisers and of dropout, clear errors, and gradients of the first two
// orders through a whole small CNN (float64 finite differences).
#include <doctest/doctest.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "tests/support/check_error.hpp"
#include "xgrad/layers.hpp"
#include "xgrad/xgrad.hpp"

using namespace xgrad;

namespace
{
    double max_abs_diff(const tensor& a, const tensor& b)
    {
        REQUIRE(a.shape() == b.shape());
        const auto x = to_vector(a), y = to_vector(b);
        double m = 0;
        for (std::size_t i = 0; i < x.size(); ++i)
            m = std::max(m, std::abs(x[i] - y[i]));
        return m;
    }

    /// Sample mean and variance of a tensor's elements.
    std::pair<double, double> moments(const tensor& t)
    {
        const auto v = to_vector(t);
        double s = 0, s2 = 0;
        for (double e : v)
            s += e;
        const double mean = s / static_cast<double>(v.size());
        for (double e : v)
            s2 += (e - mean) * (e - mean);
        return {mean, s2 / static_cast<double>(v.size())};
    }
}

TEST_CASE("init: fans and the initialisers' distributions")
{
    CHECK(nn::init::fans({64, 32, 3, 3}) == std::pair<std::int64_t, std::int64_t>{32 * 9, 64 * 9});
    CHECK(nn::init::fans({10, 20}) == std::pair<std::int64_t, std::int64_t>{20, 10});
    CHECK(nn::init::fans({7}) == std::pair<std::int64_t, std::int64_t>{7, 7});
    CHECK_ERROR(nn::init::fans({}), xgrad::invalid_argument, "rank 0");
    CHECK_ERROR(nn::init::fans({3, 0}), xgrad::invalid_argument, "[3, 0]");

    // n = 200 * 500 = 1e5 samples. The sample variance of U(-b, b) has relative standard error
    // sqrt(4/5 / n) ~ 0.0028 and that of a normal sqrt(2 / n) ~ 0.0045, so 3% is over 6 sigma;
    // the mean's standard error is sqrt(var / n) ~ 0.003 sqrt(var), checked at 0.02 sqrt(var).
    const shape_type shape{200, 500};
    generator gen(3);
    {
        const tensor w = nn::init::kaiming_uniform(shape, gen);
        const double bound = std::sqrt(2.0) * std::sqrt(3.0 / 500.0);
        const auto [m, v] = moments(w);
        CHECK(std::abs(v / (bound * bound / 3.0) - 1.0) < 0.03);
        CHECK(std::abs(m) < 0.02 * std::sqrt(v));
        for (double e : to_vector(w))
            REQUIRE(std::abs(e) <= bound);
    }
    {
        const tensor w = nn::init::kaiming_normal(shape, gen, nn::init::nonlinearity::relu,
                                                  nn::init::fan_mode::fan_out);
        const auto [m, v] = moments(w);
        CHECK(std::abs(v / (2.0 / 200.0) - 1.0) < 0.03);
        CHECK(std::abs(m) < 0.02 * std::sqrt(v));
    }
    {
        const tensor w = nn::init::xavier_uniform(shape, gen);
        const double bound = std::sqrt(6.0 / 700.0);
        const auto [m, v] = moments(w);
        CHECK(std::abs(v / (bound * bound / 3.0) - 1.0) < 0.03);
    }
    {
        const tensor w = nn::init::xavier_normal(shape, gen, 2.0);
        const auto [m, v] = moments(w);
        CHECK(std::abs(v / (4.0 * 2.0 / 700.0) - 1.0) < 0.03);
    }
    // Reproducible from the seed, different across seeds.
    generator a(9), b(9), c(10);
    const tensor wa = nn::init::kaiming_uniform({4, 5}, a), wb = nn::init::kaiming_uniform({4, 5}, b),
                 wc = nn::init::kaiming_uniform({4, 5}, c);
    CHECK(max_abs_diff(wa, wb) == 0.0);
    CHECK(max_abs_diff(wa, wc) > 0.0);

    // initialize() draws what the named initialiser draws.
    generator d(11), e(11);
    CHECK(max_abs_diff(nn::init::initialize(nn::init::scheme::xavier_normal, {6, 7}, d),
                       nn::init::xavier_normal({6, 7}, e)) == 0.0);
    CHECK(max_abs_diff(nn::init::initialize(nn::init::scheme::fan_in_uniform, {6, 7}, d),
                       nn::init::fan_in_uniform({6, 7}, 7, e)) == 0.0);
}

TEST_CASE("conv2d layer: parameters, forward = the op, layouts agree, describe, errors")
{
    generator gen(1);
    nn::conv2d_options o(4, 6, {3, 2});
    o.stride = {2, 1};
    o.padding = {1, 0};
    o.groups = 2;
    o.dtype = dtype::float64;
    nn::conv2d conv(o, gen);
    CHECK(conv.parameter("weight").shape() == shape_type{6, 2, 3, 2});
    CHECK(conv.parameter("bias").shape() == shape_type{6});
    CHECK(conv.parameter("weight").requires_grad());
    // Weight and bias drawn from U(-1/sqrt(fan_in), 1/sqrt(fan_in)) by default, fan_in = 2 * 3 * 2.
    for (double e : to_vector(conv.parameter("bias")))
        CHECK(std::abs(e) <= 1.0 / std::sqrt(12.0));
    for (double e : to_vector(conv.parameter("weight")))
        CHECK(std::abs(e) <= 1.0 / std::sqrt(12.0));
    // Another scheme is another draw: He's bound is sqrt(6) times larger.
    nn::conv2d_options ok = o;
    ok.weight_init = nn::init::scheme::kaiming_uniform;
    generator g1(1), g2(1);
    nn::conv2d he(ok, g1);
    CHECK(max_abs_diff(he.parameter("weight"), nn::init::kaiming_uniform({6, 2, 3, 2}, g2, nn::init::nonlinearity::relu,
                                                                         nn::init::fan_mode::fan_in, dtype::float64)) ==
          0.0);

    const tensor x = randn({2, 4, 7, 5}, gen, dtype::float64);
    conv2d_params p;
    p.stride = o.stride;
    p.padding = o.padding;
    p.groups = 2;
    const tensor expected = conv2d(x, conv.parameter("weight"), conv.parameter("bias"), p);
    CHECK(max_abs_diff(conv(x), expected) == 0.0);

    // The same weights in NHWC give the permuted result.
    nn::conv2d_options oh = o;
    oh.data_format = "NHWC";
    nn::conv2d conv_h(oh, gen);
    conv_h.load_state_dict(conv.state_dict());
    const tensor yh = conv_h(x.permute({0, 2, 3, 1}).contiguous());
    CHECK(max_abs_diff(yh.permute({0, 3, 1, 2}), expected) < 1e-12);

    CHECK(conv.describe().find("conv2d(4, 6, kernel=[3, 2], stride=[2, 1], padding=[1, 0], groups=2") == 0);

    nn::conv2d_options bad(4, 6, 3);
    bad.groups = 4;
    CHECK_ERROR(nn::conv2d(bad, gen), xgrad::invalid_argument, "conv2d", "groups");
    bad = nn::conv2d_options(0, 6, 3);
    CHECK_ERROR(nn::conv2d(bad, gen), xgrad::invalid_argument, "in_channels");
    bad = nn::conv2d_options(4, 6, 0);
    CHECK_ERROR(nn::conv2d(bad, gen), xgrad::invalid_argument, "kernel_size");
    bad = nn::conv2d_options(4, 6, 3);
    bad.padding = {-1, 0};
    CHECK_ERROR(nn::conv2d(bad, gen), xgrad::invalid_argument, "padding");
    bad = nn::conv2d_options(4, 6, 3);
    bad.data_format = "HWCN";
    CHECK_ERROR(nn::conv2d(bad, gen), xgrad::invalid_argument, "data_format", "HWCN");
    CHECK_ERROR(conv(randn({2, 3, 7, 5}, gen, dtype::float64)), xgrad::invalid_argument, "4 input channels",
                "[2, 3, 7, 5]");
    CHECK_ERROR(conv(randn({4, 7, 5}, gen, dtype::float64)), xgrad::invalid_argument, "rank-4", "[4, 7, 5]");

    // Without bias there is no "bias" parameter.
    nn::conv2d_options nb(1, 2, 3);
    nb.bias = false;
    nn::conv2d conv_nb(nb, gen);
    CHECK_FALSE(conv_nb.has_parameter("bias"));
    CHECK(conv_nb.parameters().size() == 1);
}

TEST_CASE("conv2d and linear layers with compute_dtype: the op on cast operands, gradients to the parameters")
{
    // Mixed precision: the layer's output and its parameters' gradients must be exactly the
    // composition cast -> op (the same ops, so the same bits), whatever kernels run.
    generator gen(3);
    nn::conv2d_options o(16, 20, 3);
    o.padding = {1, 1};
    o.data_format = "NHWC";
    o.compute_dtype = dtype::bfloat16;
    nn::conv2d conv(o, gen);
    CHECK(conv.parameter("weight").dtype() == dtype::float32);
    CHECK(conv.describe().find("compute_dtype=bfloat16") != std::string::npos);
    const tensor x = randn({2, 5, 6, 16}, gen);
    const tensor y = conv.forward(x);
    CHECK(y.dtype() == dtype::bfloat16);
    const tensor w = conv.parameter("weight").detach().requires_grad_();
    const tensor b = conv.parameter("bias").detach().requires_grad_();
    conv2d_params p;
    p.padding = {1, 1};
    const tensor want = conv2d(cast(x, dtype::bfloat16), cast(w, dtype::bfloat16), cast(b, dtype::bfloat16), p, "NHWC");
    CHECK(max_abs_diff(y, want) == 0.0);
    const tensor g = randn(y.shape(), gen).to(dtype::bfloat16);
    sum(y * g).backward();
    sum(want * g).backward();
    CHECK(conv.parameter("weight").grad().dtype() == dtype::float32);
    CHECK(max_abs_diff(conv.parameter("weight").grad(), w.grad()) == 0.0);
    CHECK(max_abs_diff(conv.parameter("bias").grad(), b.grad()) == 0.0);
    // The rounding to bfloat16 is there: the float32 convolution differs.
    CHECK(max_abs_diff(y.to(dtype::float32), conv2d(x, conv.parameter("weight"), conv.parameter("bias"), p, "NHWC")) >
          0.0);

    // A float32 linear after bfloat16 activations: the input is cast up, the output is float32.
    nn::linear_options lo(16, 4);
    lo.compute_dtype = dtype::float32;
    nn::linear fc(lo, gen);
    const tensor xl = randn({3, 16}, gen).to(dtype::bfloat16);
    const tensor yl = fc.forward(xl);
    CHECK(yl.dtype() == dtype::float32);
    CHECK(max_abs_diff(yl, matmul_add(cast(xl, dtype::float32), fc.parameter("weight").transpose(0, 1),
                                      fc.parameter("bias"))) == 0.0);

    nn::conv2d_options bad(2, 2, 1);
    bad.compute_dtype = dtype::int64;
    CHECK_THROWS_AS(nn::conv2d(bad, gen), xgrad::invalid_argument);
}

TEST_CASE("linear layer: y = x W^T + b, batched inputs, errors")
{
    generator gen(2);
    nn::linear_options o(3, 2);
    o.dtype = dtype::float64;
    nn::linear fc(o, gen);
    const double w[6] = {1, 2, 3, -1, 0.5, 4}, b[2] = {0.25, -2};
    fc.set_parameter("weight", from_host(w, {2, 3}, dtype::float64));
    fc.set_parameter("bias", from_host(b, {2}, dtype::float64));
    const double xv[6] = {1, 0, -1, 2, 3, 0.5};
    const auto y = to_vector(fc(from_host(xv, {2, 3}, dtype::float64)));
    // Row 0: [1, 0, -1] -> 1 - 3 + 0.25, -1 - 4 - 2; row 1: [2, 3, 0.5] -> 2 + 6 + 1.5 + 0.25, -2 + 1.5 + 2 - 2.
    CHECK(y == std::vector<double>{-1.75, -7.0, 9.75, -0.5});
    CHECK(fc(randn({4, 5, 3}, gen, dtype::float64)).shape() == shape_type{4, 5, 2});
    CHECK_ERROR(fc(randn({2, 4}, gen, dtype::float64)), xgrad::invalid_argument, "linear", "[..., 3]", "[2, 4]");
    CHECK_ERROR(nn::linear(0, 2, gen), xgrad::invalid_argument, "in_features");
    CHECK(fc.describe() == "linear(3, 2, bias=true)");
}

TEST_CASE("pooling, relu and flatten layers call their ops")
{
    generator gen(3);
    const tensor x = randn({2, 3, 6, 4}, gen);
    pool2d_params p;
    p.kernel = {2, 2};
    CHECK(max_abs_diff(nn::max_pool2d(2)(x), max_pool2d(x, p)) == 0.0);
    CHECK(max_abs_diff(nn::avg_pool2d(2)(x), avg_pool2d(x, p)) == 0.0);
    CHECK(nn::adaptive_avg_pool2d({1, 1})(x).shape() == shape_type{2, 3, 1, 1});
    // Global average pooling is the mean over the spatial axes.
    CHECK(max_abs_diff(nn::adaptive_avg_pool2d({1, 1})(x), mean(x, {2, 3}, true)) < 1e-6);
    const tensor xh = x.permute({0, 2, 3, 1}).contiguous();
    CHECK(max_abs_diff(nn::max_pool2d(2, "NHWC")(xh).permute({0, 3, 1, 2}), max_pool2d(x, p)) == 0.0);
    CHECK_ERROR(nn::max_pool2d(2, "NCWH"), xgrad::invalid_argument, "data_format");
    CHECK_ERROR(nn::adaptive_avg_pool2d({0, 1}), xgrad::invalid_argument, "output_size");

    CHECK(max_abs_diff(nn::relu()(x), relu(x)) == 0.0);
    CHECK(nn::flatten()(x).shape() == shape_type{2, 72});
    CHECK(nn::flatten(0, 1)(x).shape() == shape_type{6, 6, 4});
    CHECK(nn::flatten(2)(x).shape() == shape_type{2, 3, 24});
    CHECK_ERROR(nn::flatten(3, 1)(x), xgrad::invalid_argument, "flatten", "[2, 3, 6, 4]");
}

TEST_CASE("dropout: drop rate, scaling, evaluation identity, gradient, reseeding")
{
    const double p = 0.3;
    nn::dropout drop(p, 42);
    const tensor x = ones({100000}).requires_grad_();
    const tensor y = drop(x);
    const auto v = to_vector(y);
    std::int64_t zeros_seen = 0;
    for (double e : v)
    {
        if (e == 0.0)
            ++zeros_seen;
        else
            REQUIRE(std::abs(e - 1.0 / (1.0 - p)) < 1e-6); // float32 rounding of 1/0.7
    }
    // Binomial(1e5, 0.3): standard deviation of the fraction sqrt(0.21 / 1e5) ~ 0.00145, so
    // 0.01 is about 7 sigma.
    CHECK(std::abs(static_cast<double>(zeros_seen) / 1e5 - p) < 0.01);
    // The gradient is the same mask and scale.
    sum(y).backward();
    CHECK(to_vector(x.grad()) == v);
    // Reseeding reproduces the mask; evaluation mode is the identity.
    drop.reseed(42);
    CHECK(to_vector(drop(x)) == v);
    drop.eval();
    CHECK(drop(x).is_same(x));
    CHECK_ERROR(nn::dropout(1.0), xgrad::invalid_argument, "dropout", "[0, 1)");
    CHECK_ERROR(nn::dropout(-0.1), xgrad::invalid_argument, "dropout");
}

TEST_CASE("sequential: order, names, errors name the child; module::to")
{
    generator gen(4);
    nn::sequential seq;
    auto fc = seq.add("fc", std::make_shared<nn::linear>(3, 2, gen));
    seq.add(std::make_shared<nn::relu>());
    CHECK(seq.has_parameter("fc.weight"));
    CHECK(seq.named_children()[1].first == "1");
    const tensor x = randn({5, 3}, gen);
    CHECK(max_abs_diff(seq(x), relu((*fc)(x))) == 0.0);
    CHECK(nn::count_parameters(seq) == 3 * 2 + 2);
    CHECK(seq.describe().find("(fc): linear(3, 2, bias=true)") != std::string::npos);
    CHECK_ERROR(seq(randn({5, 4}, gen)), xgrad::invalid_argument, "in 'fc'", "[5, 4]");
    CHECK_ERROR(nn::sequential()(x), xgrad::invalid_argument, "empty");
    CHECK_ERROR(seq.add("fc", std::make_shared<nn::relu>()), xgrad::invalid_argument, "'fc'", "already");
    // A container without a forward of its own says so.
    struct holder : nn::module
    {
    };
    holder h;
    CHECK_ERROR(h.forward(x), xgrad::invalid_argument, "no single-input forward");

    // to(cpu) keeps the values; the parameters stay leaves that require grad.
    const auto before = to_vector(seq.parameter("fc.weight"));
    seq.to(cpu_device);
    CHECK(to_vector(seq.parameter("fc.weight")) == before);
    CHECK(seq.parameter("fc.weight").requires_grad());
    CHECK(seq.parameter("fc.weight").is_leaf());
}

TEST_CASE("a small CNN: gradcheck and gradgradcheck through every layer (float64, both layouts)")
{
    for (const std::string format : {"NCHW", "NHWC"})
    {
        CAPTURE(format);
        generator gen(5);
        nn::sequential net;
        nn::conv2d_options co(2, 3, 3);
        co.padding = {1, 1};
        co.data_format = format;
        co.dtype = dtype::float64;
        auto conv = net.add("conv", std::make_shared<nn::conv2d>(co, gen));
        nn::batch_norm_options bo(3);
        bo.data_format = format;
        bo.dtype = dtype::float64;
        bo.eps = 1e-3f;
        net.add("bn", std::make_shared<nn::batch_norm2d>(bo));
        net.add("relu", std::make_shared<nn::relu>());
        net.add("pool", std::make_shared<nn::max_pool2d>(2, format));
        net.add("flatten", std::make_shared<nn::flatten>());
        nn::linear_options lo(3 * 2 * 2, 4);
        lo.dtype = dtype::float64;
        auto fc = net.add("fc", std::make_shared<nn::linear>(lo, gen));

        const shape_type xs = format == "NCHW" ? shape_type{3, 2, 4, 4} : shape_type{3, 4, 4, 2};
        const tensor x = randn(xs, gen, dtype::float64).requires_grad_();
        const std::int64_t l[3] = {1, 3, 0};
        const tensor labels = from_host(l, {3}, dtype::int64);
        const tensor cw = conv->parameter("weight").detach().requires_grad_();
        const tensor fw = fc->parameter("weight").detach().requires_grad_();
        // The checked inputs are the image and two weights; the loss is what training
        // differentiates.
        auto f = [&](const std::vector<tensor>& in) {
            conv->set_parameter("weight", in[1]);
            fc->set_parameter("weight", in[2]);
            return std::vector<tensor>{cross_entropy(net(in[0]), labels)};
        };
        const gradcheck_result g1 = gradcheck(f, {x, cw, fw});
        CHECK_MESSAGE(g1.ok, g1.message);
        const gradcheck_result g2 = gradgradcheck(f, {x, cw, fw});
        CHECK_MESSAGE(g2.ok, g2.message);
    }
}
