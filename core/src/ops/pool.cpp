// Pooling. avg_pool2d and adaptive_avg_pool2d are composed from unfold2d, reductions and views
// and record no node of their own, so their gradients of every order are those ops'. max_pool2d
// records one: take's (below).
//
// With K = KH * KW taps and L = OH * OW windows per image, unfold2d gives
//   NCHW: cols [C * K, N * L], viewed as [C, K, N * L] -> reduce axis 1 -> [C, N * L]
//         -> [C, N, OH, OW] -> permuted to [N, C, OH, OW];
//   NHWC: cols [N * L, K * C], viewed as [N * L, K, C] -> reduce axis 1 -> [N * L, C]
//         -> [N, OH, OW, C].
// max_pool2d picks each window's maximum and its position with one kernel pass (padding never
// wins) and records the result as take(x, positions), whose gradient is put_add (and put_add's
// is take); over windows that do not overlap, the kernel max_pool2d_grad writes put_add's
// result in one pass over the input. The padding rule (at most half the kernel) plus an
// explicit check that every window reaches the input keep a window from being all padding. avg_pool2d with count_include_pad =
// false divides the window sums by the number of taps inside the input, a constant map
// obtained by unfolding ones (computed without recording). adaptive_avg_pool2d is avg_pool2d
// when the cells tile the input evenly; otherwise it averages each axis separately, cell by
// cell (a mean over a rectangle is the mean over one axis of the means over the other).
#include "xgrad/ops/pool.hpp"

#include <algorithm>
#include <limits>
#include <string>
#include <vector>

#include "../detail.hpp"
#include "../dispatch.hpp"
#include "conv_internal.hpp"
#include "core/src/profiler/record.hpp"
#include "xgrad/autograd.hpp"
#include "xgrad/checked.hpp"
#include "xgrad/factories.hpp"
#include "xgrad/ops/elementwise.hpp"
#include "xgrad/ops/index.hpp"
#include "xgrad/ops/reduce.hpp"
#include "xgrad/ops/shape.hpp"

namespace xgrad
{
    namespace
    {
        struct pool_setup
        {
            window2d window;
            bool channels_last = false;
            detail::image_dims im;
            std::array<std::int64_t, 2> out{};
        };

        /// The checks every pool runs before touching data (see pool.hpp).
        pool_setup check_pool(const tensor& x, const pool2d_params& p, std::string_view data_format, const char* op)
        {
            pool_setup s;
            s.channels_last = detail::channels_last_format(data_format, op);
            detail::check_image(x, "x", op);
            s.im = detail::image_dims_of(x.shape(), s.channels_last);
            s.window = window2d{p.kernel, p.stride.value_or(p.kernel), p.padding, p.dilation};
            s.out = detail::checked_output_size(s.window, s.im.h, s.im.w, op);
            detail::check_cols_size(s.im, s.window, s.out, op);
            for (std::size_t a = 0; a < 2; ++a)
                if (2 * p.padding[a] > p.kernel[a])
                    detail::window_fail(op, "padding " + detail::pair_to_string(p.padding) +
                                                " must be at most half the kernel " + detail::pair_to_string(p.kernel) +
                                                " in both axes");
            // With dilation (or an empty input) a window can fall entirely in padding even so.
            // Window o reads positions first + k * dilation, first = o * stride - padding; the
            // first tap at or after position 0 must exist and lie before the end. Two windows
            // per axis decide it, so the check costs O(1) whatever the extents:
            // - a window with first >= 0 reaches the input iff first < in, and first grows with
            //   o, so the last window is the one to test;
            // - a window with first < 0 has -first <= padding <= kernel / 2, so its first tap at
            //   or after 0, k = ceil(-first / dilation) <= -first, exists (k < kernel), at a
            //   position below dilation; that is inside when in >= dilation. When in <
            //   dilation, a non-empty output (in + 2 * padding >= dilation * (kernel - 1) + 1)
            //   with 2 * padding <= kernel gives in >= (dilation - 1) * (kernel - 1), hence
            //   kernel <= 2 and padding <= 1 (or in = 0, where window 0 fails): only window 0
            //   has first < 0.
            const std::array<std::int64_t, 2> in{s.im.h, s.im.w};
            for (std::size_t a = 0; a < 2; ++a)
            {
                const window2d& w = s.window;
                for (const std::int64_t o : {std::int64_t{0}, s.out[a] - 1})
                {
                    const std::int64_t first = o * w.stride[a] - w.padding[a];
                    const std::int64_t k = first >= 0 ? 0 : (w.dilation[a] - 1 - first) / w.dilation[a];
                    const bool reaches = k < w.kernel[a] && first + k * w.dilation[a] < in[a];
                    if (!reaches)
                        detail::window_fail(op, "window " + std::to_string(o) + " along the " +
                                                    (a == 0 ? "height" : "width") + " (" + detail::window_to_string(w) +
                                                    ") lies entirely in the padding of "
                                                    "an input of spatial size " +
                                                    detail::pair_to_string(in));
                }
            }
            return s;
        }

