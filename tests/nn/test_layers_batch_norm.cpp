// The batch-norm layers (xgrad::nn): batch_norm2d and batch_norm3d (running statistics,
// training and eval formulas, layouts, options, state dicts, errors, gradients) against hand
// computations in double, gradients of the first two orders through a layer against finite
// differences in float64, and the ReLU fusion (forward_relu, and in nn::sequential). The
// module base is tested in test_layers_module.cpp (same executable, test_layers).
#include <doctest/doctest.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "layers_test_helpers.hpp"
#include "tests/support/check_error.hpp"
#include "xgrad/layers.hpp"
#include "xgrad/xgrad.hpp"

using namespace xgrad;
using namespace layers_test;

namespace
{
    /// Per-channel statistics of x computed in double: mean, biased and unbiased variance.
    struct channel_stats
    {
        std::vector<double> mean, var, unbiased_var;
    };

    /// Channel of row-major element i of a tensor of `shape` whose channels are dimension cd.
    std::int64_t channel_of(std::int64_t i, const shape_type& shape, std::int64_t cd)
    {
        std::int64_t inner = 1;
        for (std::size_t d = static_cast<std::size_t>(cd) + 1; d < shape.size(); ++d)
            inner *= shape[d];
        return (i / inner) % shape[static_cast<std::size_t>(cd)];
    }

    channel_stats stats_of(const tensor& x, std::int64_t cd)
    {
        const std::vector<double> v = to_vector(x);
        const std::int64_t C = x.size(cd);
        const double R = static_cast<double>(x.numel() / C);
        channel_stats s{std::vector<double>(C, 0.0), std::vector<double>(C, 0.0), {}};
        for (std::int64_t i = 0; i < x.numel(); ++i)
            s.mean[channel_of(i, x.shape(), cd)] += v[i] / R;
        for (std::int64_t i = 0; i < x.numel(); ++i)
        {
            const std::int64_t c = channel_of(i, x.shape(), cd);
            s.var[c] += (v[i] - s.mean[c]) * (v[i] - s.mean[c]) / R;
        }
        for (double b : s.var)
            s.unbiased_var.push_back(b * R / (R - 1));
        return s;
    }

    /// (x - mean_c) / sqrt(var_c + eps) * scale_c + offset_c, in double.
    std::vector<double> normalised(const tensor& x, std::int64_t cd, const std::vector<double>& mean,
                                   const std::vector<double>& var, const std::vector<double>& scale,
                                   const std::vector<double>& offset, float eps)
    {
        const std::vector<double> v = to_vector(x);
        std::vector<double> y(v.size());
        for (std::int64_t i = 0; i < x.numel(); ++i)
        {
            const auto c = static_cast<std::size_t>(channel_of(i, x.shape(), cd));
            y[i] = (v[i] - mean[c]) / std::sqrt(var[c] + static_cast<double>(eps)) * scale[c] + offset[c];
        }
        return y;
    }

    /// Replaces the layer's scale and offset by random values (an "optimizer step").
    void randomise_affine(nn::batch_norm_base& bn, generator& gen)
    {
        no_grad guard;
        const std::int64_t C = bn.num_features();
        const dtype dt = bn.options().dtype;
        bn.set_parameter("weight", (randn({C}, gen, dtype::float64) * 0.5 + 1.0).to(dt));
        bn.set_parameter("bias", randn({C}, gen, dtype::float64).to(dt));
    }
}

