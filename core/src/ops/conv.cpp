// unfold2d and fold2d, the two window primitives, and conv2d composed from them.
//
// unfold2d (im2col) and fold2d (col2im) are linear maps and each other's adjoint: unfold2d
// copies every input element into the cols entries of the windows that read it, fold2d adds
// every cols entry back into the element it came from. The gradient of a linear map is its
// adjoint applied to the incoming gradient, so each primitive's backward rule is one call of
// the other, itself a recorded op; that is why gradients of every order exist. pad_value only
// adds a constant at the padded positions, so it does not change unfold2d's gradient.
//
// Both primitives hand the backend kernel the strides of their operands mapped onto the
// kernel's 6-d cols and 4-d image views (backends/common/kernel_list.hpp), so strided inputs (a
// channel slice of an NHWC tensor, a transposed gradient, an expanded scalar) need no copy.
//
// conv2d checks its arguments and hands each group to conv_forward (conv_gemm.cpp), which
// unfolds, multiplies and folds one cache-sized block of images at a time; its gradients are
// its two sibling ops. The composition it fuses, per group with K = KH * KW * (C / groups),
// L = OH * OW:
//   NCHW: per image, [O, K] @ unfold2d(x_n) [K, L] -> [O, L] (+ bias), i.e. [N, O, OH, OW];
//   NHWC: unfold2d(x) [N * L, K] @ weight as [KH, KW, C, O] -> [K, O] -> [N * L, O] (+ bias),
//         which already is [N, OH, OW, O].
// The tests keep that composition, written with unfold2d, matmul and fold2d, as the fused ops'
// oracle. Groups are channel slices (views) whose results are concatenated along the channel
// axis.
#include "xgrad/ops/conv.hpp"

#include <algorithm>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "../detail.hpp"
#include "conv_internal.hpp"
#include "core/src/profiler/record.hpp"
#include "xgrad/autograd.hpp"
#include "xgrad/checked.hpp"
#include "xgrad/errors.hpp"
#include "xgrad/ops/elementwise.hpp"
#include "xgrad/ops/shape.hpp"

namespace xgrad::detail
{
    kernels::window2d_dims dims_of(const shape_type& shape, const window2d& w, bool channels_last,
                                   const std::array<std::int64_t, 2>& out)
    {
        const image_dims im = image_dims_of(shape, channels_last);
        return {im.n,        im.c,         im.h,         im.w,          w.kernel[0],   w.kernel[1], w.stride[0],
                w.stride[1], w.padding[0], w.padding[1], w.dilation[0], w.dilation[1], out[0],      out[1]};
    }

    std::array<std::int64_t, 4> image_strides(const strides_type& s, bool channels_last)
    {
        if (channels_last)
            return {s[0], s[3], s[1], s[2]};
        return {s[0], s[1], s[2], s[3]};
    }

    void window_fail(const char* op, const std::string& what)
    {
        throw xgrad::invalid_argument(std::string(op) + ": " + what);
    }

    std::string pair_to_string(const std::array<std::int64_t, 2>& v)
    {
        return "{" + std::to_string(v[0]) + ", " + std::to_string(v[1]) + "}";
    }

    std::string window_to_string(const window2d& w)
    {
        return "kernel " + pair_to_string(w.kernel) + ", stride " + pair_to_string(w.stride) + ", padding " +
               pair_to_string(w.padding) + ", dilation " + pair_to_string(w.dilation);
    }

    bool channels_last_format(std::string_view data_format, const char* op)
    {
        if (data_format == "NCHW")
            return false;
        if (data_format == "NHWC")
            return true;
        window_fail(op, "data_format must be \"NCHW\" or \"NHWC\", got \"" + std::string(data_format) + "\"");
    }

    void check_image(const tensor& t, const char* arg, const char* op)
    {
        if (!t.defined())
            window_fail(op, std::string(arg) + " is undefined");
        if (!is_floating(t.dtype()))
            window_fail(op, std::string(arg) + " must be floating point, got dtype " + std::string(name(t.dtype())));
        if (t.dim() != 4)
            window_fail(op, std::string(arg) + " must have 4 dimensions ([N, C, H, W] or [N, H, W, C]), got shape " +
                                shape_to_string(t.shape()));
    }

