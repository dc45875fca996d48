// The core batch-norm API as a user sees it (xgrad/ops/batch_norm.hpp): the defaults of
// batch_norm_attrs, the shapes and dtypes of the result structs, autograd following the thread's
// grad mode, the gradient op agreeing with autograd through the forward, and the pieces an op
// built on the batch norm uses (batch_norm_moments, check_batch_norm_forward). (Formulas:
// test_batch_norm.cpp; errors: test_batch_norm_errors.cpp; the TensorFlow-shaped classes over
// these functions: test_compat_tensorflow.cpp.)
#include <doctest/doctest.h>

#include <cstring>
#include <string>
#include <vector>

#include "tests/support/batch_norm_api_helpers.hpp"
#include "xgrad/xgrad.hpp"

using namespace xgrad;
using namespace bn_api_test;

TEST_CASE("batch_norm_attrs: the contract's defaults, which the default arguments use")
{
    const batch_norm_attrs d;
    CHECK(d.epsilon == 0.0001f);
    CHECK(d.data_format == "NHWC");
    CHECK(d.is_training);
    CHECK(d.exponential_avg_factor == 1.0f);

    const bn_inputs in = make_inputs({2, 3, 4, 5}, 5, 11); // NHWC, C = 5
    const tensor none = zeros({0});
    const batch_norm_forward_result bn = fused_batch_norm(in.x, in.scale, in.offset, none, none);
    const batch_norm_forward_result ref = fused_batch_norm(in.x, in.scale, in.offset, none, none,
                                                           make_attrs("NHWC", true, 0.0001f, 1.0f));
    check_same_bits(bn.y, ref.y, "y");
    check_same_bits(bn.saved_var, ref.saved_var, "saved_var");

    // The gradient's default attributes are the same ones.
    const batch_norm_grad_result g = fused_batch_norm_grad(in.dy, in.x, in.scale, bn.saved_mean, bn.saved_var);
    const batch_norm_grad_result g3 = fused_batch_norm_grad(in.dy, in.x, in.scale, bn.saved_mean, bn.saved_var,
                                                            make_attrs("NHWC", true));
    check_same_bits(g.dx, g3.dx, "dx");
    check_same_bits(g.dscale, g3.dscale, "dscale");
    check_same_bits(g.doffset, g3.doffset, "doffset");
}

TEST_CASE("result structs: shapes and dtypes of every output")
{
    for (const dtype dt : {dtype::float32, dtype::float16, dtype::bfloat16, dtype::float64})
    {
        CAPTURE(dt);
        const dtype sdt = dt == dtype::float64 ? dtype::float64 : dtype::float32;
        bn_inputs in = make_inputs({2, 4, 3, 3}, 4, 17); // NCHW, C = 4
        in.x = in.x.to(dt);
        in.dy = in.dy.to(dt);
        for (tensor* t : {&in.scale, &in.offset, &in.mean, &in.variance})
            *t = t->to(sdt);
        const batch_norm_forward_result bn = fused_batch_norm(in.x, in.scale, in.offset, in.mean, in.variance,
                                                              make_attrs("NCHW", true, 1e-3f, 0.5f));
        CHECK(bn.y.shape() == in.x.shape());
        CHECK(bn.y.dtype() == dt);
        for (const tensor* t : {&bn.running_mean, &bn.running_var, &bn.saved_mean, &bn.saved_var})
        {
            CHECK(t->shape() == shape_type{4});
            CHECK(t->dtype() == sdt);
        }
        const batch_norm_grad_result g = fused_batch_norm_grad(in.dy, in.x, in.scale, bn.saved_mean, bn.saved_var,
                                                               make_attrs("NCHW", true, 1e-3f));
        CHECK(g.dx.shape() == in.x.shape());
        CHECK(g.dx.dtype() == dt);
        CHECK(g.dscale.shape() == shape_type{4});
        CHECK(g.dscale.dtype() == sdt);
        CHECK(g.doffset.shape() == shape_type{4});
        CHECK(g.doffset.dtype() == sdt);
    }
}

TEST_CASE("the gradient takes every format, the 5-D ones too (TensorFlow's V2 does not: the compatibility layer)")
{
    const tensor x5 = zeros({1, 2, 2, 2, 3}), c = ones({3});
    // NCDHW with C on axis 1 is [1, 3, 2, 2, 2]; NDHWC with C last is x5 itself.
    CHECK_NOTHROW(fused_batch_norm_grad(x5, x5, c, c, c, make_attrs("NDHWC", true)));
    const tensor xc = zeros({1, 3, 2, 2, 2});
    CHECK_NOTHROW(fused_batch_norm_grad(xc, xc, c, c, c, make_attrs("NCDHW", true)));
}

