// conv2d, unfold2d and fold2d (core/src/ops/conv.cpp): forward values against direct float64
// loops written here, the adjointness of unfold2d and fold2d, strided and broadcast inputs,
// 16-bit and float32 accuracy, every argument check, and first- and second-order gradient
// checks of conv2d. The pools are tested in test_conv_pool.cpp (same executable, test_conv);
// the tolerances, and why, are explained in conv_test_helpers.hpp.
#include <doctest/doctest.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "tests/core/ops/conv_test_helpers.hpp"
#include "tests/support/check_error.hpp"
#include "xgrad/xgrad.hpp"

using namespace xgrad;
using namespace conv_test;

namespace
{
    // ---------------------------------------------------------------------------------------
    // conv2d oracle

    struct conv_case
    {
        std::int64_t n, c, h, w, o, kh, kw;
        pair stride, padding, dilation;
        std::int64_t groups;
        bool bias;
    };

    std::int64_t out_size(std::int64_t in, std::int64_t k, std::int64_t s, std::int64_t p, std::int64_t d)
    {
        return (in + 2 * p - d * (k - 1) - 1) / s + 1;
    }

    /// Direct convolution in float64; abs_sum receives the sum of |terms| of each output.
    std::vector<double> naive_conv(const conv_case& k, bool cl, const std::vector<double>& x,
                                   const std::vector<double>& wt, const std::vector<double>& b,
                                   std::vector<double>& abs_sum)
    {
        const std::int64_t oh = out_size(k.h, k.kh, k.stride[0], k.padding[0], k.dilation[0]);
        const std::int64_t ow = out_size(k.w, k.kw, k.stride[1], k.padding[1], k.dilation[1]);
        const image xi{k.n, k.c, k.h, k.w, cl}, yi{k.n, k.o, oh, ow, cl};
        const std::int64_t cg = k.c / k.groups, og = k.o / k.groups;
        std::vector<double> y(static_cast<std::size_t>(k.n * k.o * oh * ow));
        abs_sum.assign(y.size(), 0.0);
        for (std::int64_t n = 0; n < k.n; ++n)
            for (std::int64_t o = 0; o < k.o; ++o)
                for (std::int64_t i = 0; i < oh; ++i)
                    for (std::int64_t j = 0; j < ow; ++j)
                    {
                        double acc = k.bias ? b[static_cast<std::size_t>(o)] : 0.0;
                        double mag = std::abs(acc);
                        for (std::int64_t c = 0; c < cg; ++c)
                            for (std::int64_t p = 0; p < k.kh; ++p)
                                for (std::int64_t q = 0; q < k.kw; ++q)
                                {
                                    const std::int64_t h = i * k.stride[0] - k.padding[0] + p * k.dilation[0];
                                    const std::int64_t w = j * k.stride[1] - k.padding[1] + q * k.dilation[1];
                                    if (h < 0 || h >= k.h || w < 0 || w >= k.w)
                                        continue;
                                    const double t =
                                        wt[static_cast<std::size_t>(((o * cg + c) * k.kh + p) * k.kw + q)] *
                                        x[static_cast<std::size_t>(xi.at(n, (o / og) * cg + c, h, w))];
                                    acc += t;
                                    mag += std::abs(t);
                                }
                        y[static_cast<std::size_t>(yi.at(n, o, i, j))] = acc;
                        abs_sum[static_cast<std::size_t>(yi.at(n, o, i, j))] = mag;
                    }
        return y;
    }

    const std::vector<conv_case> conv_cases = {
        {2, 3, 7, 6, 4, 3, 3, {1, 1}, {0, 0}, {1, 1}, 1, true},
        {1, 1, 5, 5, 1, 1, 1, {1, 1}, {0, 0}, {1, 1}, 1, false},
        {3, 4, 9, 11, 6, 3, 2, {2, 1}, {1, 2}, {1, 1}, 2, true},
        {2, 6, 10, 8, 6, 3, 3, {2, 3}, {2, 1}, {2, 2}, 3, false},
        {1, 4, 8, 7, 8, 2, 3, {1, 2}, {1, 0}, {3, 1}, 4, true},
        {2, 2, 4, 4, 3, 5, 5, {1, 1}, {2, 2}, {1, 1}, 1, true},  // kernel larger than the input
        {1, 3, 13, 1, 2, 3, 1, {3, 1}, {1, 0}, {1, 1}, 1, true}, // width 1
    };