TEST_CASE("batch_norm2d: running statistics after several training steps (momentum, Bessel's correction)")
{
    struct setting
    {
        dtype dt;
        std::optional<float> momentum;
        double tol;
    };
    // float32: statistics accumulated in float32 over R = 50 values (relative error ~1e-6).
    for (const setting& st : {setting{dtype::float32, 0.1f, 1e-5}, setting{dtype::float64, 0.3f, 1e-12},
                              setting{dtype::float64, std::nullopt, 1e-12}})
    {
        INFO(name(st.dt) << " momentum " << (st.momentum ? std::to_string(*st.momentum) : "none"));
        nn::batch_norm_options o(3);
        o.dtype = st.dt;
        o.momentum = st.momentum;
        nn::batch_norm2d bn(o);
        CHECK(bn.options().data_format == "NCHW");
        std::vector<double> rm(3, 0.0), rv(3, 1.0);
        generator gen(1);
        for (int step = 1; step <= 4; ++step)
        {
            const tensor x = (randn({2, 3, 5, 5}, gen, dtype::float64) * (1.0 + step) + 0.5 * step).to(st.dt);
            const channel_stats s = stats_of(x, 1);
            const tensor y = bn(x);
            // Training output: normalised with the batch's biased variance.
            check_close(y, normalised(x, 1, s.mean, s.var, {1, 1, 1}, {0, 0, 0}, o.eps), 10 * st.tol);
            const double f = st.momentum ? static_cast<double>(*st.momentum)
                                         : static_cast<double>(static_cast<float>(1.0 / step));
            for (std::size_t c = 0; c < 3; ++c)
            {
                rm[c] = (1 - f) * rm[c] + f * s.mean[c];
                rv[c] = (1 - f) * rv[c] + f * s.unbiased_var[c];
            }
            check_close(bn.running_mean(), rm, st.tol);
            check_close(bn.running_var(), rv, st.tol);
            CHECK(bn.num_batches_tracked().item<std::int64_t>() == step);
            CHECK(bn.running_mean().dtype() == st.dt);
            CHECK(bn.num_batches_tracked().dtype() == dtype::int64);
        }
    }
}

TEST_CASE("batch_norm2d: eval normalises with the running statistics and updates nothing")
{
    nn::batch_norm2d bn(4);
    generator gen(2);
    for (int step = 0; step < 3; ++step)
        bn(randn({3, 4, 3, 3}, gen) * 2.0 + 1.0);
    randomise_affine(bn, gen);
    bn.eval();
    const std::vector<double> rm = to_vector(bn.running_mean()), rv = to_vector(bn.running_var());
    const tensor x = randn({2, 4, 3, 3}, gen) * 3.0;
    const tensor y = bn(x);
    check_close(y, normalised(x, 1, rm, rv, to_vector(bn.scale()), to_vector(bn.offset()), 1e-5f), 1e-5);
    CHECK(to_vector(bn.running_mean()) == rm);
    CHECK(to_vector(bn.running_var()) == rv);
    CHECK(bn.num_batches_tracked().item<std::int64_t>() == 3);
    // A single value per channel is fine in eval mode (no batch statistics needed).
    CHECK(bn(randn({1, 4, 1, 1}, gen)).shape() == shape_type{1, 4, 1, 1});
}

TEST_CASE("batch_norm2d: switching between training and eval")
{
    nn::batch_norm2d bn(2);
    generator gen(3);
    const tensor x = randn({4, 2, 3, 3}, gen) * 2.0 + 3.0;
    CHECK(bn.is_training());
    const tensor y_train = bn(x);
    const std::vector<double> rm1 = to_vector(bn.running_mean());

    bn.eval();
    CHECK_FALSE(bn.is_training());
    const tensor y_eval = bn(x);
    CHECK(to_vector(bn.running_mean()) == rm1); // eval updates nothing
    CHECK(bn.num_batches_tracked().item<std::int64_t>() == 1);
    // Different statistics: training uses the batch's, eval the running ones.
    const std::vector<double> a = to_vector(y_train), b = to_vector(y_eval);
    CHECK(std::abs(a[0] - b[0]) > 1e-3);
    const channel_stats s = stats_of(x, 1);
    check_close(y_eval, normalised(x, 1, rm1, to_vector(bn.running_var()), {1, 1}, {0, 0}, 1e-5f), 1e-5);

    bn.train();
    CHECK(bn.is_training());
    check_close(bn(x), normalised(x, 1, s.mean, s.var, {1, 1}, {0, 0}, 1e-5f), 1e-5);
    CHECK(bn.num_batches_tracked().item<std::int64_t>() == 2);
    CHECK(to_vector(bn.running_mean()) != rm1);
}