    image_dims image_dims_of(const shape_type& s, bool channels_last)
    {
        if (channels_last)
            return {s[0], s[3], s[1], s[2], 3, 1, 2};
        return {s[0], s[1], s[2], s[3], 1, 2, 3};
    }

    std::array<std::int64_t, 2> checked_output_size(const window2d& w, std::int64_t h, std::int64_t wd, const char* op)
    {
        // Bounding every field keeps all index arithmetic (in + 2 * padding, dilation * kernel,
        // the kernels' offsets) far inside int64.
        constexpr std::int64_t limit = std::numeric_limits<std::int32_t>::max();
        auto check = [&](const std::array<std::int64_t, 2>& v, const char* field, std::int64_t min) {
            for (const std::int64_t e : v)
                if (e < min || e > limit)
                    window_fail(op, std::string(field) + " must be " + (min == 0 ? "in [0, " : "in [1, ") +
                                        std::to_string(limit) + "] in both axes, got " + pair_to_string(v));
        };
        check(w.kernel, "kernel", 1);
        check(w.stride, "stride", 1);
        check(w.padding, "padding", 0);
        check(w.dilation, "dilation", 1);
        const std::array<std::int64_t, 2> in{h, wd};
        if (h < 0 || wd < 0)
            window_fail(op, "input spatial size " + pair_to_string(in) + " is negative");
        if (h > (std::int64_t{1} << 62) || wd > (std::int64_t{1} << 62))
            window_fail(op, "input spatial size " + pair_to_string(in) + " is too large (above 2^62)");
        std::array<std::int64_t, 2> out{};
        for (std::size_t a = 0; a < 2; ++a)
        {
            const std::int64_t span = w.dilation[a] * (w.kernel[a] - 1) + 1;
            const std::int64_t padded = in[a] + 2 * w.padding[a];
            if (padded < span)
                window_fail(op, "the window (" + window_to_string(w) + ") spans " + std::to_string(span) + " along " +
                                    (a == 0 ? "the height" : "the width") + " but the padded input of spatial size " +
                                    pair_to_string(in) + " has only " + std::to_string(padded) +
                                    ": the output would be empty");
            out[a] = (padded - span) / w.stride[a] + 1;
        }
        return out;
    }

    void check_cols_size(const image_dims& im, const window2d& w, const std::array<std::int64_t, 2>& out,
                         const char* op)
    {
        constexpr std::int64_t limit = std::int64_t{1} << 62;
        bool ok = true;
        auto mul = [&](std::int64_t a, std::int64_t b) {
            if (a != 0 && b > limit / a)
            {
                ok = false;
                return limit;
            }
            return a * b;
        };
        const std::int64_t windows = mul(mul(im.n, out[0]), out[1]);
        mul(windows, mul(mul(im.c, w.kernel[0]), w.kernel[1]));
        if (!ok)
            window_fail(op, "unfolding " + std::to_string(im.n) + " image(s) of " + std::to_string(im.c) +
                                " channel(s) with " + window_to_string(w) + " (output size " + pair_to_string(out) +
                                ") would need more than 2^62 entries");
    }
}

namespace xgrad
{
    namespace
    {
        /// The strides of the cols matrix (row stride r, column stride q) in the kernel's
        /// (n, c, kh, kw, oh, ow) order. NCHW rows are (c, kh, kw) and columns (n, oh, ow);
        /// NHWC rows are (n, oh, ow) and columns (kh, kw, c).
        std::array<std::int64_t, 6> cols_strides(std::int64_t r, std::int64_t q, const kernels::window2d_dims& d,
                                                 bool channels_last)
        {
            // Only called for a non-empty cols, where each of these is at most the extent of
            // the whole matrix times one of its strides; checked all the same, since a
            // gradient's cols may come with any strides.
            const char* what = "unfold2d/fold2d: a stride of the cols matrix";
            const auto mul = [what](std::int64_t a, std::int64_t b) { return checked_mul(a, b, what); };
            if (channels_last)
                return {mul(mul(d.oh, d.ow), r), q, mul(mul(d.kw, d.c), q), mul(d.c, q), mul(d.ow, r), r};
            return {mul(mul(d.oh, d.ow), q), mul(mul(d.kh, d.kw), r), mul(d.kw, r), r, mul(d.ow, q), q};
        }