    void check_conv_case(const conv_case& k, bool cl, dtype dt)
    {
        const image xi{k.n, k.c, k.h, k.w, cl};
        const tensor x = random_tensor(xi.shape(), 10, dt);
        const tensor wt = random_tensor({k.o, k.c / k.groups, k.kh, k.kw}, 11, dt);
        const tensor b = k.bias ? random_tensor({k.o}, 12, dt) : tensor{};
        conv2d_params p;
        p.stride = k.stride;
        p.padding = k.padding;
        p.dilation = k.dilation;
        p.groups = k.groups;
        const tensor y = conv2d(x, wt, b, p, fmt(cl));
        CHECK(y.dtype() == dt);
        CHECK(y.is_contiguous());
        std::vector<double> mag;
        const auto want = naive_conv(k, cl, to_vector(x), to_vector(wt),
                                     b.defined() ? to_vector(b) : std::vector<double>{}, mag);
        const std::int64_t oh = out_size(k.h, k.kh, k.stride[0], k.padding[0], k.dilation[0]);
        const std::int64_t ow = out_size(k.w, k.kw, k.stride[1], k.padding[1], k.dilation[1]);
        REQUIRE(y.shape() == image{k.n, k.o, oh, ow, cl}.shape());
        // K products and the bias: K + 2 roundings (see conv_test_helpers.hpp).
        const double terms = static_cast<double>((k.c / k.groups) * k.kh * k.kw + 2);
        std::vector<double> bound(want.size());
        for (std::size_t i = 0; i < want.size(); ++i)
            bound[i] = terms * unit_roundoff(dt) * mag[i] + store_rounding(dt) * (mag[i] + std::abs(want[i])) +
                       (dt == dtype::float16 ? 0x1p-24 : 0.0) + 1e-300;
        check_within(y, want, bound);
    }
}

TEST_CASE("conv2d matches a direct convolution in both layouts")
{
    for (const bool cl : {false, true})
        for (std::size_t i = 0; i < conv_cases.size(); ++i)
            for (const dtype dt : {dtype::float64, dtype::float32, dtype::float16, dtype::bfloat16})
            {
                INFO(fmt(cl), " case ", i, " ", name(dt));
                check_conv_case(conv_cases[i], cl, dt);
            }
}

TEST_CASE("conv2d reads strided inputs and gives the same result in both layouts")
{
    // An NHWC view of an NCHW tensor (not contiguous) and a padded channel slice.
    const tensor x = random_tensor({2, 5, 6, 7}, 20);
    const tensor wt = random_tensor({4, 3, 3, 3}, 21);
    const tensor b = random_tensor({4}, 22);
    conv2d_params p;
    p.padding = {1, 1};
    const tensor xs = slice(x, 1, 1, 4); // channels 1..3, strided
    const tensor y = conv2d(xs, wt, b, p);
    const tensor y_cl = conv2d(permute(xs, {0, 2, 3, 1}), wt, b, p, "NHWC");
    const tensor y_ref = conv2d(contiguous(xs), wt, b, p);
    // Same arithmetic on the same values in the NCHW calls: equal. The NHWC GEMM sums in
    // another order; each result is within 27 + 2 roundings of S = sum|w||x| + |b|, which is
    // the convolution of the absolute values, so they differ by at most 2 * 29 u S.
    CHECK(to_vector(y) == to_vector(y_ref));
    const auto a = to_vector(permute(y_cl, {0, 3, 1, 2})), r = to_vector(y_ref);
    const auto mag = to_vector(conv2d(abs(xs), abs(wt), abs(b), p));
    for (std::size_t i = 0; i < a.size(); ++i)
        CHECK(std::abs(a[i] - r[i]) <= 2 * 29 * 0x1p-53 * mag[i]);
}

TEST_CASE("conv2d on an empty batch gives an empty result")
{
    const tensor y = conv2d(zeros({0, 2, 5, 5}), zeros({3, 2, 3, 3}), zeros({3}));
    CHECK(y.shape() == shape_type{0, 3, 3, 3});
}

