// upsample: each spatial axis in turn is gathered (nearest) or blended from two gathers
// (bilinear). The source indices of one axis never decrease along the output, so a gather is a
// concatenation of runs, each one input row (column) expanded to its count: views and one copy,
// with no index tensor the size of the output and no dense interpolation matrix (whose zero
// weights would spread a NaN or infinity to every output of its row, 0 * inf being NaN).
#include "xgrad/ops/upsample.hpp"

#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "../detail.hpp"
#include "core/src/profiler/record.hpp"
#include "xgrad/checked.hpp"
#include "xgrad/errors.hpp"
#include "xgrad/factories.hpp"
#include "xgrad/ops/elementwise.hpp"
#include "xgrad/ops/shape.hpp"

namespace xgrad
{
    namespace
    {
        [[noreturn]] void fail(const std::string& what) { throw xgrad::invalid_argument("upsample: " + what); }

        /// Rows of x along `axis`, in the given non-decreasing order of source indices.
        tensor gather_runs(const tensor& x, std::int64_t axis, const std::vector<std::int64_t>& src)
        {
            const std::int64_t in = x.size(axis), out = static_cast<std::int64_t>(src.size());
            // A whole-number upscale (every row repeated k times) is one expand of a view.
            if (out % in == 0)
            {
                const std::int64_t k = out / in;
                bool uniform = true;
                for (std::int64_t o = 0; o < out && uniform; ++o)
                    uniform = src[static_cast<std::size_t>(o)] == o / k;
                if (uniform)
                {
                    if (k == 1)
                        return x;
                    shape_type split = x.shape(), grown = x.shape(), merged = x.shape();
                    split.insert(split.begin() + axis + 1, 1);
                    grown.insert(grown.begin() + axis + 1, k);
                    merged[static_cast<std::size_t>(axis)] = out;
                    return reshape(expand(reshape(x, split), grown), merged);
                }
            }
            std::vector<tensor> runs;
            for (std::size_t o = 0; o < src.size();)
            {
                std::size_t end = o;
                while (end < src.size() && src[end] == src[o])
                    ++end;
                const tensor row = slice(x, axis, src[o], src[o] + 1);
                shape_type grown = x.shape();
                grown[static_cast<std::size_t>(axis)] = static_cast<std::int64_t>(end - o);
                runs.push_back(end - o == 1 ? row : expand(row, grown));
                o = end;
            }
            return runs.size() == 1 ? runs[0] : concat(runs, axis);
        }

        /// PyTorch's scale for an axis: 1 / factor when a factor was given, in / out otherwise.
        double axis_scale(std::int64_t in, std::int64_t out, const std::optional<double>& factor)
        {
            return factor ? 1.0 / *factor : static_cast<double>(in) / static_cast<double>(out);
        }

        tensor nearest_axis(const tensor& x, std::int64_t axis, std::int64_t out, const std::optional<double>& factor)
        {
            const std::int64_t in = x.size(axis);
            // In float32, as PyTorch's kernel: the product decides which pixel is read.
            const float scale = static_cast<float>(axis_scale(in, out, factor));
            std::vector<std::int64_t> src(static_cast<std::size_t>(out));
            for (std::int64_t o = 0; o < out; ++o)
                src[static_cast<std::size_t>(o)] =
                    std::min(static_cast<std::int64_t>(std::floor(static_cast<float>(o) * scale)), in - 1);
            return gather_runs(x, axis, src);
        }

        tensor bilinear_axis(const tensor& x, std::int64_t axis, std::int64_t out, const std::optional<double>& factor,
                             bool align_corners)
        {
            const std::int64_t in = x.size(axis);
            std::vector<std::int64_t> lo(static_cast<std::size_t>(out)), hi(lo.size());
            std::vector<double> w_hi(lo.size()), w_lo(lo.size());
            const double scale = align_corners
                                     ? (out > 1 ? static_cast<double>(in - 1) / static_cast<double>(out - 1) : 0.0)
                                     : axis_scale(in, out, factor);
            for (std::int64_t o = 0; o < out; ++o)
            {
                const double src = align_corners ? scale * static_cast<double>(o)
                                                 : std::max(scale * (static_cast<double>(o) + 0.5) - 0.5, 0.0);
                const std::int64_t i = std::min(static_cast<std::int64_t>(src), in - 1);
                const auto u = static_cast<std::size_t>(o);
                lo[u] = i;
                hi[u] = i < in - 1 ? i + 1 : i;
                w_hi[u] = src - static_cast<double>(i);
                w_lo[u] = 1.0 - w_hi[u];
            }
            // The weights broadcast along `axis`: shape [out, 1, ...] up to the last axis.
            shape_type wshape(static_cast<std::size_t>(x.dim() - axis), 1);
            wshape[0] = out;
            const tensor a = from_host(w_lo.data(), wshape, dtype::float64, x.device()).to(x.dtype());
            const tensor b = from_host(w_hi.data(), wshape, dtype::float64, x.device()).to(x.dtype());
            return add(mul(gather_runs(x, axis, lo), a), mul(gather_runs(x, axis, hi), b));
        }