        shape_type cols_shape(const kernels::window2d_dims& d, bool channels_last)
        {
            const std::int64_t rows = d.n * d.oh * d.ow, taps = d.c * d.kh * d.kw;
            return channels_last ? shape_type{rows, taps} : shape_type{taps, rows};
        }

        tensor fold_checked(const tensor& cols, const shape_type& input_shape, const window2d& w, bool channels_last,
                            const std::array<std::int64_t, 2>& out);

        /// unfold2d on checked arguments.
        tensor unfold_checked(const tensor& x, const window2d& w, bool channels_last, double pad_value,
                              const std::array<std::int64_t, 2>& out)
        {
            const kernels::window2d_dims d = detail::dims_of(x.shape(), w, channels_last, out);
            tensor cols = detail::empty(cols_shape(d, channels_last), x.dtype(), x.device());
            // An empty cols has nothing to write: the kernel is not called, so that neither its
            // scratch (sized by the kernel window) nor the cols strides (products of extents
            // that need not fit in int64 when a zero extent makes the matrix empty) are computed.
            if (cols.numel() != 0)
            {
                const auto cs = cols_strides(cols.strides()[0], cols.strides()[1], d, channels_last);
                const auto xs = detail::image_strides(x.strides(), channels_last);
                detail::backend_for(x.device())
                    .unfold2d(cols.data_ptr(), cs.data(), x.data_ptr(), xs.data(), x.dtype(), d, pad_value);
            }
            record("unfold2d", {x}, {cols},
                   [shape = x.shape(), w, channels_last, out](function_node&, const std::vector<tensor>& g) {
                       return std::vector<tensor>{fold_checked(g[0], shape, w, channels_last, out)};
                   });
            return cols;
        }

        /// fold2d on checked arguments (cols has the shape unfold2d gives for input_shape).
        tensor fold_checked(const tensor& cols, const shape_type& input_shape, const window2d& w, bool channels_last,
                            const std::array<std::int64_t, 2>& out)
        {
            const kernels::window2d_dims d = detail::dims_of(input_shape, w, channels_last, out);
            tensor x = detail::empty(input_shape, cols.dtype(), cols.device());
            // An empty x (say a zero-width input that padding kept windows for) has nothing to
            // sum into, and the kernel is not called. A non-empty x has a non-empty cols (every
            // extent of both is then at least 1).
            if (x.numel() != 0)
            {
                const auto cs = cols_strides(cols.strides()[0], cols.strides()[1], d, channels_last);
                const auto xs = detail::image_strides(x.strides(), channels_last);
                detail::backend_for(cols.device())
                    .fold2d(x.data_ptr(), xs.data(), cols.data_ptr(), cs.data(), cols.dtype(), d);
            }
            record("fold2d", {cols}, {x}, [w, channels_last, out](function_node&, const std::vector<tensor>& g) {
                return std::vector<tensor>{unfold_checked(g[0], w, channels_last, 0.0, out)};
            });
            return x;
        }

        /// A group's weight [O, C, KH, KW] as the GEMM's matrix, with recorded ops (its gradient
        /// flows back through them): NHWC multiplies by rows ordered (kh, kw, c) like its cols
        /// columns, [K, O]; NCHW by [O, K].
        tensor weight_matrix(const tensor& weight, bool channels_last)
        {
            const std::int64_t o = weight.shape()[0];
            const std::int64_t k = weight.shape()[1] * weight.shape()[2] * weight.shape()[3];
            return channels_last ? reshape(permute(weight, {2, 3, 1, 0}), {k, o}) : reshape(weight, {o, k});
        }

        /// conv2d of one group on checked arguments: x [N, C, H, W] or [N, H, W, C] (possibly a
        /// channel slice), weight [O, C, KH, KW], bias [O] or undefined. The weight is viewed as
        /// the GEMM's matrix with recorded ops, so its gradient flows back through them.
        tensor conv_group(const tensor& x, const tensor& weight, const tensor& bias, const window2d& w,
                          bool channels_last, const std::array<std::int64_t, 2>& out)
        {
            return detail::conv_forward(x, weight_matrix(weight, channels_last), bias,
                                        detail::conv_geometry{w, channels_last, out});
        }

