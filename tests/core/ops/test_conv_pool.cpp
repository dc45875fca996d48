// The pools (core/src/ops/pool.cpp): max_pool2d, avg_pool2d (with and without the padding
// counted) and adaptive_avg_pool2d against direct float64 loops written here, in both layouts
// and every floating dtype, every argument check, and first- and second-order gradient checks.
// conv2d and the window ops are tested in test_conv_convolution.cpp (same executable,
// test_conv); the tolerances, and why, are explained in conv_test_helpers.hpp.
#include <doctest/doctest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "tests/core/ops/conv_test_helpers.hpp"
#include "tests/support/check_error.hpp"
#include "xgrad/xgrad.hpp"

using namespace xgrad;
using namespace conv_test;

namespace
{
    enum class pool_kind
    {
        max,
        avg,
        avg_exclude_pad
    };

    /// Direct pooling in float64 over the window of p; abs_sum as in naive_conv.
    std::vector<double> naive_pool(const image& xi, const pool2d_params& p, pool_kind kind,
                                   const std::vector<double>& x, std::vector<double>& abs_sum, image& yi)
    {
        const pair s = p.stride.value_or(p.kernel);
        const auto oh = out_size(xi.h, p.kernel[0], s[0], p.padding[0], p.dilation[0]);
        const auto ow = out_size(xi.w, p.kernel[1], s[1], p.padding[1], p.dilation[1]);
        yi = image{xi.n, xi.c, oh, ow, xi.cl};
        std::vector<double> y(static_cast<std::size_t>(xi.n * xi.c * oh * ow));
        abs_sum.assign(y.size(), 0.0);
        for (std::int64_t n = 0; n < xi.n; ++n)
            for (std::int64_t c = 0; c < xi.c; ++c)
                for (std::int64_t i = 0; i < oh; ++i)
                    for (std::int64_t j = 0; j < ow; ++j)
                    {
                        double best = -std::numeric_limits<double>::infinity(), total = 0, mag = 0;
                        std::int64_t inside = 0;
                        for (std::int64_t a = 0; a < p.kernel[0]; ++a)
                            for (std::int64_t b = 0; b < p.kernel[1]; ++b)
                            {
                                const std::int64_t h = i * s[0] - p.padding[0] + a * p.dilation[0];
                                const std::int64_t w = j * s[1] - p.padding[1] + b * p.dilation[1];
                                if (h < 0 || h >= xi.h || w < 0 || w >= xi.w)
                                    continue;
                                const double v = x[static_cast<std::size_t>(xi.at(n, c, h, w))];
                                best = std::max(best, v);
                                total += v;
                                mag += std::abs(v);
                                ++inside;
                            }
                        const auto at = static_cast<std::size_t>(yi.at(n, c, i, j));
                        const double count = kind == pool_kind::avg ? double(p.kernel[0] * p.kernel[1])
                                                                    : double(inside);
                        y[at] = kind == pool_kind::max ? best : total / count;
                        abs_sum[at] = kind == pool_kind::max ? 0.0 : mag / count;
                    }
        return y;
    }

    /// Adaptive average pooling by its definition (PyTorch's cell bounds); abs_mean receives
    /// the mean of |x| over each cell.
    std::vector<double> naive_adaptive(const image& xi, pair out, const std::vector<double>& x, image& yi,
                                       std::vector<double>& abs_mean)
    {
        yi = image{xi.n, xi.c, out[0], out[1], xi.cl};
        std::vector<double> y(static_cast<std::size_t>(xi.n * xi.c * out[0] * out[1]));
        abs_mean.assign(y.size(), 0.0);
        for (std::int64_t n = 0; n < xi.n; ++n)
            for (std::int64_t c = 0; c < xi.c; ++c)
                for (std::int64_t i = 0; i < out[0]; ++i)
                    for (std::int64_t j = 0; j < out[1]; ++j)
                    {
                        const std::int64_t h0 = i * xi.h / out[0], h1 = ((i + 1) * xi.h + out[0] - 1) / out[0];
                        const std::int64_t w0 = j * xi.w / out[1], w1 = ((j + 1) * xi.w + out[1] - 1) / out[1];
                        double total = 0, mag = 0;
                        for (std::int64_t h = h0; h < h1; ++h)
                            for (std::int64_t w = w0; w < w1; ++w)
                            {
                                total += x[static_cast<std::size_t>(xi.at(n, c, h, w))];
                                mag += std::abs(x[static_cast<std::size_t>(xi.at(n, c, h, w))]);
                            }
                        const double count = double((h1 - h0) * (w1 - w0));
                        y[static_cast<std::size_t>(yi.at(n, c, i, j))] = total / count;
                        abs_mean[static_cast<std::size_t>(yi.at(n, c, i, j))] = mag / count;
                    }
        return y;
    }