TEST_CASE("autograd follows the thread's grad mode")
{
    bn_inputs in = make_inputs({2, 2, 3, 3}, 3, 7);
    in.x.requires_grad_();
    in.scale.requires_grad_();
    in.offset.requires_grad_();
    in.dy.requires_grad_();
    const tensor none = zeros({0});

    SUBCASE("no_grad: no output requires grad")
    {
        no_grad off;
        const batch_norm_forward_result bn = fused_batch_norm(in.x, in.scale, in.offset, none, none);
        CHECK_FALSE(bn.y.requires_grad());
        const batch_norm_grad_result g = fused_batch_norm_grad(in.dy, in.x, in.scale, bn.saved_mean, bn.saved_var);
        CHECK_FALSE(g.dx.requires_grad());
        CHECK_FALSE(g.dscale.requires_grad());
    }
    SUBCASE("recording: y and the gradients are differentiable, the statistics are not")
    {
        const batch_norm_forward_result bn = fused_batch_norm(in.x, in.scale, in.offset, none, none);
        CHECK(bn.y.requires_grad());
        CHECK_FALSE(bn.running_mean.requires_grad());
        CHECK_FALSE(bn.running_var.requires_grad());
        CHECK_FALSE(bn.saved_mean.requires_grad());
        CHECK_FALSE(bn.saved_var.requires_grad());
        const batch_norm_grad_result g = fused_batch_norm_grad(in.dy, in.x, in.scale, bn.saved_mean, bn.saved_var);
        CHECK(g.dx.requires_grad());
        CHECK(g.dscale.requires_grad());
        CHECK(g.doffset.requires_grad());
    }
}

TEST_CASE("the gradient op agrees with autograd through the forward, and differentiates again")
{
    for (const bool training : {true, false})
    {
        CAPTURE(training);
        bn_inputs in = make_inputs({2, 3, 2, 2}, 3, 31); // NCHW
        in.x.requires_grad_();
        const batch_norm_attrs a = make_attrs("NCHW", training);

        const batch_norm_forward_result bn = fused_batch_norm(in.x, in.scale, in.offset, in.mean, in.variance, a);
        const batch_norm_grad_result g = fused_batch_norm_grad(in.dy, in.x, in.scale, bn.saved_mean, bn.saved_var, a);
        // The forward's backward runs the same gradient op: the same bits.
        const tensor xb = grad({bn.y}, {in.x}, {in.dy}, std::nullopt, /*create_graph=*/true)[0];
        check_same_bits(g.dx, xb, "dx vs autograd");

        // Second order: d/dx sum(dx^2), through the grad op and through double backward.
        const tensor second = grad({sum(square(g.dx))}, {in.x})[0];
        const tensor second_ref = grad({sum(square(xb))}, {in.x})[0];
        const std::vector<double> s = to_vector(second), sr = to_vector(second_ref);
        REQUIRE(s.size() == sr.size());
        for (std::size_t i = 0; i < s.size(); ++i)
            CHECK(s[i] == doctest::Approx(sr[i]).epsilon(1e-5));
    }
}

TEST_CASE("batch_norm_moments: the training forward's statistics, bit for bit, in either layout")
{
    for (const char* format : {"NHWC", "NCHW"})
    {
        INFO(format);
        const bool cl = std::string(format) == "NHWC";
        const bn_inputs in = make_inputs(cl ? shape_type{2, 3, 4, 5} : shape_type{2, 5, 3, 4}, 5, 17);
        const tensor none = zeros({0});
        const batch_norm_attrs at = make_attrs(format, true);
        const batch_norm_forward_result f = fused_batch_norm(in.x, in.scale, in.offset, none, none, at);
        const batch_norm_moments_result m = batch_norm_moments(in.x, at);
        check_same_bits(m.mean, f.saved_mean, "mean");
        check_same_bits(m.variance, f.saved_var, "variance");
        CHECK_FALSE(m.mean.requires_grad());
        // The layout and the checks an op built on the batch norm reuses, naming that op.
        const batch_norm_layout L = check_batch_norm_forward(in.x, in.scale, in.offset, at, "my_op");
        CHECK(L.C == 5);
        CHECK(L.count() == 24);
        CHECK(L.channels_last == cl);
        CHECK(L.channel_shape() == (cl ? shape_type{1, 1, 1, 5} : shape_type{1, 5, 1, 1}));
    }
    const bn_inputs in = make_inputs({2, 3, 4, 5}, 5, 18);
    CHECK_THROWS_WITH_AS(check_batch_norm_forward(in.x, in.scale.slice(0, 0, 4), in.offset, {}, "my_op"),
                         doctest::Contains("my_op: "), xgrad::invalid_argument);
    CHECK_THROWS_WITH_AS(batch_norm_moments(in.x.reshape({6, 4, 5})), doctest::Contains("batch_norm_moments: "),
                         xgrad::invalid_argument);
    CHECK(batch_norm_stats_dtype(dtype::bfloat16) == dtype::float32);
    CHECK(batch_norm_stats_dtype(dtype::float64) == dtype::float64);
}