        void check_operand(const tensor& t, const tensor& x, const char* arg, const char* op)
        {
            if (!is_floating(t.dtype()))
                detail::window_fail(op, std::string(arg) + " must be floating point, got dtype " +
                                            std::string(name(t.dtype())));
            if (t.dtype() != x.dtype() || t.device() != x.device())
                detail::window_fail(op, std::string(arg) + " has dtype " + std::string(name(t.dtype())) + " on " +
                                            to_string(t.device()) + " but x has dtype " + std::string(name(x.dtype())) +
                                            " on " + to_string(x.device()) +
                                            " (all operands must share dtype and device)");
        }

        /// The checks conv2d and conv_transpose2d share: x an image (checked before), weight a
        /// defined 4-D tensor of x's dtype and device with a non-empty kernel, bias undefined or
        /// of x's dtype and device, groups >= 1. `layout` names the weight's dimensions.
        void check_weight(const tensor& x, const tensor& weight, const tensor& bias, std::int64_t groups,
                          const char* layout, const char* op)
        {
            if (!weight.defined())
                detail::window_fail(op, "weight is undefined");
            check_operand(weight, x, "weight", op);
            if (weight.dim() != 4)
                detail::window_fail(op, std::string("weight must have 4 dimensions ") + layout + ", got shape " +
                                            shape_to_string(weight.shape()));
            if (weight.shape()[2] < 1 || weight.shape()[3] < 1)
                detail::window_fail(op, "weight of shape " + shape_to_string(weight.shape()) +
                                            " has an empty kernel (KH and KW must be >= 1)");
            if (bias.defined())
                check_operand(bias, x, "bias", op);
            if (groups < 1)
                detail::window_fail(op, "groups must be >= 1, got " + std::to_string(groups));
        }
    }

    std::array<std::int64_t, 2> window_output_size(const window2d& w, std::int64_t h, std::int64_t wd)
    {
        return detail::checked_output_size(w, h, wd, "window_output_size");
    }

    tensor unfold2d(const tensor& x, const window2d& w, std::string_view data_format, double pad_value)
    {
        XGRAD_PROFILE_OP("unfold2d");
        const char* op = "unfold2d";
        const bool cl = detail::channels_last_format(data_format, op);
        detail::check_image(x, "x", op);
        const detail::image_dims im = detail::image_dims_of(x.shape(), cl);
        const auto out = detail::checked_output_size(w, im.h, im.w, op);
        detail::check_cols_size(im, w, out, op);
        return unfold_checked(x, w, cl, pad_value, out);
    }

    tensor fold2d(const tensor& cols, const shape_type& input_shape, const window2d& w, std::string_view data_format)
    {
        XGRAD_PROFILE_OP("fold2d");
        const char* op = "fold2d";
        const bool cl = detail::channels_last_format(data_format, op);
        if (!cols.defined())
            detail::window_fail(op, "cols is undefined");
        if (!is_floating(cols.dtype()))
            detail::window_fail(op, "cols must be floating point, got dtype " + std::string(name(cols.dtype())));
        if (input_shape.size() != 4)
            detail::window_fail(op, "input_shape must have 4 entries ([N, C, H, W] or [N, H, W, C]), got " +
                                        shape_to_string(input_shape));
        for (const std::int64_t e : input_shape)
            if (e < 0)
                detail::window_fail(op, "input_shape " + shape_to_string(input_shape) + " has a negative extent");
        numel_of(input_shape); // rejects sizes that overflow, naming the shape
        const detail::image_dims im = detail::image_dims_of(input_shape, cl);
        const auto out = detail::checked_output_size(w, im.h, im.w, op);
        detail::check_cols_size(im, w, out, op);
        const shape_type want = cols_shape(detail::dims_of(input_shape, w, cl, out), cl);
        if (cols.shape() != want)
            detail::window_fail(op, "cols has shape " + shape_to_string(cols.shape()) + " but unfold2d of " +
                                        std::string(data_format) + " input_shape " + shape_to_string(input_shape) +
                                        " with " + detail::window_to_string(w) + " gives " + shape_to_string(want));
        return fold_checked(cols, input_shape, w, cl, out);
    }