        std::int64_t output_extent(std::int64_t in, double factor, const char* axis)
        {
            if (!(factor > 0.0) || !std::isfinite(factor))
                fail(std::string("scale_factor must be positive and finite, got ") + std::to_string(factor) +
                     " for the " + axis);
            const double out = std::floor(static_cast<double>(in) * factor);
            if (out < 1.0 || out > static_cast<double>(std::int64_t{1} << 40))
                fail(std::string("scale_factor ") + std::to_string(factor) + " gives " + std::to_string(out) +
                     " output elements along the " + axis + " from " + std::to_string(in) + " (must be in [1, 2^40])");
            return static_cast<std::int64_t>(out);
        }
    }

    tensor upsample(const tensor& x, const upsample_params& p, std::string_view data_format)
    {
        XGRAD_PROFILE_OP("upsample");
        if (!x.defined())
            fail("x is undefined");
        detail::check_floating(x, "upsample");
        if (x.dim() != 4)
            fail("x must have 4 dimensions ([N, C, H, W] or [N, H, W, C]), got shape " + shape_to_string(x.shape()));
        if (data_format != "NCHW" && data_format != "NHWC")
            fail("data_format must be \"NCHW\" or \"NHWC\", got \"" + std::string(data_format) + "\"");
        const bool nearest = p.mode == "nearest";
        if (!nearest && p.mode != "bilinear")
            fail("mode must be \"nearest\" or \"bilinear\", got \"" + p.mode + "\"");
        if (nearest && p.align_corners)
            fail("align_corners applies to mode \"bilinear\" only");
        if (p.size.has_value() == p.scale_factor.has_value())
            fail("give exactly one of size and scale_factor");
        const std::int64_t h_axis = data_format == "NCHW" ? 2 : 1;
        const std::array<std::int64_t, 2> in{x.size(h_axis), x.size(h_axis + 1)};
        if (in[0] < 1 || in[1] < 1)
            fail("x of shape " + shape_to_string(x.shape()) + " has an empty spatial axis");
        std::array<std::int64_t, 2> out{};
        if (p.size)
        {
            out = *p.size;
            if (out[0] < 1 || out[1] < 1 || out[0] > (std::int64_t{1} << 40) || out[1] > (std::int64_t{1} << 40))
                fail("size must be in [1, 2^40] in both axes, got {" + std::to_string(out[0]) + ", " +
                     std::to_string(out[1]) + "}");
        }
        else
        {
            out[0] = output_extent(in[0], (*p.scale_factor)[0], "height");
            out[1] = output_extent(in[1], (*p.scale_factor)[1], "width");
        }
        shape_type y_shape = x.shape();
        y_shape[static_cast<std::size_t>(h_axis)] = out[0];
        y_shape[static_cast<std::size_t>(h_axis + 1)] = out[1];
        numel_of(y_shape); // rejects sizes that overflow, naming the shape

        const dtype dt = x.dtype();
        const bool narrow = dt == dtype::float16 || dt == dtype::bfloat16;
        tensor y = narrow ? cast(x, dtype::float32) : x;
        std::optional<double> fh, fw;
        if (p.scale_factor)
        {
            fh = (*p.scale_factor)[0];
            fw = (*p.scale_factor)[1];
        }
        if (nearest)
            y = nearest_axis(nearest_axis(y, h_axis + 1, out[1], fw), h_axis, out[0], fh);
        else
            y = bilinear_axis(bilinear_axis(y, h_axis + 1, out[1], fw, p.align_corners), h_axis, out[0], fh,
                              p.align_corners);
        return narrow ? cast(y, dt) : y;
    }
}
