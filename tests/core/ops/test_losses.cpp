// The losses' errors and what the PyTorch golden data cannot hold (tests/core/ops/
// test_torch_losses.cpp has the values): infinite log-probabilities, float32 extremes, the
// first-release cross_entropy signature, reduction::batchmean outside kl_div. Values and
// gradients in every option: the golden test; finite differences: tests/support/gradcheck_cases.hpp.
#include <doctest/doctest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "tests/support/check_error.hpp"
#include "xgrad/xgrad.hpp"

using namespace xgrad;

namespace
{
    tensor f64(std::vector<double> v, const shape_type& shape) { return from_host(v.data(), shape, dtype::float64); }
    tensor i64(std::vector<std::int64_t> v, const shape_type& shape)
    {
        return from_host(v.data(), shape, dtype::int64);
    }
    bool all_finite(const tensor& t)
    {
        for (double v : to_vector(t))
            if (!std::isfinite(v))
                return false;
        return true;
    }
}

TEST_CASE("losses: reduction batchmean is kl_div's alone")
{
    const tensor x = full({2, 3}, 0.5, dtype::float64), t = full({2, 3}, 0.25, dtype::float64);
    const tensor labels = i64({0, 2}, {2});
    using loss = std::function<tensor(reduction)>;
    const std::vector<std::pair<const char*, loss>> losses = {
        {"mse_loss", [&](reduction r) { return mse_loss(x, t, r); }},
        {"l1_loss", [&](reduction r) { return l1_loss(x, t, r); }},
        {"smooth_l1_loss", [&](reduction r) { return smooth_l1_loss(x, t, r); }},
        {"huber_loss", [&](reduction r) { return huber_loss(x, t, r); }},
        {"binary_cross_entropy", [&](reduction r) { return binary_cross_entropy(x, t, r); }},
        {"binary_cross_entropy_with_logits", [&](reduction r) { return binary_cross_entropy_with_logits(x, t, r); }},
        {"nll_loss", [&](reduction r) { return nll_loss(x, labels, r); }},
        {"cross_entropy", [&](reduction r) { return cross_entropy(x, labels, r); }},
    };
    for (const auto& entry : losses)
    {
        const auto& name = entry.first;
        const auto& f = entry.second;
        INFO(name);
        CHECK_ERROR(f(reduction::batchmean), xgrad::invalid_argument, name, "batchmean", "kl_div only");
        CHECK_ERROR(f(static_cast<reduction>(7)), xgrad::invalid_argument, name, "unknown reduction 7");
    }
    // kl_div: the sum over the batch of 2.
    CHECK(kl_div(x, t, reduction::batchmean).item() == doctest::Approx(kl_div(x, t, reduction::sum).item() / 2));
}

