// The ops users reach for beyond the primitives: log1p, expm1 and erf near 0, softplus, silu
// and gelu against their formulas in double, clamp, flip, negative-step slices (Python's
// rules) and argmin (ties, NaN, int64 extremes). Their gradients of first and second order are
// checked by finite differences with every other op (tests/support/gradcheck_cases.hpp).
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <vector>

#include "tests/support/check_error.hpp"
#include "xgrad/xgrad.hpp"

using namespace xgrad;

namespace
{
    tensor f64(const std::vector<double>& v, const shape_type& shape)
    {
        return from_host(v.data(), shape, dtype::float64);
    }
    tensor f64(const std::vector<double>& v) { return f64(v, {static_cast<std::int64_t>(v.size())}); }

    void check_values(const tensor& got, const std::vector<double>& want, double rtol)
    {
        const std::vector<double> g = to_vector(got);
        REQUIRE(g.size() == want.size());
        for (std::size_t i = 0; i < g.size(); ++i)
        {
            if (std::isnan(want[i]))
                CHECK_MESSAGE(std::isnan(g[i]), "element " << i);
            else
                CHECK_MESSAGE(std::abs(g[i] - want[i]) <= rtol * std::max(std::abs(want[i]), 1e-300),
                              "element " << i << ": " << g[i] << " vs " << want[i]);
        }
    }
}

TEST_CASE("log1p, expm1: accurate where the composites lose every digit")
{
    const std::vector<double> small{1e-20, -3e-12, 1e-8, 0.5, -0.75};
    std::vector<double> l, e;
    for (double v : small)
    {
        l.push_back(std::log1p(v));
        e.push_back(std::expm1(v));
    }
    check_values(log1p(f64(small)), l, 1e-15);
    check_values(expm1(f64(small)), e, 1e-15);
    // log(1 + 1e-20) is 0 in double; log1p keeps it.
    CHECK(to_vector(log1p(f64({1e-20})))[0] == 1e-20);
    // float32 computes in float32 and keeps small values too.
    CHECK(to_vector(expm1(f64({1e-10}).to(dtype::float32)))[0] == doctest::Approx(1e-10).epsilon(1e-6));
    check_values(erf(f64({0.0, 1e-9, -0.5, 2.2, 6.0})), {0.0, std::erf(1e-9), std::erf(-0.5), std::erf(2.2), 1.0},
                 1e-15);
}

TEST_CASE("softplus, silu, gelu: the formulas, at the extremes too")
{
    const std::vector<double> xs{-800.0, -30.0, -1.5, -1e-9, 0.0, 0.3, 4.0, 30.0, 800.0};
    std::vector<double> sp, sp2, si, ge, gt;
    for (double v : xs)
    {
        sp.push_back(v > 0 ? v + std::log1p(std::exp(-v)) : std::log1p(std::exp(v)));
        const double b = 2.5 * v;
        sp2.push_back((b > 0 ? b + std::log1p(std::exp(-b)) : std::log1p(std::exp(b))) / 2.5);
        si.push_back(v / (1.0 + std::exp(-v)));
        ge.push_back(0.5 * v * (1.0 + std::erf(v / std::sqrt(2.0))));
        gt.push_back(0.5 * v * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (v + 0.044715 * v * v * v))));
    }
    si[0] = -0.0; // -800 e^-800 underflows to -0
    check_values(softplus(f64(xs)), sp, 1e-14);
    check_values(softplus(f64(xs), 2.5), sp2, 1e-14);
    check_values(silu(f64(xs)), si, 1e-14);
    check_values(gelu(f64(xs)), ge, 1e-14);
    check_values(gelu(f64(xs), "tanh"), gt, 1e-14);
    // No overflow: softplus(800) is 800, not inf.
    CHECK(to_vector(softplus(f64({800.0}).to(dtype::float32)))[0] == 800.0);

    // softplus' = sigmoid, 1/2 at 0, where the composite relu(x) + log1p(e^-|x|) gives 0.
    const tensor x = f64({0.0, 2.0}).requires_grad_();
    const tensor g = grad({sum(softplus(x))}, {x})[0];
    check_values(g, {0.5, 1.0 / (1.0 + std::exp(-2.0))}, 1e-15);

    CHECK_ERROR(softplus(f64({1.0}), 0.0), xgrad::invalid_argument, "softplus", "beta");
    CHECK_ERROR(softplus(f64({1.0}), std::nan("")), xgrad::invalid_argument, "softplus", "beta");
    CHECK_ERROR(gelu(f64({1.0}), "erf"), xgrad::invalid_argument, "gelu", "'none' or 'tanh'", "'erf'");
    CHECK_THROWS_AS(silu(zeros({2}, dtype::int64)), std::invalid_argument);
}

