// The fused batch-norm ops (and their ReLU-fused variants) against their composite formulas,
// and their derivatives of the first three orders against finite differences in float64, in
// every format and both modes.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "core/src/ops/batch_norm_internal.hpp"
#include "tests/support/check_error.hpp"
#include "xgrad/layers.hpp"
#include "xgrad/xgrad.hpp"

using namespace xgrad;

namespace
{
    struct bn_case
    {
        const char* format;
        shape_type shape;
        std::int64_t channel_dim;
    };

    const std::vector<bn_case> formats = {
        {"NHWC", {2, 3, 2, 5}, 3},
        {"NCHW", {2, 5, 3, 2}, 1},
        {"NDHWC", {2, 2, 3, 1, 3}, 4},
        {"NCDHW", {1, 3, 2, 2, 3}, 1},
    };

    batch_norm_attrs attrs_for(const bn_case& c, bool training, float eps = 0.001f)
    {
        batch_norm_attrs a;
        a.data_format = c.format;
        a.is_training = training;
        a.epsilon = eps;
        return a;
    }

    std::int64_t channels(const bn_case& c) { return c.shape[static_cast<std::size_t>(c.channel_dim)]; }

    /// Elementwise |got - want| <= tol * max(1, |want|).
    void check_close(const tensor& got, const tensor& want, double tol)
    {
        REQUIRE(got.shape() == want.shape());
        const auto g = to_vector(got), w = to_vector(want);
        double worst = 0;
        for (std::size_t i = 0; i < g.size(); ++i)
            worst = std::max(worst, std::abs(g[i] - w[i]) / std::max(1.0, std::abs(w[i])));
        CHECK_MESSAGE(worst <= tol, "worst relative difference " << worst << " > " << tol);
    }

    struct inputs
    {
        tensor x, dy, scale, offset, pop_mean, pop_var, A, a, b;
    };

    inputs make_inputs(const bn_case& c, dtype dt, std::uint64_t seed)
    {
        generator gen(seed);
        const std::int64_t C = channels(c);
        const dtype sdt = dt == dtype::float64 ? dtype::float64 : dtype::float32;
        inputs in;
        in.x = (randn(c.shape, gen, dtype::float64) * 2.0 + 0.5).to(dt);
        in.dy = randn(c.shape, gen, dtype::float64).to(dt);
        in.scale = (randn({C}, gen, dtype::float64) + 1.0).to(sdt);
        in.offset = randn({C}, gen, dtype::float64).to(sdt);
        in.pop_mean = randn({C}, gen, dtype::float64).to(sdt);
        in.pop_var = (abs(randn({C}, gen, dtype::float64)) + 0.5).to(sdt);
        in.A = randn(c.shape, gen, dtype::float64).to(dt);
        in.a = randn({C}, gen, dtype::float64).to(sdt);
        in.b = randn({C}, gen, dtype::float64).to(sdt);
        return in;
    }

    /// The batch statistics of x, as the forward op saves them (not differentiable).
    std::pair<tensor, tensor> batch_stats(const tensor& x, const tensor& scale, const tensor& offset,
                                          const batch_norm_attrs& attrs)
    {
        batch_norm_attrs t = attrs;
        t.is_training = true;
        t.exponential_avg_factor = 1.0f;
        const auto f = fused_batch_norm(x.detach(), scale.detach(), offset.detach(), tensor(zeros({0}, scale.dtype())),
                                        zeros({0}, scale.dtype()), t);
        return {f.saved_mean, f.saved_var};
    }

    /// The batch mean and biased variance of x computed with xgrad's ops: differentiable
    /// functions of x (section 3.4), for autograd oracles of the total derivative.
    std::pair<tensor, tensor> differentiable_stats(const tensor& x, const bn_case& c)
    {
        axes_type axes;
        for (std::int64_t d = 0; d < x.dim(); ++d)
            if (d != c.channel_dim)
                axes.push_back(d);
        return {reshape(mean(x, axes), {channels(c)}),
                reshape(mean(square(x - mean(x, axes, true)), axes), {channels(c)})};
    }
}

