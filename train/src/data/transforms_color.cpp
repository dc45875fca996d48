// Colour transforms (see xgrad/data/transforms.hpp), as torchvision's functions on float
// tensors compute them (torchvision/transforms/_functional_tensor.py: adjust_brightness,
// adjust_contrast, adjust_saturation, adjust_hue with _rgb2hsv / _hsv2rgb, rgb_to_grayscale),
// in float64 on one [C, H, W] buffer.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "transform_support.hpp"
#include "xgrad/data/transforms.hpp"

namespace xgrad::data
{
    using detail::check_probability;
    using detail::chw;
    using detail::fail;
    using detail::luma;
    using detail::with_data;

    namespace
    {
        /// One image's pixels in float64, channel planes, for the adjustments to work on.
        struct planes
        {
            std::int64_t channels = 0, plane = 0;
            std::vector<double> v;
            double* channel(std::int64_t c) { return v.data() + c * plane; }
            double gray(std::int64_t p) const
            {
                return channels == 1 ? v[static_cast<std::size_t>(p)]
                                     : luma(v[static_cast<std::size_t>(p)], v[static_cast<std::size_t>(plane + p)],
                                            v[static_cast<std::size_t>(2 * plane + p)]);
            }
        };

        /// The input checked to be 1 or 3 channels, as float64 planes.
        planes read_planes(const tensor& in, const char* who)
        {
            planes img;
            img.channels = in.size(0);
            img.plane = in.size(1) * in.size(2);
            if (img.channels != 1 && img.channels != 3)
                fail(who, "expected an image of 1 or 3 channels, got " + shape_to_string(in.shape()));
            img.v.resize(static_cast<std::size_t>(img.channels * img.plane));
            with_data(in, [&](const auto* src) { std::copy(src, src + img.v.size(), img.v.begin()); });
            return img;
        }

        /// The planes as a tensor of `like`'s dtype.
        tensor write_planes(const planes& img, const tensor& like)
        {
            tensor out = xgrad::empty(like.shape(), like.dtype());
            with_data(out, [&](auto* dst) {
                using T = std::remove_pointer_t<decltype(dst)>;
                std::transform(img.v.begin(), img.v.end(), dst, [](double x) { return static_cast<T>(x); });
            });
            return out;
        }

        double clamp01(double x) { return std::min(1.0, std::max(0.0, x)); }

        /// torchvision's _blend: ratio * x + (1 - ratio) * other, clamped to [0, 1].
        double blend(double x, double other, double ratio) { return clamp01(ratio * x + (1.0 - ratio) * other); }

        void adjust_brightness(planes& img, double f)
        {
            for (double& x : img.v)
                x = blend(x, 0.0, f);
        }

        void adjust_contrast(planes& img, double f)
        {
            double mean = 0.0;
            for (std::int64_t p = 0; p < img.plane; ++p)
                mean += img.gray(p);
            mean /= static_cast<double>(img.plane);
            for (double& x : img.v)
                x = blend(x, mean, f);
        }

        void adjust_saturation(planes& img, double f)
        {
            if (img.channels == 1)
                return; // torchvision leaves a gray image as it is
            for (std::int64_t p = 0; p < img.plane; ++p)
            {
                const double gray = img.gray(p);
                for (std::int64_t c = 0; c < 3; ++c)
                    img.channel(c)[p] = blend(img.channel(c)[p], gray, f);
            }
        }

        void adjust_hue(planes& img, double shift)
        {
            if (img.channels == 1)
                return;
            double *r = img.channel(0), *g = img.channel(1), *b = img.channel(2);
            for (std::int64_t p = 0; p < img.plane; ++p)
            {
                // _rgb2hsv.
                const double maxc = std::max({r[p], g[p], b[p]}), minc = std::min({r[p], g[p], b[p]});
                const bool flat = maxc == minc;
                const double range = maxc - minc;
                const double s = range / (flat ? 1.0 : maxc);
                const double divisor = flat ? 1.0 : range;
                const double rc = (maxc - r[p]) / divisor, gc = (maxc - g[p]) / divisor, bc = (maxc - b[p]) / divisor;
                double h = 0.0;
                if (maxc == r[p])
                    h = bc - gc;
                else if (maxc == g[p])
                    h = 2.0 + rc - bc;
                else
                    h = 4.0 + gc - rc;
                h = std::fmod(h / 6.0 + 1.0, 1.0);
                // The shift, modulo 1 into [0, 1) (Python's %).
                h = h + shift;
                h -= std::floor(h);
                // _hsv2rgb.
                const double v = maxc;
                const double i = std::floor(h * 6.0), f = h * 6.0 - i;
                const double pp = clamp01(v * (1.0 - s)), q = clamp01(v * (1.0 - s * f)),
                             t = clamp01(v * (1.0 - s * (1.0 - f)));
                const std::array<std::array<double, 3>, 6> rgb{
                    {{v, t, pp}, {q, v, pp}, {pp, v, t}, {pp, q, v}, {t, pp, v}, {v, pp, q}}};
                const auto sector = static_cast<std::size_t>(static_cast<std::int64_t>(i) % 6);
                r[p] = rgb[sector][0];
                g[p] = rgb[sector][1];
                b[p] = rgb[sector][2];
            }
        }

