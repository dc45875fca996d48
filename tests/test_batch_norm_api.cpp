// The TensorFlow-shaped API of the batch-norm ops (xgrad/scope.hpp, xgrad/ops/nn_ops.hpp): the
// classes compile with TensorFlow's signatures, their Attrs chain, their outputs are those of the
// free functions bit for bit, and the scope decides recording and device.
#include <doctest/doctest.h>

#include <cstring>
#include <string>

#include "xgrad/xgrad.hpp"

using namespace xgrad;

namespace
{
    /// Same shape, dtype and bytes (contiguous copies are compared).
    void check_same_bits(const tensor& a, const tensor& b, const char* what)
    {
        INFO(what);
        REQUIRE(a.defined());
        REQUIRE(b.defined());
        REQUIRE(a.shape() == b.shape());
        REQUIRE(a.dtype() == b.dtype());
        CHECK(a.device() == b.device());
        const tensor ac = a.detach().contiguous(), bc = b.detach().contiguous();
        const std::size_t nbytes = static_cast<std::size_t>(a.numel()) * itemsize(a.dtype());
        CHECK(std::memcmp(ac.data_ptr(), bc.data_ptr(), nbytes) == 0);
    }

    batch_norm_attrs free_attrs(const char* format, bool training, float eps, float factor = 1.0f)
    {
        batch_norm_attrs a;
        a.data_format = format;
        a.is_training = training;
        a.epsilon = eps;
        a.exponential_avg_factor = factor;
        return a;
    }

    /// Inputs of one case: x of `shape` with C channels, per-channel tensors of length C.
    struct bn_inputs
    {
        tensor x, dy, scale, offset, mean, variance;
    };

    bn_inputs make_inputs(const shape_type& shape, std::int64_t C, std::uint64_t seed)
    {
        generator gen(seed);
        bn_inputs in;
        in.x = randn(shape, gen) * 2.0 + 0.5;
        in.dy = randn(shape, gen);
        in.scale = rand({C}, gen, dtype::float32, cpu_device, 0.5, 1.5);
        in.offset = randn({C}, gen);
        in.mean = randn({C}, gen) * 0.1;
        in.variance = rand({C}, gen, dtype::float32, cpu_device, 0.5, 2.0);
        return in;
    }
}

TEST_CASE("Scope: the root scope is CPU with recording on; With* return modified copies")
{
    const Scope root = Scope::NewRootScope();
    CHECK(root.device() == cpu_device);
    CHECK(root.records_gradients());

    const Scope quiet = root.WithGradientRecording(false);
    CHECK_FALSE(quiet.records_gradients());
    CHECK(quiet.device() == cpu_device);
    CHECK(root.records_gradients()); // the original is unchanged

    const Scope cpu = root.WithDevice(cpu_device).WithGradientRecording(true);
    CHECK(cpu.device() == cpu_device);
    CHECK(cpu.records_gradients());
    CHECK(root.WithDevice("cpu").device() == cpu_device);
    CHECK_THROWS_AS((void)root.WithDevice("tpu"), std::invalid_argument);

    const Scope gpu = root.WithDevice(device{device_type::cuda, 1});
    CHECK(gpu.device() == device{device_type::cuda, 1});
    CHECK(root.device() == cpu_device);
    CHECK(root.WithDevice("cuda:1").device() == gpu.device());
}

TEST_CASE("Attrs: the contract's defaults, equal to batch_norm_attrs'")
{
    const batch_norm_attrs d;
    const ops::FusedBatchNormV3::Attrs f;
    CHECK(f.epsilon_ == 0.0001f);
    CHECK(f.data_format_ == "NHWC");
    CHECK(f.is_training_);
    CHECK(f.exponential_avg_factor_ == 1.0f);
    CHECK(f.epsilon_ == d.epsilon);
    CHECK(f.data_format_ == d.data_format);
    CHECK(f.is_training_ == d.is_training);
    CHECK(f.exponential_avg_factor_ == d.exponential_avg_factor);

    const ops::FusedBatchNormGradV3::Attrs g3;
    CHECK(g3.epsilon_ == d.epsilon);
    CHECK(g3.data_format_ == d.data_format);
    CHECK(g3.is_training_ == d.is_training);
    const ops::FusedBatchNormGradV2::Attrs g2;
    CHECK(g2.epsilon_ == d.epsilon);
    CHECK(g2.data_format_ == d.data_format);
    CHECK(g2.is_training_ == d.is_training);
}