TEST_CASE("fused gradient equals the composite formula (all formats, both modes, float32/float64)")
{
    for (const auto& c : formats)
        for (bool training : {true, false})
            for (dtype dt : {dtype::float64, dtype::float32})
            {
                INFO(c.format << (training ? " training " : " inference ") << name(dt));
                const inputs in = make_inputs(c, dt, 1);
                const batch_norm_attrs at = attrs_for(c, training);
                auto [m, v] = batch_stats(in.x, in.scale, in.offset, at);
                const tensor rs1 = training ? m : in.pop_mean, rs2 = training ? v : in.pop_var;
                const auto fused = fused_batch_norm_grad(in.dy, in.x, in.scale, rs1, rs2, at);
                const auto comp = detail::batch_norm_grad_composite(in.dy, in.x, in.scale, rs1, rs2, at);
                // float64: both are exact formulas evaluated in double (1e-12); float32: sums of
                // R <= 60 terms of O(1) values in float32 against double accumulation (1e-5).
                const double tol = dt == dtype::float64 ? 1e-12 : 1e-5;
                check_close(fused.dx, comp.dx, tol);
                check_close(fused.dscale, comp.dscale, tol);
                check_close(fused.doffset, comp.doffset, tol);
            }
}

TEST_CASE("fused second-order op equals its composite formula and autograd of the first-order composite")
{
    for (const auto& c : formats)
        for (bool training : {true, false})
        {
            INFO(c.format << (training ? " training" : " inference"));
            const inputs in = make_inputs(c, dtype::float64, 2);
            const batch_norm_attrs at = attrs_for(c, training);
            auto [m, v] = batch_stats(in.x, in.scale, in.offset, at);
            const tensor rs1 = training ? m : in.pop_mean, rs2 = training ? v : in.pop_var;
            const auto fused = fused_batch_norm_grad_grad(in.A, in.a, in.b, in.dy, in.x, in.scale, rs1, rs2, at);
            const auto comp = detail::batch_norm_grad_grad_composite(in.A, in.a, in.b, in.dy, in.x, in.scale, rs1, rs2,
                                                                     at);
            check_close(fused.d_dy, comp.d_dy, 1e-12);
            check_close(fused.d_x, comp.d_x, 1e-12);
            check_close(fused.d_scale, comp.d_scale, 1e-12);
            // Independent derivation: differentiate the first-order composite with autograd,
            // with the statistics recomputed from x in training (the total derivative).
            const tensor dy = in.dy.detach().requires_grad_(), x = in.x.detach().requires_grad_(),
                         s = in.scale.detach().requires_grad_();
            const auto [srs1, srs2] = training ? differentiable_stats(x, c) : std::pair{rs1, rs2};
            const auto first = detail::batch_norm_grad_composite(dy, x, s, srs1, srs2, at);
            const auto g = grad({first.dx, first.dscale, first.doffset}, {dy, x, s}, {in.A, in.a, in.b});
            check_close(fused.d_dy, g[0], 1e-10);
            check_close(fused.d_x, g[1], 1e-10);
            check_close(fused.d_scale, g[2], 1e-10);
        }
}

