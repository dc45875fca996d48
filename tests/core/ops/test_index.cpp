// take / put_add (gather and scatter-add by position) and the max-pooling selection built on
// them: values against hand computations, adjointness, 16-bit accumulation, the kernels'
// assign contract with pre-filled outputs, tie and NaN rules, and clear errors.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "backends/cpu/cpu_kernels.hpp"
#include "tests/support/check_error.hpp"
#include "tests/support/cpu_kernels_helpers.hpp"
#include "xgrad/xgrad.hpp"

using namespace xgrad;

namespace
{
    tensor positions(const std::vector<std::int64_t>& p, const shape_type& shape)
    {
        return from_host(p.data(), shape, dtype::int64);
    }
}

TEST_CASE("take gathers, put_add scatters and adds repeats; they are adjoint")
{
    const double xv[6] = {10, 11, 12, 13, 14, 15};
    const tensor x = from_host(xv, {2, 3}, dtype::float64);
    const tensor idx = positions({5, 0, 5, 2}, {2, 2});
    CHECK(take(x, idx).shape() == shape_type{2, 2});
    CHECK(to_vector(take(x, idx)) == std::vector<double>{15, 10, 15, 12});
    // Positions are row-major whatever the strides: x^T's element 1 is x[1][0] = 13.
    CHECK(to_vector(take(x.transpose(0, 1), positions({1}, {1}))) == std::vector<double>{13});

    const double gv[4] = {1, 2, 4, 8};
    const tensor g = from_host(gv, {2, 2}, dtype::float64);
    CHECK(to_vector(put_add(g, idx, {2, 3})) == std::vector<double>{2, 0, 8, 0, 0, 5});

    // <take(x, i), g> == <x, put_add(g, i)> for random x and g, with repeated positions.
    generator gen(1);
    const tensor xr = randn({4, 5}, gen, dtype::float64), gr = randn({3, 7}, gen, dtype::float64);
    std::vector<std::int64_t> p(21);
    for (auto& e : p)
        e = static_cast<std::int64_t>(gen.below(20));
    const tensor ir = positions(p, {3, 7});
    const double lhs = sum(take(xr, ir) * gr).item(), rhs = sum(xr * put_add(gr, ir, {4, 5})).item();
    // Both are sums of the same 21 products in float64: equal to rounding.
    CHECK(std::abs(lhs - rhs) <= 1e-12 * (1 + std::abs(lhs)));
}

TEST_CASE("put_add of 16-bit data accumulates in float32 and rounds once")
{
    // bfloat16 has 8 significant bits: summing 1000 ones in bfloat16 would stall at 256.
    const tensor g = ones({1000}, dtype::bfloat16);
    const tensor idx = zeros({1000}, dtype::int64);
    CHECK(to_vector(put_add(g, idx, {2})) == std::vector<double>{1000, 0});
    CHECK(to_vector(put_add(ones({1000}, dtype::float16), idx, {1})) == std::vector<double>{1000});
}

TEST_CASE("index kernels assign every output element (pre-filled outputs)")
{
    const float nan = std::numeric_limits<float>::quiet_NaN();
    const float x[4] = {1, 2, 3, 4};
    const std::int64_t idx[3] = {3, 3, 1};
    std::vector<float> out(4, nan);
    CHECK(cpu::put_add(out.data(), 4, x, idx, dtype::float32, 3) == -1);
    CHECK(out == std::vector<float>{0, 3, 0, 3});
    std::vector<float> gathered(3, nan);
    CHECK(cpu::take(gathered.data(), x, 4, idx, dtype::float32, 3) == -1);
    CHECK(gathered == std::vector<float>{4, 4, 2});
    // A bad position is reported and nothing is written.
    const std::int64_t bad[2] = {0, 4};
    std::vector<float> untouched(2, 7.0f);
    CHECK(cpu::take(untouched.data(), x, 4, bad, dtype::float32, 2) == 1);
    CHECK(untouched == std::vector<float>{7, 7});

    // The window argmax over a 1x1x3x3 image, 2x2 windows with stride 1.
    const float img[9] = {1, 5, 2, 7, 3, 9, 4, 8, 6};
    const kernels::window2d_dims d{1, 1, 3, 3, 2, 2, 1, 1, 0, 0, 1, 1, 2, 2};
    const std::int64_t xs[4] = {9, 9, 3, 1}, is[4] = {4, 4, 2, 1};
    std::vector<std::int64_t> am(4, -7);
    std::vector<float> maxima(4, nan);
    cpu::max_pool2d(maxima.data(), is, am.data(), is, img, xs, dtype::float32, d);
    CHECK(am == std::vector<std::int64_t>{3, 5, 7, 5});
    CHECK(maxima == std::vector<float>{7, 9, 8, 9});
}