    pool2d_params pool(pair kernel, std::optional<pair> stride = std::nullopt, pair padding = {0, 0},
                       pair dilation = {1, 1}, bool include_pad = true)
    {
        pool2d_params p;
        p.kernel = kernel;
        p.stride = stride;
        p.padding = padding;
        p.dilation = dilation;
        p.count_include_pad = include_pad;
        return p;
    }

    const std::vector<pool2d_params> pool_cases = {
        pool({2, 2}),
        pool({3, 3}, pair{1, 1}, {1, 1}),
        pool({3, 2}, pair{2, 1}, {1, 1}, {1, 2}),
        pool({2, 3}, pair{3, 2}, {1, 0}, {2, 1}),
        pool({1, 1}),
    };
}

TEST_CASE("max_pool2d and avg_pool2d match direct loops")
{
    for (const bool cl : {false, true})
        for (std::size_t i = 0; i < pool_cases.size(); ++i)
            for (const pool_kind kind : {pool_kind::max, pool_kind::avg, pool_kind::avg_exclude_pad})
                for (const dtype dt : {dtype::float64, dtype::float32, dtype::float16, dtype::bfloat16})
                {
                    INFO(fmt(cl), " case ", i, " kind ", int(kind), " ", name(dt));
                    pool2d_params p = pool_cases[i];
                    p.count_include_pad = kind != pool_kind::avg_exclude_pad;
                    const image xi{2, 3, 7, 6, cl};
                    const tensor x = random_tensor(xi.shape(), 70 + i, dt);
                    const tensor y = kind == pool_kind::max ? max_pool2d(x, p, fmt(cl)) : avg_pool2d(x, p, fmt(cl));
                    std::vector<double> mag;
                    image yi{};
                    const auto want = naive_pool(xi, p, kind, to_vector(x), mag, yi);
                    REQUIRE(y.shape() == yi.shape());
                    CHECK(y.is_contiguous());
                    // max picks an input value: exact. avg: K terms summed, one division, and
                    // two stores in 16 bits (mag is sum|x| / count, the scale of the stored sum
                    // after the division).
                    const double taps = double(p.kernel[0] * p.kernel[1] + 1);
                    std::vector<double> bound(want.size());
                    for (std::size_t j = 0; j < want.size(); ++j)
                        bound[j] = kind == pool_kind::max ? 1e-300
                                                          : taps * unit_roundoff(dt) * mag[j] +
                                                                store_rounding(dt) * (mag[j] + std::abs(want[j])) +
                                                                (dt == dtype::float16 ? 0x1p-24 : 0.0) + 1e-300;
                    check_within(y, want, bound);
                }
}

TEST_CASE("adaptive_avg_pool2d matches its definition")
{
    const std::vector<std::pair<shape_type, pair>> cases = {
        {{2, 3, 8, 6}, {4, 3}},  // divides evenly: avg_pool2d
        {{2, 3, 7, 5}, {3, 2}},  // uneven cells that overlap
        {{1, 2, 5, 9}, {1, 1}},  // global average
        {{1, 2, 3, 4}, {5, 4}},  // more cells than rows
        {{2, 1, 10, 7}, {4, 7}}, // one axis even, the other not
    };
    for (const bool cl : {false, true})
        for (const auto& c : cases)
            for (const dtype dt : {dtype::float64, dtype::float32, dtype::bfloat16})
            {
                const auto& s = c.first; // named: INFO captures it in a lambda
                const auto& out = c.second;
                INFO(fmt(cl), " shape ", shape_to_string(s), " ", name(dt));
                const image xi{s[0], s[1], s[2], s[3], cl};
                const tensor x = random_tensor(xi.shape(), 80, dt);
                image yi{};
                std::vector<double> mag;
                const auto want = naive_adaptive(xi, out, to_vector(x), yi, mag);
                const tensor y = adaptive_avg_pool2d(x, out, fmt(cl));
                REQUIRE(y.shape() == yi.shape());
                // A cell averages at most 70 values: the sums and divisions err by at most
                // (70 + 2) u mean|x|. Uneven cells average one axis, then the other; in 16 bits
                // both results are stored, so the store rounding counts twice, each time
                // relative to a mean of values bounded by mean|x| over the cell.
                std::vector<double> bound(want.size());
                for (std::size_t j = 0; j < want.size(); ++j)
                    bound[j] = (72 * unit_roundoff(dt) + 2 * store_rounding(dt)) * mag[j] + 1e-300;
                check_within(y, want, bound);
            }
}

