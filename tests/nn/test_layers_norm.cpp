// Layer, group and instance normalisation: the ops (xgrad/ops/norm.hpp) against their formula
// evaluated here in double, in every floating dtype, and their errors; the layers
// (xgrad/nn/norm.hpp): parameters, description, errors. Their gradients of the first and second
// order are checked by finite differences with every other op (tests/support/gradcheck_cases.hpp).
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "tests/support/check_error.hpp"
#include "xgrad/nn.hpp"
#include "xgrad/xgrad.hpp"

using namespace xgrad;

namespace
{
    /// The formula on the host: x as `groups` consecutive blocks of `per_group` values, each
    /// normalised with its mean and biased variance, then times w[k] plus b[k] where k is the
    /// element's index into the affine parameters (affine_index).
    template <class F>
    std::vector<double> reference(const std::vector<double>& x, std::int64_t groups, double eps,
                                  const std::vector<double>& w, const std::vector<double>& b, F affine_index)
    {
        const std::int64_t per = static_cast<std::int64_t>(x.size()) / groups;
        std::vector<double> y(x.size());
        for (std::int64_t g = 0; g < groups; ++g)
        {
            double m = 0, v = 0;
            for (std::int64_t i = 0; i < per; ++i)
                m += x[g * per + i];
            m /= static_cast<double>(per);
            for (std::int64_t i = 0; i < per; ++i)
                v += (x[g * per + i] - m) * (x[g * per + i] - m);
            v /= static_cast<double>(per);
            for (std::int64_t i = 0; i < per; ++i)
            {
                const std::int64_t at = g * per + i;
                const std::int64_t k = affine_index(at);
                y[at] = (x[at] - m) / std::sqrt(v + eps) * (w.empty() ? 1.0 : w[k]) + (b.empty() ? 0.0 : b[k]);
            }
        }
        return y;
    }

    void check_close(const tensor& got, const std::vector<double>& want, double tol)
    {
        const std::vector<double> g = to_vector(got);
        REQUIRE(g.size() == want.size());
        double worst = 0;
        for (std::size_t i = 0; i < g.size(); ++i)
            worst = std::max(worst, std::abs(g[i] - want[i]));
        CHECK(worst <= tol);
    }
}

TEST_CASE("layer_norm, group_norm, instance_norm: the formula, in every floating dtype")
{
    generator gen(41);
    const tensor x = randn({2, 6, 3, 4}, gen, dtype::float64) * 3.0 + 1.5;
    const tensor w6 = randn({6}, gen, dtype::float64), b6 = randn({6}, gen, dtype::float64);
    const tensor w34 = randn({3, 4}, gen, dtype::float64), b34 = randn({3, 4}, gen, dtype::float64);
    const std::vector<double> xv = to_vector(x);
    const double eps = 1e-3; // a float attribute: 1e-3 as a float, exactly, below
    const double e = static_cast<double>(static_cast<float>(eps));
    // Tolerances: float64 computes the same formula in double (a few ulp of O(10) values);
    // float32 rounds each of ~100 terms once (1e-5 of the O(1)-O(10) outputs); the 16-bit
    // dtypes round x on the way in and y on the way out (2^-8 and 2^-11 relative, on outputs of
    // a few units).
    for (const auto& entry : std::vector<std::pair<dtype, double>>{{dtype::float64, 1e-12},
                                                                   {dtype::float32, 1e-4},
                                                                   {dtype::float16, 2e-2},
                                                                   {dtype::bfloat16, 1.5e-1}})
    {
        const dtype dt = entry.first; // (not a binding: INFO and the lambda below capture it)
        const double tol = entry.second;
        INFO(name(dt));
        const tensor xd = x.to(dt);
        const std::vector<double> xr = to_vector(xd); // the values the op sees
        const auto to = [&](const tensor& t) { return t.to(dt); };
        // layer_norm over the last two dims: 12 rows of 12; weight index = position in [3, 4].
        check_close(
            layer_norm(xd, {3, 4}, to(w34), to(b34), eps),
            reference(xr, 12, e, to_vector(to(w34)), to_vector(to(b34)), [](std::int64_t at) { return at % 12; }), tol);
        // group_norm, 3 groups of 2 channels: 6 blocks of 24; weight index = channel.
        check_close(
            group_norm(xd, 3, to(w6), to(b6), eps),
            reference(xr, 6, e, to_vector(to(w6)), to_vector(to(b6)), [](std::int64_t at) { return (at / 12) % 6; }),
            tol);
        // instance_norm: 12 blocks of 12, no affine.
        check_close(instance_norm(xd, {}, {}, eps), reference(xr, 12, e, {}, {}, [](std::int64_t) { return 0; }), tol);
    }
}