        /// cols viewed with the K taps of a window on axis 1 (see the file comment).
        tensor taps_view(const tensor& cols, const pool_setup& s)
        {
            const std::int64_t k = s.window.kernel[0] * s.window.kernel[1];
            const std::int64_t l = s.im.n * s.out[0] * s.out[1];
            return s.channels_last ? reshape(cols, {l, k, s.im.c}) : reshape(cols, {s.im.c, k, l});
        }

        /// A per-window [C, N * L] (NCHW) or [N * L, C] (NHWC) result in the image layout.
        tensor to_image(const tensor& r, const pool_setup& s)
        {
            if (s.channels_last)
                return reshape(r, {s.im.n, s.out[0], s.out[1], s.im.c});
            return contiguous(permute(reshape(r, {s.im.c, s.im.n, s.out[0], s.out[1]}), {1, 0, 2, 3}));
        }

        /// The number of taps of each window that fall inside the input, shaped to broadcast
        /// against [C, N, OH, OW] (NCHW) or [N, OH, OW, C] (NHWC). Not recorded.
        tensor inside_count(const tensor& x, const pool_setup& s)
        {
            no_grad guard;
            const bool cl = s.channels_last;
            const tensor one = ones(cl ? shape_type{1, s.im.h, s.im.w, 1} : shape_type{1, 1, s.im.h, s.im.w}, x.dtype(),
                                    x.device());
            const tensor cols = unfold2d(one, s.window, cl ? "NHWC" : "NCHW"); // [L, K] or [K, L]
            const tensor counts = sum(cols, {cl ? 1 : 0});
            return cl ? reshape(counts, {s.out[0], s.out[1], 1}) : reshape(counts, {s.out[0], s.out[1]});
        }

        /// Mean over axis `dim` of each of the `o` adaptive cells of an axis of extent n, in a
        /// fixed number of ops whatever o is: the axis is moved last and a zero appended to it;
        /// each cell gathers (take) its elements, at most L of them, the shorter cells padded
        /// with positions of that zero; the sums over L are divided by the cell lengths. The
        /// positions number R * o * L for R rows of the other axes, and L <= n / o + 2, so the
        /// scratch is of the order of the input plus the output.
        tensor adaptive_axis(const tensor& x, std::int64_t dim, std::int64_t n, std::int64_t o)
        {
            if (n == o)
                return x;
            const char* what = "adaptive_avg_pool2d: the cells along an axis";
            std::vector<std::int64_t> first(static_cast<std::size_t>(o)), length(first.size());
            std::int64_t widest = 0;
            for (std::int64_t i = 0; i < o; ++i)
            {
                const std::int64_t b = checked_mul(i, n, what) / o;
                const std::int64_t e = checked_add(checked_mul(i + 1, n, what), o - 1, what) / o;
                first[static_cast<std::size_t>(i)] = b;
                length[static_cast<std::size_t>(i)] = e - b;
                widest = std::max(widest, e - b);
            }
            std::vector<std::int64_t> to_last, back(static_cast<std::size_t>(x.dim()));
            for (std::int64_t k = 0; k < x.dim(); ++k)
                if (k != dim)
                    to_last.push_back(k);
            to_last.push_back(dim);
            for (std::size_t k = 0; k < to_last.size(); ++k)
                back[static_cast<std::size_t>(to_last[k])] = static_cast<std::int64_t>(k);
            const tensor xt = permute(x, to_last);
            shape_type rows_shape(xt.shape().begin(), xt.shape().end() - 1), one = rows_shape;
            one.push_back(1);
            const tensor padded = concat({xt, zeros(one, x.dtype(), x.device())}, -1); // [..., n + 1]
            const std::int64_t rows = numel_of(rows_shape);
            const std::int64_t count = checked_product({rows, o, widest}, what);
            std::vector<std::int64_t> pos(checked_bytes(count, sizeof(std::int64_t), what) / sizeof(std::int64_t));
            std::size_t at = 0;
            for (std::int64_t r = 0; r < rows; ++r)
                for (std::size_t i = 0; i < first.size(); ++i)
                    for (std::int64_t j = 0; j < widest; ++j)
                        pos[at++] = r * (n + 1) + (j < length[i] ? first[i] + j : n);
            const tensor idx = from_host(pos.data(), {rows, o, widest}, dtype::int64, x.device());
            std::vector<double> lengths(length.begin(), length.end());
            const tensor divisor = detail::raw_cast(from_host(lengths.data(), {o}, dtype::float64, x.device()),
                                                    x.dtype());
            const tensor means = div(sum(take(padded, idx), {2}), divisor); // [rows, o]
            shape_type out_shape = rows_shape;
            out_shape.push_back(o);
            return contiguous(permute(reshape(means, out_shape), back));
        }
    }