TEST_CASE("batch_norm2d: without running statistics or affine parameters")
{
    generator gen(4);
    const tensor x = randn({3, 2, 2, 3}, gen) + 2.0;
    const channel_stats s = stats_of(x, 1);
    {
        nn::batch_norm_options o(2);
        o.track_running_stats = false;
        nn::batch_norm2d bn(o);
        CHECK(bn.named_buffers().empty());
        CHECK_FALSE(bn.running_mean().defined());
        CHECK(names_of(bn.named_parameters()) == std::vector<std::string>{"weight", "bias"});
        const std::vector<double> want = normalised(x, 1, s.mean, s.var, {1, 1}, {0, 0}, 1e-5f);
        check_close(bn(x), want, 1e-5);
        bn.eval(); // batch statistics in eval too
        check_close(bn(x), want, 1e-5);
        CHECK(bn.state_dict().size() == 2);
        CHECK_ERROR(bn(randn({1, 2, 1, 1}, gen)), xgrad::invalid_argument, "more than 1 value", "[1, 2, 1, 1]");
    }
    {
        nn::batch_norm_options o(2);
        o.affine = false;
        nn::batch_norm2d bn(o);
        CHECK(bn.parameters().empty());
        CHECK_FALSE(bn.scale().defined());
        check_close(bn(x), normalised(x, 1, s.mean, s.var, {1, 1}, {0, 0}, 1e-5f), 1e-5);
        CHECK_FALSE(bn(x).requires_grad());
        const tensor xg = x.detach().requires_grad_();
        const tensor y = bn(xg);
        CHECK(y.requires_grad());
        CHECK(grad({sum(square(y))}, {xg})[0].shape() == x.shape());
    }
}

TEST_CASE("batch_norm2d: parameters get gradients through backward (training and eval)")
{
    generator gen(5);
    nn::batch_norm_options o(3);
    o.dtype = dtype::float64;
    o.eps = 1e-3f;
    nn::batch_norm2d bn(o);
    randomise_affine(bn, gen);
    tensor x = (randn({2, 3, 3, 2}, gen, dtype::float64) * 1.5 + 0.5).requires_grad_();
    const tensor w = randn({2, 3, 3, 2}, gen, dtype::float64);
    const std::vector<double> wv = to_vector(w);
    for (bool training : {true, false})
    {
        INFO((training ? "training" : "eval"));
        bn.train(training);
        bn.zero_grad();
        const channel_stats s = stats_of(x, 1);
        const std::vector<double> mean = training ? s.mean : to_vector(bn.running_mean());
        const std::vector<double> var = training ? s.var : to_vector(bn.running_var());
        sum(bn(x) * w).backward();
        // d/d offset_c = Σ w, d/d scale_c = Σ w·x̂ with x̂ = (x - mean_c) / sqrt(var_c + eps).
        const std::vector<double> xhat = normalised(x, 1, mean, var, {1, 1, 1}, {0, 0, 0}, o.eps);
        std::vector<double> ds(3, 0.0), db(3, 0.0);
        for (std::int64_t i = 0; i < x.numel(); ++i)
        {
            const auto c = static_cast<std::size_t>(channel_of(i, x.shape(), 1));
            ds[c] += wv[i] * xhat[i];
            db[c] += wv[i];
        }
        REQUIRE(bn.scale().grad().defined());
        check_close(bn.scale().grad(), ds, 1e-12);
        check_close(bn.offset().grad(), db, 1e-12);
        REQUIRE(x.grad().defined());
        CHECK(x.grad().shape() == x.shape());
        x.zero_grad();
    }
}

TEST_CASE("batch_norm2d: NHWC and NCHW agree on a permuted input")
{
    generator gen(6);
    nn::batch_norm_options oc(5), ol(5);
    ol.data_format = "NHWC";
    nn::batch_norm2d first(oc), last(ol);
    CHECK(last.channel_dim() == 3);
    randomise_affine(first, gen);
    {
        no_grad guard;
        last.set_parameter("weight", first.scale().detach().contiguous() + 0.0);
        last.set_parameter("bias", first.offset().detach().contiguous() + 0.0);
    }
    for (int step = 0; step < 3; ++step)
    {
        const tensor x = randn({2, 5, 3, 4}, gen) * 2.0 - 1.0; // NCHW
        const tensor w = randn({2, 5, 3, 4}, gen);
        const tensor xl = x.permute({0, 2, 3, 1}); // NHWC view, not contiguous
        const tensor y1 = first(x), y2 = last(xl);
        check_close(y2.permute({0, 3, 1, 2}).contiguous(), y1, 1e-5);
        check_close(last.running_mean(), first.running_mean(), 1e-5);
        check_close(last.running_var(), first.running_var(), 1e-5);
        first.zero_grad();
        last.zero_grad();
        sum(y1 * w).backward();
        sum(y2 * w.permute({0, 2, 3, 1})).backward();
        check_close(last.scale().grad(), first.scale().grad(), 1e-4);
        check_close(last.offset().grad(), first.offset().grad(), 1e-4);
    }
    first.eval();
    last.eval();
    const tensor x = randn({3, 5, 2, 2}, gen);
    check_close(last(x.permute({0, 2, 3, 1})).permute({0, 3, 1, 2}).contiguous(), first(x), 1e-5);
}

