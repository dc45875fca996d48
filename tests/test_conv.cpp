// conv2d, unfold2d/fold2d and the pools (core/src/ops/conv.cpp, pool.cpp): forward values
// against direct float64 loops written here, the adjointness of unfold2d and fold2d, 16-bit
// and float32 accuracy, every argument check, and first- and second-order gradient checks.
//
// Tolerances, and why. A result that sums K products is compared with a bound proportional to
// the sum of the absolute values of its terms, S: any summation order (GEMM blocking, FMA,
// pairwise trees) of K terms in a format with unit roundoff u errs by at most about K u S
// (the classical bound gamma_K = K u / (1 - K u)). Inputs are rounded to the tested dtype
// before the oracle reads them, so only the arithmetic is measured. Each check adds the terms
// its pipeline has beyond the sum: one rounding per bias add or division. 16-bit results are
// stored by every op of the composition (relative 2^-11 for float16, 2^-8 for bfloat16, plus
// 2^-25 absolute per store for float16 subnormals): the GEMM or window sum, bounded by S, and
// the bias add or division, bounded by the result; so their bound is that rounding times
// S + |result|.
#include <doctest/doctest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "tests/check_error.hpp"
#include "xgrad/xgrad.hpp"

using namespace xgrad;

namespace
{
    using pair = std::array<std::int64_t, 2>;

    /// Element access to an image stored row-major in either layout.
    struct image
    {
        std::int64_t n, c, h, w;
        bool cl;
        std::int64_t at(std::int64_t in, std::int64_t ic, std::int64_t ih, std::int64_t iw) const
        {
            return cl ? ((in * h + ih) * w + iw) * c + ic : ((in * c + ic) * h + ih) * w + iw;
        }
        shape_type shape() const { return cl ? shape_type{n, h, w, c} : shape_type{n, c, h, w}; }
    };

    std::string fmt(bool cl) { return cl ? "NHWC" : "NCHW"; }

    double unit_roundoff(dtype dt)
    {
        return dt == dtype::float64 ? 0x1p-53 : 0x1p-24; // 16-bit dtypes compute in float32
    }

    /// Relative rounding of a final store to dt (0 when the result is not narrowed).
    double store_rounding(dtype dt)
    {
        return dt == dtype::float16 ? 0x1p-11 : dt == dtype::bfloat16 ? 0x1p-8 : 0.0;
    }

    /// Checks |got - want| <= bound elementwise and reports the worst element.
    void check_within(const tensor& got, const std::vector<double>& want, const std::vector<double>& bound)
    {
        const std::vector<double> g = to_vector(got);
        REQUIRE(g.size() == want.size());
        double worst = 0;
        std::size_t at = 0;
        for (std::size_t i = 0; i < g.size(); ++i)
        {
            const double excess = std::abs(g[i] - want[i]) / bound[i];
            if (!(excess <= worst)) // also catches NaN
            {
                worst = std::isnan(excess) ? std::numeric_limits<double>::infinity() : excess;
                at = i;
            }
        }
        INFO("worst element ", at, ": got ", g[at], ", want ", want[at], ", bound ", bound[at]);
        CHECK(worst <= 1.0);
    }

    tensor random_tensor(const shape_type& shape, std::uint64_t seed, dtype dt = dtype::float64)
    {
        generator gen(seed);
        return randn(shape, gen, dtype::float64).to(dt);
    }

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
                                    const double t = wt[static_cast<std::size_t>(((o * cg + c) * k.kh + p) * k.kw + q)] *
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
        {2, 2, 4, 4, 3, 5, 5, {1, 1}, {2, 2}, {1, 1}, 1, true}, // kernel larger than the input
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
        const auto want = naive_conv(k, cl, to_vector(x), to_vector(wt), b.defined() ? to_vector(b) : std::vector<double>{},
                                     mag);
        const std::int64_t oh = out_size(k.h, k.kh, k.stride[0], k.padding[0], k.dilation[0]);
        const std::int64_t ow = out_size(k.w, k.kw, k.stride[1], k.padding[1], k.dilation[1]);
        REQUIRE(y.shape() == image{k.n, k.o, oh, ow, cl}.shape());
        // K products and the bias: K + 2 roundings (see the file comment).
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
                                out[static_cast<std::size_t>(at)] = in ? x[static_cast<std::size_t>(xi.at(n, c, h, v))] : pad;
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
// Pools

namespace
{
    enum class pool_kind
    {
        max,
        avg,
        avg_exclude_pad
    };