    namespace
    {
        /// put_add(g, idx, shape) for max pooling over disjoint windows d, idx as max_pool2d
        /// wrote it for a contiguous x of `shape` (its values and bits), written by the kernel
        /// max_pool2d_grad in one pass over the input instead of a zero fill and a scatter.
        /// Linear in g with put_add's matrix, so its gradient is put_add's, take. relu_y: null,
        /// or the pooled output of a ReLU-fused forward (contiguous, idx's shape), whose mask
        /// y > 0 the kernel applies to g as it reads it (and the gradient to take's result).
        tensor windows_grad(const tensor& g, const tensor& idx, const shape_type& shape, bool channels_last,
                            const kernels::window2d_dims& d, const tensor& relu_y)
        {
            XGRAD_PROFILE_OP("max_pool2d_grad");
            // A g that arrives as a view (the classifier's flatten in channels-first order, over
            // channels-last activations) is copied once: the kernel's fast loops want its
            // channels where dx has them, and the copy costs far less than a strided walk.
            const tensor gc = detail::raw_contiguous(g);
            tensor dx = detail::empty(shape, g.dtype(), g.device());
            const auto xs = detail::image_strides(dx.strides(), channels_last);
            const auto gs = detail::image_strides(gc.strides(), channels_last);
            const auto is = detail::image_strides(idx.strides(), channels_last);
            detail::backend_for(g.device())
                .max_pool2d_grad(dx.data_ptr(), xs.data(), gc.data_ptr(), gs.data(), idx.data<std::int64_t>(),
                                 is.data(), relu_y.defined() ? relu_y.data_ptr() : nullptr, g.dtype(), d);
            record("max_pool2d_grad", {g}, {dx},
                   [idx, yd = relu_y.defined() ? relu_y.detach() : tensor()](function_node&,
                                                                             const std::vector<tensor>& gg) {
                       const tensor t = take(gg[0], idx);
                       if (!yd.defined())
                           return std::vector<tensor>{t};
                       const tensor zero = scalar_like(yd, 0.0);
                       return std::vector<tensor>{where(gt(yd, zero), t, zero)};
                   });
            return dx;
        }
    }

    void detail::max_pool_check(const tensor& x, const pool2d_params& p, std::string_view data_format, const char* op)
    {
        (void)check_pool(x, p, data_format, op);
    }

    detail::max_pool_picked detail::max_pool_pick(const tensor& x, const pool2d_params& p, std::string_view data_format,
                                                  const char* op)
    {
        const pool_setup s = check_pool(x, p, data_format, op);
        // Which element of each window is its maximum is a constant of the forward pass; the
        // pooled value is then a gather, take(x, idx), linear in x, whose gradient is the
        // scatter put_add (and whose second order is take again). One kernel pass picks the
        // positions and writes the maxima, with no window copies and no tie bookkeeping in the
        // backward.
        const tensor xc = detail::raw_contiguous(x);
        const shape_type out_shape = s.channels_last ? shape_type{s.im.n, s.out[0], s.out[1], s.im.c}
                                                     : shape_type{s.im.n, s.im.c, s.out[0], s.out[1]};
        max_pool_picked r;
        max_pool_picks& k = r.picks;
        k.idx = detail::empty(out_shape, dtype::int64, x.device());
        r.out = detail::empty(out_shape, x.dtype(), x.device());
        k.x_shape = xc.shape();
        k.channels_last = s.channels_last;
        k.d = detail::dims_of(x.shape(), s.window, s.channels_last, s.out);
        // No window, no kernel call: its per-row and per-column scratch is sized by the output
        // extents, which an empty batch or channel axis leaves unbounded.
        if (k.idx.numel() != 0)
        {
            const auto xs = detail::image_strides(xc.strides(), s.channels_last);
            const auto is = detail::image_strides(k.idx.strides(), s.channels_last);
            const auto os = detail::image_strides(r.out.strides(), s.channels_last);
            detail::backend_for(x.device())
                .max_pool2d(r.out.data_ptr(), os.data(), k.idx.data<std::int64_t>(), is.data(), xc.data_ptr(),
                            xs.data(), x.dtype(), k.d);
        }
        return r;
    }