    tensor conv2d(const tensor& x, const tensor& weight, const tensor& bias, const conv2d_params& p,
                  std::string_view data_format)
    {
        XGRAD_PROFILE_OP("conv2d");
        const char* op = "conv2d";
        const bool cl = detail::channels_last_format(data_format, op);
        detail::check_image(x, "x", op);
        check_weight(x, weight, bias, p.groups, "[O, C / groups, KH, KW]", op);
        const detail::image_dims im = detail::image_dims_of(x.shape(), cl);
        const std::int64_t groups = p.groups, o = weight.shape()[0];
        if (im.c % groups != 0)
            detail::window_fail(op, "x has " + std::to_string(im.c) + " channels (shape " + shape_to_string(x.shape()) +
                                        ", " + std::string(data_format) +
                                        "), not divisible by groups = " + std::to_string(groups));
        if (o % groups != 0)
            detail::window_fail(op, "weight has " + std::to_string(o) + " output channels (shape " +
                                        shape_to_string(weight.shape()) +
                                        "), not divisible by groups = " + std::to_string(groups));
        if (weight.shape()[1] != im.c / groups)
            detail::window_fail(op, "weight of shape " + shape_to_string(weight.shape()) + " expects " +
                                        std::to_string(weight.shape()[1]) +
                                        " input channels per group, but x of shape " + shape_to_string(x.shape()) +
                                        " (" + std::string(data_format) + ") has " + std::to_string(im.c) +
                                        " channels in " + std::to_string(groups) + " group(s), i.e. " +
                                        std::to_string(im.c / groups) + " per group");
        if (bias.defined() && bias.shape() != shape_type{o})
            detail::window_fail(op, "bias must have shape [" + std::to_string(o) +
                                        "] (one per output channel of weight " + shape_to_string(weight.shape()) +
                                        "), got " + shape_to_string(bias.shape()));
        const window2d w{{weight.shape()[2], weight.shape()[3]}, p.stride, p.padding, p.dilation};
        const auto out = detail::checked_output_size(w, im.h, im.w, op);
        detail::check_cols_size(im, w, out, op);

        if (groups == 1)
            return conv_group(x, weight, bias, w, cl, out);
        const std::int64_t cg = im.c / groups, og = o / groups;
        std::vector<tensor> parts;
        parts.reserve(static_cast<std::size_t>(groups));
        for (std::int64_t g = 0; g < groups; ++g)
        {
            const tensor xg = slice(x, im.c_axis, g * cg, (g + 1) * cg);
            const tensor wg = slice(weight, 0, g * og, (g + 1) * og);
            const tensor bg = bias.defined() ? slice(bias, 0, g * og, (g + 1) * og) : tensor{};
            parts.push_back(conv_group(xg, wg, bg, w, cl, out));
        }
        return concat(parts, im.c_axis);
    }

