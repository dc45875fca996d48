// The image transforms of xgrad/data/transforms.hpp against their formulas (torchvision is
// not a test dependency): resize (bilinear, with and without antialias), resize by the
// shorter side, centre crop, random resized crop (its draws and its fallback), colour jitter
// (each adjustment, the random order), grayscale; their errors.
#include <doctest/doctest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <functional>
#include <set>
#include <vector>

#include "tests/support/check_error.hpp"
#include "xgrad/data/transforms.hpp"
#include "xgrad/errors.hpp"
#include "xgrad/factories.hpp"

using namespace xgrad;
using namespace xgrad::data;

namespace
{
    std::vector<double> values(const tensor& t)
    {
        const tensor c = t.to(dtype::float64).contiguous();
        return {c.data<double>(), c.data<double>() + c.numel()};
    }

    /// A [c, h, w] float64 image of the given values.
    tensor image(std::int64_t c, std::int64_t h, std::int64_t w, const std::vector<double>& v)
    {
        return from_host(v.data(), {c, h, w}, dtype::float64);
    }

    /// Values in [0, 1] that differ per element.
    std::vector<double> ramp(std::int64_t n, int salt = 0)
    {
        std::vector<double> v;
        for (std::int64_t i = 0; i < n; ++i)
            v.push_back(static_cast<double>((i * 37 + salt * 17) % 101) / 100.0);
        return v;
    }

    void check_close(const std::vector<double>& got, const std::vector<double>& want, double tol)
    {
        REQUIRE(got.size() == want.size());
        for (std::size_t i = 0; i < got.size(); ++i)
        {
            CAPTURE(i);
            CHECK(std::abs(got[i] - want[i]) <= tol);
        }
    }

    /// PyTorch's interpolate(mode="bilinear", align_corners=False, antialias=False) written
    /// directly in two dimensions: each output pixel from the 2x2 source pixels around the
    /// source position of its centre.
    std::vector<double> bilinear(const std::vector<double>& in, std::int64_t c, std::int64_t h, std::int64_t w,
                                 std::int64_t oh, std::int64_t ow)
    {
        std::vector<double> out;
        const auto source = [](std::int64_t i, std::int64_t n, std::int64_t o, std::int64_t& i0, std::int64_t& i1,
                               double& frac) {
            const double src = std::max(0.0, (static_cast<double>(i) + 0.5) * n / o - 0.5);
            i0 = static_cast<std::int64_t>(std::floor(src));
            i1 = std::min(i0 + 1, n - 1);
            frac = src - static_cast<double>(i0);
        };
        for (std::int64_t ch = 0; ch < c; ++ch)
            for (std::int64_t y = 0; y < oh; ++y)
                for (std::int64_t x = 0; x < ow; ++x)
                {
                    std::int64_t y0, y1, x0, x1;
                    double fy, fx;
                    source(y, h, oh, y0, y1, fy);
                    source(x, w, ow, x0, x1, fx);
                    const auto at = [&](std::int64_t r, std::int64_t q) {
                        return in[static_cast<std::size_t>((ch * h + r) * w + q)];
                    };
                    out.push_back((1 - fy) * ((1 - fx) * at(y0, x0) + fx * at(y0, x1)) +
                                  fy * ((1 - fx) * at(y1, x0) + fx * at(y1, x1)));
                }
        return out;
    }

    /// The draws color_jitter makes, as its header orders them.
    struct jitter_draws
    {
        std::array<int, 4> order{0, 1, 2, 3};
        double brightness = 1.0, contrast = 1.0, saturation = 1.0, hue = 0.0;
    };

    jitter_draws draw_jitter(std::uint64_t seed, double b, double c, double s, double h)
    {
        generator gen(seed);
        jitter_draws d;
        for (std::size_t i = 4; i > 1; --i)
            std::swap(d.order[i - 1], d.order[static_cast<std::size_t>(gen.below(i))]);
        const auto factor = [&](double v) {
            return std::max(0.0, 1 - v) + (1 + v - std::max(0.0, 1 - v)) * gen.uniform();
        };
        if (b > 0)
            d.brightness = factor(b);
        if (c > 0)
            d.contrast = factor(c);
        if (s > 0)
            d.saturation = factor(s);
        if (h > 0)
            d.hue = -h + 2 * h * gen.uniform();
        return d;
    }