TEST_CASE("forward: normalisation, batch statistics with Bessel's correction, running averages")
{
    const bn_case c = formats[1]; // NCHW [2, 5, 3, 2]
    const inputs in = make_inputs(c, dtype::float64, 3);
    const std::int64_t C = channels(c);
    const axes_type axes = {0, 2, 3};
    const double R = 2 * 3 * 2;
    const tensor m = reshape(mean(in.x, axes), {C});
    const tensor v = reshape(mean(square(in.x - mean(in.x, axes, true)), axes), {C});
    const shape_type ch = {1, C, 1, 1};
    // epsilon is a float attribute: the formulas below use its float value exactly.
    for (float f : {1.0f, 0.6f, 0.0f})
    {
        INFO("exponential_avg_factor " << f);
        batch_norm_attrs at = attrs_for(c, true);
        at.exponential_avg_factor = f;
        const auto out = fused_batch_norm(in.x, in.scale, in.offset, in.pop_mean, in.pop_var, at);
        const tensor y = (in.x - reshape(m, ch)) * rsqrt(reshape(v, ch) + static_cast<double>(0.001f)) *
                             reshape(in.scale, ch) +
                         reshape(in.offset, ch);
        check_close(out.y, y, 1e-12);
        check_close(out.saved_mean, m, 1e-12);
        check_close(out.saved_var, v, 1e-12);
        const double k = R / (R - 1);
        check_close(out.running_mean, in.pop_mean * (1.0 - f) + m * static_cast<double>(f), 1e-12);
        check_close(out.running_var, in.pop_var * (1.0 - f) + v * (static_cast<double>(f) * k), 1e-12);
    }
    // Inference: population statistics; the statistics outputs are copies of them.
    const auto inf = fused_batch_norm(in.x, in.scale, in.offset, in.pop_mean, in.pop_var, attrs_for(c, false));
    check_close(inf.y,
                (in.x - reshape(in.pop_mean, ch)) * rsqrt(reshape(in.pop_var, ch) + static_cast<double>(0.001f)) *
                        reshape(in.scale, ch) +
                    reshape(in.offset, ch),
                1e-12);
    CHECK(to_vector(inf.running_mean) == to_vector(in.pop_mean));
    CHECK(to_vector(inf.saved_var) == to_vector(in.pop_var));
    CHECK(inf.running_mean.data_ptr() != in.pop_mean.data_ptr());
}

TEST_CASE("empty x: NaN batch statistics, zero reserve spaces, zero parameter gradients")
{
    for (bool training : {true, false})
    {
        batch_norm_attrs at;
        at.is_training = training;
        const tensor x = zeros({0, 2, 3, 4});
        const tensor s = ones({4}), o = zeros({4});
        const auto f = fused_batch_norm(x, s, o, zeros({4}), ones({4}), at);
        CHECK(f.y.shape() == x.shape());
        for (double v : to_vector(f.running_mean))
            CHECK(std::isnan(v));
        for (double v : to_vector(f.running_var))
            CHECK(std::isnan(v));
        CHECK(to_vector(f.saved_mean) == std::vector<double>(4, 0.0));
        const auto g = fused_batch_norm_grad(x, x, s, zeros({4}), ones({4}), at);
        CHECK(g.dx.shape() == x.shape());
        CHECK(to_vector(g.dscale) == std::vector<double>(4, 0.0));
        CHECK(to_vector(g.doffset) == std::vector<double>(4, 0.0));
    }
}

TEST_CASE("the two phases compose to the fused gradient and honour a global count")
{
    const bn_case c = formats[0];
    const inputs in = make_inputs(c, dtype::float64, 4);
    const batch_norm_attrs at = attrs_for(c, true);
    auto [m, v] = batch_stats(in.x, in.scale, in.offset, at);
    const auto sums = batch_norm_grad_reduce(in.dy, in.x, m, at);
    const auto fused = fused_batch_norm_grad(in.dy, in.x, in.scale, m, v, at);
    const auto phased = batch_norm_grad_apply(in.dy, in.x, in.scale, m, v, sums, 2 * 3 * 2, at);
    check_close(phased.dx, fused.dx, 1e-14);
    check_close(phased.dscale, fused.dscale, 1e-14);
    // Two replicas holding the same batch: the all-reduced sums are doubled and R is doubled,
    // which must give the same dx as one replica.
    const batch_norm_grad_sums twice{sums.sum_dy * 2.0, sums.sum_dy_xc * 2.0};
    check_close(batch_norm_grad_apply(in.dy, in.x, in.scale, m, v, twice, 2 * 2 * 3 * 2, at).dx, fused.dx, 1e-12);
}