        /// A factor range [max(0, 1 - v), 1 + v] of ColorJitter; empty for v = 0.
        void check_jitter(const char* name, double v)
        {
            if (!(v >= 0.0) || !std::isfinite(v))
                fail("color_jitter", std::string(name) + " must be finite and >= 0, got " + std::to_string(v));
        }

        /// The gray image in `channels` channels, of the input's dtype.
        tensor gray_image(const tensor& in, std::int64_t channels, const char* who)
        {
            const planes img = read_planes(in, who);
            planes out;
            out.channels = channels;
            out.plane = img.plane;
            out.v.resize(static_cast<std::size_t>(channels * img.plane));
            for (std::int64_t p = 0; p < img.plane; ++p)
                for (std::int64_t c = 0; c < channels; ++c)
                    out.v[static_cast<std::size_t>(c * img.plane + p)] = img.gray(p);
            return write_planes(out, xgrad::empty({channels, in.size(1), in.size(2)}, in.dtype()));
        }
    }

    transform color_jitter(double brightness, double contrast, double saturation, double hue)
    {
        check_jitter("brightness", brightness);
        check_jitter("contrast", contrast);
        check_jitter("saturation", saturation);
        if (!(hue >= 0.0 && hue <= 0.5))
            fail("color_jitter", "hue must be in [0, 0.5], got " + std::to_string(hue));
        return [=](const tensor& x, generator& gen) {
            const tensor in = chw(x, "color_jitter");
            planes img = read_planes(in, "color_jitter");
            // torch.randperm(4), then the factors of the adjustments enabled, in this order.
            std::array<int, 4> order{0, 1, 2, 3};
            for (std::size_t i = order.size(); i > 1; --i)
                std::swap(order[i - 1], order[static_cast<std::size_t>(gen.below(i))]);
            const auto factor = [&](double v) {
                const double lo = std::max(0.0, 1.0 - v), hi = 1.0 + v;
                return lo + (hi - lo) * gen.uniform();
            };
            const double b = brightness > 0 ? factor(brightness) : 1.0, c = contrast > 0 ? factor(contrast) : 1.0,
                         s = saturation > 0 ? factor(saturation) : 1.0,
                         h = hue > 0 ? -hue + 2.0 * hue * gen.uniform() : 0.0;
            for (const int step : order)
            {
                if (step == 0 && brightness > 0)
                    adjust_brightness(img, b);
                else if (step == 1 && contrast > 0)
                    adjust_contrast(img, c);
                else if (step == 2 && saturation > 0)
                    adjust_saturation(img, s);
                else if (step == 3 && hue > 0)
                    adjust_hue(img, h);
            }
            return write_planes(img, in);
        };
    }

    transform grayscale(std::int64_t num_output_channels)
    {
        if (num_output_channels != 1 && num_output_channels != 3)
            fail("grayscale", "num_output_channels must be 1 or 3, got " + std::to_string(num_output_channels));
        return [num_output_channels](const tensor& x, generator&) {
            return gray_image(chw(x, "grayscale"), num_output_channels, "grayscale");
        };
    }

    transform random_grayscale(double p)
    {
        check_probability("random_grayscale", p);
        return [p](const tensor& x, generator& gen) {
            const tensor in = chw(x, "random_grayscale");
            if (!(gen.uniform() < p))
                return in;
            return gray_image(in, in.size(0), "random_grayscale");
        };
    }
}
