// Index kernels of the CPU backend: max pooling (the window maximum and its position), and
// take / put_add, the adjoint pair that gathers elements at int64 positions and scatters them
// back. They select and move elements with exact comparisons, so (like one_hot) they have no
// reference twin: max_pool2d's vectorised loops (simd/max_pool_impl.hpp, for the common 2x2
// NCHW and the channels-last windows) sit beside its general loop, which the tests compare
// them with, and every level gives the same bits.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <type_traits>
#include <utility>
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
        using detail::simd_call;

        /// The first i < n with idx[i] outside [0, numel), or -1; checked over the threads (each
        /// block stops at its first bad position, and the least of those is the first).
        std::int64_t first_bad_position(const std::int64_t* idx, std::int64_t n, std::int64_t numel)
        {
            std::atomic<std::int64_t> first{n};
            parallel_for(0, n, grain, [&](std::int64_t b, std::int64_t e) {
                for (std::int64_t i = b; i < e; ++i)
                    if (idx[i] < 0 || idx[i] >= numel)
                    {
                        std::int64_t seen = first.load(std::memory_order_relaxed);
                        while (i < seen && !first.compare_exchange_weak(seen, i, std::memory_order_relaxed))
                        {
                        }
                        return;
                    }
            });
            const std::int64_t bad = first.load();
            return bad < n ? bad : -1;
        }
    }

    namespace
    {
        /// The taps k in [0, kernel) whose position o * stride - pad + k * dilation lies in
        /// [0, extent): a contiguous range [first, last), since positions grow with k.
        std::pair<std::int64_t, std::int64_t> inside_taps(std::int64_t o, std::int64_t stride, std::int64_t pad,
                                                          std::int64_t dilation, std::int64_t kernel,
                                                          std::int64_t extent)
        {
            const std::int64_t start = o * stride - pad;
            std::int64_t first = start >= 0 ? 0 : (-start + dilation - 1) / dilation;
            std::int64_t last = start >= extent ? 0 : (extent - start + dilation - 1) / dilation;
            last = std::min(last, kernel);
            first = std::min(first, last);
            return {first, last};
        }

        /// The taps of a window row (or column) inside the input.
        struct span
        {
            std::int64_t first, last, offset; // tap range, element offset of tap 0
        };

        /// What max_pool2d finds once of its windows, for every path: the taps inside the input
        /// depend on the row or column of a window only, not on the plane (nor on the dtype).
        struct pool_geometry
        {
            std::vector<span> rows, cols;
            bool inside = true;          // every tap of every window inside the input (no padding reached)
            std::int64_t step_i, step_j; // elements between taps down and across (dilation included)
            std::int64_t taps;           // kh * kw
        };

        pool_geometry find_pool_geometry(const kernels::window2d_dims& d, const std::int64_t* x_strides)
        {
            pool_geometry g;
            g.rows.resize(static_cast<std::size_t>(d.oh));
            g.cols.resize(static_cast<std::size_t>(d.ow));
            for (std::int64_t oh = 0; oh < d.oh; ++oh)
            {
                const auto [i0, i1] = inside_taps(oh, d.sh, d.ph, d.dh, d.kh, d.h);
                g.rows[static_cast<std::size_t>(oh)] = {i0, i1, (oh * d.sh - d.ph) * x_strides[2]};
                g.inside = g.inside && i0 == 0 && i1 == d.kh;
            }
            for (std::int64_t ow = 0; ow < d.ow; ++ow)
            {
                const auto [j0, j1] = inside_taps(ow, d.sw, d.pw, d.dw, d.kw, d.w);
                g.cols[static_cast<std::size_t>(ow)] = {j0, j1, (ow * d.sw - d.pw) * x_strides[3]};
                g.inside = g.inside && j0 == 0 && j1 == d.kw;
            }
            g.step_i = d.dh * x_strides[2];
            g.step_j = d.dw * x_strides[3];
            g.taps = d.kh * d.kw;
            return g;
        }

        /// The element offsets of a window's taps from its first, row by row.
        std::vector<std::int64_t> tap_offsets(const kernels::window2d_dims& d, const pool_geometry& g)
        {
            std::vector<std::int64_t> offsets(static_cast<std::size_t>(g.taps));
            for (std::int64_t i = 0; i < d.kh; ++i)
                for (std::int64_t j = 0; j < d.kw; ++j)
                    offsets[static_cast<std::size_t>(i * d.kw + j)] = i * g.step_i + j * g.step_j;
            return offsets;
        }

        /// max_pool2d's tensors for one dtype: out and idx written, x read, each with its strides.
        template <class T>
        struct pool_tensors
        {
            T* op;
            const std::int64_t* out_strides;
            std::int64_t* idx;
            const std::int64_t* idx_strides;
            const T* xp;
            const std::int64_t* x_strides;
        };

        /// Channels-last (channels contiguous in x, out and idx) and every window inside the
        /// input: each window is a few contiguous channel runs, one per tap.
        template <class T>
        bool channels_last_inside(const pool_tensors<T>& t, const pool_geometry& g)
        {
            return g.inside && t.x_strides[1] == 1 && t.out_strides[1] == 1 && t.idx_strides[1] == 1;
        }

#ifndef XGRAD_CPU_SCALAR_ONLY // an XGRAD_SIMD=scalar build has no SIMD functors: the general loop only
        /// NCHW, 2x2 windows of stride 2 (the small CNNs' pool), float32 and float64: one output
        /// row of a plane from two contiguous input rows. False, with nothing written, for any
        /// other window or layout.
        template <class T>
        bool max_pool_2x2_nchw(const pool_tensors<T>& t, const kernels::window2d_dims& d, const pool_geometry& g)
        {
            T* op = t.op;
            std::int64_t* idx = t.idx;
            const T* xp = t.xp;
            const std::int64_t *out_strides = t.out_strides, *idx_strides = t.idx_strides, *x_strides = t.x_strides;
            if (!(g.inside && d.kh == 2 && d.kw == 2 && d.sh == 2 && d.sw == 2 && d.dh == 1 && d.dw == 1 &&
                  x_strides[3] == 1 && out_strides[3] == 1 && idx_strides[3] == 1))
                return false;
            const std::int64_t per_plane = std::max<std::int64_t>(1, 4 * d.oh * d.ow);
            // Rows shorter than a few vectors (a 28- or 14-wide image pools to 14 or 7) leave the
            // row loop in its scalar tail; float planes then go through the gathering loop, over
            // an offset table shared by every plane.
            const bool short_rows = std::is_same_v<T, float> && d.ow < 32 && out_strides[2] == d.ow &&
                                    idx_strides[2] == d.ow && 2 * d.oh * x_strides[2] < std::int64_t{1} << 30;
            if (short_rows)
            {
                std::vector<std::int32_t> offsets(static_cast<std::size_t>(d.oh * d.ow));
                for (std::int64_t oh = 0; oh < d.oh; ++oh)
                    for (std::int64_t ow = 0; ow < d.ow; ++ow)
                        offsets[static_cast<std::size_t>(oh * d.ow + ow)] =
                            static_cast<std::int32_t>(2 * oh * x_strides[2] + 2 * ow);
                const auto row = static_cast<std::int32_t>(x_strides[2]);
                parallel_for(
                    0, d.n * d.c, std::max<std::int64_t>(1, grain / per_plane), [&](std::int64_t b, std::int64_t e) {
                        for (std::int64_t p = b; p < e; ++p)
                        {
                            const std::int64_t n = p / d.c, c = p % d.c;
                            const std::int64_t plane = n * x_strides[0] + c * x_strides[1];
                            simd_call<simd::max_pool_2x2_plane_fn>(op + n * out_strides[0] + c * out_strides[1],
                                                                   idx + n * idx_strides[0] + c * idx_strides[1],
                                                                   xp + plane, offsets.data(), row, plane, d.oh * d.ow);
                        }
                    });
                return true;
            }
            parallel_for(0, d.n * d.c, std::max<std::int64_t>(1, grain / per_plane),
                         [&](std::int64_t b, std::int64_t e) {
                             for (std::int64_t p = b; p < e; ++p)
                             {
                                 const std::int64_t n = p / d.c, c = p % d.c;
                                 const std::int64_t plane = n * x_strides[0] + c * x_strides[1];
                                 for (std::int64_t oh = 0; oh < d.oh; ++oh)
                                 {
                                     const std::int64_t origin = plane + 2 * oh * x_strides[2];
                                     simd_call<simd::max_pool_2x2_row_fn>(
                                         op + n * out_strides[0] + c * out_strides[1] + oh * out_strides[2],
                                         idx + n * idx_strides[0] + c * idx_strides[1] + oh * idx_strides[2],
                                         xp + origin, x_strides[2], origin, d.ow);
                                 }
                             }
                         });
            return true;
        }

        /// Channels-last windows inside the input, float32, float64 and bfloat16 (compared as
        /// floats, simd/max_pool_impl.hpp): one output row (n, oh) per call of the functor.
        template <class T>
        void max_pool_channels_last(const pool_tensors<T>& t, const kernels::window2d_dims& d, const pool_geometry& g)
        {
            T* op = t.op;
            std::int64_t* idx = t.idx;
            const T* xp = t.xp;
            const std::int64_t *out_strides = t.out_strides, *idx_strides = t.idx_strides, *x_strides = t.x_strides;
            const std::int64_t taps = g.taps;
            const std::vector<std::int64_t> offsets = tap_offsets(d, g);
            // Inside the input, window ow starts ow * sw columns after window 0.
            const std::int64_t x_step = d.sw * x_strides[3];
            parallel_for(0, d.n * d.oh, std::max<std::int64_t>(1, grain / std::max<std::int64_t>(1, taps * d.c * d.ow)),
                         [&](std::int64_t b, std::int64_t e) {
                             for (std::int64_t q = b; q < e; ++q)
                             {
                                 const std::int64_t n = q / d.oh, oh = q % d.oh;
                                 const std::int64_t origin =
                                     n * x_strides[0] + g.rows[static_cast<std::size_t>(oh)].offset + g.cols[0].offset;
                                 simd_call<simd::max_pool_taps_fn>(
                                     op + n * out_strides[0] + oh * out_strides[2], out_strides[3],
                                     idx + n * idx_strides[0] + oh * idx_strides[2], idx_strides[3], xp + origin,
                                     x_step, offsets.data(), taps, origin, d.c, d.ow);
                             }
                         });
        }
#endif

        /// float16 (and, in a scalar build, bfloat16) channels-last windows inside the input:
        /// max_pool_taps_fn's loop in plain C++, widening each element to S (the general loop
        /// would walk each channel's plane with a stride of C elements).
        template <class T, class S>
        void max_pool_channels_last_widened(const pool_tensors<T>& t, const kernels::window2d_dims& d,
                                            const pool_geometry& g)
        {
            T* op = t.op;
            std::int64_t* idx = t.idx;
            const T* xp = t.xp;
            const std::int64_t *out_strides = t.out_strides, *idx_strides = t.idx_strides, *x_strides = t.x_strides;
            const std::int64_t taps = g.taps;
            const std::vector<std::int64_t> offsets = tap_offsets(d, g);
            const std::int64_t x_step = d.sw * x_strides[3];
            parallel_for(0, d.n * d.oh, std::max<std::int64_t>(1, grain / std::max<std::int64_t>(1, taps * d.c * d.ow)),
                         [&](std::int64_t b, std::int64_t e) {
                             std::vector<S> best(static_cast<std::size_t>(d.c));
                             for (std::int64_t q = b; q < e; ++q)
                             {
                                 const std::int64_t n = q / d.oh, oh = q % d.oh;
                                 const std::int64_t origin =
                                     n * x_strides[0] + g.rows[static_cast<std::size_t>(oh)].offset + g.cols[0].offset;
                                 for (std::int64_t w = 0; w < d.ow; ++w)
                                 {
                                     const std::int64_t at = origin + w * x_step;
                                     std::int64_t* id = idx + n * idx_strides[0] + oh * idx_strides[2] +
                                                        w * idx_strides[3];
                                     T* o = op + n * out_strides[0] + oh * out_strides[2] + w * out_strides[3];
                                     for (std::int64_t j = 0; j < d.c; ++j)
                                     {
                                         best[static_cast<std::size_t>(j)] = detail::widen<S>(xp[at + offsets[0] + j]);
                                         id[j] = offsets[0];
                                     }
                                     // The first maximum wins and a NaN, once taken, stays (as in the
                                     // general loop).
                                     for (std::int64_t k = 1; k < taps; ++k)
                                         for (std::int64_t j = 0; j < d.c; ++j)
                                         {
                                             S& bv = best[static_cast<std::size_t>(j)];
                                             const S v = detail::widen<S>(xp[at + offsets[k] + j]);
                                             const bool take = bv == bv && !(v <= bv);
                                             bv = take ? v : bv;
                                             id[j] = take ? offsets[k] : id[j];
                                         }
                                     for (std::int64_t j = 0; j < d.c; ++j)
                                     {
                                         o[j] = xp[at + id[j] + j];
                                         id[j] += at + j;
                                     }
                                 }
                             }
                         });
        }

        /// The general loop: any window, layout, padding and dtype, compared as S. The 2x2
        /// windows inside the input (stride 2 or 1) take four loads and three branch-free
        /// selections per output, with the same first-maximum and NaN rule as the search.
        template <class T, class S>
        void max_pool_general(const pool_tensors<T>& t, const kernels::window2d_dims& d, const pool_geometry& g)
        {
            T* op = t.op;
            std::int64_t* idx = t.idx;
            const T* xp = t.xp;
            const std::int64_t *out_strides = t.out_strides, *idx_strides = t.idx_strides, *x_strides = t.x_strides;
            const std::int64_t step_i = g.step_i, step_j = g.step_j;
            const bool two_by_two = g.inside && d.kh == 2 && d.kw == 2;
            // One (n, c) plane per work item: each writes only its own outputs, so the result
            // does not depend on the thread count.
            const std::int64_t per_plane = std::max<std::int64_t>(1, d.oh * d.ow * g.taps);
            parallel_for(0, d.n * d.c, std::max<std::int64_t>(1, grain / per_plane),
                         [&](std::int64_t b, std::int64_t e) {
                             for (std::int64_t p = b; p < e; ++p)
                             {
                                 const std::int64_t n = p / d.c, c = p % d.c;
                                 const T* plane = xp + n * x_strides[0] + c * x_strides[1];
                                 const std::int64_t plane_offset = n * x_strides[0] + c * x_strides[1];
                                 std::int64_t* idx_plane = idx + n * idx_strides[0] + c * idx_strides[1];
                                 T* out_plane = op + n * out_strides[0] + c * out_strides[1];
                                 for (std::int64_t oh = 0; oh < d.oh; ++oh)
                                 {
                                     const span r = g.rows[static_cast<std::size_t>(oh)];
                                     std::int64_t* idx_row = idx_plane + oh * idx_strides[2];
                                     T* out_row = out_plane + oh * out_strides[2];
                                     for (std::int64_t ow = 0; ow < d.ow; ++ow)
                                     {
                                         const span q = g.cols[static_cast<std::size_t>(ow)];
                                         const std::int64_t origin = r.offset + q.offset;
                                         // The op guarantees every window reaches the input, so the tap ranges
                                         // are not empty; start from the first tap inside.
                                         std::int64_t best = origin + r.first * step_i + q.first * step_j;
                                         S best_v = detail::widen<S>(plane[best]);
                                         if (two_by_two)
                                         {
                                             // Takes v when the best so far is a number and v is larger or
                                             // NaN: the search's rule, written without branches.
                                             const auto pick = [&](std::int64_t at) {
                                                 const S v = detail::widen<S>(plane[at]);
                                                 const bool take = best_v == best_v && !(v <= best_v);
                                                 best_v = take ? v : best_v;
                                                 best = take ? at : best;
                                             };
                                             pick(origin + step_j);
                                             pick(origin + step_i);
                                             pick(origin + step_i + step_j);
                                         }
                                         // The first maximum wins. `!(v <= best_v)` is true for a larger v and
                                         // for a NaN v; a NaN ends the search (the first NaN wins and
                                         // propagates, as in xgrad::max).
                                         else if (best_v == best_v)
                                             for (std::int64_t i = r.first; i < r.last; ++i)
                                             {
                                                 const std::int64_t row = origin + i * step_i;
                                                 std::int64_t j = q.first;
                                                 for (; j < q.last; ++j)
                                                 {
                                                     const S v = detail::widen<S>(plane[row + j * step_j]);
                                                     if (!(v <= best_v))
                                                     {
                                                         best = row + j * step_j;
                                                         best_v = v;
                                                         if (v != v)
                                                             break;
                                                     }
                                                 }
                                                 if (best_v != best_v)
                                                     break;
                                             }
                                         idx_row[ow * idx_strides[3]] = plane_offset + best;
                                         out_row[ow * out_strides[3]] = plane[best];
                                     }
                                 }
                             }
                         });
        }
    }

    void max_pool2d(void* out, const std::int64_t* out_strides, std::int64_t* idx, const std::int64_t* idx_strides,
                    const void* x, const std::int64_t* x_strides, dtype dt, const kernels::window2d_dims& d)
    {
        // No window: the row and column tables of the geometry are sized by the output extents.
        if (d.n == 0 || d.c == 0 || d.oh == 0 || d.ow == 0)
            return;
        const pool_geometry g = find_pool_geometry(d, x_strides);
        detail::visit_with_stats(dt, [&](auto tag, auto stats) {
            using T = decltype(tag);
            using S = decltype(stats); // compared in float, or double for float64
            T* const op = static_cast<T*>(out);
            const T* const xp = static_cast<const T*>(x);
            const pool_tensors<T> t{op, out_strides, idx, idx_strides, xp, x_strides};
#ifndef XGRAD_CPU_SCALAR_ONLY // an XGRAD_SIMD=scalar build has no SIMD functors: the general loop only
            if constexpr (std::is_same_v<T, S>) // float32, float64: the vectorised loops
            {
                if (max_pool_2x2_nchw(t, d, g))
                    return;
            }
            if constexpr (std::is_same_v<T, S> || std::is_same_v<T, bfloat16_t>)
            {
                if (channels_last_inside(t, g))
                    return max_pool_channels_last(t, d, g);
            }
#endif
            if constexpr (!std::is_same_v<T, S>)
            {
                if (channels_last_inside(t, g))
                    return max_pool_channels_last_widened<T, S>(t, d, g);
            }
            max_pool_general<T, S>(t, d, g);
        });
    }

    void max_pool2d_grad(void* dx, const std::int64_t* dx_strides, const void* g, const std::int64_t* g_strides,
                         const std::int64_t* idx, const std::int64_t* idx_strides, const void* y, dtype dt,
                         const kernels::window2d_dims& d)
    {
        if (d.n == 0 || d.c == 0 || d.h == 0 || d.w == 0)
            return;
        // The window (or -1) that reads each input row and column: a function of the row or
        // column alone, found once here (tables sized by the input, which exists).
        std::vector<std::int64_t> window_row(static_cast<std::size_t>(d.h)), window_col(static_cast<std::size_t>(d.w));
        for (std::int64_t h = 0; h < d.h; ++h)
            window_row[static_cast<std::size_t>(h)] = kernels::disjoint_window_of(h, d.sh, d.ph, d.dh, d.kh, d.oh);
        for (std::int64_t w = 0; w < d.w; ++w)
            window_col[static_cast<std::size_t>(w)] = kernels::disjoint_window_of(w, d.sw, d.pw, d.dw, d.kw, d.ow);
        const std::int64_t *xs = dx_strides, *gs = g_strides, *is = idx_strides;
        // dx is written in its own memory order, one (n, h) row (channels-last) or one (n, c, h)
        // row (channels first) per work item: each item writes only its own elements, and each
        // element is a selection, so the result does not depend on the thread count.
        const bool channels_last = xs[1] < xs[3];
        detail::visit_with_stats(dt, [&](auto tag, auto stats) {
            using T = decltype(tag);
            using S = decltype(stats);
            T* out = static_cast<T*>(dx);
            const T* gp = static_cast<const T*>(g);
            const T* yp = static_cast<const T*>(y);
            const T zero = detail::convert<T>(S(0));
            // Whether window offset `win` (in idx's layout) passes the ReLU mask.
            const auto open = [&](std::int64_t win) { return !yp || detail::widen<S>(yp[win]) > S(0); };
            // The element at (n, c, h, w), whose window is (oh, ow) (both >= 0).
            const auto chosen = [&](std::int64_t n, std::int64_t c, std::int64_t h, std::int64_t w, std::int64_t oh,
                                    std::int64_t ow) {
                const std::int64_t at = n * xs[0] + c * xs[1] + h * xs[2] + w * xs[3];
                const std::int64_t win = n * is[0] + c * is[1] + oh * is[2] + ow * is[3];
                return idx[win] == at && open(win)
                           ? detail::convert<T>(S(0) +
                                                detail::widen<S>(gp[n * gs[0] + c * gs[1] + oh * gs[2] + ow * gs[3]]))
                           : zero;
            };
            if (channels_last)
            {
#ifndef XGRAD_CPU_SCALAR_ONLY // an XGRAD_SIMD=scalar build has no SIMD functors
                const bool runs = (std::is_same_v<T, S> || std::is_same_v<T, bfloat16_t>)&&xs[1] == 1 && gs[1] == 1 &&
                                  is[1] == 1;
#endif
                parallel_for(
                    0, d.n * d.h, std::max<std::int64_t>(1, grain / (d.w * d.c)), [&](std::int64_t b, std::int64_t e) {
                        for (std::int64_t q = b; q < e; ++q)
                        {
                            const std::int64_t n = q / d.h, h = q % d.h;
                            const std::int64_t oh = window_row[static_cast<std::size_t>(h)];
                            const std::int64_t base = n * xs[0] + h * xs[2];
#ifndef XGRAD_CPU_SCALAR_ONLY
                            if (runs && oh >= 0)
                            {
                                const std::int64_t win = n * is[0] + oh * is[2];
                                simd_call<simd::max_pool_grad_row_fn>(out + base, xs[3], gp + n * gs[0] + oh * gs[2],
                                                                      gs[3], idx + win, is[3], yp ? yp + win : nullptr,
                                                                      window_col.data(), base, d.w, d.c);
                                continue;
                            }
#endif
                            if (oh >= 0 && xs[1] == 1 && gs[1] == 1 && is[1] == 1)
                            {
                                // Contiguous channels (float16, or a scalar build): the functor's
                                // selection, widening each element.
                                const std::int64_t win = n * is[0] + oh * is[2], grow = n * gs[0] + oh * gs[2];
                                for (std::int64_t w = 0; w < d.w; ++w)
                                {
                                    const std::int64_t ow = window_col[static_cast<std::size_t>(w)];
                                    T* row = out + base + w * xs[3];
                                    if (ow < 0)
                                    {
                                        std::fill(row, row + d.c, zero);
                                        continue;
                                    }
                                    const std::int64_t* id = idx + win + ow * is[3];
                                    const T* gw = gp + grow + ow * gs[3];
                                    const std::int64_t at = base + w * xs[3];
                                    for (std::int64_t c = 0; c < d.c; ++c)
                                        row[c] = id[c] == at + c && open(win + ow * is[3] + c)
                                                     ? detail::convert<T>(S(0) + detail::widen<S>(gw[c]))
                                                     : zero;
                                }
                                continue;
                            }
                            for (std::int64_t w = 0; w < d.w; ++w)
                            {
                                const std::int64_t ow = window_col[static_cast<std::size_t>(w)];
                                T* row = out + base + w * xs[3];
                                for (std::int64_t c = 0; c < d.c; ++c)
                                    row[c * xs[1]] = oh < 0 || ow < 0 ? zero : chosen(n, c, h, w, oh, ow);
                            }
                        }
                    });
                return;
            }
            // Channels first: a row of w elements holds one channel, and its windows' positions
            // are ow elements apart in idx; testing each element against its window's position
            // costs an index computation per element. Instead each row is zeroed (in L1), then
            // its window row's positions that fall in it are written: the same selection, one
            // term per window at most, as the windows are disjoint and each column's window is
            // checked against the table.
            parallel_for(0, d.n * d.c * d.h, std::max<std::int64_t>(1, grain / d.w),
                         [&](std::int64_t b, std::int64_t e) {
                             for (std::int64_t q = b; q < e; ++q)
                             {
                                 const std::int64_t h = q % d.h, nc = q / d.h, n = nc / d.c, c = nc % d.c;
                                 const std::int64_t base = n * xs[0] + c * xs[1] + h * xs[2];
                                 T* row = out + base;
                                 for (std::int64_t w = 0; w < d.w; ++w)
                                     row[w * xs[3]] = zero;
                                 const std::int64_t oh = window_row[static_cast<std::size_t>(h)];
                                 if (oh < 0)
                                     continue;
                                 const std::int64_t win = n * is[0] + c * is[1] + oh * is[2];
                                 const std::int64_t* ip = idx + win;
                                 const T* gq = gp + n * gs[0] + c * gs[1] + oh * gs[2];
                                 for (std::int64_t ow = 0; ow < d.ow; ++ow)
                                 {
                                     const std::int64_t off = ip[ow * is[3]] - base;
                                     if (off < 0)
                                         continue;
                                     const std::int64_t w = xs[3] == 1 ? off : (xs[3] > 0 ? off / xs[3] : 0);
                                     if (w < d.w && w * xs[3] == off && window_col[static_cast<std::size_t>(w)] == ow &&
                                         open(win + ow * is[3]))
                                         row[off] = detail::convert<T>(S(0) + detail::widen<S>(gq[ow * gs[3]]));
                                 }
                             }
                         });
        });
    }

    std::int64_t take(void* out, const void* x, std::int64_t x_numel, const std::int64_t* idx, dtype dt, std::int64_t n)
    {
        if (const std::int64_t bad = first_bad_position(idx, n, x_numel); bad >= 0)
            return bad;
        detail::visit_dtype(dt, [&](auto tag) {
            using T = decltype(tag);
            T* o = static_cast<T*>(out);
            const T* xp = static_cast<const T*>(x);
            parallel_for(0, n, grain, [&](std::int64_t b, std::int64_t e) {
                for (std::int64_t i = b; i < e; ++i)
                    o[i] = xp[idx[i]];
            });
        });
        return -1;
    }

    std::int64_t put_add(void* out, std::int64_t out_numel, const void* g, const std::int64_t* idx, dtype dt,
                         std::int64_t n)
    {
        if (const std::int64_t bad = first_bad_position(idx, n, out_numel); bad >= 0)
            return bad;
        detail::visit_with_stats(dt, [&](auto tag, auto stats) {
            using T = decltype(tag);
            using S = decltype(stats);
            T* o = static_cast<T*>(out);
            const T* gp = static_cast<const T*>(g);
            // The scatter is serial, in index order, so that colliding indices (overlapping
            // windows) always add in the same order; the zero fill before it, which writes
            // every output element (four times the scatter's for a 2x2 pool), is split over
            // the threads. 16-bit sums accumulate in float32 and round once.
            if constexpr (std::is_same_v<T, S>)
            {
                parallel_for(0, out_numel, grain,
                             [&](std::int64_t b, std::int64_t e) { std::fill(o + b, o + e, T(0)); });
                for (std::int64_t i = 0; i < n; ++i)
                    o[idx[i]] += gp[i];
            }
            else
            {
                std::vector<S> acc(static_cast<std::size_t>(out_numel), S(0));
                for (std::int64_t i = 0; i < n; ++i)
                    acc[static_cast<std::size_t>(idx[i])] += detail::convert<S>(gp[i]);
                parallel_for(0, out_numel, grain, [&](std::int64_t b, std::int64_t e) {
                    for (std::int64_t i = b; i < e; ++i)
                        o[i] = detail::convert<T>(acc[static_cast<std::size_t>(i)]);
                });
            }
        });
        return -1;
    }
}