TEST_CASE("16-bit I/O: float32 arithmetic, one rounding of the result")
{
    const bn_case c = formats[0];
    for (dtype dt : {dtype::float16, dtype::bfloat16})
    {
        INFO(name(dt));
        const inputs in = make_inputs(c, dt, 5);
        const batch_norm_attrs at = attrs_for(c, true);
        auto [m, v] = batch_stats(in.x, in.scale, in.offset, at);
        const auto fused = fused_batch_norm_grad(in.dy, in.x, in.scale, m, v, at);
        CHECK(fused.dx.dtype() == dt);
        CHECK(fused.dscale.dtype() == dtype::float32);
        // The float32 result of the same inputs, rounded once to dt, differs from the fused
        // 16-bit result by at most one unit in the last place of dt (2^-10 or 2^-7 relative).
        const auto ref = fused_batch_norm_grad(in.dy.to(dtype::float32), in.x.to(dtype::float32), in.scale, m, v, at);
        const double ulp = dt == dtype::float16 ? 0x1p-10 : 0x1p-7;
        const auto got = to_vector(fused.dx), want = to_vector(ref.dx.to(dt));
        for (std::size_t i = 0; i < got.size(); ++i)
            CHECK(std::abs(got[i] - want[i]) <= ulp * std::max(std::abs(want[i]), 0x1p-14));
        check_close(fused.dscale, ref.dscale, 1e-6);
        const auto f = fused_batch_norm(in.x, in.scale, in.offset, zeros({0}), zeros({0}), at);
        CHECK(f.y.dtype() == dt);
        CHECK(f.running_mean.dtype() == dtype::float32);
    }
}

// --- derivatives by finite differences -----------------------------------------------------

namespace
{
    using args = std::vector<tensor>;

    /// y of the forward op, as a function of (x, scale, offset); population statistics fixed.
    gradcheck_function forward_fn(const batch_norm_attrs& at, const tensor& pop_mean, const tensor& pop_var)
    {
        return [at, pop_mean, pop_var](const args& a) {
            return args{fused_batch_norm(a[0], a[1], a[2], pop_mean, pop_var, at).y};
        };
    }

    /// The gradient op as a function of (dy, x, scale); in training the saved statistics are
    /// recomputed from x, as a network's forward would (contract section 5).
    gradcheck_function grad_fn(const batch_norm_attrs& at, const tensor& offset, const tensor& pop_mean,
                               const tensor& pop_var)
    {
        return [at, offset, pop_mean, pop_var](const args& a) {
            tensor rs1 = pop_mean, rs2 = pop_var;
            if (at.is_training)
                std::tie(rs1, rs2) = batch_stats(a[1], a[2], offset, at);
            const auto r = fused_batch_norm_grad(a[0], a[1], a[2], rs1, rs2, at);
            return args{r.dx, r.dscale, r.doffset};
        };
    }

    /// The second-order op as a function of (A, a, b, dy, x, scale).
    gradcheck_function grad_grad_fn(const batch_norm_attrs& at, const tensor& offset, const tensor& pop_mean,
                                    const tensor& pop_var)
    {
        return [at, offset, pop_mean, pop_var](const args& a) {
            tensor rs1 = pop_mean, rs2 = pop_var;
            if (at.is_training)
                std::tie(rs1, rs2) = batch_stats(a[4], a[5], offset, at);
            const auto r = fused_batch_norm_grad_grad(a[0], a[1], a[2], a[3], a[4], a[5], rs1, rs2, at);
            return args{r.d_dy, r.d_x, r.d_scale};
        };
    }

    args leaves(std::initializer_list<tensor> ts)
    {
        args out;
        for (const auto& t : ts)
            out.push_back(t.detach().requires_grad_());
        return out;
    }
}

TEST_CASE("forward: first and second derivatives match finite differences")
{
    for (const auto& c : formats)
        for (bool training : {true, false})
        {
            INFO(c.format << (training ? " training" : " inference"));
            const inputs in = make_inputs(c, dtype::float64, 6);
            const batch_norm_attrs at = attrs_for(c, training);
            const auto f = forward_fn(at, in.pop_mean, in.pop_var);
            const args xs = leaves({in.x, in.scale, in.offset});
            const auto r1 = gradcheck(f, xs);
            CHECK_MESSAGE(r1.ok, r1.message);
            const auto r2 = gradgradcheck(f, xs);
            CHECK_MESSAGE(r2.ok, r2.message);
        }
}