TEST_CASE("clamp: bounds included in the gradient, NaN kept, one-sided bounds")
{
    const tensor x = f64({-2.0, -0.5, 0.0, 0.7, 3.0, std::nan("")}).requires_grad_();
    check_values(clamp(x, -0.5, 0.7), {-0.5, -0.5, 0.0, 0.7, 0.7, std::nan("")}, 0);
    check_values(clamp(x, std::nullopt, 0.0), {-2.0, -0.5, 0.0, 0.0, 0.0, std::nan("")}, 0);
    check_values(clamp(x, 0.0, std::nullopt), {0.0, 0.0, 0.0, 0.7, 3.0, std::nan("")}, 0);
    const tensor g = grad({sum(clamp(x, -0.5, 0.7))}, {x})[0];
    // PyTorch's rule: 1 where min <= x <= max (the bounds themselves included).
    check_values(g, {0.0, 1.0, 1.0, 1.0, 0.0, 1.0}, 0);
    CHECK_ERROR(clamp(x, 1.0, -1.0), xgrad::invalid_argument, "clamp", "min", "max");
    CHECK(clamp(x, std::nullopt, std::nullopt).is_same(x));
}

TEST_CASE("flip: along any dims, its own gradient")
{
    const tensor x = arange(0, 24, 1, dtype::float64).reshape({2, 3, 4});
    std::vector<double> want;
    for (int i = 1; i >= 0; --i)
        for (int j = 0; j < 3; ++j)
            for (int k = 3; k >= 0; --k)
                want.push_back(12.0 * i + 4.0 * j + k);
    check_values(flip(x, {0, -1}), want, 0);
    // A strided view flips by its own element order.
    const tensor t = x.permute({2, 1, 0});
    check_values(flip(t, {0}), to_vector(flip(t.contiguous(), {0})), 0);
    CHECK(flip(x, {}).is_same(x));
    CHECK(flip(zeros({0, 3}), {1}).shape() == shape_type{0, 3});
    CHECK_ERROR(flip(x, {1, -2}), xgrad::invalid_argument, "flip", "named twice");
    CHECK_THROWS_AS(flip(x, {3}), std::invalid_argument);
    // Through take, flip takes floating tensors only, and says so.
    CHECK_THROWS_AS(flip(zeros({3}, dtype::int64), {0}), std::invalid_argument);
}

TEST_CASE("slice with a negative step: Python's x[start:stop:step]")
{
    const tensor x = arange(0, 6, 1, dtype::float64); // [0, 1, 2, 3, 4, 5]
    const auto py = [&](std::int64_t start, std::int64_t stop, std::int64_t step) {
        return to_vector(slice(x, 0, start, stop, step));
    };
    constexpr std::int64_t big = std::numeric_limits<std::int64_t>::max(),
                           small = std::numeric_limits<std::int64_t>::min();
    CHECK(py(big, small, -1) == std::vector<double>{5, 4, 3, 2, 1, 0}); // x[::-1]
    CHECK(py(big, small, -2) == std::vector<double>{5, 3, 1});          // x[::-2]
    CHECK(py(4, 1, -1) == std::vector<double>{4, 3, 2});                // x[4:1:-1]
    CHECK(py(-2, -6, -3) == std::vector<double>{4, 1});                 // x[-2:-6:-3]
    CHECK(py(10, -100, -4) == std::vector<double>{5, 1});               // x[10:-100:-4]
    CHECK(py(1, 4, -1).empty());                                        // x[1:4:-1]
    CHECK(py(-7, small, -1).empty());                                   // x[-7::-1]
    CHECK(slice(x.reshape({2, 3}), 1, big, small, -1).shape() == shape_type{2, 3});
    CHECK_ERROR(slice(x, 0, 0, 6, 0), xgrad::invalid_argument, "step");
    CHECK_ERROR(slice(x, 0, 0, 6, small), xgrad::invalid_argument, "step");
}

TEST_CASE("argmin: the first minimum, NaN first, int64 extremes, keepdim")
{
    const tensor x = f64({3.0, 1.0, 2.0, 1.0, 5.0, 0.5}, {2, 3});
    CHECK(to_vector(argmin(x, 1)) == std::vector<double>{1, 2});
    CHECK(to_vector(argmin(x, 0)) == std::vector<double>{1, 0, 1});
    CHECK(argmin(x, 0, true).shape() == shape_type{1, 3});
    CHECK(to_vector(argmin(f64({2.0, std::nan(""), 1.0, std::nan("")}), 0)) == std::vector<double>{1});
    const std::vector<std::int64_t> ints{std::numeric_limits<std::int64_t>::max(), -3,
                                         std::numeric_limits<std::int64_t>::min(),
                                         std::numeric_limits<std::int64_t>::min()};
    CHECK(argmin(from_host(ints.data(), {4}, dtype::int64)).item<std::int64_t>() == 2);
    CHECK(argmin(f64({4.0}, {})).item<std::int64_t>() == 0);
    CHECK(argmin(f64({1.0, 2.0}).to(dtype::bfloat16)).item<std::int64_t>() == 0);
    CHECK_FALSE(argmin(x.detach().requires_grad_(), 1).requires_grad());
    CHECK_ERROR(argmin(zeros({2, 0}), 1), xgrad::invalid_argument, "argmin", "extent 0");
    CHECK_ERROR(argmin(x, 2), xgrad::invalid_argument, "argmin");
    CHECK_ERROR(argmin(tensor()), xgrad::invalid_argument, "argmin", "undefined");
}