TEST_CASE("Attrs: setters return modified copies and chain, from Attrs() and from the static setters")
{
    const ops::FusedBatchNormGradV3::Attrs base;
    const auto a = base.Epsilon(1e-3f).IsTraining(false);
    CHECK(a.epsilon_ == 1e-3f);
    CHECK_FALSE(a.is_training_);
    CHECK(a.data_format_ == "NHWC");
    CHECK(base.epsilon_ == 0.0001f); // unchanged
    CHECK(base.is_training_);

    const auto b = ops::FusedBatchNormGradV3::Epsilon(1e-3f).DataFormat("NCDHW").IsTraining(false);
    CHECK(b.epsilon_ == 1e-3f);
    CHECK(b.data_format_ == "NCDHW");
    CHECK_FALSE(b.is_training_);
    CHECK(ops::FusedBatchNormGradV3::DataFormat("NCHW").data_format_ == "NCHW");
    CHECK_FALSE(ops::FusedBatchNormGradV3::IsTraining(false).is_training_);

    const auto f = ops::FusedBatchNormV3::ExponentialAvgFactor(0.6f).Epsilon(2e-3f).DataFormat("NCHW").IsTraining(true);
    CHECK(f.exponential_avg_factor_ == 0.6f);
    CHECK(f.epsilon_ == 2e-3f);
    CHECK(f.data_format_ == "NCHW");
    CHECK(f.is_training_);
    const auto f2 = ops::FusedBatchNormV3::Attrs().IsTraining(false).ExponentialAvgFactor(0.25f);
    CHECK_FALSE(f2.is_training_);
    CHECK(f2.exponential_avg_factor_ == 0.25f);
    CHECK(ops::FusedBatchNormV3::Epsilon(1e-5f).epsilon_ == 1e-5f);
    CHECK(ops::FusedBatchNormV3::DataFormat("NDHWC").data_format_ == "NDHWC");
    CHECK_FALSE(ops::FusedBatchNormV3::IsTraining(false).is_training_);

    const std::string fmt = "NCHW"; // any string_view source
    const auto g = ops::FusedBatchNormGradV2::DataFormat(fmt).Epsilon(1e-2f).IsTraining(false);
    CHECK(g.data_format_ == "NCHW");
    CHECK(g.epsilon_ == 1e-2f);
    CHECK_FALSE(g.is_training_);
    CHECK(ops::FusedBatchNormGradV2::Attrs().DataFormat("NHWC").data_format_ == "NHWC");
    CHECK(ops::FusedBatchNormGradV2::Epsilon(3e-3f).epsilon_ == 3e-3f);
    CHECK_FALSE(ops::FusedBatchNormGradV2::IsTraining(false).is_training_);
}

TEST_CASE("the classes without Attrs equal the free functions with default attributes, bit for bit")
{
    const Scope scope = Scope::NewRootScope();
    const bn_inputs in = make_inputs({2, 3, 4, 5}, 5, 11); // NHWC, C = 5
    const tensor none = zeros({0});

    const ops::FusedBatchNormV3 bn(scope, in.x, in.scale, in.offset, none, none);
    const batch_norm_forward_result ref = fused_batch_norm(in.x, in.scale, in.offset, none, none);
    check_same_bits(bn.y, ref.y, "y");
    check_same_bits(bn.batch_mean, ref.batch_mean, "batch_mean");
    check_same_bits(bn.batch_variance, ref.batch_variance, "batch_variance");
    check_same_bits(bn.reserve_space_1, ref.reserve_space_1, "reserve_space_1");
    check_same_bits(bn.reserve_space_2, ref.reserve_space_2, "reserve_space_2");
    check_same_bits(bn.reserve_space_3, ref.reserve_space_3, "reserve_space_3");
    CHECK(bn.reserve_space_3.shape() == shape_type{0});

    const ops::FusedBatchNormGradV3 g3(scope, in.dy, in.x, in.scale, bn.reserve_space_1, bn.reserve_space_2,
                                       bn.reserve_space_3);
    const batch_norm_grad_result r3 = fused_batch_norm_grad(in.dy, in.x, in.scale, bn.reserve_space_1,
                                                            bn.reserve_space_2, bn.reserve_space_3);
    check_same_bits(g3.x_backprop, r3.x_backprop, "V3 x_backprop");
    check_same_bits(g3.scale_backprop, r3.scale_backprop, "V3 scale_backprop");
    check_same_bits(g3.offset_backprop, r3.offset_backprop, "V3 offset_backprop");
    check_same_bits(g3.reserve_space_4, r3.placeholder_1, "V3 reserve_space_4");
    check_same_bits(g3.reserve_space_5, r3.placeholder_2, "V3 reserve_space_5");
    CHECK(g3.reserve_space_4.shape() == shape_type{0});
    CHECK(g3.reserve_space_5.shape() == shape_type{0});

    const ops::FusedBatchNormGradV2 g2(scope, in.dy, in.x, in.scale, bn.reserve_space_1, bn.reserve_space_2);
    const batch_norm_grad_result r2 = fused_batch_norm_grad(in.dy, in.x, in.scale, bn.reserve_space_1,
                                                            bn.reserve_space_2, {}, {}, batch_norm_grad_version::v2);
    check_same_bits(g2.x_backprop, r2.x_backprop, "V2 x_backprop");
    check_same_bits(g2.scale_backprop, r2.scale_backprop, "V2 scale_backprop");
    check_same_bits(g2.offset_backprop, r2.offset_backprop, "V2 offset_backprop");
    check_same_bits(g2.reserve_space_3, r2.placeholder_1, "V2 reserve_space_3");
    check_same_bits(g2.reserve_space_4, r2.placeholder_2, "V2 reserve_space_4");
}