TEST_CASE("gradient op: its own first and second derivatives (second and third order of batch norm)")
{
    for (const auto& c : formats)
        for (bool training : {true, false})
        {
            INFO(c.format << (training ? " training" : " inference"));
            const inputs in = make_inputs(c, dtype::float64, 7);
            const batch_norm_attrs at = attrs_for(c, training);
            const auto f = grad_fn(at, in.offset, in.pop_mean, in.pop_var);
            const args xs = leaves({in.dy, in.x, in.scale});
            const auto r1 = gradcheck(f, xs);
            CHECK_MESSAGE(r1.ok, r1.message);
            const auto r2 = gradgradcheck(f, xs);
            CHECK_MESSAGE(r2.ok, r2.message);
        }
}

TEST_CASE("second-order op: its derivatives (third order) match finite differences")
{
    for (const auto& c : {formats[0], formats[1]})
        for (bool training : {true, false})
        {
            INFO(c.format << (training ? " training" : " inference"));
            const inputs in = make_inputs(c, dtype::float64, 8);
            const batch_norm_attrs at = attrs_for(c, training);
            const auto f = grad_grad_fn(at, in.offset, in.pop_mean, in.pop_var);
            const auto r1 = gradcheck(f, leaves({in.A, in.a, in.b, in.dy, in.x, in.scale}));
            CHECK_MESSAGE(r1.ok, r1.message);
        }
}

TEST_CASE("second and third derivatives through a small network with batch norm")
{
    // loss(x, w, scale, offset) = sum(relu(bn(reshape(x @ w, NCHW))) ^ 2 * weights)
    generator gen(9);
    const tensor weights = randn({2, 3, 2, 2}, gen, dtype::float64);
    for (bool training : {true, false})
    {
        INFO(std::string(training ? "training" : "inference"));
        batch_norm_attrs at;
        at.data_format = "NCHW";
        at.is_training = training;
        at.epsilon = 0.001f;
        const tensor pop_mean = randn({3}, gen, dtype::float64), pop_var = abs(randn({3}, gen, dtype::float64)) + 0.5;
        auto net = [&](const args& a) {
            const tensor h = reshape(matmul(a[0], a[1]), {2, 3, 2, 2});
            const tensor y = fused_batch_norm(h, a[2], a[3], pop_mean, pop_var, at).y;
            // softplus-like smooth activation keeps second derivatives well defined; relu is
            // exercised through its (piecewise constant) first derivative.
            const tensor act = relu(y) + tanh(y);
            return args{sum(mul(mul(act, act), weights))};
        };
        const args xs = leaves({randn({2, 4}, gen, dtype::float64), randn({4, 12}, gen, dtype::float64),
                                randn({3}, gen, dtype::float64) + 1.0, randn({3}, gen, dtype::float64)});
        const auto r2 = gradgradcheck(net, xs);
        CHECK_MESSAGE(r2.ok, r2.message);
        // Third order: finite differences of the Hessian-vector product's gradient.
        auto hvp = [&](const args& a) {
            const tensor loss = net(a)[0];
            const auto g = grad({loss}, {a[0], a[1]}, {}, true, true);
            return args{grad({sum(g[0] * g[0]) + sum(g[1] * g[1])}, {a[0], a[1]}, {}, true, true)};
        };
        const auto r3 = gradcheck(hvp, xs);
        CHECK_MESSAGE(r3.ok, r3.message);
    }
}