// -------------------------------------------------------------------------------------------
// Argument checks: each message names the op and the offending argument.

TEST_CASE("the pools reject bad arguments")
{
    using xgrad::invalid_argument;
    const tensor x = zeros({2, 3, 6, 6});
    CHECK_ERROR(max_pool2d(x, pool({3, 3}, std::nullopt, {2, 1})), invalid_argument, "max_pool2d", "padding", "{2, 1}",
                "half the kernel");
    CHECK_ERROR(avg_pool2d(x, pool({2, 2}, std::nullopt, {0, 2})), invalid_argument, "avg_pool2d", "padding", "{0, 2}");
    // Taps at rows -1 and 2 of a 2-row input: padding only.
    CHECK_ERROR(max_pool2d(zeros({2, 3, 2, 6}), pool({2, 1}, pair{1, 1}, {1, 0}, {3, 1})), invalid_argument,
                "max_pool2d", "window 0 along the height", "entirely in the padding");
    CHECK_ERROR(max_pool2d(x, pool({0, 2})), invalid_argument, "max_pool2d", "kernel", "{0, 2}");
    CHECK_ERROR(avg_pool2d(x, pool({2, 2}, pair{2, 0})), invalid_argument, "avg_pool2d", "stride", "{2, 0}");
    CHECK_ERROR(max_pool2d(x, pool({7, 2})), invalid_argument, "max_pool2d", "kernel {7, 2}", "empty");
    CHECK_ERROR(max_pool2d(x, pool({2, 2}), "NWHC"), invalid_argument, "max_pool2d", "data_format", "NWHC");
    CHECK_ERROR(avg_pool2d(zeros({3, 6, 6}), pool({2, 2})), invalid_argument, "avg_pool2d", "x", "[3, 6, 6]");
    CHECK_ERROR(max_pool2d(x.to(dtype::int64), pool({2, 2})), invalid_argument, "max_pool2d", "x", "int64");
    CHECK_ERROR(adaptive_avg_pool2d(x, {0, 2}), invalid_argument, "adaptive_avg_pool2d", "output_size", "{0, 2}");
    CHECK_ERROR(adaptive_avg_pool2d(zeros({2, 3, 0, 6}), {1, 1}), invalid_argument, "adaptive_avg_pool2d",
                "[2, 3, 0, 6]", "empty spatial");
    CHECK_ERROR(adaptive_avg_pool2d(x, {1, 1}, "HWCN"), invalid_argument, "adaptive_avg_pool2d", "data_format");
    CHECK_ERROR(adaptive_avg_pool2d(tensor{}, {1, 1}), invalid_argument, "adaptive_avg_pool2d", "x", "undefined");
}

// -------------------------------------------------------------------------------------------
// Gradients of the first and second order (finite differences in float64, gradcheck.hpp)

TEST_CASE("pool gradients of the first and second order, both layouts")
{
    for (const bool cl : {false, true})
    {
        INFO(fmt(cl));
        const image xi{2, 2, 7, 6, cl};
        const std::vector<tensor> x = leaves({xi.shape()}, 100);
        const pool2d_params overlap = pool({3, 2}, pair{2, 1}, {1, 1}, {1, 2});
        const pool2d_params exclude = pool({3, 3}, pair{2, 2}, {1, 1}, {1, 1}, false);
        // Windows that do not overlap take their own backward kernel (max_pool2d_grad): ones
        // that tile the input, and ones with gaps, padding and a column past the last window.
        const pool2d_params tile = pool({2, 2});
        const pool2d_params gaps = pool({2, 3}, pair{3, 3}, {1, 1});
        for (const pool2d_params* p : {&overlap, &tile, &gaps})
            check_grads(
                [&](const std::vector<tensor>& a) { return std::vector<tensor>{max_pool2d(a[0], *p, fmt(cl))}; }, x);
        check_grads(
            [&](const std::vector<tensor>& a) { return std::vector<tensor>{avg_pool2d(a[0], overlap, fmt(cl))}; }, x);
        check_grads(
            [&](const std::vector<tensor>& a) { return std::vector<tensor>{avg_pool2d(a[0], exclude, fmt(cl))}; }, x);
        check_grads(
            [&](const std::vector<tensor>& a) {
                return std::vector<tensor>{adaptive_avg_pool2d(a[0], {3, 4}, fmt(cl))};
            },
            x);
    }
}