TEST_CASE("the classes with Attrs equal the free functions with the same attributes, bit for bit")
{
    const Scope scope = Scope::NewRootScope();
    for (const bool training : {true, false})
    {
        CAPTURE(training);
        const bn_inputs in = make_inputs({3, 4, 5, 2}, 4, 23); // NCHW, C = 4
        const float eps = 1e-3f, factor = 0.6f;

        const ops::FusedBatchNormV3 bn(
            scope, in.x, in.scale, in.offset, in.mean, in.variance,
            ops::FusedBatchNormV3::DataFormat("NCHW").Epsilon(eps).IsTraining(training).ExponentialAvgFactor(factor));
        const batch_norm_forward_result ref = fused_batch_norm(in.x, in.scale, in.offset, in.mean, in.variance,
                                                               free_attrs("NCHW", training, eps, factor));
        check_same_bits(bn.y, ref.y, "y");
        check_same_bits(bn.batch_mean, ref.batch_mean, "batch_mean");
        check_same_bits(bn.batch_variance, ref.batch_variance, "batch_variance");
        check_same_bits(bn.reserve_space_1, ref.reserve_space_1, "reserve_space_1");
        check_same_bits(bn.reserve_space_2, ref.reserve_space_2, "reserve_space_2");
        check_same_bits(bn.reserve_space_3, ref.reserve_space_3, "reserve_space_3");

        const batch_norm_attrs ga = free_attrs("NCHW", training, eps);
        const ops::FusedBatchNormGradV3 g3(scope, in.dy, in.x, in.scale, bn.reserve_space_1, bn.reserve_space_2,
                                           bn.reserve_space_3,
                                           ops::FusedBatchNormGradV3::Attrs().Epsilon(eps).IsTraining(training).DataFormat(
                                               "NCHW"));
        const batch_norm_grad_result r3 = fused_batch_norm_grad(in.dy, in.x, in.scale, bn.reserve_space_1,
                                                                bn.reserve_space_2, bn.reserve_space_3, ga);
        check_same_bits(g3.x_backprop, r3.x_backprop, "V3 x_backprop");
        check_same_bits(g3.scale_backprop, r3.scale_backprop, "V3 scale_backprop");
        check_same_bits(g3.offset_backprop, r3.offset_backprop, "V3 offset_backprop");
        check_same_bits(g3.reserve_space_4, r3.placeholder_1, "V3 reserve_space_4");
        check_same_bits(g3.reserve_space_5, r3.placeholder_2, "V3 reserve_space_5");

        const ops::FusedBatchNormGradV2 g2(scope, in.dy, in.x, in.scale, bn.reserve_space_1, bn.reserve_space_2,
                                           ops::FusedBatchNormGradV2::Epsilon(eps).DataFormat("NCHW").IsTraining(
                                               training));
        const batch_norm_grad_result r2 = fused_batch_norm_grad(in.dy, in.x, in.scale, bn.reserve_space_1,
                                                                bn.reserve_space_2, {}, ga, batch_norm_grad_version::v2);
        check_same_bits(g2.x_backprop, r2.x_backprop, "V2 x_backprop");
        check_same_bits(g2.scale_backprop, r2.scale_backprop, "V2 scale_backprop");
        check_same_bits(g2.offset_backprop, r2.offset_backprop, "V2 offset_backprop");
        check_same_bits(g2.reserve_space_3, r2.placeholder_1, "V2 reserve_space_3");
        check_same_bits(g2.reserve_space_4, r2.placeholder_2, "V2 reserve_space_4");
    }
}