TEST_CASE("put_add gives the same bits at every thread count; put_add and take report the first bad index")
{
    const int saved = get_num_threads();
    std::mt19937_64 gen(5);
    // More positions than one thread's block, a shuffled subset of the outputs; terms of
    // every sign, zeros of both signs among them (0 + -0 is +0 in the ordered sum).
    const std::int64_t n = 300000, out_numel = 400000;
    std::vector<std::int64_t> pos(static_cast<std::size_t>(out_numel));
    for (std::size_t i = 0; i < pos.size(); ++i)
        pos[i] = static_cast<std::int64_t>(i);
    std::shuffle(pos.begin(), pos.end(), gen);
    pos.resize(static_cast<std::size_t>(n));
    std::normal_distribution<double> dist;
    std::vector<double> gd(static_cast<std::size_t>(n));
    for (std::size_t i = 0; i < gd.size(); ++i)
        gd[i] = i % 5 == 0 ? -0.0 : dist(gen);
    for (const dtype dt : {dtype::float32, dtype::float64, dtype::bfloat16, dtype::float16})
    {
        INFO(name(dt));
        const tensor g = from_host(gd.data(), {n}, dtype::float64).to(dt);
        const std::size_t bytes = static_cast<std::size_t>(out_numel) * itemsize(dt);
        set_num_threads(1);
        std::vector<unsigned char> want(bytes, 0xff);
        CHECK(cpu::put_add(want.data(), out_numel, g.data_ptr(), pos.data(), dt, n) == -1);
        // +0 where no position points, 0 + g[i] (so never -0) at pos[i].
        const std::vector<double> gv = to_vector(g), wv = to_vector(from_host(want.data(), {out_numel}, dt));
        std::vector<double> expect(static_cast<std::size_t>(out_numel), 0.0);
        for (std::size_t i = 0; i < pos.size(); ++i)
            expect[static_cast<std::size_t>(pos[i])] = 0.0 + gv[i];
        int wrong = 0;
        for (std::size_t i = 0; i < expect.size(); ++i)
            wrong += wv[i] != expect[i] || std::signbit(wv[i]) != std::signbit(expect[i]);
        CHECK(wrong == 0);
        for (const int threads : {2, 3})
        {
            set_num_threads(threads);
            std::vector<unsigned char> got(bytes, 0xff); // pre-filled: every element must be assigned
            CHECK(cpu::put_add(got.data(), out_numel, g.data_ptr(), pos.data(), dt, n) == -1);
            CHECK_MESSAGE(got == want, "threads ", threads);
        }
    }
    // Bad positions in several threads' blocks: the first one is reported.
    std::vector<std::int64_t> bad = pos;
    bad[280000] = -1;
    bad[150001] = out_numel;
    bad[299999] = -7;
    const std::vector<float> g(static_cast<std::size_t>(n), 1.0f);
    std::vector<float> out(static_cast<std::size_t>(out_numel)), src(static_cast<std::size_t>(out_numel), 2.0f);
    for (const int threads : {1, 2, 3})
    {
        set_num_threads(threads);
        CHECK(cpu::put_add(out.data(), out_numel, g.data(), bad.data(), dtype::float32, n) == 150001);
        CHECK(cpu::take(out.data(), src.data(), out_numel, bad.data(), dtype::float32, n) == 150001);
    }
    set_num_threads(saved);
}