TEST_CASE("second and third derivatives through matmul, reshape to NCHW, BatchNorm2d, relu and a loss")
{
    // loss(x, w, scale, offset) = sum(relu(bn(reshape(x @ w, [2, 3, 2, 2])))^2 * weights), the
    // batch-norm layer's scale and offset being checked inputs too.
    generator gen(10);
    const tensor weights = randn({2, 3, 2, 2}, gen, dtype::float64);
    for (bool training : {true, false})
    {
        INFO(std::string(training ? "training" : "eval"));
        nn::batch_norm_options opt(3);
        opt.dtype = dtype::float64;
        opt.eps = 1e-3f;
        nn::batch_norm2d bn(opt);
        // Non-trivial running statistics for eval mode: a few training steps first.
        for (int i = 0; i < 3; ++i)
            bn(randn({4, 3, 2, 2}, gen, dtype::float64) * 2.0 + 1.0);
        bn.train(training);
        auto net = [&](const args& a) {
            bn.set_parameter("weight", a[2]);
            bn.set_parameter("bias", a[3]);
            const tensor h = reshape(matmul(a[0], a[1]), {2, 3, 2, 2});
            const tensor r = relu(bn(h));
            return args{sum(mul(mul(r, r), weights))};
        };
        const args xs = leaves({randn({2, 4}, gen, dtype::float64), randn({4, 12}, gen, dtype::float64),
                                randn({3}, gen, dtype::float64) + 1.0, randn({3}, gen, dtype::float64)});
        const auto r1 = gradcheck(net, xs);
        CHECK_MESSAGE(r1.ok, r1.message);
        const auto r2 = gradgradcheck(net, xs);
        CHECK_MESSAGE(r2.ok, r2.message);
        auto hvp = [&](const args& a) {
            const tensor loss = net(a)[0];
            const auto g = grad({loss}, {a[0], a[1], a[2]}, {}, true, true);
            return args{
                grad({sum(g[0] * g[0]) + sum(g[1] * g[1]) + sum(g[2] * g[2])}, {a[0], a[1], a[2]}, {}, true, true)};
        };
        const auto r3 = gradcheck(hvp, xs);
        CHECK_MESSAGE(r3.ok, r3.message);
    }
}

TEST_CASE("the contract's large shapes: [27, 131, 127, 6] and the empty [0, 131, 127, 6]")
{
    // R = 449,199 elements per channel. The fused float32 result is compared with the composite
    // formula evaluated in float64 on the same inputs. Float32 blocked sums of R terms err by at
    // most ~(85 + log2 R) u sum|t| (backends/cpu/batch_norm/kernels.cpp), ~6e-6 of the sum of
    // magnitudes, i.e. ~6e-6 of R for O(1) terms; divided by R in the formulas this leaves
    // ~1e-5 of the tensor's magnitude, so 1e-4 relative to the largest |value| is a safe bound
    // that still catches any wrong term (which would be O(1) relative).
    generator gen(11);
    const shape_type shape = {27, 131, 127, 6};
    const tensor x = randn(shape, gen) * 3.0 + 1.0, dy = randn(shape, gen);
    const tensor scale = randn({6}, gen) + 1.0, offset = randn({6}, gen);
    batch_norm_attrs at;
    const auto f = fused_batch_norm(x, scale, offset, zeros({0}), zeros({0}), at);
    const auto g = fused_batch_norm_grad(dy, x, scale, f.saved_mean, f.saved_var, at);
    const auto c = detail::batch_norm_grad_composite(dy.to(dtype::float64), x.to(dtype::float64),
                                                     scale.to(dtype::float64), f.saved_mean.to(dtype::float64),
                                                     f.saved_var.to(dtype::float64), at);
    auto norm_rel = [](const tensor& got, const tensor& want) {
        const auto gv = to_vector(got), wv = to_vector(want);
        double diff = 0, mag = 0;
        for (std::size_t i = 0; i < gv.size(); ++i)
        {
            diff = std::max(diff, std::abs(gv[i] - wv[i]));
            mag = std::max(mag, std::abs(wv[i]));
        }
        return diff / std::max(mag, 1e-30);
    };
    CHECK(norm_rel(g.dx, c.dx) < 1e-4);
    CHECK(norm_rel(g.dscale, c.dscale) < 1e-4);
    CHECK(norm_rel(g.doffset, c.doffset) < 1e-4);
    // The moments against float64 means of the same data.
    const tensor m64 = mean(x.to(dtype::float64), {0, 1, 2});
    CHECK(norm_rel(f.saved_mean, m64) < 1e-5);
    const auto e = fused_batch_norm(zeros({0, 131, 127, 6}), scale, offset, zeros({0}), zeros({0}), at);
    CHECK(e.y.shape() == shape_type{0, 131, 127, 6});
    for (double v : to_vector(e.running_mean))
        CHECK(std::isnan(v));
}