    tensor conv_transpose2d(const tensor& x, const tensor& weight, const tensor& bias, const conv_transpose2d_params& p,
                            std::string_view data_format)
    {
        XGRAD_PROFILE_OP("conv_transpose2d");
        const char* op = "conv_transpose2d";
        const bool cl = detail::channels_last_format(data_format, op);
        detail::check_image(x, "x", op);
        check_weight(x, weight, bias, p.groups, "[C_in, C_out / groups, KH, KW]", op);
        const detail::image_dims im = detail::image_dims_of(x.shape(), cl);
        const std::int64_t groups = p.groups;
        if (weight.shape()[0] != im.c)
            detail::window_fail(op, "weight of shape " + shape_to_string(weight.shape()) + " expects " +
                                        std::to_string(weight.shape()[0]) + " input channels, but x of shape " +
                                        shape_to_string(x.shape()) + " (" + std::string(data_format) + ") has " +
                                        std::to_string(im.c));
        if (im.c % groups != 0)
            detail::window_fail(op, "x has " + std::to_string(im.c) + " channels (shape " + shape_to_string(x.shape()) +
                                        "), not divisible by groups = " + std::to_string(groups));
        const std::int64_t cg = weight.shape()[1], c_out = checked_mul(cg, groups, op);
        if (bias.defined() && bias.shape() != shape_type{c_out})
            detail::window_fail(op, "bias must have shape [" + std::to_string(c_out) +
                                        "] (one per output channel: weight " + shape_to_string(weight.shape()) +
                                        " with groups = " + std::to_string(groups) + "), got " +
                                        shape_to_string(bias.shape()));
        const window2d w{{weight.shape()[2], weight.shape()[3]}, p.stride, p.padding, p.dilation};
        // The window's fields get conv2d's checks (each in [0 or 1, 2^31 - 1]) on an input of
        // the largest allowed size, which no valid window empties; the sums below then stay far
        // inside int64.
        constexpr std::int64_t largest = std::int64_t{1} << 62;
        detail::checked_output_size(w, largest, largest, op);
        std::array<std::int64_t, 2> full{};
        const std::array<std::int64_t, 2> in{im.h, im.w};
        for (std::size_t a = 0; a < 2; ++a)
        {
            const std::int64_t op_pad = p.output_padding[a];
            if (op_pad < 0 || op_pad >= std::max(w.stride[a], w.dilation[a]))
                detail::window_fail(op, "output_padding must be in [0, max(stride, dilation)) in each axis, got " +
                                            detail::pair_to_string(p.output_padding) + " with stride " +
                                            detail::pair_to_string(w.stride) + " and dilation " +
                                            detail::pair_to_string(w.dilation));
            if (in[a] < 1)
                detail::window_fail(op, "x of shape " + shape_to_string(x.shape()) + " has an empty spatial axis");
            // (in - 1) * stride - 2 * padding + dilation * (kernel - 1) + output_padding + 1
            const std::int64_t grown = checked_add(checked_mul(in[a] - 1, w.stride[a], op),
                                                   w.dilation[a] * (w.kernel[a] - 1) + op_pad + 1, op);
            full[a] = grown - 2 * w.padding[a];
            if (full[a] < 1)
                detail::window_fail(op, "the output would be empty: x of shape " + shape_to_string(x.shape()) +
                                            " with " + detail::window_to_string(w) + " and output_padding " +
                                            detail::pair_to_string(p.output_padding) + " gives spatial size " +
                                            std::to_string(full[a]) + " in axis " + std::to_string(a));
        }
        const shape_type y_shape = cl ? shape_type{im.n, full[0], full[1], c_out}
                                      : shape_type{im.n, c_out, full[0], full[1]};
        numel_of(y_shape); // rejects sizes that overflow, naming the shape
        // The conv2d of y's shape gives back x's spatial size, plus one more row (column) per
        // stride that output_padding adds beyond the stride (possible where dilation > stride):
        // those rows of y receive no input, so x is padded with zeros there.
        const auto conv_out = detail::checked_output_size(w, full[0], full[1], op);
        detail::check_cols_size(detail::image_dims_of(y_shape, cl), w, conv_out, op);
        tensor xin = x;
        if (conv_out[0] != im.h || conv_out[1] != im.w)
        {
            std::vector<std::pair<std::int64_t, std::int64_t>> widths(4, {0, 0});
            widths[static_cast<std::size_t>(im.h_axis)] = {0, conv_out[0] - im.h};
            widths[static_cast<std::size_t>(im.w_axis)] = {0, conv_out[1] - im.w};
            xin = pad(x, widths);
        }
        const std::int64_t og = im.c / groups;
        std::vector<tensor> parts;
        parts.reserve(static_cast<std::size_t>(groups));
        for (std::int64_t g = 0; g < groups; ++g)
        {
            // The group's conv2d has weight [og, cg, KH, KW]: x's channels are its outputs.
            const tensor xg = groups == 1 ? xin : slice(xin, im.c_axis, g * og, (g + 1) * og);
            const tensor wg = groups == 1 ? weight : slice(weight, 0, g * og, (g + 1) * og);
            const shape_type part_shape = cl ? shape_type{im.n, full[0], full[1], cg}
                                             : shape_type{im.n, cg, full[0], full[1]};
            parts.push_back(
                detail::conv_input_grad(xg, weight_matrix(wg, cl), part_shape, detail::conv_geometry{w, cl, conv_out}));
        }
        tensor y = groups == 1 ? parts[0] : concat(parts, im.c_axis);
        if (bias.defined())
            y = add(y, cl ? bias : reshape(bias, {c_out, 1, 1}));
        return y;
    }
}
