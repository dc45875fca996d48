// Batch norm + ReLU + max pooling as one op (fused_batch_norm_relu_max_pool2d) against the two
// ops it replaces, fused_batch_norm_relu then max_pool2d: the forward and the first-order
// gradients bit for bit (the fused backward forms the very cotangent the two ops' backwards
// would, see core/src/ops/batch_norm.cpp), the second and third orders to rounding; and its
// argument checks; and nn::sequential's use of it. Its finite-difference checks are rows of
// tests/support/gradcheck_cases.hpp.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tests/support/check_error.hpp"
#include "xgrad/layers.hpp"
#include "xgrad/xgrad.hpp"

using namespace xgrad;

namespace
{
    using args = std::vector<tensor>;

    struct pool_case
    {
        const char* format;
        shape_type shape; // x
        pool2d_params pool;
    };

    pool2d_params disjoint_2x2() { return pool2d_params{}; }

    /// Overlapping 3x3 windows, stride 2, padding 1: positions picked by two windows get the
    /// sum of their gradients (put_add), which the fused mask must not change.
    pool2d_params overlapping_3x3()
    {
        pool2d_params p;
        p.kernel = {3, 3};
        p.stride = std::array<std::int64_t, 2>{2, 2};
        p.padding = {1, 1};
        return p;
    }

    const std::vector<pool_case> cases = {
        {"NHWC", {3, 6, 4, 5}, disjoint_2x2()},
        {"NCHW", {3, 5, 6, 4}, disjoint_2x2()},
        {"NHWC", {2, 7, 5, 3}, overlapping_3x3()},
        {"NCHW", {2, 3, 7, 5}, overlapping_3x3()},
    };

    std::int64_t channels(const pool_case& c) { return std::string(c.format) == "NHWC" ? c.shape[3] : c.shape[1]; }

    batch_norm_attrs attrs_for(const pool_case& c, bool training)
    {
        batch_norm_attrs a;
        a.data_format = c.format;
        a.is_training = training;
        a.epsilon = 0.001f;
        a.exponential_avg_factor = 0.5f;
        return a;
    }

    /// The same bits, element for element (NaN compared as bits too).
    void check_same_bits(const tensor& got, const tensor& want)
    {
        REQUIRE(got.shape() == want.shape());
        REQUIRE(got.dtype() == want.dtype());
        const tensor g = contiguous(got.detach()), w = contiguous(want.detach());
        const auto bytes = static_cast<std::size_t>(g.numel()) * itemsize(g.dtype());
        CHECK(std::memcmp(g.data_ptr(), w.data_ptr(), bytes) == 0);
    }

    void check_close(const tensor& got, const tensor& want, double tol)
    {
        REQUIRE(got.shape() == want.shape());
        const auto g = to_vector(got), w = to_vector(want);
        for (std::size_t i = 0; i < g.size(); ++i)
            CHECK(std::abs(g[i] - w[i]) <= tol * (1.0 + std::abs(w[i])));
    }

    struct bn_inputs
    {
        tensor x, scale, offset, mean, variance;
    };

    /// Inputs of both signs around the ReLU kink, with ties in some windows (x rounded to a
    /// coarse grid) so that the first-maximum rule matters; with nan, one NaN in x (its
    /// window's pick; in training its channel's statistics too).
    bn_inputs make_inputs(const pool_case& c, dtype dt, std::uint64_t seed, bool nan = false)
    {
        generator gen(seed);
        const std::int64_t C = channels(c);
        const dtype sdt = dt == dtype::float64 ? dtype::float64 : dtype::float32;
        bn_inputs in;
        std::vector<double> xs = to_vector(randn(c.shape, gen, dtype::float64));
        for (double& v : xs)
            v = std::round(v * 4.0) / 4.0;
        if (nan)
            xs[xs.size() / 3] = std::nan("");
        in.x = from_host(xs.data(), c.shape, dtype::float64).to(dt);
        in.scale = (randn({C}, gen, dtype::float64) + 0.5).to(sdt);
        in.offset = (randn({C}, gen, dtype::float64) * 0.5).to(sdt);
        in.mean = (randn({C}, gen, dtype::float64) * 0.3).to(sdt);
        in.variance = (abs(randn({C}, gen, dtype::float64)) + 0.5).to(sdt);
        return in;
    }

