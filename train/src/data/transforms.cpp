// Transforms (see xgrad/data/transforms.hpp). Each works on one contiguous [C, H, W] buffer on
// the host, in float32 or float64 as its input comes: examples are small (an image), and the
// loader runs them on its own thread, so plain loops are the clear choice here.
#include "xgrad/data/transforms.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "transform_support.hpp"

namespace xgrad::data
{
    using detail::check_probability;
    using detail::chw;
    using detail::copy_of;
    using detail::fail;
    using detail::with_data;

    transform compose(std::vector<transform> transforms)
    {
        for (const transform& t : transforms)
            if (!t)
                fail("compose", "a transform of the list is empty");
        return [ts = std::move(transforms)](const tensor& x, generator& gen) {
            tensor y = x;
            for (const transform& t : ts)
                y = t(y, gen);
            return y;
        };
    }

    transform normalize(std::vector<double> mean, std::vector<double> std)
    {
        if (mean.empty() || std.empty())
            fail("normalize", "mean and std need at least one value each");
        for (double m : mean)
            if (!std::isfinite(m))
                fail("normalize", "mean " + std::to_string(m) + " is not finite");
        for (double s : std)
            if (!(s > 0.0) || !std::isfinite(s))
                fail("normalize", "std " + std::to_string(s) + " must be finite and > 0");
        return [mean = std::move(mean), std = std::move(std)](const tensor& x, generator&) {
            tensor y = copy_of(chw(x, "normalize"));
            const std::int64_t c = y.size(0), plane = y.size(1) * y.size(2);
            for (const auto* v : {&mean, &std})
                if (v->size() != 1 && static_cast<std::int64_t>(v->size()) != c)
                    fail("normalize", "given " + std::to_string(v->size()) + " values for an input of " +
                                          std::to_string(c) + " channels " + shape_to_string(x.shape()));
            with_data(y, [&](auto* d) {
                for (std::int64_t ch = 0; ch < c; ++ch)
                {
                    const double m = mean[mean.size() == 1 ? 0 : static_cast<std::size_t>(ch)];
                    const double s = std[std.size() == 1 ? 0 : static_cast<std::size_t>(ch)];
                    for (std::int64_t i = 0; i < plane; ++i)
                        d[ch * plane + i] =
                            static_cast<std::remove_pointer_t<decltype(d)>>((d[ch * plane + i] - m) / s);
                }
            });
            return y;
        };
    }

    transform random_crop(std::int64_t height, std::int64_t width, std::int64_t padding, double fill)
    {
        // Every field at most 2^31 - 1 (as the window ops' fields): the padded sizes below are
        // then far inside int64 for any input extent (at most 2^62).
        constexpr std::int64_t limit = std::numeric_limits<std::int32_t>::max();
        if (height < 1 || width < 1 || padding < 0 || height > limit || width > limit || padding > limit)
            fail("random_crop", "the size must be in [1, " + std::to_string(limit) +
                                    "] in both axes and the padding in [0, " + std::to_string(limit) + "], got " +
                                    std::to_string(height) + "x" + std::to_string(width) + " with padding " +
                                    std::to_string(padding));
        return [=](const tensor& x, generator& gen) {
            const tensor in = chw(x, "random_crop");
            const std::int64_t c = in.size(0), h = in.size(1), w = in.size(2);
            const std::int64_t ph = h + 2 * padding, pw = w + 2 * padding;
            numel_of({c, height, width}); // the output's size, checked before it is allocated
            if (height > ph || width > pw)
                fail("random_crop", "a " + std::to_string(height) + "x" + std::to_string(width) +
                                        " window does not fit the padded image " + std::to_string(ph) + "x" +
                                        std::to_string(pw) + " of input " + shape_to_string(x.shape()));
            const auto top = static_cast<std::int64_t>(gen.below(static_cast<std::uint64_t>(ph - height + 1)));
            const auto left = static_cast<std::int64_t>(gen.below(static_cast<std::uint64_t>(pw - width + 1)));
            tensor out = xgrad::full({c, height, width}, fill, in.dtype());
            with_data(in, [&](const auto* src) {
                using T = std::remove_const_t<std::remove_pointer_t<decltype(src)>>;
                T* dst = out.data<T>();
                for (std::int64_t ch = 0; ch < c; ++ch)
                    for (std::int64_t r = 0; r < height; ++r)
                    {
                        const std::int64_t sr = top + r - padding; // row in the unpadded input
                        if (sr < 0 || sr >= h)
                            continue;
                        for (std::int64_t q = 0; q < width; ++q)
                        {
                            const std::int64_t sc = left + q - padding;
                            if (sc >= 0 && sc < w)
                                dst[(ch * height + r) * width + q] = src[(ch * h + sr) * w + sc];
                        }
                    }
            });
            return out;
        };
    }