    /// Direct pooling in float64 over the window of p; abs_sum as in naive_conv.
    std::vector<double> naive_pool(const image& xi, const pool2d_params& p, pool_kind kind, const std::vector<double>& x,
                                   std::vector<double>& abs_sum, image& yi)
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
                        const double count =
                            kind == pool_kind::avg ? double(p.kernel[0] * p.kernel[1]) : double(inside);
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
                        bound[j] = kind == pool_kind::max
                                       ? 1e-300
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
        for (const auto& [s, out] : cases)
            for (const dtype dt : {dtype::float64, dtype::float32, dtype::bfloat16})
            {
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
    CHECK_ERROR(unfold2d(x, window2d{{0, 3}, {1, 1}, {0, 0}, {1, 1}}), invalid_argument, "unfold2d", "kernel", "{0, 3}");
    CHECK_ERROR(unfold2d(x, window2d{{3, 3}, {1, 1}, {0, 0}, {4, 1}}), invalid_argument, "unfold2d", "spans 9",
                "{6, 6}");
    CHECK_ERROR(unfold2d(x, window2d{{3, 3}, {1, std::int64_t{1} << 40}, {0, 0}, {1, 1}}), invalid_argument,
                "unfold2d", "stride", "2147483647");
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

namespace
{
    void check_grads(const gradcheck_function& f, const std::vector<tensor>& inputs)
    {
        const gradcheck_result first = gradcheck(f, inputs);
        CHECK_MESSAGE(first.ok, first.message);
        const gradcheck_result second = gradgradcheck(f, inputs);
        CHECK_MESSAGE(second.ok, second.message);
    }

    std::vector<tensor> leaves(const std::vector<shape_type>& shapes, std::uint64_t seed)
    {
        std::vector<tensor> out;
        for (const auto& s : shapes)
            out.push_back(random_tensor(s, seed++).requires_grad_());
        return out;
    }
}

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
        check_grads([&](const std::vector<tensor>& a) { return std::vector<tensor>{conv2d(a[0], a[1], a[2], p, fmt(cl))}; },
                    leaves({xi.shape(), {4, 2, 3, 2}, {4}}, 90));
    }
}

TEST_CASE("pool gradients of the first and second order, both layouts")
{
    for (const bool cl : {false, true})
    {
        INFO(fmt(cl));
        const image xi{2, 2, 7, 6, cl};
        const std::vector<tensor> x = leaves({xi.shape()}, 100);
        const pool2d_params overlap = pool({3, 2}, pair{2, 1}, {1, 1}, {1, 2});
        const pool2d_params exclude = pool({3, 3}, pair{2, 2}, {1, 1}, {1, 1}, false);
        check_grads([&](const std::vector<tensor>& a) { return std::vector<tensor>{max_pool2d(a[0], overlap, fmt(cl))}; },
                    x);
        check_grads([&](const std::vector<tensor>& a) { return std::vector<tensor>{avg_pool2d(a[0], overlap, fmt(cl))}; },
                    x);
        check_grads([&](const std::vector<tensor>& a) { return std::vector<tensor>{avg_pool2d(a[0], exclude, fmt(cl))}; },
                    x);
        check_grads(
            [&](const std::vector<tensor>& a) { return std::vector<tensor>{adaptive_avg_pool2d(a[0], {3, 4}, fmt(cl))}; },
            x);
    }
}