    tensor detail::max_pool_scatter(const tensor& g, const max_pool_picks& picks, const tensor& relu_y)
    {
        // Windows that do not overlap (the usual 2x2 / stride 2) choose distinct positions, and
        // every input element is read by one window at most: the scatter is then one pass over
        // the input that writes each element once (windows_grad, above), masking as it reads.
        if (kernels::windows_disjoint(picks.d))
            return windows_grad(g, picks.idx, picks.x_shape, picks.channels_last, picks.d, relu_y);
        if (!relu_y.defined())
            return put_add(g, picks.idx, picks.x_shape);
        const tensor zero = scalar_like(relu_y, 0.0);
        return put_add(where(gt(relu_y, zero), g, zero), picks.idx, picks.x_shape);
    }

    tensor max_pool2d(const tensor& x, const pool2d_params& p, std::string_view data_format)
    {
        XGRAD_PROFILE_OP("max_pool2d");
        auto [out, picks] = detail::max_pool_pick(x, p, data_format, "max_pool2d");
        // The node recorded is take's: its gradient is the scatter.
        record("max_pool2d", {x}, {out}, [picks = std::move(picks)](function_node&, const std::vector<tensor>& g) {
            return std::vector<tensor>{detail::max_pool_scatter(g[0], picks)};
        });
        return out;
    }

    tensor avg_pool2d(const tensor& x, const pool2d_params& p, std::string_view data_format)
    {
        XGRAD_PROFILE_OP("avg_pool2d");
        const pool_setup s = check_pool(x, p, data_format, "avg_pool2d");
        const tensor cols = unfold2d(x, s.window, data_format);
        // An empty result needs no divisor: inside_count would unfold a plane of ones as large
        // as x's spatial extent for nothing.
        if (p.count_include_pad || cols.numel() == 0)
            return to_image(mean(taps_view(cols, s), {1}), s);
        const tensor sums = sum(taps_view(cols, s), {1});
        if (s.channels_last)
            return div(to_image(sums, s), inside_count(x, s));
        const tensor per_window = reshape(sums, {s.im.c, s.im.n, s.out[0], s.out[1]});
        return contiguous(permute(div(per_window, inside_count(x, s)), {1, 0, 2, 3}));
    }

    tensor adaptive_avg_pool2d(const tensor& x, std::array<std::int64_t, 2> output_size, std::string_view data_format)
    {
        XGRAD_PROFILE_OP("adaptive_avg_pool2d");
        const char* op = "adaptive_avg_pool2d";
        const bool cl = detail::channels_last_format(data_format, op);
        detail::check_image(x, "x", op);
        if (output_size[0] < 1 || output_size[1] < 1)
            detail::window_fail(op,
                                "output_size must be >= 1 in both axes, got " + detail::pair_to_string(output_size));
        const detail::image_dims im = detail::image_dims_of(x.shape(), cl);
        if (im.h < 1 || im.w < 1)
            detail::window_fail(op, "x of shape " + shape_to_string(x.shape()) + " (" + std::string(data_format) +
                                        ") has an empty spatial extent; every output cell needs at least one element");
        const shape_type out_shape = cl ? shape_type{im.n, output_size[0], output_size[1], im.c}
                                        : shape_type{im.n, im.c, output_size[0], output_size[1]};
        const std::int64_t out_numel = checked_product({im.n, im.c, output_size[0], output_size[1]},
                                                       "adaptive_avg_pool2d: output elements");
        checked_bytes(out_numel, itemsize(x.dtype()), "adaptive_avg_pool2d: output bytes");
        // No element, no cell to average: the (empty) result is the per-image mean broadcast
        // to the output shape, at a cost independent of output_size (still recorded, so that
        // the gradient of x is its empty zeros).
        if (out_numel == 0)
            return expand(mean(x, {im.h_axis, im.w_axis}, true), out_shape);
        if (output_size[0] == 1 && output_size[1] == 1)
            return mean(x, {im.h_axis, im.w_axis}, true);
        if (im.h % output_size[0] == 0 && im.w % output_size[1] == 0)
        {
            pool2d_params p;
            p.kernel = {im.h / output_size[0], im.w / output_size[1]};
            return avg_pool2d(x, p, data_format);
        }
        return adaptive_axis(adaptive_axis(x, im.h_axis, im.h, output_size[0]), im.w_axis, im.w, output_size[1]);
    }
}
