// The fast window kernels, unfold2d (im2col) and fold2d (col2im), threaded over the thread
// pool. At simd_level::scalar the dispatch serves their xgrad::cpu::reference twins
// (reference/unfold.cpp) instead.
//
// Why they are built this way:
// - The cols array is walked along its innermost axis, which the strides reveal: the window
//   column ow for the NCHW matrix [C*KH*KW, N*OH*OW] (stride 1 along ow), the channel c for
//   the NHWC matrix [N*OH*OW, KH*KW*C] (stride 1 along c). For each tap the range of windows
//   that reads inside the input is computed once (valid_range), so the inner loops carry no
//   bounds test: padding is filled in runs and the rest copied in runs (memcpy when both sides
//   are contiguous).
// - Work items follow the layouts: in the ow-inner layout an item is one input plane (n, c),
//   which unfold2d copies into the OH*OW contiguous columns of image n in each row
//   (c, kh, kw), and fold2d sums from them; in the c-inner layout unfold2d writes, per (n, oh),
//   the contiguous OW*KH*KW*C entries of that row of windows, and fold2d sums one row (n, h)
//   of x with all its channels. The windows each tap reads inside the input are computed once
//   per call (tap_ranges), not per item.
// - fold is deterministic: each element of x belongs to exactly one work item, which sums its
//   terms in a local accumulator (float64 for float64, float32 otherwise) in the order of
//   (kh, kw), the order of the reference. Threads only decide who computes which item, so the
//   result is the reference's bit for bit, whatever the thread count.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include "backends/common/convert.hpp"
#include "backends/cpu/cpu_kernels.hpp"
#include "backends/cpu/dispatch.hpp"
#include "xgrad/thread_pool.hpp"

namespace xgrad::cpu
{
    namespace
    {
        using detail::grain;
        using kernels::window2d_dims;

        /// The windows o in [lo, hi) of [0, count) whose tap at offset `off` (k * dilation),
        /// o * stride - pad + off, falls inside [0, extent). lo == hi when there is none.
        void valid_range(std::int64_t extent, std::int64_t stride, std::int64_t pad, std::int64_t off,
                         std::int64_t count, std::int64_t& lo, std::int64_t& hi) noexcept
        {
            const std::int64_t first = pad - off;             // o * stride >= first
            const std::int64_t last = extent - 1 + pad - off; // o * stride <= last
            lo = first <= 0 ? 0 : (first + stride - 1) / stride;
            hi = last < 0 ? 0 : std::min(count, last / stride + 1);
            lo = std::min(lo, hi);
        }

        /// valid_range for every tap k < taps of one axis, computed once per call rather than
        /// per work item (integer divisions would otherwise dominate small planes).
        struct tap_ranges
        {
            std::vector<std::int64_t> lo, hi;
            tap_ranges(std::int64_t extent, std::int64_t stride, std::int64_t pad, std::int64_t dilation,
                       std::int64_t taps, std::int64_t count)
                : lo(static_cast<std::size_t>(taps)), hi(static_cast<std::size_t>(taps))
            {
                for (std::size_t k = 0; k < lo.size(); ++k)
                    valid_range(extent, stride, pad, static_cast<std::int64_t>(k) * dilation, count, lo[k], hi[k]);
            }
        };

        /// Below this many elements a plain loop beats the memcpy call (NHWC with few channels
        /// copies runs of one or two elements).
        constexpr std::int64_t memcpy_min = 16;

        template <class T>
        void copy_run(T* dst, std::int64_t ds, const T* src, std::int64_t ss, std::int64_t n) noexcept
        {
            if (ds == 1 && ss == 1)
            {
                if (n >= memcpy_min)
                    std::memcpy(dst, src, static_cast<std::size_t>(n) * sizeof(T));
                else
                    for (std::int64_t j = 0; j < n; ++j)
                        dst[j] = src[j];
            }
            else if (ds == 1 && ss == 2) // stride-2 windows (2x2 pooling): a constant stride vectorises
                for (std::int64_t j = 0; j < n; ++j)
                    dst[j] = src[2 * j];
            else
                for (std::int64_t j = 0; j < n; ++j)
                    dst[j * ds] = src[j * ss];
        }