TEST_CASE("max_pool2d kernel: every window shape, layout and SIMD level against a direct search")
{
    // Values from a small set (ties in most windows) with NaNs sprinkled in. The windows that lie
    // inside the input take the kernel's vectorised loops where the layout allows (2x2 of
    // stride 2 in NCHW; any window in channels-last), the others its general loop, and all must
    // pick what the contract says: the first maximum in (kh, kw) order, the first NaN. The
    // shapes are wide enough (w = 70, c = 37) for whole vectors and a tail at every level.
    const float nan = std::numeric_limits<float>::quiet_NaN();
    std::mt19937_64 gen(11);
    std::uniform_int_distribution<int> value(0, 4), sprinkle(0, 9);
    struct window
    {
        std::int64_t k, s, p, dil;
    };
    struct image
    {
        std::int64_t n, c, h, w;
    };
    const cpu_kernels_test::settings_guard restore;
    for (const cpu::simd_level level : cpu_kernels_test::simd_levels())
    {
        cpu::limit_simd_level(level);
        for (const image im : {image{2, 3, 9, 8}, image{2, 37, 6, 70}})
            for (const window win : {window{2, 2, 0, 1}, window{2, 1, 0, 1}, window{2, 2, 1, 1}, window{3, 2, 0, 1},
                                     window{2, 2, 0, 2}, window{3, 1, 1, 1}})
                for (const bool channels_last : {false, true})
                    for (const dtype dt : {dtype::float32, dtype::float64, dtype::bfloat16, dtype::float16})
                    {
                        INFO(cpu_kernels_test::level_name(level), " image ", im.n, "x", im.c, "x", im.h, "x", im.w,
                             " k ", win.k, " s ", win.s, " p ", win.p, " d ", win.dil,
                             channels_last ? " NHWC" : " NCHW", " ", name(dt));
                        const std::int64_t n = im.n, c = im.c, h = im.h, w = im.w;
                        const std::int64_t oh = (h + 2 * win.p - win.dil * (win.k - 1) - 1) / win.s + 1;
                        const std::int64_t ow = (w + 2 * win.p - win.dil * (win.k - 1) - 1) / win.s + 1;
                        std::vector<float> v(static_cast<std::size_t>(n * c * h * w));
                        for (float& e : v)
                            e = sprinkle(gen) == 0 ? nan : static_cast<float>(value(gen));
                        const tensor xf = from_host(v.data(), {static_cast<std::int64_t>(v.size())}, dtype::float32);
                        const tensor x = xf.to(dt);
                        // (n, c, h, w) strides of the two layouts over the same buffer, and of
                        // the outputs in the same layout (the vectorised loops need it).
                        const std::int64_t xs[4] = {c * h * w, channels_last ? 1 : h * w, channels_last ? w * c : w,
                                                    channels_last ? c : 1};
                        const std::int64_t is[4] = {c * oh * ow, channels_last ? 1 : oh * ow,
                                                    channels_last ? ow * c : ow, channels_last ? c : 1};
                        const std::int64_t count = n * c * oh * ow;
                        // Pre-filled outputs: the kernel assigns every element.
                        std::vector<std::int64_t> got(static_cast<std::size_t>(count), -7);
                        const tensor maxima = full({count}, -7.0, dt);
                        cpu::max_pool2d(maxima.data_ptr(), is, got.data(), is, x.data_ptr(), xs, dt,
                                        kernels::window2d_dims{n, c, h, w, win.k, win.k, win.s, win.s, win.p, win.p,
                                                               win.dil, win.dil, oh, ow});
                        const std::vector<double> xv = to_vector(x), mv = to_vector(maxima);
                        int wrong = 0;
                        for (std::int64_t in = 0; in < n; ++in)
                            for (std::int64_t ic = 0; ic < c; ++ic)
                                for (std::int64_t y = 0; y < oh; ++y)
                                    for (std::int64_t z = 0; z < ow; ++z)
                                    {
                                        std::int64_t best = -1;
                                        for (std::int64_t i = 0; i < win.k; ++i)
                                            for (std::int64_t j = 0; j < win.k; ++j)
                                            {
                                                const std::int64_t r = y * win.s - win.p + i * win.dil,
                                                                   q = z * win.s - win.p + j * win.dil;
                                                if (r < 0 || r >= h || q < 0 || q >= w)
                                                    continue;
                                                const std::int64_t at = in * xs[0] + ic * xs[1] + r * xs[2] + q * xs[3];
                                                const double e = xv[static_cast<std::size_t>(at)];
                                                if (best < 0)
                                                    best = at;
                                                else if (!std::isnan(xv[static_cast<std::size_t>(best)]) &&
                                                         !(e <= xv[static_cast<std::size_t>(best)]))
                                                    best = at;
                                            }
                                        const std::int64_t o = in * is[0] + ic * is[1] + y * is[2] + z * is[3];
                                        const double want = xv[static_cast<std::size_t>(best)];
                                        const double m = mv[static_cast<std::size_t>(o)];
                                        const bool same_value = std::isnan(want) ? std::isnan(m) : m == want;
                                        wrong += got[static_cast<std::size_t>(o)] != best || !same_value;
                                    }
                        CHECK(wrong == 0);
                    }
    }
}