    transform random_horizontal_flip(double p)
    {
        check_probability("random_horizontal_flip", p);
        return [p](const tensor& x, generator& gen) {
            const tensor in = chw(x, "random_horizontal_flip");
            if (!(gen.uniform() < p))
                return in;
            tensor out = copy_of(in);
            const std::int64_t rows = in.size(0) * in.size(1), w = in.size(2);
            with_data(out, [&](auto* d) {
                for (std::int64_t r = 0; r < rows; ++r)
                    std::reverse(d + r * w, d + (r + 1) * w);
            });
            return out;
        };
    }

    transform random_erasing(double p, double scale_lo, double scale_hi, double ratio_lo, double ratio_hi, double value)
    {
        check_probability("random_erasing", p);
        if (!(scale_lo > 0.0 && scale_lo <= scale_hi && scale_hi <= 1.0))
            fail("random_erasing", "the scale must satisfy 0 < lo <= hi <= 1, got [" + std::to_string(scale_lo) + ", " +
                                       std::to_string(scale_hi) + "]");
        if (!(ratio_lo > 0.0 && ratio_lo <= ratio_hi && std::isfinite(ratio_hi)))
            fail("random_erasing", "the ratio must satisfy 0 < lo <= hi, finite, got [" + std::to_string(ratio_lo) +
                                       ", " + std::to_string(ratio_hi) + "]");
        if (!std::isfinite(value))
            fail("random_erasing", "value must be finite, got " + std::to_string(value));
        return [=](const tensor& x, generator& gen) {
            const tensor in = chw(x, "random_erasing");
            // Drawn whatever happens, so that later transforms' draws do not depend on it.
            const bool erase = gen.uniform() < p;
            const std::int64_t c = in.size(0), h = in.size(1), w = in.size(2);
            const double area = static_cast<double>(h * w);
            for (int attempt = 0; attempt < 10; ++attempt)
            {
                const double target = area * (scale_lo + (scale_hi - scale_lo) * gen.uniform());
                const double log_ratio = std::log(ratio_lo) + (std::log(ratio_hi) - std::log(ratio_lo)) * gen.uniform();
                const double ratio = std::exp(log_ratio);
                const auto eh = static_cast<std::int64_t>(std::lround(std::sqrt(target * ratio)));
                const auto ew = static_cast<std::int64_t>(std::lround(std::sqrt(target / ratio)));
                if (eh < 1 || ew < 1 || eh > h || ew > w)
                    continue;
                const auto top = static_cast<std::int64_t>(gen.below(static_cast<std::uint64_t>(h - eh + 1)));
                const auto left = static_cast<std::int64_t>(gen.below(static_cast<std::uint64_t>(w - ew + 1)));
                if (!erase)
                    return in;
                tensor out = copy_of(in);
                with_data(out, [&](auto* d) {
                    using T = std::remove_pointer_t<decltype(d)>;
                    for (std::int64_t ch = 0; ch < c; ++ch)
                        for (std::int64_t r = top; r < top + eh; ++r)
                            std::fill(d + (ch * h + r) * w + left, d + (ch * h + r) * w + left + ew,
                                      static_cast<T>(value));
                });
                return out;
            }
            return in;
        };
    }
}
