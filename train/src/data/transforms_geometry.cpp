// Resizing and cropping to a size (see xgrad/data/transforms.hpp).
//
// Resizing is separable: along each axis every output index reads a run of consecutive input
// indices with weights (two for plain bilinear, more for an antialiased downscale), computed
// once per axis as PyTorch's interpolate computes them (aten/src/ATen/native/UpSample.h's
// area_pixel_compute_source_index, and UpSampleKernel.cpp's _compute_index_ranges_weights for
// antialias), then applied along the width and along the height, in float64.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "transform_support.hpp"
#include "xgrad/data/transforms.hpp"

namespace xgrad::data
{
    using detail::chw;
    using detail::fail;
    using detail::with_data;

    namespace
    {
        /// The input indices [first, first + weights.size()) and their weights, per output index.
        struct axis_weights
        {
            std::vector<std::int64_t> first;
            std::vector<std::vector<double>> weights;
        };

        axis_weights resize_weights(std::int64_t in, std::int64_t out, bool antialias)
        {
            axis_weights a;
            const double scale = static_cast<double>(in) / static_cast<double>(out);
            for (std::int64_t i = 0; i < out; ++i)
            {
                std::vector<double> w;
                std::int64_t first = 0;
                if (!antialias)
                {
                    // The source position of the output pixel's centre, clamped at 0; the pixel
                    // at or left of it and the next one (the last pixel alone at the edge).
                    const double src = std::max(0.0, scale * (static_cast<double>(i) + 0.5) - 0.5);
                    first = static_cast<std::int64_t>(src);
                    const double frac = src - static_cast<double>(first);
                    w = first < in - 1 ? std::vector<double>{1.0 - frac, frac} : std::vector<double>{1.0};
                }
                else
                {
                    // The triangle filter, stretched by the scale when downscaling, over the
                    // input pixels within its support, normalised to sum to 1.
                    const double support = scale >= 1.0 ? scale : 1.0;
                    const double inv = scale >= 1.0 ? 1.0 / scale : 1.0;
                    const double centre = scale * (static_cast<double>(i) + 0.5);
                    // Truncated toward zero before the clamp, as PyTorch's int64 cast.
                    first = std::max<std::int64_t>(static_cast<std::int64_t>(centre - support + 0.5), 0);
                    const std::int64_t last = std::min<std::int64_t>(static_cast<std::int64_t>(centre + support + 0.5),
                                                                     in);
                    double total = 0.0;
                    for (std::int64_t j = first; j < last; ++j)
                    {
                        const double x = std::abs((static_cast<double>(j) - centre + 0.5) * inv);
                        w.push_back(x < 1.0 ? 1.0 - x : 0.0);
                        total += w.back();
                    }
                    if (total != 0.0)
                        for (double& v : w)
                            v /= total;
                }
                a.first.push_back(first);
                a.weights.push_back(std::move(w));
            }
            return a;
        }