    args leaves(std::initializer_list<tensor> ts)
    {
        args out;
        for (const tensor& t : ts)
            out.push_back(t.detach().requires_grad_());
        return out;
    }
}

TEST_CASE("fused batch norm + ReLU + max pool: the values and first-order gradients of the two ops, bit for bit")
{
    for (const auto& c : cases)
        for (bool training : {true, false})
            for (dtype dt : {dtype::float64, dtype::float32, dtype::float16, dtype::bfloat16})
                for (bool nan : {false, true})
                {
                    INFO(std::string(c.format)
                         << " " << shape_to_string(c.shape) << (training ? " training " : " inference ") << name(dt)
                         << (nan ? " with a NaN" : ""));
                    const bn_inputs in = make_inputs(c, dt, 21, nan);
                    const batch_norm_attrs at = attrs_for(c, training);
                    const args l = leaves({in.x, in.scale, in.offset});
                    const auto fused = fused_batch_norm_relu_max_pool2d(l[0], l[1], l[2], in.mean, in.variance, at,
                                                                        c.pool);
                    const auto bn = fused_batch_norm_relu(l[0], l[1], l[2], in.mean, in.variance, at);
                    const tensor want = max_pool2d(bn.y, c.pool, c.format);
                    REQUIRE(fused.y.grad_fn());
                    CHECK(fused.y.grad_fn()->name() == "fused_batch_norm_relu_max_pool2d");
                    check_same_bits(fused.y, want);
                    for (const auto& [got, ref] : {std::pair{fused.running_mean, bn.running_mean},
                                                   {fused.running_var, bn.running_var},
                                                   {fused.saved_mean, bn.saved_mean},
                                                   {fused.saved_var, bn.saved_var}})
                        check_same_bits(got, ref);
                    generator gen(22);
                    const tensor g = randn(want.shape(), gen, dtype::float64).to(dt);
                    const args g1 = grad({fused.y}, l, {g});
                    const args g2 = grad({want}, l, {g});
                    for (std::size_t k = 0; k < l.size(); ++k)
                        check_same_bits(g1[k], g2[k]);
                }
}

TEST_CASE("fused batch norm + ReLU + max pool: second and third orders equal those of the two ops")
{
    for (const auto& c : cases)
        for (bool training : {true, false})
        {
            INFO(std::string(c.format) << " " << shape_to_string(c.shape) << (training ? " training" : " inference"));
            const bn_inputs in = make_inputs(c, dtype::float64, 23);
            const batch_norm_attrs at = attrs_for(c, training);
            generator gen(24);
            const shape_type out_shape =
                max_pool2d(zeros(c.shape, dtype::float64), c.pool, c.format).shape(); // the pooled shape
            const args l = leaves({in.x, in.scale, in.offset, randn(out_shape, gen, dtype::float64)});
            const args wrt = {l[0], l[1], l[2]};
            const auto fused = fused_batch_norm_relu_max_pool2d(l[0], l[1], l[2], in.mean, in.variance, at, c.pool);
            const tensor two = max_pool2d(fused_batch_norm_relu(l[0], l[1], l[2], in.mean, in.variance, at).y, c.pool,
                                          c.format);
            const args f1 = grad({fused.y}, wrt, {l[3]}, true, true);
            const args t1 = grad({two}, wrt, {l[3]}, true, true);
            REQUIRE(f1[0].grad_fn());
            CHECK(f1[0].grad_fn()->name() == "fused_batch_norm_relu_max_pool2d_grad");
            // Second order: a scalar of the first-order gradients, differentiated w.r.t. the
            // inputs and the cotangent.
            tensor fs = zeros({}, dtype::float64), ts = zeros({}, dtype::float64);
            for (std::size_t k = 0; k < f1.size(); ++k)
            {
                const tensor w = randn(f1[k].shape(), gen, dtype::float64);
                fs = fs + sum(f1[k] * w);
                ts = ts + sum(t1[k] * w);
            }
            // (offset has no second derivative: both leave it undefined.)
            const args f2 = grad({fs}, l, {}, true, true, true);
            const args t2 = grad({ts}, l, {}, true, true, true);
            for (std::size_t k = 0; k < l.size(); ++k)
            {
                REQUIRE(f2[k].defined() == t2[k].defined());
                if (f2[k].defined())
                    check_close(f2[k], t2[k], 1e-11);
            }
            CHECK(f2[0].defined());
            CHECK(f2[3].defined());
            // Third order, through the composite batch-norm formula both chains end in.
            tensor fss = zeros({}, dtype::float64), tss = zeros({}, dtype::float64);
            for (std::size_t k = 0; k < f2.size(); ++k)
            {
                if (!f2[k].defined())
                    continue;
                const tensor w = randn(f2[k].shape(), gen, dtype::float64);
                fss = fss + sum(f2[k] * w);
                tss = tss + sum(t2[k] * w);
            }
            const args f3 = grad({fss}, wrt, {}, false, false, true);
            const args t3 = grad({tss}, wrt, {}, false, false, true);
            for (std::size_t k = 0; k < wrt.size(); ++k)
            {
                REQUIRE(f3[k].defined() == t3[k].defined());
                if (f3[k].defined())
                    check_close(f3[k], t3[k], 1e-10);
            }
        }
}