    double clamp01(double x) { return std::min(1.0, std::max(0.0, x)); }
    double luma(double r, double g, double b) { return 0.299 * r + 0.587 * g + 0.114 * b; }

    /// Python's colorsys.rgb_to_hsv / hsv_to_rgb: the textbook conversion, written apart from
    /// torchvision's vectorised one that the transform follows.
    std::array<double, 3> rgb_to_hsv(double r, double g, double b)
    {
        const double maxc = std::max({r, g, b}), minc = std::min({r, g, b});
        if (maxc == minc)
            return {0.0, 0.0, maxc};
        const double s = (maxc - minc) / maxc;
        const double rc = (maxc - r) / (maxc - minc), gc = (maxc - g) / (maxc - minc), bc = (maxc - b) / (maxc - minc);
        double h = r == maxc ? bc - gc : g == maxc ? 2.0 + rc - bc : 4.0 + gc - rc;
        h = h / 6.0 - std::floor(h / 6.0);
        return {h, s, maxc};
    }

    std::array<double, 3> hsv_to_rgb(double h, double s, double v)
    {
        if (s == 0.0)
            return {v, v, v};
        const int i = static_cast<int>(h * 6.0) % 6;
        const double f = h * 6.0 - std::floor(h * 6.0);
        const double p = v * (1 - s), q = v * (1 - s * f), t = v * (1 - s * (1 - f));
        switch (i)
        {
        case 0: return {v, t, p};
        case 1: return {q, v, p};
        case 2: return {p, v, t};
        case 3: return {p, q, v};
        case 4: return {t, p, v};
        default: return {v, p, q};
        }
    }

    /// The jitter's adjustments on [3, n] planes, as the header states them.
    void adjust(std::vector<double>& v, std::size_t n, int step, const jitter_draws& d)
    {
        if (step == 0)
            for (double& x : v)
                x = clamp01(d.brightness * x);
        if (step == 1)
        {
            double mean = 0;
            for (std::size_t p = 0; p < n; ++p)
                mean += luma(v[p], v[n + p], v[2 * n + p]) / static_cast<double>(n);
            for (double& x : v)
                x = clamp01(d.contrast * x + (1 - d.contrast) * mean);
        }
        if (step == 2)
            for (std::size_t p = 0; p < n; ++p)
            {
                const double gray = luma(v[p], v[n + p], v[2 * n + p]);
                for (std::size_t c = 0; c < 3; ++c)
                    v[c * n + p] = clamp01(d.saturation * v[c * n + p] + (1 - d.saturation) * gray);
            }
        if (step == 3)
            for (std::size_t p = 0; p < n; ++p)
            {
                const auto hsv = rgb_to_hsv(v[p], v[n + p], v[2 * n + p]);
                const double h = hsv[0] + d.hue - std::floor(hsv[0] + d.hue);
                const auto rgb = hsv_to_rgb(h, hsv[1], hsv[2]);
                for (std::size_t c = 0; c < 3; ++c)
                    v[c * n + p] = rgb[c];
            }
    }
}