        /// [C, H, W] -> [C, height, width] by the weights of each axis.
        tensor resize_to(const tensor& x, std::int64_t height, std::int64_t width, bool antialias, const char* who)
        {
            const tensor in = chw(x, who);
            const std::int64_t c = in.size(0), h = in.size(1), w = in.size(2);
            if (h < 1 || w < 1)
                fail(who, "cannot resize an empty image " + shape_to_string(x.shape()));
            if (h == height && w == width)
                return in;
            const axis_weights rows = resize_weights(h, height, antialias), cols = resize_weights(w, width, antialias);
            tensor out = xgrad::empty({c, height, width}, in.dtype());
            with_data(in, [&](const auto* src) {
                using T = std::remove_const_t<std::remove_pointer_t<decltype(src)>>;
                T* dst = out.data<T>();
                std::vector<double> across(static_cast<std::size_t>(h * width)); // one channel, resized along W
                for (std::int64_t ch = 0; ch < c; ++ch)
                {
                    const T* plane = src + ch * h * w;
                    for (std::int64_t r = 0; r < h; ++r)
                        for (std::int64_t q = 0; q < width; ++q)
                        {
                            const auto& wq = cols.weights[static_cast<std::size_t>(q)];
                            const T* p = plane + r * w + cols.first[static_cast<std::size_t>(q)];
                            double sum = 0.0;
                            for (std::size_t k = 0; k < wq.size(); ++k)
                                sum += wq[k] * static_cast<double>(p[k]);
                            across[static_cast<std::size_t>(r * width + q)] = sum;
                        }
                    for (std::int64_t r = 0; r < height; ++r)
                    {
                        const auto& wr = rows.weights[static_cast<std::size_t>(r)];
                        const std::int64_t r0 = rows.first[static_cast<std::size_t>(r)];
                        for (std::int64_t q = 0; q < width; ++q)
                        {
                            double sum = 0.0;
                            for (std::size_t k = 0; k < wr.size(); ++k)
                                sum +=
                                    wr[k] *
                                    across[static_cast<std::size_t>((r0 + static_cast<std::int64_t>(k)) * width + q)];
                            dst[(ch * height + r) * width + q] = static_cast<T>(sum);
                        }
                    }
                }
            });
            return out;
        }

        /// The window [top, top + height) x [left, left + width), 0 where it leaves the image.
        tensor crop(const tensor& in, std::int64_t top, std::int64_t left, std::int64_t height, std::int64_t width)
        {
            const std::int64_t c = in.size(0), h = in.size(1), w = in.size(2);
            tensor out = xgrad::zeros({c, height, width}, in.dtype());
            with_data(in, [&](const auto* src) {
                using T = std::remove_const_t<std::remove_pointer_t<decltype(src)>>;
                T* dst = out.data<T>();
                const std::int64_t q0 = std::max<std::int64_t>(0, -left), q1 = std::min(width, w - left);
                for (std::int64_t ch = 0; ch < c; ++ch)
                    for (std::int64_t r = std::max<std::int64_t>(0, -top); r < std::min(height, h - top); ++r)
                        for (std::int64_t q = q0; q < q1; ++q)
                            dst[(ch * height + r) * width + q] = src[(ch * h + top + r) * w + left + q];
            });
            return out;
        }

        /// Python's int(round(v)): to the nearest integer, half to even (the default rounding
        /// mode of nearbyint).
        std::int64_t round_even(double v) { return static_cast<std::int64_t>(std::nearbyint(v)); }

        /// torchvision's centre offset along one axis of `size` for a window of `window`.
        std::int64_t centre_offset(std::int64_t size, std::int64_t window)
        {
            if (window > size)
                return -((window - size) / 2); // padded by (window - size) // 2 before
            return round_even(static_cast<double>(size - window) / 2.0);
        }

        void check_size(const char* who, std::int64_t height, std::int64_t width)
        {
            if (height < 1 || width < 1)
                fail(who, "the size must be at least 1x1, got " + std::to_string(height) + "x" + std::to_string(width));
        }
    }

    transform resize(std::int64_t height, std::int64_t width, bool antialias)
    {
        check_size("resize", height, width);
        return [=](const tensor& x, generator&) { return resize_to(x, height, width, antialias, "resize"); };
    }