TEST_CASE("batch_norm3d: channels first and last, running statistics, eval")
{
    generator gen(8);
    nn::batch_norm_options ol(3);
    ol.data_format = "NDHWC";
    nn::batch_norm3d first(3), last(ol);
    CHECK(first.options().data_format == "NCDHW");
    CHECK(first.input_rank() == 5);
    CHECK(last.channel_dim() == 4);
    std::vector<double> rm(3, 0.0), rv(3, 1.0);
    for (int step = 0; step < 3; ++step)
    {
        const tensor x = randn({2, 3, 2, 3, 2}, gen) * 1.5 + 0.5; // NCDHW
        const channel_stats s = stats_of(x, 1);
        const tensor y1 = first(x), y2 = last(x.permute({0, 2, 3, 4, 1}));
        check_close(y1, normalised(x, 1, s.mean, s.var, {1, 1, 1}, {0, 0, 0}, 1e-5f), 1e-5);
        check_close(y2.permute({0, 4, 1, 2, 3}).contiguous(), y1, 1e-5);
        const double f = 0.1f; // the default momentum, a float
        for (std::size_t c = 0; c < 3; ++c)
        {
            rm[c] = (1 - f) * rm[c] + f * s.mean[c];
            rv[c] = (1 - f) * rv[c] + f * s.unbiased_var[c];
        }
        check_close(first.running_mean(), rm, 1e-5);
        check_close(first.running_var(), rv, 1e-5);
        check_close(last.running_var(), rv, 1e-5);
    }
    first.eval();
    const tensor x = randn({1, 3, 2, 2, 2}, gen);
    check_close(
        first(x),
        normalised(x, 1, to_vector(first.running_mean()), to_vector(first.running_var()), {1, 1, 1}, {0, 0, 0}, 1e-5f),
        1e-5);
    CHECK_ERROR(first(randn({2, 3, 4, 4}, gen)), xgrad::invalid_argument, "batch_norm3d", "rank-5", "[2, 3, 4, 4]",
                "[N, C, D, H, W]");
    CHECK_ERROR(last(randn({2, 2, 2, 2, 4}, gen)), xgrad::invalid_argument, "3 channels", "dimension 4",
                "[2, 2, 2, 2, 4]");
}

TEST_CASE("batch_norm: clear errors for bad options and inputs")
{
    generator gen(9);
    nn::batch_norm2d bn(3);
    CHECK_ERROR(bn(randn({2, 3, 4}, gen)), xgrad::invalid_argument, "batch_norm2d", "rank-4", "[2, 3, 4]",
                "[N, C, H, W]");
    CHECK_ERROR(bn(randn({2, 4, 5, 5}, gen)), xgrad::invalid_argument, "3 channels", "dimension 1", "[2, 4, 5, 5]");
    CHECK_ERROR(bn(randn({2, 3, 2, 2}, gen, dtype::float64)), xgrad::invalid_argument, "float64", "float32");
    CHECK_ERROR(bn(zeros({2, 3, 2, 2}, dtype::int64)), xgrad::invalid_argument, "int64");
    CHECK_ERROR(bn(tensor()), xgrad::invalid_argument, "undefined");
    CHECK_ERROR(bn(randn({1, 3, 1, 1}, gen)), xgrad::invalid_argument, "more than 1 value per channel", "[1, 3, 1, 1]");
    CHECK(bn.num_batches_tracked().item<std::int64_t>() == 0); // failed calls change nothing
    // 16-bit inputs work with float32 parameters.
    CHECK(bn(randn({2, 3, 2, 2}, gen).to(dtype::float16)).dtype() == dtype::float16);
    // An empty batch gives an empty output and updates nothing.
    CHECK(bn(zeros({0, 3, 2, 2})).shape() == shape_type{0, 3, 2, 2});
    CHECK(bn.num_batches_tracked().item<std::int64_t>() == 1);

    auto make2d = [](auto change) {
        nn::batch_norm_options o(3);
        change(o);
        return nn::batch_norm2d(o);
    };
    CHECK_ERROR(make2d([](auto& o) { o.num_features = 0; }), xgrad::invalid_argument, "num_features", "0");
    CHECK_ERROR(make2d([](auto& o) { o.eps = -1.0f; }), xgrad::invalid_argument, "eps");
    CHECK_ERROR(make2d([](auto& o) { o.momentum = 1.5f; }), xgrad::invalid_argument, "momentum", "1.5");
    CHECK_ERROR(make2d([](auto& o) { o.dtype = dtype::float16; }), xgrad::invalid_argument, "float16");
    CHECK_ERROR(make2d([](auto& o) { o.data_format = "NCDHW"; }), xgrad::invalid_argument, "\"NCHW\"", "\"NHWC\"",
                "\"NCDHW\"");
    nn::batch_norm_options o3(3);
    o3.data_format = "NHWC";
    CHECK_ERROR(nn::batch_norm3d(o3), xgrad::invalid_argument, "batch_norm3d", "\"NDHWC\"", "\"NHWC\"");
}