TEST_CASE("resize: bilinear on pixel centres, with and without antialias")
{
    generator gen(1);
    // [0, 1] to 4 pixels: source positions -0.25 (clamped to 0), 0.25, 0.75, 1.25 (the last pixel).
    const tensor two = image(1, 1, 2, {0.0, 1.0});
    check_close(values(resize(1, 4, false)(two, gen)), {0.0, 0.25, 0.75, 1.0}, 1e-15);
    // Upscaling is the same with antialias.
    check_close(values(resize(1, 4, true)(two, gen)), {0.0, 0.25, 0.75, 1.0}, 1e-15);
    // Downscaling [0, 1, 2, 3] by 2 with antialias: the triangle filter of half-width 2 around
    // centres 1 and 3 weighs pixels (0, 1, 2) by (0.75, 0.75, 0.25) and (1, 2, 3) by (0.25,
    // 0.75, 0.75), each over their sum 1.75; without it, pixels (0, 1) and (2, 3) half and half.
    const tensor four = image(1, 1, 4, {0.0, 1.0, 2.0, 3.0});
    check_close(values(resize(1, 2)(four, gen)), {1.25 / 1.75, 4.0 / 1.75}, 1e-15);
    check_close(values(resize(1, 2, false)(four, gen)), {0.5, 2.5}, 1e-15);

    // Every output size against the two-dimensional formula, up and down, two channels.
    const std::int64_t c = 2, h = 5, w = 7;
    const auto v = ramp(c * h * w);
    for (const auto& size : std::vector<std::array<std::int64_t, 2>>{{9, 11}, {3, 4}, {5, 2}, {1, 1}, {8, 3}})
    {
        const std::int64_t oh = size[0], ow = size[1]; // named: CAPTURE cannot take a structured binding
        CAPTURE(oh);
        CAPTURE(ow);
        const tensor out = resize(oh, ow, false)(image(c, h, w, v), gen);
        CHECK(out.shape() == shape_type{c, oh, ow});
        // float64 throughout; the separable passes sum in another order: a few ulps.
        check_close(values(out), bilinear(v, c, h, w, oh, ow), 1e-14);
        // float32 in, float32 out, rounded once from the float64 result.
        const tensor f = resize(oh, ow, false)(image(c, h, w, v).to(dtype::float32), gen);
        CHECK(f.dtype() == dtype::float32);
        check_close(values(f), bilinear(values(image(c, h, w, v).to(dtype::float32)), c, h, w, oh, ow), 1e-6);
    }
    // Antialiased: a constant stays constant, and each output is a weighted mean of its input,
    // so within the input's range.
    const auto aa = values(resize(2, 3)(image(c, h, w, v), gen));
    for (double x : aa)
        CHECK((x >= 0.0 && x <= 1.0));
    check_close(values(resize(2, 3)(full({1, 5, 7}, 0.25, dtype::float64), gen)), std::vector<double>(6, 0.25), 1e-15);
    // The same size: the input.
    CHECK(values(resize(h, w)(image(c, h, w, v), gen)) == v);

    CHECK_ERROR(resize(0, 3), xgrad::invalid_argument, "resize", "at least 1x1", "0x3");
    CHECK_ERROR(resize(2, 2)(zeros({2, 3}), gen), xgrad::invalid_argument, "resize", "[C, H, W]");
    CHECK_ERROR(resize(2, 2)(zeros({1, 0, 3}), gen), xgrad::invalid_argument, "resize", "empty image");
}

TEST_CASE("resize_shorter_side: torchvision's output sizes")
{
    generator gen(1);
    const auto size_of = [&](std::int64_t h, std::int64_t w, std::int64_t size, std::int64_t max_size = 0) {
        const tensor out = resize_shorter_side(size, max_size)(zeros({1, h, w}), gen);
        return shape_type{out.size(1), out.size(2)};
    };
    CHECK(size_of(4, 6, 2) == shape_type{2, 3});
    CHECK(size_of(6, 4, 2) == shape_type{3, 2});
    CHECK(size_of(3, 7, 2) == shape_type{2, 4}); // int(2 * 7 / 3) = int(4.67)
    CHECK(size_of(5, 5, 8) == shape_type{8, 8});
    CHECK(size_of(2, 10, 2, 5) == shape_type{1, 5}); // the longer side 10 > 5: 5, and int(5 * 2 / 10)
    CHECK(size_of(2, 4, 2, 5) == shape_type{2, 4});  // 4 <= 5: unchanged, and returned as it is
    const auto v = ramp(3 * 4 * 6);
    check_close(values(resize_shorter_side(2, 0, false)(image(3, 4, 6, v), gen)), bilinear(v, 3, 4, 6, 2, 3), 1e-14);
    CHECK_ERROR(resize_shorter_side(0), xgrad::invalid_argument, "resize_shorter_side", "size 0");
    CHECK_ERROR(resize_shorter_side(4, 4), xgrad::invalid_argument, "resize_shorter_side", "max_size 4");
}