// -------------------------------------------------------------------------------------------
// unfold2d and fold2d

namespace
{
    struct window_case
    {
        std::int64_t n, c, h, w;
        window2d win;
    };

    const std::vector<window_case> window_cases = {
        {2, 3, 5, 6, {{3, 3}, {1, 1}, {1, 1}, {1, 1}}},
        {1, 2, 7, 5, {{2, 3}, {2, 1}, {0, 1}, {1, 2}}},
        {3, 1, 6, 6, {{3, 2}, {3, 2}, {2, 1}, {2, 1}}},
        {1, 4, 4, 9, {{1, 4}, {1, 3}, {0, 2}, {1, 1}}},
    };

    /// cols by the layout's definition (pad where the position is outside).
    std::vector<double> naive_unfold(const window_case& k, bool cl, const std::vector<double>& x, double pad)
    {
        const window2d& w = k.win;
        const auto oh = out_size(k.h, w.kernel[0], w.stride[0], w.padding[0], w.dilation[0]);
        const auto ow = out_size(k.w, w.kernel[1], w.stride[1], w.padding[1], w.dilation[1]);
        const image xi{k.n, k.c, k.h, k.w, cl};
        const std::int64_t taps = k.c * w.kernel[0] * w.kernel[1], cols = k.n * oh * ow;
        std::vector<double> out(static_cast<std::size_t>(taps * cols));
        for (std::int64_t n = 0; n < k.n; ++n)
            for (std::int64_t c = 0; c < k.c; ++c)
                for (std::int64_t p = 0; p < w.kernel[0]; ++p)
                    for (std::int64_t q = 0; q < w.kernel[1]; ++q)
                        for (std::int64_t i = 0; i < oh; ++i)
                            for (std::int64_t j = 0; j < ow; ++j)
                            {
                                const std::int64_t h = i * w.stride[0] - w.padding[0] + p * w.dilation[0];
                                const std::int64_t v = j * w.stride[1] - w.padding[1] + q * w.dilation[1];
                                const bool in = h >= 0 && h < k.h && v >= 0 && v < k.w;
                                const std::int64_t col = (n * oh + i) * ow + j;
                                const std::int64_t at = cl ? col * taps + (p * w.kernel[1] + q) * k.c + c
                                                           : ((c * w.kernel[0] + p) * w.kernel[1] + q) * cols + col;
                                out[static_cast<std::size_t>(at)] = in ? x[static_cast<std::size_t>(xi.at(n, c, h, v))]
                                                                       : pad;
                            }
        return out;
    }
}

TEST_CASE("unfold2d copies each window's taps; fold2d is its adjoint")
{
    for (const bool cl : {false, true})
        for (std::size_t i = 0; i < window_cases.size(); ++i)
        {
            const window_case& k = window_cases[i];
            INFO(fmt(cl), " case ", i);
            const image xi{k.n, k.c, k.h, k.w, cl};
            for (const dtype dt : {dtype::float64, dtype::float32, dtype::float16, dtype::bfloat16})
            {
                // unfold2d copies elements and pad_value: exact in every dtype (7.5 is exact too).
                const tensor x = random_tensor(xi.shape(), 30 + i, dt);
                const tensor cols = unfold2d(x, k.win, fmt(cl), 7.5);
                CHECK(cols.dtype() == dt);
                CHECK(to_vector(cols) == naive_unfold(k, cl, to_vector(x), 7.5));
            }
            // <unfold(x), c> == <x, fold(c)>: both sides sum the same products |x_i c_j| in a
            // different grouping; bound 2 * (count + 1) u sum|x_i c_j|, well below 1e-12 here.
            const tensor x = random_tensor(xi.shape(), 40 + i);
            const tensor u = unfold2d(x, k.win, fmt(cl));
            const tensor c = random_tensor(u.shape(), 50 + i);
            const tensor f = fold2d(c, x.shape(), k.win, fmt(cl));
            CHECK(f.shape() == x.shape());
            const double lhs = sum(mul(u, c)).item(), rhs = sum(mul(x, f)).item();
            const double mag = sum(abs(mul(u, c))).item();
            CHECK(std::abs(lhs - rhs) <= 1e-12 * mag);
        }
}