        template <class T>
        void fill_run(T* dst, std::int64_t ds, T value, std::int64_t n) noexcept
        {
            if (ds == 1)
                std::fill_n(dst, n, value);
            else
                for (std::int64_t j = 0; j < n; ++j)
                    dst[j * ds] = value;
        }

        /// Whether the channel axis is the innermost one of cols (the NHWC matrix), rather
        /// than the window column ow (the NCHW matrix). Only the walking order depends on it.
        bool channels_inner(const std::int64_t* cs, const window2d_dims& d) noexcept
        {
            return d.c > 1 && (d.ow == 1 || cs[1] < cs[5]);
        }

        /// parallel_for over `items` work items of about `per_item` elements each.
        template <class F>
        void for_items(std::int64_t items, std::int64_t per_item, F&& f)
        {
            if (items <= 0 || per_item <= 0)
                return;
            const std::int64_t g = std::max<std::int64_t>(1, grain / per_item);
            parallel_for(0, items, g, [&](std::int64_t begin, std::int64_t end) { f(begin, end); });
        }

        // ---------------------------------------------------------------------------------
        // unfold2d

        template <class T>
        void unfold_impl(T* cols, const std::int64_t* cs, const T* x, const std::int64_t* xs, const window2d_dims& d,
                         T pad)
        {
            if (channels_inner(cs, d))
            {
                // Item (n, oh): windows ow, taps (kh, kw), channels c innermost.
                for_items(d.n * d.oh, d.ow * d.kh * d.kw * d.c, [&](std::int64_t begin, std::int64_t end) {
                    for (std::int64_t it = begin; it < end; ++it)
                    {
                        const std::int64_t n = it / d.oh, oh = it % d.oh;
                        T* row = cols + n * cs[0] + oh * cs[4];
                        const T* xn = x + n * xs[0];
                        for (std::int64_t ow = 0; ow < d.ow; ++ow)
                            for (std::int64_t kh = 0; kh < d.kh; ++kh)
                            {
                                const std::int64_t h = oh * d.sh - d.ph + kh * d.dh;
                                const bool h_inside = h >= 0 && h < d.h;
                                for (std::int64_t kw = 0; kw < d.kw; ++kw)
                                {
                                    const std::int64_t w = ow * d.sw - d.pw + kw * d.dw;
                                    T* dst = row + ow * cs[5] + kh * cs[2] + kw * cs[3];
                                    if (h_inside && w >= 0 && w < d.w)
                                        copy_run(dst, cs[1], xn + h * xs[2] + w * xs[3], xs[1], d.c);
                                    else
                                        fill_run(dst, cs[1], pad, d.c);
                                }
                            }
                    }
                });
                return;
            }
            // Item (c, n): the plane of image n, channel c; for each tap (kh, kw) it writes the
            // OH x OW windows of image n in row (c, kh, kw), ow innermost, reading the plane
            // (which stays in cache) once per tap.
            const tap_ranges hr(d.h, d.sh, d.ph, d.dh, d.kh, d.oh), wr(d.w, d.sw, d.pw, d.dw, d.kw, d.ow);
            for_items(d.c * d.n, d.kh * d.kw * d.oh * d.ow, [&](std::int64_t begin, std::int64_t end) {
                for (std::int64_t it = begin; it < end; ++it)
                {
                    const std::int64_t c = it / d.n, n = it % d.n;
                    const T* plane = x + n * xs[0] + c * xs[1];
                    for (std::int64_t kh = 0; kh < d.kh; ++kh)
                        for (std::int64_t kw = 0; kw < d.kw; ++kw)
                        {
                            const auto k = static_cast<std::size_t>(kw);
                            const std::int64_t lo = wr.lo[k], hi = wr.hi[k];
                            const std::int64_t hlo = hr.lo[static_cast<std::size_t>(kh)];
                            const std::int64_t hhi = hr.hi[static_cast<std::size_t>(kh)];
                            T* base = cols + n * cs[0] + c * cs[1] + kh * cs[2] + kw * cs[3];
                            // Offset in the plane of the first column read (used only when lo < hi).
                            const std::int64_t col = (lo * d.sw - d.pw + kw * d.dw) * xs[3];
                            for (std::int64_t oh = 0; oh < d.oh; ++oh)
                            {
                                T* dst = base + oh * cs[4];
                                if (oh < hlo || oh >= hhi || lo == hi)
                                {
                                    fill_run(dst, cs[5], pad, d.ow);
                                    continue;
                                }
                                const std::int64_t h = oh * d.sh - d.ph + kh * d.dh;
                                fill_run(dst, cs[5], pad, lo);
                                copy_run(dst + lo * cs[5], cs[5], plane + col + h * xs[2], d.sw * xs[3], hi - lo);
                                fill_run(dst + hi * cs[5], cs[5], pad, d.ow - hi);
                            }
                        }
                }
            });
        }