// --- batch norm + ReLU, fused (docs/batch_norm.md, section 1.8) --------------------------------

namespace
{
    /// where(y > 0, dy, 0): ReLU's backward, the cotangent the fused ReLU gradient works with.
    tensor relu_masked(const tensor& dy, const tensor& y)
    {
        return where(gt(y, scalar_like(y, 0.0)), dy, scalar_like(dy, 0.0));
    }

    /// An x-like result against its oracle: float64 and float32 as above. 16-bit: both sides
    /// compute in float32 or wider, where they agree to 1e-5 of the tensor's magnitude (the
    /// float32 bound above), then each rounds once to dt (half a unit in the last place each),
    /// so |got - want| <= ulp |want| + 1e-5 max(1, max |want|).
    void check_io_close(const tensor& got, const tensor& want, dtype dt)
    {
        if (dt == dtype::float64 || dt == dtype::float32)
            return check_close(got, want, dt == dtype::float64 ? 1e-12 : 1e-5);
        const auto g = to_vector(got), w = to_vector(want);
        REQUIRE(g.size() == w.size());
        double mag = 1;
        for (double v : w)
            mag = std::max(mag, std::abs(v));
        const double ulp = dt == dtype::float16 ? 0x1p-10 : 0x1p-7;
        for (std::size_t i = 0; i < g.size(); ++i)
            CHECK(std::abs(g[i] - w[i]) <= ulp * std::abs(w[i]) + 1e-5 * mag);
    }
}

TEST_CASE("fused batch norm + ReLU: relu of the forward, and the composite gradient at the masked cotangent")
{
    for (const auto& c : formats)
        for (bool training : {true, false})
            for (dtype dt : {dtype::float64, dtype::float32, dtype::float16, dtype::bfloat16})
            {
                INFO(c.format << (training ? " training " : " inference ") << name(dt));
                const inputs in = make_inputs(c, dt, 12);
                const batch_norm_attrs at = attrs_for(c, training);
                const auto fr = fused_batch_norm_relu(in.x, in.scale, in.offset, in.pop_mean, in.pop_var, at);
                const auto f = fused_batch_norm(in.x, in.scale, in.offset, in.pop_mean, in.pop_var, at);
                CHECK(fr.y.dtype() == dt);
                check_io_close(fr.y, relu(f.y), dt);
                const double stol = dt == dtype::float64 ? 1e-12 : 1e-5; // per-channel: float64 or float32
                for (const auto& [got, want] : {std::pair{fr.saved_mean, f.saved_mean},
                                                {fr.saved_var, f.saved_var},
                                                {fr.running_mean, f.running_mean},
                                                {fr.running_var, f.running_var}})
                    check_close(got, want, stol);
                const tensor rs1 = training ? fr.saved_mean : in.pop_mean;
                const tensor rs2 = training ? fr.saved_var : in.pop_var;
                const auto g = fused_batch_norm_relu_grad(in.dy, in.x, fr.y, in.scale, rs1, rs2, at);
                const auto want = detail::batch_norm_grad_composite(relu_masked(in.dy, fr.y), in.x, in.scale, rs1, rs2,
                                                                    at);
                CHECK(g.dx.dtype() == dt);
                check_io_close(g.dx, want.dx, dt);
                check_close(g.dscale, want.dscale, stol);
                check_close(g.doffset, want.doffset, stol);
            }
}