TEST_CASE("fold2d of a strided or broadcast gradient equals fold2d of its copy")
{
    const window2d w{{3, 3}, {2, 2}, {1, 1}, {1, 1}};
    const tensor x = random_tensor({2, 3, 6, 5}, 60);
    const tensor u = unfold2d(x, w);
    const tensor ct = transpose(random_tensor({u.shape()[1], u.shape()[0]}, 61), 0, 1); // column-major view
    CHECK(to_vector(fold2d(ct, x.shape(), w)) == to_vector(fold2d(contiguous(ct), x.shape(), w)));
    const tensor ones_view = expand(scalar_like(u, 1.0), u.shape()); // every stride 0
    CHECK(to_vector(fold2d(ones_view, x.shape(), w)) == to_vector(fold2d(ones_like(u), x.shape(), w)));
}

// -------------------------------------------------------------------------------------------
// Argument checks: each message names the op and the offending argument.

TEST_CASE("conv2d and the window ops reject bad arguments")
{
    using xgrad::invalid_argument;
    const tensor x = zeros({2, 4, 6, 6}), wt = zeros({6, 2, 3, 3}), b = zeros({6});
    conv2d_params g2;
    g2.groups = 2;
    auto with = [](auto field, pair v) {
        conv2d_params p;
        p.*field = v;
        return p;
    };
    CHECK_ERROR(conv2d(x, wt, b, g2, "NCWH"), invalid_argument, "conv2d", "data_format", "NCWH");
    CHECK_ERROR(conv2d(zeros({4, 6, 6}), wt, b, g2), invalid_argument, "conv2d", "x", "[4, 6, 6]");
    CHECK_ERROR(conv2d(tensor{}, wt, b, g2), invalid_argument, "conv2d", "x", "undefined");
    CHECK_ERROR(conv2d(x.to(dtype::int64), wt, b, g2), invalid_argument, "conv2d", "x", "int64");
    CHECK_ERROR(conv2d(x, tensor{}, b, g2), invalid_argument, "conv2d", "weight", "undefined");
    CHECK_ERROR(conv2d(x, zeros({6, 2, 3}), b, g2), invalid_argument, "conv2d", "weight", "[6, 2, 3]");
    CHECK_ERROR(conv2d(x, wt.to(dtype::float64), b, g2), invalid_argument, "conv2d", "weight", "float64", "float32");
    CHECK_ERROR(conv2d(x, zeros({6, 2, 0, 3}), b, g2), invalid_argument, "conv2d", "weight", "[6, 2, 0, 3]", "kernel");
    CHECK_ERROR(conv2d(x, wt, b.to(dtype::float64), g2), invalid_argument, "conv2d", "bias", "float64");
    CHECK_ERROR(conv2d(x, wt, zeros({5}), g2), invalid_argument, "conv2d", "bias", "[6]", "[5]");
    CHECK_ERROR(conv2d(x, wt, b, conv2d_params{{1, 1}, {0, 0}, {1, 1}, 0}), invalid_argument, "conv2d", "groups", "0");
    CHECK_ERROR(conv2d(x, zeros({6, 1, 3, 3}), b, conv2d_params{{1, 1}, {0, 0}, {1, 1}, 3}), invalid_argument, "conv2d",
                "4 channels", "groups = 3");
    CHECK_ERROR(conv2d(x, zeros({5, 2, 3, 3}), zeros({5}), g2), invalid_argument, "conv2d", "weight", "5 output",
                "groups = 2");
    CHECK_ERROR(conv2d(x, zeros({6, 4, 3, 3}), b, g2), invalid_argument, "conv2d", "weight", "[6, 4, 3, 3]",
                "2 per group");
    const tensor wt1 = zeros({6, 4, 3, 3}); // groups = 1
    CHECK_ERROR(conv2d(x, wt1, b, with(&conv2d_params::stride, {0, 1})), invalid_argument, "conv2d", "stride",
                "{0, 1}");
    CHECK_ERROR(conv2d(x, wt1, b, with(&conv2d_params::padding, {-1, 0})), invalid_argument, "conv2d", "padding",
                "{-1, 0}");
    CHECK_ERROR(conv2d(x, wt1, b, with(&conv2d_params::dilation, {1, 0})), invalid_argument, "conv2d", "dilation",
                "{1, 0}");
    CHECK_ERROR(conv2d(x, zeros({6, 4, 7, 3}), b), invalid_argument, "conv2d", "kernel {7, 3}", "{6, 6}", "empty");
    // x read as NHWC has 6 channels, 3 per group, but weight expects 2.
    CHECK_ERROR(conv2d(x, wt, b, g2, "NHWC"), invalid_argument, "conv2d", "weight", "[6, 2, 3, 3]", "6 channels");

    const window2d w3{{3, 3}, {1, 1}, {0, 0}, {1, 1}};
    CHECK_ERROR(unfold2d(x, w3, "nchw"), invalid_argument, "unfold2d", "data_format", "nchw");
    CHECK_ERROR(unfold2d(zeros({6, 6}), w3), invalid_argument, "unfold2d", "x", "[6, 6]");
    CHECK_ERROR(unfold2d(x, window2d{{0, 3}, {1, 1}, {0, 0}, {1, 1}}), invalid_argument, "unfold2d", "kernel",
                "{0, 3}");
    CHECK_ERROR(unfold2d(x, window2d{{3, 3}, {1, 1}, {0, 0}, {4, 1}}), invalid_argument, "unfold2d", "spans 9",
                "{6, 6}");
    CHECK_ERROR(unfold2d(x, window2d{{3, 3}, {1, std::int64_t{1} << 40}, {0, 0}, {1, 1}}), invalid_argument, "unfold2d",
                "stride", "2147483647");
    const std::int64_t big = 2147483647;
    CHECK_ERROR(unfold2d(zeros({1, 1, 1, 1}), window2d{{1, 1}, {1, 1}, {big, big}, {1, 1}}), invalid_argument,
                "unfold2d", "padding {2147483647, 2147483647}", "2^62");
    const tensor cols = unfold2d(x, w3);
    CHECK_ERROR(fold2d(cols, {0, 4, std::numeric_limits<std::int64_t>::max(), 6}, w3), invalid_argument, "fold2d",
                "input spatial size", "too large");
    CHECK_ERROR(fold2d(cols, {2, 4, 6, 7}, w3), invalid_argument, "fold2d", "cols", "[36, 32]", "[36, 40]");
    CHECK_ERROR(fold2d(cols, {2, 4, 6}, w3), invalid_argument, "fold2d", "input_shape", "[2, 4, 6]");
    CHECK_ERROR(fold2d(cols, {2, -4, 6, 6}, w3), invalid_argument, "fold2d", "input_shape", "negative");
    CHECK_ERROR(fold2d(cols.to(dtype::int64), x.shape(), w3), invalid_argument, "fold2d", "cols", "int64");
    CHECK_ERROR(fold2d(cols, x.shape(), w3, "CHWN"), invalid_argument, "fold2d", "data_format", "CHWN");
    CHECK_ERROR(window_output_size(w3, 2, 6), invalid_argument, "window_output_size", "{2, 6}", "empty");
    CHECK_ERROR(window_output_size(window2d{{3, 3}, {1, 1}, {0, -2}, {1, 1}}, 8, 8), invalid_argument,
                "window_output_size", "padding", "{0, -2}");
    CHECK(window_output_size(window2d{{3, 2}, {2, 1}, {1, 0}, {1, 2}}, 7, 5) == pair{4, 3});
}

// -------------------------------------------------------------------------------------------
// Gradients of the first and second order (finite differences in float64, gradcheck.hpp)

TEST_CASE("conv2d gradients of the first and second order, both layouts")
{
    conv2d_params p;
    p.stride = {2, 1};
    p.padding = {1, 2};
    p.dilation = {2, 1};
    p.groups = 2;
    for (const bool cl : {false, true})
    {
        INFO(fmt(cl));
        const image xi{2, 4, 6, 5, cl};
        check_grads(
            [&](const std::vector<tensor>& a) { return std::vector<tensor>{conv2d(a[0], a[1], a[2], p, fmt(cl))}; },
            leaves({xi.shape(), {4, 2, 3, 2}, {4}}, 90));
    }
}