TEST_CASE("center_crop: Python's rounding of the offset, and zero padding when the window is larger")
{
    generator gen(1);
    // An n x n image of values 0, 1, ..., and its window at (top, left).
    const auto grid = [](std::int64_t n) {
        std::vector<double> v(static_cast<std::size_t>(n * n));
        for (std::size_t i = 0; i < v.size(); ++i)
            v[i] = static_cast<double>(i);
        return image(1, n, n, v);
    };
    const auto window = [](std::int64_t n, std::int64_t top, std::int64_t left, std::int64_t h, std::int64_t w) {
        std::vector<double> out;
        for (std::int64_t r = 0; r < h; ++r)
            for (std::int64_t q = 0; q < w; ++q)
                out.push_back(static_cast<double>((top + r) * n + left + q));
        return out;
    };
    // 5 - 2 = 3: offset round(1.5) = 2; 7 - 2 = 5: round(2.5) = 2 (half to even); 5 - 3: 1.
    CHECK(values(center_crop(2, 2)(grid(5), gen)) == window(5, 2, 2, 2, 2));
    CHECK(values(center_crop(3, 2)(grid(5), gen)) == window(5, 1, 2, 3, 2));
    CHECK(values(center_crop(2, 2)(grid(7), gen)) == window(7, 2, 2, 2, 2));
    // A 2x2 image in a 4x5 window: padded by (4 - 2) // 2 = 1 above and (5 - 2) // 2 = 1 left.
    const tensor small = image(1, 2, 2, {1, 2, 3, 4});
    CHECK(values(center_crop(4, 5)(small, gen)) ==
          std::vector<double>{0, 0, 0, 0, 0, 0, 1, 2, 0, 0, 0, 3, 4, 0, 0, 0, 0, 0, 0, 0});
    // Larger one way only: 3 rows of 2 padded by 0 above, 2 columns of the 2 as they are.
    CHECK(values(center_crop(3, 2)(small, gen)) == std::vector<double>{1, 2, 3, 4, 0, 0});
    CHECK_ERROR(center_crop(2, 0), xgrad::invalid_argument, "center_crop", "at least 1x1");
}

TEST_CASE("random_resized_crop: torchvision's draws, placement and fallback")
{
    std::vector<double> v(8 * 8);
    for (std::size_t i = 0; i < v.size(); ++i)
        v[i] = static_cast<double>(i);
    const tensor x = image(1, 8, 8, v);
    // Area 1/4 at ratio 1: a 4x4 window, resized to 4x4 (itself), anywhere of the 5 x 5 places.
    std::set<double> corners;
    generator gen(4);
    for (int i = 0; i < 300; ++i)
    {
        const auto out = values(random_resized_crop(4, 4, 0.25, 0.25, 1.0, 1.0)(x, gen));
        const double first = out[0];
        const auto top = static_cast<std::size_t>(first) / 8, left = static_cast<std::size_t>(first) % 8;
        REQUIRE((top <= 4 && left <= 4));
        for (std::size_t r = 0; r < 4; ++r)
            for (std::size_t q = 0; q < 4; ++q)
                CHECK(out[r * 4 + q] == v[(top + r) * 8 + left + q]);
        corners.insert(first);
    }
    CHECK(corners.size() == 25u); // about 12 draws each

    // The whole image at its own ratio and size: the image.
    const tensor wide = image(1, 4, 6, std::vector<double>(v.begin(), v.begin() + 24));
    CHECK(values(random_resized_crop(4, 6, 1.0, 1.0, 1.5, 1.5)(wide, gen)) == values(wide));
    // No draw fits a 2x8 image at ratio <= 1 and the whole area (h = round(sqrt(16 / r)) >= 4):
    // the fallback clamps its ratio 4 to 1, a 2x2 window, centred at column (8 - 2) // 2 = 3.
    const tensor strip = image(1, 2, 8, std::vector<double>(v.begin(), v.begin() + 16));
    CHECK(values(random_resized_crop(2, 2, 1.0, 1.0, 0.5, 1.0)(strip, gen)) == std::vector<double>{3, 4, 11, 12});
    // Resized to the size asked, reproducibly from the generator.
    generator a(9), b(9);
    const auto t = random_resized_crop(3, 5);
    const tensor ya = t(x, a), yb = t(x, b);
    CHECK(ya.shape() == shape_type{1, 3, 5});
    CHECK(values(ya) == values(yb));

    CHECK_ERROR(random_resized_crop(4, 4, 0.5, 0.2), xgrad::invalid_argument, "random_resized_crop", "scale");
    CHECK_ERROR(random_resized_crop(4, 4, 0.5, 1.0, 0.0, 1.0), xgrad::invalid_argument, "random_resized_crop", "ratio");
}