TEST_CASE("fused batch norm + ReLU + max pool: an empty batch, and the errors of both ops")
{
    const pool_case& c = cases[0];
    const bn_inputs in = make_inputs(c, dtype::float32, 25);
    const batch_norm_attrs at = attrs_for(c, true);
    const auto e = fused_batch_norm_relu_max_pool2d(zeros({0, 6, 4, 5}), in.scale, in.offset, in.mean, in.variance, at,
                                                    c.pool);
    CHECK(e.y.shape() == shape_type{0, 3, 2, 5});
    {
        const tensor x0 = zeros({0, 6, 4, 5}).requires_grad_();
        const auto e0 = fused_batch_norm_relu_max_pool2d(x0, in.scale, in.offset, in.mean, in.variance, at, c.pool);
        const args g0 = grad({sum(e0.y)}, {x0});
        CHECK(g0[0].shape() == shape_type{0, 6, 4, 5});
    }
    CHECK_ERROR(fused_batch_norm_relu_max_pool2d(in.x, ones({4}), in.offset, in.mean, in.variance, at, c.pool),
                xgrad::invalid_argument,
                "fused_batch_norm_relu_max_pool2d: scale must have the same number of elements", "got 4 and 5");
    pool2d_params big;
    big.kernel = {8, 2};
    CHECK_ERROR(fused_batch_norm_relu_max_pool2d(in.x, in.scale, in.offset, in.mean, in.variance, at, big),
                xgrad::invalid_argument, "fused_batch_norm_relu_max_pool2d:");
    pool2d_params wide_pad;
    wide_pad.padding = {2, 0};
    CHECK_ERROR(fused_batch_norm_relu_max_pool2d(in.x, in.scale, in.offset, in.mean, in.variance, at, wide_pad),
                xgrad::invalid_argument, "fused_batch_norm_relu_max_pool2d: padding {2, 0} must be at most half");
    batch_norm_attrs at5 = at;
    at5.data_format = "NDHWC";
    CHECK_ERROR(fused_batch_norm_relu_max_pool2d(zeros({2, 2, 6, 4, 5}), in.scale, in.offset, in.mean, in.variance, at5,
                                                 c.pool),
                xgrad::invalid_argument, "fused_batch_norm_relu_max_pool2d: x must be rank 4", "[2, 2, 6, 4, 5]",
                "NDHWC");
}

TEST_CASE("max_pool2d and the fused op free their graphs, backward graphs included, when the outputs die")
{
    // Each node keeps what its backward needs (positions, the pooled maxima for the mask) but
    // never its own output tensor: output -> node -> output would be a cycle that never frees.
    for (const pool_case& c : cases)
    {
        INFO(c.format);
        const bn_inputs in = make_inputs(c, dtype::float32, 31);
        const args xs = leaves({in.x, in.scale, in.offset});
        for (bool fused : {false, true})
        {
            INFO("fused: " << fused);
            std::weak_ptr<node> fn, grad_fn;
            std::weak_ptr<tensor_impl> out_impl, grad_impl;
            {
                const tensor y = fused ? fused_batch_norm_relu_max_pool2d(xs[0], xs[1], xs[2], in.mean, in.variance,
                                                                          attrs_for(c, true), c.pool)
                                             .y
                                       : max_pool2d(xs[0], c.pool, c.format);
                fn = y.grad_fn();
                out_impl = y.impl();
                const tensor g = grad({sum(mul(y, y))}, {xs[0]}, {}, std::nullopt, true)[0];
                REQUIRE(g.requires_grad());
                grad_fn = g.grad_fn();
                grad_impl = g.impl();
                CHECK_FALSE(fn.expired());
                CHECK_FALSE(grad_fn.expired());
            }
            CHECK(fn.expired());
            CHECK(out_impl.expired());
            CHECK(grad_fn.expired());
            CHECK(grad_impl.expired());
        }
    }
}