TEST_CASE("batch_norm2d: state_dict / load_state_dict round trip and errors")
{
    generator gen(10);
    nn::batch_norm2d a(3);
    for (int step = 0; step < 3; ++step)
        a(randn({4, 3, 2, 2}, gen) * 2.0 + 1.0);
    randomise_affine(a, gen);
    const nn::module::state_dict_type sd = a.state_dict();
    std::vector<std::string> keys;
    for (const auto& [n, t] : sd)
        keys.push_back(n);
    CHECK(keys == std::vector<std::string>{"bias", "num_batches_tracked", "running_mean", "running_var", "weight"});
    CHECK_FALSE(sd.at("weight").requires_grad());

    nn::batch_norm2d b(3);
    const auto loaded = b.load_state_dict(sd);
    CHECK(loaded.missing_keys.empty());
    CHECK(loaded.unexpected_keys.empty());
    for (const auto& [n, t] : sd)
        CHECK(to_vector(b.state_dict().at(n)) == to_vector(t));
    a.eval();
    b.eval();
    const tensor x = randn({2, 3, 2, 2}, gen);
    CHECK(to_vector(b(x)) == to_vector(a(x)));
    // b's parameters are leaves of their own: gradients through b do not reach a.
    CHECK(b.scale().requires_grad());
    CHECK_FALSE(b.scale().is_same(a.scale()));
    sum(b(x)).backward();
    CHECK(b.scale().grad().defined());
    CHECK_FALSE(a.scale().grad().defined());

    // Errors: everything is checked before anything is replaced.
    nn::batch_norm2d c(3);
    auto missing = sd;
    missing.erase("running_var");
    CHECK_ERROR(c.load_state_dict(missing), xgrad::invalid_argument, "batch_norm2d", "missing", "'running_var'");
    auto wrong_shape = sd;
    wrong_shape["weight"] = ones({4});
    CHECK_ERROR(c.load_state_dict(wrong_shape), xgrad::invalid_argument, "'weight'", "[4]", "[3]");
    auto wrong_dtype = sd;
    wrong_dtype["running_mean"] = zeros({3}, dtype::float64);
    wrong_dtype["num_batches_tracked"] = zeros({});
    CHECK_ERROR(c.load_state_dict(wrong_dtype), xgrad::invalid_argument, "'running_mean'", "float64", "float32",
                "'num_batches_tracked'", "int64");
    auto unexpected = sd;
    unexpected["shift"] = zeros({3});
    CHECK_ERROR(c.load_state_dict(unexpected), xgrad::invalid_argument, "'shift'", "not in the module");
    auto undefined = sd;
    undefined["bias"] = tensor();
    CHECK_ERROR(c.load_state_dict(undefined), xgrad::invalid_argument, "'bias'", "undefined");
    CHECK(to_vector(c.running_mean()) == std::vector<double>{0, 0, 0});
    CHECK(to_vector(c.scale()) == std::vector<double>{1, 1, 1});
    CHECK(c.num_batches_tracked().item<std::int64_t>() == 0);

    // Non-strict: missing and unexpected names are reported, the rest is loaded.
    missing["shift"] = zeros({3});
    const auto partial = c.load_state_dict(missing, false);
    CHECK(partial.missing_keys == std::vector<std::string>{"running_var"});
    CHECK(partial.unexpected_keys == std::vector<std::string>{"shift"});
    CHECK(to_vector(c.running_mean()) == to_vector(sd.at("running_mean")));
    CHECK(to_vector(c.running_var()) == std::vector<double>{1, 1, 1});
    CHECK_ERROR(c.load_state_dict(wrong_shape, false), xgrad::invalid_argument, "'weight'", "[4]");
}