TEST_CASE("color_jitter: each adjustment's formula, in the drawn order")
{
    const std::int64_t h = 3, w = 4, n = h * w;
    const auto v = ramp(3 * n, 2);
    struct setting
    {
        double b, c, s, hue;
    };
    for (const setting st : {setting{0.5, 0, 0, 0}, setting{0, 0.7, 0, 0}, setting{0, 0, 0.9, 0}, setting{0, 0, 0, 0.4},
                             setting{0.4, 0.4, 0.4, 0.1}, setting{0.9, 0.5, 1.0, 0.5}})
    {
        for (const std::uint64_t seed : {1u, 2u, 3u, 4u, 5u})
        {
            CAPTURE(st.b);
            CAPTURE(st.c);
            CAPTURE(st.s);
            CAPTURE(st.hue);
            CAPTURE(seed);
            generator gen(seed);
            const auto got = values(color_jitter(st.b, st.c, st.s, st.hue)(image(3, h, w, v), gen));
            const jitter_draws d = draw_jitter(seed, st.b, st.c, st.s, st.hue);
            std::vector<double> want = v;
            for (const int step : d.order)
                if ((step == 0 && st.b > 0) || (step == 1 && st.c > 0) || (step == 2 && st.s > 0) ||
                    (step == 3 && st.hue > 0))
                    adjust(want, static_cast<std::size_t>(n), step, d);
            // float64 throughout; the HSV round trip differs from colorsys's in rounding only.
            check_close(got, want, 1e-12);
        }
    }
    // Hue: red shifted by a third of the circle is green; gray has no hue.
    const auto hue_of = [](double shift, std::array<double, 3> rgb) {
        jitter_draws d;
        d.hue = shift;
        std::vector<double> p(rgb.begin(), rgb.end());
        adjust(p, 1, 3, d);
        return p;
    };
    check_close(hue_of(1.0 / 3.0, {1, 0, 0}), {0, 1, 0}, 1e-12);
    check_close(hue_of(-0.5, {1, 0, 0}), {0, 1, 1}, 1e-12);
    check_close(hue_of(0.25, {0.4, 0.4, 0.4}), {0.4, 0.4, 0.4}, 1e-15);

    // One channel: saturation and hue leave it, brightness scales it.
    generator gen(7);
    const tensor gray = image(1, h, w, ramp(n));
    CHECK(values(color_jitter(0, 0, 0.9, 0.3)(gray, gen)) == values(gray));
    const auto bright = values(color_jitter(0.5)(gray, gen));
    const double f = bright[5] / values(gray)[5];
    CHECK((f >= 0.5 && f <= 1.5));
    // Off: the input's values.
    CHECK(values(color_jitter()(image(3, h, w, v), gen)) == v);

    CHECK_ERROR(color_jitter(-0.1), xgrad::invalid_argument, "color_jitter", "brightness");
    CHECK_ERROR(color_jitter(0, 0, 0, 0.6), xgrad::invalid_argument, "color_jitter", "hue", "[0, 0.5]");
    CHECK_ERROR(color_jitter(0.2)(zeros({4, 2, 2}), gen), xgrad::invalid_argument, "color_jitter", "1 or 3 channels",
                "[4, 2, 2]");
}

TEST_CASE("grayscale and random_grayscale: ITU-R 601-2 luma")
{
    generator gen(1);
    const tensor rgb = image(3, 1, 2, {1.0, 0.2, 0.0, 0.4, 0.0, 0.9});
    const std::vector<double> y{luma(1.0, 0.0, 0.0), luma(0.2, 0.4, 0.9)};
    check_close(values(grayscale()(rgb, gen)), y, 1e-15);
    check_close(values(grayscale(3)(rgb, gen)), {y[0], y[1], y[0], y[1], y[0], y[1]}, 1e-15);
    const tensor one = image(1, 1, 2, {0.3, 0.6});
    CHECK(values(grayscale(3)(one, gen)) == std::vector<double>{0.3, 0.6, 0.3, 0.6, 0.3, 0.6});
    check_close(values(random_grayscale(1.0)(rgb, gen)), {y[0], y[1], y[0], y[1], y[0], y[1]}, 1e-15);
    CHECK(values(random_grayscale(0.0)(rgb, gen)) == values(rgb));
    // float32 stays float32.
    CHECK(grayscale()(rgb.to(dtype::float32), gen).dtype() == dtype::float32);
    CHECK_ERROR(grayscale(2), xgrad::invalid_argument, "grayscale", "1 or 3");
    CHECK_ERROR(grayscale()(zeros({2, 1, 1}), gen), xgrad::invalid_argument, "grayscale", "1 or 3 channels");
    CHECK_ERROR(random_grayscale(2.0), xgrad::invalid_argument, "random_grayscale", "p");
}