TEST_CASE("max_pool2d_grad kernel: put_add's bits over disjoint windows, with and without the ReLU mask, every layout, "
          "SIMD level and thread count")
{
    // The op's backward over windows that do not overlap: the kernel must write exactly what the
    // zero fill plus put_add(g, idx) writes (0 + g at each chosen position, +0 elsewhere, -0
    // terms included), assigning every element of a NaN-filled dx. The windows cover the
    // shapes it must get right: windows that tile the input, gaps between windows (stride
    // beyond the window), padding, dilation, and rows and columns past the last window. g comes
    // in idx's layout (the vectorised channels-last runs), in the other one and broadcast over
    // the channels (stride 0; both the general loop); c = 37 and w = 70 give whole vectors and
    // tails at every level.
    std::mt19937_64 gen(23);
    std::uniform_int_distribution<int> value(0, 4);
    std::normal_distribution<double> normal;
    struct window
    {
        std::int64_t kh, kw, s, p, dil;
    };
    struct image
    {
        std::int64_t n, c, h, w;
    };
    const cpu_kernels_test::settings_guard restore;
    for (const image im : {image{2, 3, 9, 8}, image{2, 37, 7, 70}})
        for (const window win : {window{2, 2, 2, 0, 1}, window{2, 2, 2, 1, 1}, window{2, 3, 3, 0, 1},
                                 window{3, 3, 4, 1, 1}, window{2, 2, 4, 0, 2}, window{1, 1, 2, 0, 1}})
            for (const bool channels_last : {false, true})
                for (const int g_layout : {0, 1, 2}) // idx's, the other, broadcast over channels
                    for (const dtype dt : {dtype::float32, dtype::float64, dtype::bfloat16, dtype::float16})
                    {
                        INFO("image ", im.n, "x", im.c, "x", im.h, "x", im.w, " k ", win.kh, "x", win.kw, " s ", win.s,
                             " p ", win.p, " d ", win.dil, channels_last ? " NHWC" : " NCHW",
                             g_layout == 0   ? " g as idx"
                             : g_layout == 1 ? " g in the other layout"
                                             : " g broadcast over channels",
                             " ", name(dt));
                        const std::int64_t n = im.n, c = im.c, h = im.h, w = im.w;
                        const std::int64_t oh = (h + 2 * win.p - win.dil * (win.kh - 1) - 1) / win.s + 1;
                        const std::int64_t ow = (w + 2 * win.p - win.dil * (win.kw - 1) - 1) / win.s + 1;
                        const kernels::window2d_dims d{n,     c,     h,     w,       win.kh,  win.kw, win.s,
                                                       win.s, win.p, win.p, win.dil, win.dil, oh,     ow};
                        REQUIRE(kernels::windows_disjoint(d));
                        // Positions as max_pool2d writes them, over values with ties.
                        std::vector<float> v(static_cast<std::size_t>(n * c * h * w));
                        for (float& e : v)
                            e = static_cast<float>(value(gen));
                        const tensor x = from_host(v.data(), {static_cast<std::int64_t>(v.size())}, dtype::float32);
                        const auto strides = [&](std::int64_t rows, std::int64_t cols, bool last) {
                            return std::vector<std::int64_t>{c * rows * cols, last ? 1 : rows * cols,
                                                             last ? cols * c : cols, last ? c : 1};
                        };
                        const std::vector<std::int64_t> xs = strides(h, w, channels_last),
                                                        is = strides(oh, ow, channels_last),
                                                        gs = g_layout == 2
                                                                 ? std::vector<std::int64_t>{oh * ow, 0, ow, 1}
                                                                 : strides(oh, ow, channels_last == (g_layout == 0));
                        const std::int64_t count = n * c * oh * ow, numel = n * c * h * w;
                        std::vector<std::int64_t> idx(static_cast<std::size_t>(count));
                        const tensor maxima = full({count}, 0.0, dtype::float32);
                        cpu::max_pool2d(maxima.data_ptr(), is.data(), idx.data(), is.data(), x.data_ptr(), xs.data(),
                                        dtype::float32, d);
                        // g in idx's order (put_add's input) and the same values at gs (one per
                        // (n, oh, ow) when broadcast: the first channel's).
                        std::vector<double> g_idx(static_cast<std::size_t>(count)),
                            g_at(static_cast<std::size_t>(count));
                        for (std::int64_t a = 0; a < n; ++a)
                            for (std::int64_t b = 0; b < c; ++b)
                                for (std::int64_t y = 0; y < oh; ++y)
                                    for (std::int64_t z = 0; z < ow; ++z)
                                    {
                                        const double e =
                                            g_layout == 2 && b > 0
                                                ? g_at[static_cast<std::size_t>(a * gs[0] + y * gs[2] + z * gs[3])]
                                                : (gen() % 7 == 0 ? -0.0 : normal(gen));
                                        g_idx[static_cast<std::size_t>(a * is[0] + b * is[1] + y * is[2] + z * is[3])] =
                                            e;
                                        g_at[static_cast<std::size_t>(a * gs[0] + b * gs[1] + y * gs[2] + z * gs[3])] =
                                            e;
                                    }
                        const tensor ga = from_host(g_at.data(), {count}, dtype::float64).to(dt);
                        // The ReLU mask: y in idx's layout, the maxima less 2 (values -2..2, so
                        // zeros, both signs and ties), one in 11 NaN; masked, put_add sums
                        // where(y > 0, g, 0) instead (+0 for a masked -0 term too).
                        std::vector<double> y_idx(static_cast<std::size_t>(count));
                        const std::vector<double> m = to_vector(maxima);
                        for (std::size_t i = 0; i < y_idx.size(); ++i)
                            y_idx[i] = gen() % 11 == 0 ? std::nan("") : m[i] - 2.0;
                        const tensor yt = from_host(y_idx.data(), {count}, dtype::float64).to(dt);
                        const std::size_t bytes = static_cast<std::size_t>(numel) * itemsize(dt);
                        for (const bool masked : {false, true})
                        {
                            std::vector<double> terms = g_idx;
                            if (masked)
                                for (std::size_t i = 0; i < terms.size(); ++i)
                                    if (!(y_idx[i] > 0)) // as rounded to dt: -2..2 and NaN are exact
                                        terms[i] = 0.0;
                            const tensor gi = from_host(terms.data(), {count}, dtype::float64).to(dt);
                            std::vector<unsigned char> want(bytes, 0xff);
                            REQUIRE(cpu::put_add(want.data(), numel, gi.data_ptr(), idx.data(), dt, count) == -1);
                            for (const cpu::simd_level level : cpu_kernels_test::simd_levels())
                                for (const int threads : {1, 2, 3})
                                {
                                    cpu::limit_simd_level(level);
                                    set_num_threads(threads);
                                    std::vector<unsigned char> got(bytes, 0xff); // NaN in every dtype
                                    cpu::max_pool2d_grad(got.data(), xs.data(), ga.data_ptr(), gs.data(), idx.data(),
                                                         is.data(), masked ? yt.data_ptr() : nullptr, dt, d);
                                    CHECK_MESSAGE(got == want, cpu_kernels_test::level_name(level), " threads ",
                                                  threads, masked ? " masked" : "");
                                }
                        }
                    }
}