TEST_CASE("5-D layouts go through FusedBatchNormV3 and FusedBatchNormGradV3")
{
    const Scope scope = Scope::NewRootScope();
    const bn_inputs in = make_inputs({2, 3, 2, 2, 2}, 3, 5); // NCDHW, C = 3
    const auto fa = ops::FusedBatchNormV3::DataFormat("NCDHW");
    const ops::FusedBatchNormV3 bn(scope, in.x, in.scale, in.offset, in.mean, in.variance, fa);
    const ops::FusedBatchNormGradV3 g(scope, in.dy, in.x, in.scale, bn.reserve_space_1, bn.reserve_space_2,
                                      bn.reserve_space_3, ops::FusedBatchNormGradV3::DataFormat("NCDHW"));
    const batch_norm_grad_result r = fused_batch_norm_grad(in.dy, in.x, in.scale, bn.reserve_space_1,
                                                           bn.reserve_space_2, bn.reserve_space_3,
                                                           free_attrs("NCDHW", true, 0.0001f));
    check_same_bits(g.x_backprop, r.x_backprop, "x_backprop");
    check_same_bits(g.scale_backprop, r.scale_backprop, "scale_backprop");
}

TEST_CASE("FusedBatchNormGradV2 rejects 5-D formats; errors are xgrad::invalid_argument")
{
    const Scope scope = Scope::NewRootScope();
    const tensor x5 = zeros({1, 2, 2, 2, 3}), c = ones({3});
    for (const char* format : {"NDHWC", "NCDHW"})
    {
        CAPTURE(format);
        CHECK_THROWS_AS(ops::FusedBatchNormGradV2(scope, x5, x5, c, c, c, ops::FusedBatchNormGradV2::DataFormat(format)),
                        xgrad::invalid_argument);
        try
        {
            ops::FusedBatchNormGradV2(scope, x5, x5, c, c, c, ops::FusedBatchNormGradV2::DataFormat(format));
        }
        catch (const xgrad::invalid_argument& e)
        {
            const std::string msg = e.what();
            CHECK(msg.find("FusedBatchNormGradV2") != std::string::npos);
            CHECK(msg.find(format) != std::string::npos);
        }
    }
    // The same input is fine for V3.
    CHECK_NOTHROW(ops::FusedBatchNormGradV3(scope, x5, x5, c, c, zeros({3}), zeros({0}),
                                            ops::FusedBatchNormGradV3::DataFormat("NDHWC")));
    // And the checks of the free functions surface unchanged through the classes.
    CHECK_THROWS_AS(ops::FusedBatchNormV3(scope, zeros({2, 3}), c, c, c, c), xgrad::invalid_argument);
    CHECK_THROWS_AS(ops::FusedBatchNormGradV3(scope, x5, x5, c, c, c, c), xgrad::invalid_argument); // NHWC, rank 5
}

TEST_CASE("an input off the scope's device is rejected, naming both devices")
{
    // The scope's device is only a tag: a CUDA scope with CPU inputs fails the check before
    // anything runs, so this needs no CUDA build.
    const Scope gpu = Scope::NewRootScope().WithDevice(device{device_type::cuda, 0});
    const bn_inputs in = make_inputs({1, 2, 2, 3}, 3, 3);
    const auto check_msg = [](const auto& construct, const char* op) {
        bool thrown = false;
        try
        {
            construct();
        }
        catch (const xgrad::invalid_argument& e)
        {
            thrown = true;
            const std::string msg = e.what();
            CHECK(msg.find(op) != std::string::npos);
            CHECK(msg.find("cpu") != std::string::npos);
            CHECK(msg.find("cuda:0") != std::string::npos);
        }
        CHECK_MESSAGE(thrown, op << " accepted CPU inputs under a CUDA scope");
    };
    check_msg([&] { ops::FusedBatchNormV3(gpu, in.x, in.scale, in.offset, in.mean, in.variance); }, "FusedBatchNormV3");
    check_msg([&] { ops::FusedBatchNormGradV3(gpu, in.dy, in.x, in.scale, in.mean, in.variance, tensor()); },
              "FusedBatchNormGradV3");
    check_msg([&] { ops::FusedBatchNormGradV2(gpu, in.dy, in.x, in.scale, in.mean, in.variance); },
              "FusedBatchNormGradV2");

    // The same inputs under a CPU scope (explicitly chosen, or the default) run.
    CHECK_NOTHROW(ops::FusedBatchNormV3(Scope::NewRootScope().WithDevice(cpu_device), in.x, in.scale, in.offset,
                                        in.mean, in.variance));
    CHECK_NOTHROW(ops::FusedBatchNormGradV3(gpu.WithDevice("cpu"), in.dy, in.x, in.scale, in.mean, in.variance,
                                            tensor()));
}