        // ---------------------------------------------------------------------------------
        // fold2d

        template <class T>
        using acc_type = std::conditional_t<std::is_same_v<T, double>, double, float>;

        template <class T>
        void fold_impl(T* x, const std::int64_t* xs, const T* cols, const std::int64_t* cs, const window2d_dims& d)
        {
            using A = acc_type<T>;
            // Taps per output row that can hit it: about kh / sh (at least one).
            const std::int64_t hits = std::max<std::int64_t>(1, (d.kh + d.sh - 1) / d.sh);
            const tap_ranges hr(d.h, d.sh, d.ph, d.dh, d.kh, d.oh), wr(d.w, d.sw, d.pw, d.dw, d.kw, d.ow);
            if (channels_inner(cs, d))
            {
                // Item (n, h): row h of image n, all channels; accumulator [W, C].
                for_items(d.n * d.h, d.c * d.w + hits * d.kw * d.ow * d.c, [&](std::int64_t begin, std::int64_t end) {
                    std::vector<A> acc(static_cast<std::size_t>(d.w * d.c));
                    for (std::int64_t it = begin; it < end; ++it)
                    {
                        const std::int64_t n = it / d.h, h = it % d.h;
                        std::fill(acc.begin(), acc.end(), A(0));
                        for (std::int64_t kh = 0; kh < d.kh; ++kh)
                        {
                            const std::int64_t t = h + d.ph - kh * d.dh; // oh * sh
                            if (t < 0 || t % d.sh != 0 || t / d.sh >= d.oh)
                                continue;
                            const T* src_k = cols + n * cs[0] + (t / d.sh) * cs[4] + kh * cs[2];
                            for (std::int64_t kw = 0; kw < d.kw; ++kw)
                            {
                                const std::int64_t lo = wr.lo[static_cast<std::size_t>(kw)];
                                const std::int64_t hi = wr.hi[static_cast<std::size_t>(kw)];
                                for (std::int64_t ow = lo; ow < hi; ++ow)
                                {
                                    A* a = acc.data() + (ow * d.sw - d.pw + kw * d.dw) * d.c;
                                    const T* s = src_k + kw * cs[3] + ow * cs[5];
                                    if (cs[1] == 1)
                                        for (std::int64_t c = 0; c < d.c; ++c)
                                            a[c] += detail::widen<A>(s[c]);
                                    else
                                        for (std::int64_t c = 0; c < d.c; ++c)
                                            a[c] += detail::widen<A>(s[c * cs[1]]);
                                }
                            }
                        }
                        T* xr = x + n * xs[0] + h * xs[2];
                        for (std::int64_t w = 0; w < d.w; ++w)
                            for (std::int64_t c = 0; c < d.c; ++c)
                                xr[w * xs[3] + c * xs[1]] =
                                    detail::convert<T>(acc[static_cast<std::size_t>(w * d.c + c)]);
                    }
                });
                return;
            }
            // Item (c, n): plane c of image n; accumulator [H, W]. Consecutive items read the
            // consecutive column blocks n of the same cols rows (c, kh, kw).
            for_items(d.c * d.n, d.h * d.w + d.kh * d.kw * d.oh * d.ow, [&](std::int64_t begin, std::int64_t end) {
                std::vector<A> acc(static_cast<std::size_t>(d.h * d.w));
                for (std::int64_t it = begin; it < end; ++it)
                {
                    const std::int64_t c = it / d.n, n = it % d.n;
                    std::fill(acc.begin(), acc.end(), A(0));
                    for (std::int64_t kh = 0; kh < d.kh; ++kh)
                        for (std::int64_t kw = 0; kw < d.kw; ++kw)
                        {
                            const std::int64_t lo = wr.lo[static_cast<std::size_t>(kw)];
                            const std::int64_t hi = wr.hi[static_cast<std::size_t>(kw)];
                            const std::int64_t hlo = hr.lo[static_cast<std::size_t>(kh)];
                            const std::int64_t hhi = hr.hi[static_cast<std::size_t>(kh)];
                            const std::int64_t count = hi - lo;
                            if (count == 0)
                                continue;
                            const T* src_k = cols + n * cs[0] + c * cs[1] + kh * cs[2] + kw * cs[3] + lo * cs[5];
                            for (std::int64_t oh = hlo; oh < hhi; ++oh)
                            {
                                const std::int64_t h = oh * d.sh - d.ph + kh * d.dh;
                                A* a = acc.data() + h * d.w + (lo * d.sw - d.pw + kw * d.dw);
                                const T* s = src_k + oh * cs[4];
                                if (d.sw == 1 && cs[5] == 1)
                                    for (std::int64_t j = 0; j < count; ++j)
                                        a[j] += detail::widen<A>(s[j]);
                                else
                                    for (std::int64_t j = 0; j < count; ++j)
                                        a[j * d.sw] += detail::widen<A>(s[j * cs[5]]);
                            }
                        }
                    T* xp = x + n * xs[0] + c * xs[1];
                    for (std::int64_t h = 0; h < d.h; ++h)
                    {
                        const A* a = acc.data() + h * d.w;
                        T* xr = xp + h * xs[2];
                        if constexpr (std::is_same_v<T, A>)
                            if (xs[3] == 1)
                            {
                                std::memcpy(xr, a, static_cast<std::size_t>(d.w) * sizeof(T));
                                continue;
                            }
                        for (std::int64_t w = 0; w < d.w; ++w)
                            xr[w * xs[3]] = detail::convert<T>(a[w]);
                    }
                }
            });
        }