TEST_CASE("class losses: errors name the loss, the shapes and the first bad label")
{
    const tensor x = zeros({3, 4}, dtype::float64);
    CHECK_ERROR(nll_loss(x, zeros({3}, dtype::float64)), std::invalid_argument, "nll_loss", "int64", "float64");
    CHECK_ERROR(cross_entropy(x, zeros({3}, dtype::float64)), std::invalid_argument, "cross_entropy", "int64",
                "probabilities");
    CHECK_ERROR(cross_entropy(x, zeros({3, 4}, dtype::float32)), std::invalid_argument, "cross_entropy", "float32",
                "float64");
    CHECK_ERROR(nll_loss(x, zeros({4}, dtype::int64)), std::invalid_argument, "[4]", "[3, 4]", "expected [3]");
    CHECK_ERROR(nll_loss(zeros({2, 4, 3}, dtype::float64), zeros({2, 4}, dtype::int64)), std::invalid_argument,
                "expected [2, 3]");
    CHECK_ERROR(nll_loss(zeros({}, dtype::float64), zeros({}, dtype::int64)), std::invalid_argument, "0-d");
    CHECK_ERROR(nll_loss(zeros({3, 0}, dtype::float64), zeros({3}, dtype::int64)), std::invalid_argument, "no classes");
    CHECK_ERROR(nll_loss(zeros({3, 4}, dtype::int64), zeros({3}, dtype::int64)), std::invalid_argument, "nll_loss",
                "int64");
    // An empty input whose other extents multiply past int64 (numel is 0 whatever they are).
    const std::int64_t huge = std::int64_t(1) << 40;
    CHECK_ERROR(cross_entropy(zeros({0, 2, huge, huge}, dtype::float64), zeros({0, huge, huge}, dtype::int64)),
                std::invalid_argument, "cross_entropy", "overflows");

    // The first bad label in row-major order, past ignored ones, with its position.
    CHECK_ERROR(nll_loss(x, i64({0, -100, 7}, {3})), std::invalid_argument, "nll_loss: label 7 at position 2",
                "outside [0, 4)", "ignore_index (-100)");
    CHECK_ERROR(cross_entropy(zeros({2, 4, 2}, dtype::float64), i64({0, 1, -100, -5}, {2, 2})), std::invalid_argument,
                "label -5 at position [1, 1]");
    cross_entropy_options ignore_zero;
    ignore_zero.ignore_index = 0;
    CHECK_ERROR(cross_entropy(x, i64({0, -100, 1}, {3}), ignore_zero), std::invalid_argument, "label -100",
                "position 1", "ignore_index (0)");

    nll_loss_options o;
    o.weight = f64({1, 1, 1}, {3});
    CHECK_ERROR(nll_loss(x, i64({0, 1, 2}, {3}), o), std::invalid_argument, "weight of shape [3] must be [4]");
    o.weight = full({4}, 1.0, dtype::float32);
    CHECK_ERROR(nll_loss(x, i64({0, 1, 2}, {3}), o), std::invalid_argument, "weight of dtype float32",
                "input of dtype float64");
    o.weight = f64({1, 0, -1, 2}, {4});
    CHECK_ERROR(nll_loss(x, i64({0, 1, 2}, {3}), o), std::invalid_argument, "weight must be finite and >= 0", "-1.0",
                "position 2");
    o.weight = f64({1, std::nan(""), 1, 2}, {4});
    CHECK_ERROR(nll_loss(x, i64({0, 1, 2}, {3}), o), std::invalid_argument, "nan", "position 1");

    for (double eps : {-0.1, 1.5, std::nan("")})
        CHECK_ERROR(cross_entropy(x, i64({0, 1, 2}, {3}), reduction::mean, eps), std::invalid_argument,
                    "label_smoothing must be in [0, 1]");
}

TEST_CASE("class losses: labelled entries only, ignored targets, the first-release signature")
{
    // -inf log-probabilities of classes no target names are never read (PyTorch neither).
    const double inf = std::numeric_limits<double>::infinity();
    const tensor logp = f64({-0.5, -inf, -1.5, -inf, -0.25, -2.0}, {2, 3}).requires_grad_(true);
    const tensor y = nll_loss(logp, i64({0, 1}, {2}), reduction::sum);
    CHECK(y.item() == 0.75);
    CHECK(to_vector(grad({y}, {logp})[0]) == std::vector<double>{-1, 0, 0, 0, -1, 0});

    // Every target ignored: mean is 0 / 0 (NaN, as PyTorch), sum 0, and no gradient.
    const tensor x = f64({0.5, -1.0, 2.0, 0.25}, {2, 2}).requires_grad_(true);
    const tensor none_left = i64({-100, -100}, {2});
    CHECK(std::isnan(cross_entropy(x, none_left).item()));
    CHECK(cross_entropy(x, none_left, reduction::sum).item() == 0.0);
    CHECK(to_vector(grad({cross_entropy(x, none_left)}, {x})[0]) == std::vector<double>(4, 0.0));

    // Ignored labels in float32 (the keep mask made on the host, cast to the input's dtype) agree
    // with float64 to float32's precision.
    generator gen(7);
    const tensor z = randn({6, 5}, gen, dtype::float64);
    const tensor labels = i64({4, -100, 0, 2, -100, 1}, {6});
    cross_entropy_options o;
    o.weight = f64({0.5, 1, 2, 1.5, 0.25}, {5});
    o.label_smoothing = 0.2;
    const double want = cross_entropy(z, labels, o).item();
    o.weight = o.weight.to(dtype::float32);
    CHECK(cross_entropy(z.to(dtype::float32), labels, o).item() == doctest::Approx(want).epsilon(1e-6));

    // The first signature is the options struct's defaults plus reduction and smoothing.
    cross_entropy_options same;
    same.red = reduction::none;
    same.label_smoothing = 0.1;
    CHECK(to_vector(cross_entropy(z, labels, reduction::none, 0.1)) == to_vector(cross_entropy(z, labels, same)));
}