TEST_CASE("the scope decides gradient recording, and the thread's grad mode is restored")
{
    const Scope root = Scope::NewRootScope();
    bn_inputs in = make_inputs({2, 2, 3, 3}, 3, 7);
    in.x.requires_grad_();
    in.scale.requires_grad_();
    in.offset.requires_grad_();
    in.dy.requires_grad_();
    const tensor none = zeros({0});

    SUBCASE("recording off: no output requires grad")
    {
        const Scope quiet = root.WithGradientRecording(false);
        const ops::FusedBatchNormV3 bn(quiet, in.x, in.scale, in.offset, none, none);
        CHECK_FALSE(bn.y.requires_grad());
        CHECK_FALSE(bn.batch_mean.requires_grad());
        const ops::FusedBatchNormGradV3 g3(quiet, in.dy, in.x, in.scale, bn.reserve_space_1, bn.reserve_space_2,
                                           bn.reserve_space_3);
        CHECK_FALSE(g3.x_backprop.requires_grad());
        CHECK_FALSE(g3.scale_backprop.requires_grad());
        CHECK_FALSE(g3.offset_backprop.requires_grad());
        const ops::FusedBatchNormGradV2 g2(quiet, in.dy, in.x, in.scale, bn.reserve_space_1, bn.reserve_space_2);
        CHECK_FALSE(g2.x_backprop.requires_grad());
        CHECK(is_grad_enabled()); // restored
    }
    SUBCASE("recording on: y and the gradients are differentiable, even inside no_grad")
    {
        no_grad outer;
        const ops::FusedBatchNormV3 bn(root, in.x, in.scale, in.offset, none, none);
        CHECK(bn.y.requires_grad());
        CHECK_FALSE(bn.batch_mean.requires_grad()); // statistics are not differentiable outputs
        CHECK_FALSE(bn.reserve_space_1.requires_grad());
        const ops::FusedBatchNormGradV3 g3(root, in.dy, in.x, in.scale, bn.reserve_space_1, bn.reserve_space_2,
                                           bn.reserve_space_3);
        CHECK(g3.x_backprop.requires_grad());
        CHECK(g3.scale_backprop.requires_grad());
        CHECK(g3.offset_backprop.requires_grad());
        CHECK_FALSE(is_grad_enabled()); // restored to the no_grad of the caller
    }
}

TEST_CASE("the gradient class agrees with autograd through the forward class, and differentiates again")
{
    const Scope scope = Scope::NewRootScope();
    for (const bool training : {true, false})
    {
        CAPTURE(training);
        bn_inputs in = make_inputs({2, 3, 2, 2}, 3, 31); // NCHW
        in.x.requires_grad_();
        const auto fa = ops::FusedBatchNormV3::DataFormat("NCHW").IsTraining(training);
        const auto ga = ops::FusedBatchNormGradV3::DataFormat("NCHW").IsTraining(training);

        const ops::FusedBatchNormV3 bn(scope, in.x, in.scale, in.offset, in.mean, in.variance, fa);
        const ops::FusedBatchNormGradV3 g(scope, in.dy, in.x, in.scale, bn.reserve_space_1, bn.reserve_space_2,
                                          bn.reserve_space_3, ga);
        // The forward's backward runs the same gradient op: the same bits.
        const tensor xb = grad({bn.y}, {in.x}, {in.dy}, std::nullopt, /*create_graph=*/true)[0];
        check_same_bits(g.x_backprop, xb, "x_backprop vs autograd");

        // Second order: d/dx sum(x_backprop^2), through the grad op and through double backward.
        const tensor second = grad({sum(square(g.x_backprop))}, {in.x})[0];
        const tensor second_ref = grad({sum(square(xb))}, {in.x})[0];
        const std::vector<double> s = to_vector(second), sr = to_vector(second_ref);
        REQUIRE(s.size() == sr.size());
        for (std::size_t i = 0; i < s.size(); ++i)
            CHECK(s[i] == doctest::Approx(sr[i]).epsilon(1e-5));
    }
}