TEST_CASE("max_pool2d: the first maximum of a window gets the gradient; NaN propagates")
{
    // One 2x2 window of equal values: all of the gradient goes to the first (kh, kw) element.
    const tensor x = ones({1, 1, 2, 2}, dtype::float64).requires_grad_();
    pool2d_params p;
    sum(max_pool2d(x, p)).backward();
    CHECK(to_vector(x.grad()) == std::vector<double>{1, 0, 0, 0});

    // Overlapping windows choosing the same element add up (stride 1 over a 1x3 row).
    const double v[3] = {0, 5, 1};
    const tensor r = from_host(v, {1, 1, 1, 3}, dtype::float64).requires_grad_();
    pool2d_params q;
    q.kernel = {1, 2};
    q.stride = std::array<std::int64_t, 2>{1, 1};
    sum(max_pool2d(r, q)).backward();
    CHECK(to_vector(r.grad()) == std::vector<double>{0, 2, 0});

    const double nan = std::numeric_limits<double>::quiet_NaN();
    const double w[4] = {1, nan, 3, 2};
    const auto y = to_vector(max_pool2d(from_host(w, {1, 1, 2, 2}, dtype::float64), p));
    CHECK(std::isnan(y[0]));

    // Padding never wins, even over negative numbers.
    const tensor neg = full({1, 1, 2, 2}, -5.0, dtype::float64);
    pool2d_params padded;
    padded.padding = {1, 1};
    for (double e : to_vector(max_pool2d(neg, padded)))
        CHECK(e == -5.0);
}

TEST_CASE("take / put_add: clear errors")
{
    const tensor x = zeros({2, 3});
    CHECK_ERROR(take(x, positions({6}, {1})), xgrad::invalid_argument, "take", "idx[0]", "= 6", "[0, 6)");
    CHECK_ERROR(take(x, positions({0, -1}, {2})), xgrad::invalid_argument, "take", "idx[1]", "-1");
    CHECK_ERROR(take(x, zeros({2})), xgrad::invalid_argument, "take", "int64");
    CHECK_ERROR(take(zeros({2}, dtype::int64), positions({0}, {1})), xgrad::invalid_argument, "floating");
    CHECK_ERROR(put_add(zeros({2}), positions({0, 9}, {2}), {3}), xgrad::invalid_argument, "put_add", "idx[1]", "9");
    CHECK_ERROR(put_add(zeros({3}), positions({0, 1}, {2}), {3}), xgrad::invalid_argument, "put_add", "[3]", "[2]");
}