    transform resize_shorter_side(std::int64_t size, std::int64_t max_size, bool antialias)
    {
        if (size < 1 || max_size < 0 || (max_size > 0 && max_size <= size))
            fail("resize_shorter_side", "size must be >= 1 and max_size 0 or > size, got size " + std::to_string(size) +
                                            ", max_size " + std::to_string(max_size));
        return [=](const tensor& x, generator&) {
            const tensor in = chw(x, "resize_shorter_side");
            const std::int64_t h = in.size(1), w = in.size(2);
            if (h < 1 || w < 1)
                fail("resize_shorter_side", "cannot resize an empty image " + shape_to_string(x.shape()));
            const std::int64_t shorter = std::min(h, w), longer = std::max(h, w);
            std::int64_t new_short = size;
            // int(size * long / short): the quotient in floating point, then truncated.
            auto new_long = static_cast<std::int64_t>(static_cast<double>(size) * static_cast<double>(longer) /
                                                      static_cast<double>(shorter));
            if (max_size > 0 && new_long > max_size)
            {
                new_short = static_cast<std::int64_t>(static_cast<double>(max_size) * static_cast<double>(new_short) /
                                                      static_cast<double>(new_long));
                new_long = max_size;
            }
            const bool tall = w <= h;
            return resize_to(in, tall ? new_long : new_short, tall ? new_short : new_long, antialias,
                             "resize_shorter_side");
        };
    }

    transform center_crop(std::int64_t height, std::int64_t width)
    {
        check_size("center_crop", height, width);
        return [=](const tensor& x, generator&) {
            const tensor in = chw(x, "center_crop");
            return crop(in, centre_offset(in.size(1), height), centre_offset(in.size(2), width), height, width);
        };
    }

    transform random_resized_crop(std::int64_t height, std::int64_t width, double scale_lo, double scale_hi,
                                  double ratio_lo, double ratio_hi, bool antialias)
    {
        check_size("random_resized_crop", height, width);
        if (!(scale_lo > 0.0 && scale_lo <= scale_hi && std::isfinite(scale_hi)))
            fail("random_resized_crop", "the scale must satisfy 0 < lo <= hi, finite, got [" +
                                            std::to_string(scale_lo) + ", " + std::to_string(scale_hi) + "]");
        if (!(ratio_lo > 0.0 && ratio_lo <= ratio_hi && std::isfinite(ratio_hi)))
            fail("random_resized_crop", "the ratio must satisfy 0 < lo <= hi, finite, got [" +
                                            std::to_string(ratio_lo) + ", " + std::to_string(ratio_hi) + "]");
        return [=](const tensor& x, generator& gen) {
            const tensor in = chw(x, "random_resized_crop");
            const std::int64_t h = in.size(1), w = in.size(2);
            if (h < 1 || w < 1)
                fail("random_resized_crop", "cannot crop an empty image " + shape_to_string(x.shape()));
            const double area = static_cast<double>(h) * static_cast<double>(w);
            const double log_lo = std::log(ratio_lo), log_hi = std::log(ratio_hi);
            for (int attempt = 0; attempt < 10; ++attempt)
            {
                const double target = area * (scale_lo + (scale_hi - scale_lo) * gen.uniform());
                const double ratio = std::exp(log_lo + (log_hi - log_lo) * gen.uniform());
                const std::int64_t cw = round_even(std::sqrt(target * ratio));
                const std::int64_t ch = round_even(std::sqrt(target / ratio));
                if (cw > 0 && cw <= w && ch > 0 && ch <= h)
                {
                    const auto top = static_cast<std::int64_t>(gen.below(static_cast<std::uint64_t>(h - ch + 1)));
                    const auto left = static_cast<std::int64_t>(gen.below(static_cast<std::uint64_t>(w - cw + 1)));
                    return resize_to(crop(in, top, left, ch, cw), height, width, antialias, "random_resized_crop");
                }
            }
            // The fallback: the whole image, narrowed to the nearest ratio in range, centred.
            const double in_ratio = static_cast<double>(w) / static_cast<double>(h);
            std::int64_t cw = w, ch = h;
            if (in_ratio < ratio_lo) // at least a row or column, where torchvision would fail
                ch = std::max<std::int64_t>(1, round_even(static_cast<double>(w) / ratio_lo));
            else if (in_ratio > ratio_hi)
                cw = std::max<std::int64_t>(1, round_even(static_cast<double>(h) * ratio_hi));
            return resize_to(crop(in, (h - ch) / 2, (w - cw) / 2, ch, cw), height, width, antialias,
                             "random_resized_crop");
        };
    }
}