TEST_CASE("batch_norm: gradcheck and gradgradcheck through the layer (float64, training and eval)")
{
    struct layout_case
    {
        const char* format;
        shape_type shape;
    };
    for (const layout_case& lc :
         {layout_case{"NCHW", {2, 3, 2, 2}}, layout_case{"NHWC", {2, 2, 2, 3}}, layout_case{"NCDHW", {2, 3, 2, 1, 2}}})
    {
        nn::batch_norm_options o(3);
        o.dtype = dtype::float64;
        o.data_format = lc.format;
        o.eps = 1e-3f;
        std::unique_ptr<nn::batch_norm_base> bn;
        if (lc.shape.size() == 4)
            bn = std::make_unique<nn::batch_norm2d>(o);
        else
            bn = std::make_unique<nn::batch_norm3d>(o);
        generator gen(12);
        for (int step = 0; step < 2; ++step) // non-trivial running statistics for eval
            bn->forward(randn(lc.shape, gen, dtype::float64) * 2.0 + 1.0);
        const tensor x = (randn(lc.shape, gen, dtype::float64) * 2.0 + 0.5).requires_grad_();
        const tensor scale = (randn({3}, gen, dtype::float64) * 0.5 + 1.0).requires_grad_();
        const tensor offset = randn({3}, gen, dtype::float64).requires_grad_();
        // The layer's parameters are the checked inputs; in training the statistics are
        // recomputed from x by every forward, as the finite differences need.
        auto f = [&bn](const std::vector<tensor>& in) {
            bn->set_parameter("weight", in[1]);
            bn->set_parameter("bias", in[2]);
            return std::vector<tensor>{bn->forward(in[0])};
        };
        for (bool training : {true, false})
        {
            INFO((std::string(lc.format) + (training ? " training" : " eval")));
            bn->train(training);
            const gradcheck_result g1 = gradcheck(f, {x, scale, offset});
            CHECK_MESSAGE(g1.ok, g1.message);
            const gradcheck_result g2 = gradgradcheck(f, {x, scale, offset});
            CHECK_MESSAGE(g2.ok, g2.message);
        }
    }
}

TEST_CASE("batch_norm: forward_relu is relu(forward) (outputs, gradients, running statistics)")
{
    generator gen(13);
    for (const char* format : {"NHWC", "NCDHW"})
    {
        INFO(format);
        nn::batch_norm_options o(3);
        o.dtype = dtype::float64;
        o.data_format = format;
        const bool is3d = std::string(format).size() == 5;
        auto make = [&]() -> std::unique_ptr<nn::batch_norm_base> {
            if (is3d)
                return std::make_unique<nn::batch_norm3d>(o);
            return std::make_unique<nn::batch_norm2d>(o);
        };
        const auto fused = make(), plain = make();
        randomise_affine(*fused, gen);
        plain->load_state_dict(fused->state_dict());
        const shape_type shape = is3d ? shape_type{2, 3, 2, 2, 3} : shape_type{2, 3, 4, 3};
        for (int step = 0; step < 4; ++step)
        {
            const bool training = step < 3;
            INFO("step " << step);
            fused->train(training);
            plain->train(training);
            const tensor x = (randn(shape, gen, dtype::float64) * 2.0 + 0.3).requires_grad_();
            const tensor w = randn(shape, gen, dtype::float64);
            const tensor y1 = fused->forward_relu(x), y2 = relu(plain->forward(x));
            CHECK(y1.grad_fn()->name() == "fused_batch_norm_relu");
            check_close(y1, y2, 1e-12);
            const auto g1 = grad({sum(y1 * w)}, {x, fused->scale(), fused->offset()});
            const auto g2 = grad({sum(y2 * w)}, {x, plain->scale(), plain->offset()});
            for (std::size_t k = 0; k < 3; ++k)
                check_close(g1[k], g2[k], 1e-12);
            check_close(fused->running_mean(), plain->running_mean(), 1e-12);
            check_close(fused->running_var(), plain->running_var(), 1e-12);
            CHECK(fused->num_batches_tracked().item<std::int64_t>() ==
                  plain->num_batches_tracked().item<std::int64_t>());
        }
        CHECK_ERROR(fused->forward_relu(randn({2, 2, 2, 2}, gen, dtype::float64)), xgrad::invalid_argument,
                    is3d ? "batch_norm3d" : "batch_norm2d", "[2, 2, 2, 2]");
    }
}