        /// Calls f(T{}) for the floating element type of dt.
        template <class F>
        void visit_floating(dtype dt, F&& f)
        {
            detail::visit_dtype(dt, [&](auto tag) {
                using T = decltype(tag);
                if constexpr (!std::is_same_v<T, std::int64_t>)
                    f(T{});
            });
        }
    }

    void unfold2d(void* cols, const std::int64_t* cols_strides, const void* x, const std::int64_t* x_strides, dtype dt,
                  const window2d_dims& d, double pad_value)
    {
        // An empty cols: nothing to write, and no tap table (sized by the kernel window) to build.
        if (d.n == 0 || d.c == 0 || d.oh == 0 || d.ow == 0)
            return;
        visit_floating(dt, [&](auto tag) {
            using T = decltype(tag);
            unfold_impl(static_cast<T*>(cols), cols_strides, static_cast<const T*>(x), x_strides, d,
                        detail::convert<T>(pad_value));
        });
    }

    void fold2d(void* x, const std::int64_t* x_strides, const void* cols, const std::int64_t* cols_strides, dtype dt,
                const window2d_dims& d)
    {
        // An empty x: nothing to sum into (and its accumulator rows would have no storage).
        if (d.n == 0 || d.c == 0 || d.h == 0 || d.w == 0)
            return;
        visit_floating(dt, [&](auto tag) {
            using T = decltype(tag);
            fold_impl(static_cast<T*>(x), x_strides, static_cast<const T*>(cols), cols_strides, d);
        });
    }
}