TEST_CASE("elementwise losses: errors name the loss and the bad value")
{
    const tensor a = full({2, 2}, 0.5, dtype::float64);
    CHECK_ERROR(l1_loss(a, a.reshape({4})), std::invalid_argument, "l1_loss", "[2, 2]", "[4]", "same shape");
    CHECK_ERROR(huber_loss(a, a.to(dtype::float32)), std::invalid_argument, "huber_loss", "float32", "float64");
    CHECK_ERROR(kl_div(zeros({2}, dtype::int64), zeros({2}, dtype::int64)), std::invalid_argument, "kl_div", "int64");
    CHECK_ERROR(mse_loss(a, tensor{}), std::invalid_argument, "mse_loss", "undefined");
    CHECK_ERROR(smooth_l1_loss(a, a, reduction::mean, -1.0), std::invalid_argument, "beta must be non-negative");
    CHECK_ERROR(smooth_l1_loss(a, a, reduction::mean, std::nan("")), std::invalid_argument, "beta");
    CHECK_ERROR(huber_loss(a, a, reduction::mean, 0.0), std::invalid_argument, "delta must be positive");

    const tensor p = f64({0.5, 1.5, -0.5, 0.25}, {2, 2});
    CHECK_ERROR(binary_cross_entropy(p, a), std::invalid_argument, "binary_cross_entropy: input 1.5", "position [0, 1]",
                "outside [0, 1]", "binary_cross_entropy_with_logits");
    CHECK_ERROR(binary_cross_entropy(f64({0.5, std::nan("")}, {2}), f64({0, 1}, {2})), std::invalid_argument, "nan",
                "position 1");
    CHECK_ERROR(binary_cross_entropy(a, a, reduction::mean, f64({1, 1, 1}, {3})), std::invalid_argument,
                "weight of shape [3] does not broadcast to input of shape [2, 2]");
    CHECK_ERROR(binary_cross_entropy_with_logits(a, a, reduction::mean, {}, f64({1, -2}, {2})), std::invalid_argument,
                "pos_weight must be finite and >= 0", "position 1");
    CHECK_ERROR(binary_cross_entropy_with_logits(a, a, reduction::mean, f64({1, 1}, {2, 1, 1})), std::invalid_argument,
                "does not broadcast");
}

TEST_CASE("elementwise losses: float32 extremes stay finite")
{
    // A sigmoid that underflowed to 0 or rounded to 1: clamped logs, PyTorch's floored gradient.
    const tensor p = from_host(std::vector<float>{0.0f, 1.0f, 0.5f}.data(), {3}, dtype::float32).requires_grad_(true);
    const tensor t = from_host(std::vector<float>{1.0f, 0.0f, 1.0f}.data(), {3}, dtype::float32);
    const tensor y = binary_cross_entropy(p, t, reduction::sum);
    CHECK(y.item() == doctest::Approx(200 + std::log(2.0)).epsilon(1e-6));
    CHECK(all_finite(grad({y}, {p})[0]));
    // Logits far beyond exp's float32 range.
    const tensor x =
        from_host(std::vector<float>{200.0f, -200.0f, 0.0f}.data(), {3}, dtype::float32).requires_grad_(true);
    const tensor z = binary_cross_entropy_with_logits(x, t, reduction::none);
    const std::vector<double> zs = to_vector(z);
    CHECK(zs[0] == 0.0);
    CHECK(zs[1] == 0.0);
    CHECK(zs[2] == doctest::Approx(std::log(2.0)).epsilon(1e-6));
    CHECK(to_vector(grad({sum(z)}, {x})[0]) == std::vector<double>{0.0, 0.0, -0.5});
    // kl_div at target 0: the term is 0 and its target derivative -input (see the header).
    const tensor lp = f64({-1.0, -2.0}, {2});
    const tensor q = f64({0.0, 0.5}, {2}).requires_grad_(true);
    const tensor k = kl_div(lp, q, reduction::sum);
    CHECK(k.item() == doctest::Approx(0.5 * (std::log(0.5) + 2.0)));
    CHECK(to_vector(grad({k}, {q})[0])[0] == 1.0);
}