TEST_CASE("sequential fuses batch_norm2d + relu + max_pool2d: the three children's outputs, gradients and state")
{
    for (const char* format : {"NCHW", "NHWC"})
    {
        INFO(format);
        const bool cl = std::string(format) == "NHWC";
        generator gen(26);
        auto bn = [&] {
            nn::batch_norm_options o(3);
            o.dtype = dtype::float64;
            o.data_format = format;
            return std::make_shared<nn::batch_norm2d>(o);
        };
        nn::sequential seq;
        const auto bn1 = seq.add("bn1", bn());
        seq.add("relu1", std::make_shared<nn::relu>());
        seq.add("pool1", std::make_shared<nn::max_pool2d>(2, format));
        CHECK(seq.fused_groups().empty());
        CHECK(seq(randn(cl ? shape_type{2, 4, 6, 3} : shape_type{2, 3, 4, 6}, gen, dtype::float64)).grad_fn()->name() ==
              "max_pool2d"); // not fused before the pass
        REQUIRE(nn::fuse(seq) == 1);
        REQUIRE(seq.fused_groups().size() == 1);
        CHECK(seq.fused_groups()[0].first == 0);
        CHECK(seq.fused_groups()[0].count == 3);
        {
            no_grad guard;
            bn1->set_parameter("weight", randn({3}, gen, dtype::float64) * 0.5 + 1.0);
            bn1->set_parameter("bias", randn({3}, gen, dtype::float64));
        }
        // The same children called one by one, with the batch norm + ReLU fusion that
        // pass gives a batch norm followed by a relu alone (a separate relu child agrees to
        // rounding, which the relu fusion's own tests bound).
        const auto plain = bn();
        plain->load_state_dict(bn1->state_dict());
        nn::max_pool2d pool(2, format);
        const shape_type x_shape = cl ? shape_type{2, 4, 6, 3} : shape_type{2, 3, 4, 6};
        for (int step = 0; step < 4; ++step)
        {
            const bool training = step < 3;
            INFO("step " << step);
            seq.train(training);
            plain->train(training);
            const tensor x = randn(x_shape, gen, dtype::float64).requires_grad_();
            const tensor y = seq(x);
            REQUIRE(y.grad_fn());
            CHECK(y.grad_fn()->name() == "fused_batch_norm_relu_max_pool2d");
            const tensor want = pool(plain->forward_relu(x));
            check_same_bits(y, want);
            const tensor w = randn(y.shape(), gen, dtype::float64);
            const auto g1 = grad({sum(y * w)}, {x, bn1->scale(), bn1->offset()});
            const auto g2 = grad({sum(want * w)}, {x, plain->scale(), plain->offset()});
            for (std::size_t k = 0; k < g1.size(); ++k)
                check_same_bits(g1[k], g2[k]);
            for (const auto& [n, t] : plain->state_dict())
                check_same_bits(bn1->state_dict().at(n), t);
        }
        // The error names the three children run as one.
        CHECK_ERROR(seq(randn(cl ? shape_type{2, 4, 6, 5} : shape_type{2, 5, 4, 6}, gen, dtype::float64)),
                    xgrad::invalid_argument, "sequential: in 'bn1' + 'relu1' + 'pool1': ", "3 channels");
        // A pool of the other layout is not fused (nor is a batch norm whose relu is not
        // followed by a max pool).
        nn::sequential other;
        other.add("bn", bn());
        other.add("relu", std::make_shared<nn::relu>());
        other.add("pool", std::make_shared<nn::max_pool2d>(2, cl ? "NCHW" : "NHWC"));
        CHECK(nn::fuse(other) == 1); // batch norm + relu only
        CHECK(other.fused_groups()[0].count == 2);
        CHECK(
            other(randn(cl ? shape_type{2, 4, 4, 3} : shape_type{2, 3, 4, 4}, gen, dtype::float64)).grad_fn()->name() ==
            "max_pool2d");
    }
}