TEST_CASE("layer_norm: the errors name the function and what was wrong")
{
    const tensor x = zeros({2, 3, 4});
    CHECK_ERROR(layer_norm(x, {3}), xgrad::invalid_argument, "layer_norm", "normalized_shape [3]", "[2, 3, 4]");
    CHECK_ERROR(layer_norm(x, {}), xgrad::invalid_argument, "layer_norm", "non-empty");
    CHECK_ERROR(layer_norm(x, {4}, ones({3})), xgrad::invalid_argument, "layer_norm", "weight must have shape [4]");
    CHECK_ERROR(layer_norm(x, {4}, ones({4}), ones({4}, dtype::float64)), xgrad::invalid_argument, "bias", "float64");
    CHECK_ERROR(layer_norm(x, {4}, {}, {}, -1.0), xgrad::invalid_argument, "eps");
    CHECK_ERROR(layer_norm(zeros({2, 4}, dtype::int64), {4}), xgrad::invalid_argument, "floating point");
    CHECK_ERROR(group_norm(x, 2), xgrad::invalid_argument, "group_norm", "divide the 3 channels");
    CHECK_ERROR(group_norm(zeros({4}), 1), xgrad::invalid_argument, "group_norm", "rank 2 or more");
    CHECK_ERROR(instance_norm(zeros({2, 3})), xgrad::invalid_argument, "instance_norm", "rank 3 or more");
    CHECK_ERROR(instance_norm(x, ones({2})), xgrad::invalid_argument, "instance_norm: ", "weight");
    CHECK(layer_norm(zeros({0, 4}), {4}).shape() == shape_type{0, 4}); // nothing to normalise
}

TEST_CASE("nn::layer_norm and nn::group_norm: PyTorch's parameters, the op's values, errors")
{
    nn::layer_norm ln(shape_type{3, 4});
    CHECK(ln.parameter("weight").shape() == shape_type{3, 4});
    CHECK(ln.parameter("bias").shape() == shape_type{3, 4});
    CHECK(ln.describe() == "layer_norm([3, 4], eps=1e-05, elementwise_affine=true)");
    nn::layer_norm_options plain({4});
    plain.elementwise_affine = false;
    CHECK(nn::layer_norm(plain).parameters().empty());

    nn::group_norm gn(2, 6);
    CHECK(gn.named_parameters().size() == 2);
    CHECK(gn.describe() == "group_norm(2, 6, eps=1e-05, affine=true)");
    generator gen(5);
    const tensor x = randn({2, 6, 3, 3}, gen);
    {
        no_grad guard;
        gn.set_parameter("weight", randn({6}, gen));
    }
    const std::vector<double> got = to_vector(gn(x));
    const std::vector<double> want = to_vector(group_norm(x, 2, gn.parameter("weight"), gn.parameter("bias")));
    CHECK(got == want);
    CHECK_ERROR(gn(randn({2, 4, 3, 3}, gen)), xgrad::invalid_argument, "group_norm", "[N, 6, ...]", "[2, 4, 3, 3]");
    CHECK_ERROR(nn::group_norm(4, 6), xgrad::invalid_argument, "num_groups (4)", "num_channels (6)");
    CHECK_ERROR(nn::layer_norm(shape_type{0}), xgrad::invalid_argument, "normalized_shape");
    nn::layer_norm_options bad({4});
    bad.eps = std::nan("");
    CHECK_ERROR(nn::layer_norm(bad), xgrad::invalid_argument, "eps");
}

TEST_CASE("nn::instance_norm2d: PyTorch's defaults, group norm with one channel per group, errors")
{
    nn::instance_norm2d plain(4);
    CHECK(plain.parameters().empty()); // PyTorch's InstanceNorm2d: affine=False by default
    CHECK(plain.describe() == "instance_norm2d(4, eps=1e-05, affine=false)");
    nn::instance_norm_options o(4);
    o.affine = true;
    o.dtype = dtype::float64;
    nn::instance_norm2d in(o);
    CHECK(in.named_parameters().size() == 2);
    generator gen(6);
    const tensor x = randn({3, 4, 5, 2}, gen, dtype::float64);
    {
        no_grad guard;
        in.set_parameter("weight", randn({4}, gen, dtype::float64));
        in.set_parameter("bias", randn({4}, gen, dtype::float64));
    }
    // Statistics per (sample, channel) in training and in evaluation alike.
    const std::vector<double> want = to_vector(group_norm(x, 4, in.parameter("weight"), in.parameter("bias")));
    CHECK(to_vector(in(x)) == want);
    in.eval();
    CHECK(to_vector(in(x)) == want);
    CHECK_ERROR(in(randn({3, 4, 5}, gen, dtype::float64)), xgrad::invalid_argument, "instance_norm2d", "[N, 4, H, W]");
    CHECK_ERROR(nn::instance_norm2d(0), xgrad::invalid_argument, "instance_norm2d", "num_features");
}