TEST_CASE("sequential fuses batch_norm2d + relu: same outputs, gradients, running statistics, state and description")
{
    generator gen(14);
    auto bn = [](std::int64_t c) {
        nn::batch_norm_options o(c);
        o.dtype = dtype::float64;
        return std::make_shared<nn::batch_norm2d>(o);
    };
    nn::sequential seq;
    const auto bn1 = seq.add("bn1", bn(3));
    seq.add("relu1", std::make_shared<nn::relu>());
    const auto bn2 = seq.add("bn2", bn(3));
    seq.add("relu2", std::make_shared<nn::relu>());
    const auto bn3 = seq.add("bn3", bn(3)); // not followed by a relu: not fused
    REQUIRE(nn::fuse(seq) == 2);
    for (const auto& b : {bn1, bn2, bn3})
        randomise_affine(*b, gen);
    // The same layers called one by one.
    const auto s1 = bn(3), s2 = bn(3), s3 = bn(3);
    s1->load_state_dict(bn1->state_dict());
    s2->load_state_dict(bn2->state_dict());
    s3->load_state_dict(bn3->state_dict());
    nn::relu act;
    const std::vector<std::string> keys = names_of(seq.named_parameters());
    for (int step = 0; step < 4; ++step)
    {
        const bool training = step < 3;
        INFO("step " << step);
        seq.train(training);
        for (const auto& s : {s1, s2, s3})
            s->train(training);
        const tensor x = (randn({2, 3, 3, 2}, gen, dtype::float64) * 1.5 + 0.2).requires_grad_();
        const tensor w = randn({2, 3, 3, 2}, gen, dtype::float64);
        const tensor h = seq(x);
        CHECK(h.grad_fn()->name() == "fused_batch_norm"); // bn3
        const tensor want = s3->forward(act(s2->forward(act(s1->forward(x)))));
        check_close(h, want, 1e-12);
        std::vector<tensor> wrt1 = {x}, wrt2 = {x};
        for (const auto& [b, s] : {std::pair{bn1, s1}, {bn2, s2}, {bn3, s3}})
        {
            wrt1.insert(wrt1.end(), {b->scale(), b->offset()});
            wrt2.insert(wrt2.end(), {s->scale(), s->offset()});
        }
        const auto g1 = grad({sum(h * w)}, wrt1), g2 = grad({sum(want * w)}, wrt2);
        for (std::size_t k = 0; k < g1.size(); ++k)
            check_close(g1[k], g2[k], 1e-12);
        for (const auto& [b, s] : {std::pair{bn1, s1}, {bn2, s2}, {bn3, s3}})
            for (const auto& [n, t] : s->state_dict())
                check_close(b->state_dict().at(n), t, 1e-12);
    }
    // A relu child is fused into the batch norm before it: the output's node is the fused op.
    nn::sequential pair;
    pair.add("bn", bn(3));
    pair.add("relu", std::make_shared<nn::relu>());
    CHECK(pair(randn({2, 3, 2, 2}, gen, dtype::float64)).grad_fn()->name() == "relu"); // before the pass
    nn::fuse(pair);
    CHECK(pair(randn({2, 3, 2, 2}, gen, dtype::float64)).grad_fn()->name() == "fused_batch_norm_relu");
    // Nothing about the model changes: parameters, state dict and description.
    CHECK(names_of(seq.named_parameters()) == keys);
    CHECK(seq.state_dict().size() == 3 * 5);
    CHECK(seq.describe() == "sequential(\n  (bn1): " + bn1->describe() + "\n  (relu1): relu\n  (bn2): " +
                                bn2->describe() + "\n  (relu2): relu\n  (bn3): " + bn3->describe() + "\n)");
    CHECK_ERROR(seq(randn({2, 4, 3, 2}, gen, dtype::float64)), xgrad::invalid_argument, "sequential: in 'bn1'",
                "batch_norm2d", "3 channels");
}