TEST_CASE("fused batch norm + ReLU: autograd chain; second order equals autograd of the masked composite")
{
    for (const auto& c : formats)
        for (bool training : {true, false})
        {
            INFO(c.format << (training ? " training" : " inference"));
            const inputs in = make_inputs(c, dtype::float64, 13);
            const batch_norm_attrs at = attrs_for(c, training);
            const args l = leaves({in.dy, in.x, in.scale, in.offset});
            const auto fr = fused_batch_norm_relu(l[1], l[2], l[3], in.pop_mean, in.pop_var, at);
            REQUIRE(fr.y.grad_fn());
            CHECK(fr.y.grad_fn()->name() == "fused_batch_norm_relu");
            // First order: the node's backward is the fused ReLU gradient, itself recorded.
            const auto g1 = grad({fr.y}, {l[1], l[2], l[3]}, {l[0]}, true, true);
            const tensor rs1 = training ? fr.saved_mean : in.pop_mean;
            const tensor rs2 = training ? fr.saved_var : in.pop_var;
            const auto direct = fused_batch_norm_relu_grad(in.dy, in.x, fr.y.detach(), in.scale, rs1, rs2, at);
            check_close(g1[0], direct.dx, 1e-14);
            check_close(g1[1], direct.dscale, 1e-14);
            check_close(g1[2], direct.doffset, 1e-14);
            REQUIRE(g1[0].grad_fn());
            CHECK(g1[0].grad_fn()->name() == "fused_batch_norm_relu_grad");
            // Second order w.r.t. (dy, x, scale), against autograd of the composite gradient at
            // the masked dy (mask constant), with the statistics as functions of x in training.
            const auto g2 = grad({g1[0], g1[1], g1[2]}, {l[0], l[1], l[2]}, {in.A, in.a, in.b});
            const args o = leaves({in.dy, in.x, in.scale});
            const auto [srs1, srs2] = training ? differentiable_stats(o[1], c) : std::pair{in.pop_mean, in.pop_var};
            const auto first = detail::batch_norm_grad_composite(relu_masked(o[0], fr.y.detach()), o[1], o[2], srs1,
                                                                 srs2, at);
            const auto want = grad({first.dx, first.dscale, first.doffset}, o, {in.A, in.a, in.b});
            for (std::size_t k = 0; k < 3; ++k)
                check_close(g2[k], want[k], 1e-10);
        }
}

TEST_CASE("fused batch norm + ReLU: errors name the op and the argument; NaN stays NaN")
{
    const inputs in = make_inputs(formats[0], dtype::float32, 15); // NHWC [2, 3, 2, 5]
    const batch_norm_attrs at = attrs_for(formats[0], true);
    CHECK_ERROR(fused_batch_norm_relu(in.x, ones({4}), in.offset, in.pop_mean, in.pop_var, at), xgrad::invalid_argument,
                "fused_batch_norm_relu: scale must have the same number of elements as the channels of x, got 4 and 5");
    const auto fr = fused_batch_norm_relu(in.x, in.scale, in.offset, in.pop_mean, in.pop_var, at);
    const tensor m = fr.saved_mean, v = fr.saved_var;
    CHECK_ERROR(
        fused_batch_norm_relu_grad(in.dy, in.x, fr.y.to(dtype::float64), in.scale, m, v, at), xgrad::invalid_argument,
        "fused_batch_norm_relu_grad: y must have x's shape [2, 3, 2, 5] and dtype float32", "got [2, 3, 2, 5] float64");
    CHECK_ERROR(fused_batch_norm_relu_grad(in.dy, in.x, fr.y.slice(0, 0, 1), in.scale, m, v, at),
                xgrad::invalid_argument, "fused_batch_norm_relu_grad: y must have x's shape", "got [1, 3, 2, 5]");
    CHECK_ERROR(fused_batch_norm_relu_grad(in.dy, in.x, tensor(), in.scale, m, v, at), xgrad::invalid_argument,
                "fused_batch_norm_relu_grad: y must have", "(undefined)");
    CHECK_ERROR(fused_batch_norm_relu_grad(in.dy, in.x, fr.y, in.scale, m, ones({2}), at), xgrad::invalid_argument,
                "fused_batch_norm_relu_grad: saved_var must have the same number of elements");
    std::vector<double> xv = to_vector(in.x);
    xv[0] = std::nan("");
    const tensor xn = from_host(xv.data(), in.x.shape(), dtype::float64).to(dtype::float32);
    for (bool training : {true, false}) // max(NaN, 0) is NaN
        CHECK(std::isnan(to_vector(
            fused_batch_norm_relu(xn, in.scale, in.offset, in.pop_mean, in.pop_var, attrs_for(formats[0], training))
                .y)[0]));
}
