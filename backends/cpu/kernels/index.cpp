// Index kernels of the CPU backend: the window argmax of max pooling, and take / put_add, the
// adjoint pair that gathers elements at int64 positions and scatters them back. They move one
// element per index and compare, with nothing to vectorise, so (like one_hot) they have no
// reference twin and are the same in every XGRAD_SIMD configuration.
#include <algorithm>
#include <cmath>
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
    }

    void max_pool2d_argmax(std::int64_t* idx, const std::int64_t* idx_strides, const void* x,
                           const std::int64_t* x_strides, dtype dt, const kernels::window2d_dims& d)
    {
        // No window: the row and column tables below are sized by the output extents.
        if (d.n == 0 || d.c == 0 || d.oh == 0 || d.ow == 0)
            return;
        detail::visit_with_stats(dt, [&](auto tag, auto stats) {
            using T = decltype(tag);
            using S = decltype(stats); // compared in float, or double for float64
            const T* xp = static_cast<const T*>(x);
            // The taps inside the input depend on the row or column of a window only: found
            // once here, not per plane.
            struct span
            {
                std::int64_t first, last, offset; // tap range, element offset of tap 0
            };
            std::vector<span> rows(static_cast<std::size_t>(d.oh)), cols(static_cast<std::size_t>(d.ow));
            for (std::int64_t oh = 0; oh < d.oh; ++oh)
            {
                const auto [i0, i1] = inside_taps(oh, d.sh, d.ph, d.dh, d.kh, d.h);
                rows[static_cast<std::size_t>(oh)] = {i0, i1, (oh * d.sh - d.ph) * x_strides[2]};
            }
            for (std::int64_t ow = 0; ow < d.ow; ++ow)
            {
                const auto [j0, j1] = inside_taps(ow, d.sw, d.pw, d.dw, d.kw, d.w);
                cols[static_cast<std::size_t>(ow)] = {j0, j1, (ow * d.sw - d.pw) * x_strides[3]};
            }
            const std::int64_t step_i = d.dh * x_strides[2], step_j = d.dw * x_strides[3];
            // The common 2x2 window of the small CNNs, every tap inside the input (no padding
            // reached, stride 2 or 1): four loads and three branch-free selections per
            // output, with the same first-maximum and NaN rule as the general loop below.
            bool two_by_two = d.kh == 2 && d.kw == 2;
            for (const span& r : rows)
                two_by_two = two_by_two && r.first == 0 && r.last == 2;
            for (const span& q : cols)
                two_by_two = two_by_two && q.first == 0 && q.last == 2;
            // One (n, c) plane per work item: each writes only its own outputs, so the result
            // does not depend on the thread count.
            const std::int64_t per_plane = std::max<std::int64_t>(1, d.oh * d.ow * d.kh * d.kw);
            parallel_for(0, d.n * d.c, std::max<std::int64_t>(1, grain / per_plane),
                         [&](std::int64_t b, std::int64_t e) {
                             for (std::int64_t p = b; p < e; ++p)
                             {
                                 const std::int64_t n = p / d.c, c = p % d.c;
                                 const T* plane = xp + n * x_strides[0] + c * x_strides[1];
                                 const std::int64_t plane_offset = n * x_strides[0] + c * x_strides[1];
                                 std::int64_t* out = idx + n * idx_strides[0] + c * idx_strides[1];
                                 if (two_by_two)
                                 {
                                     // Takes v when the best so far is a number and v is larger or
                                     // NaN: the general loop's rule, written without branches.
                                     const auto pick = [](S& best_v, std::int64_t& best, S v, std::int64_t at) {
                                         const bool take = best_v == best_v && !(v <= best_v);
                                         best_v = take ? v : best_v;
                                         best = take ? at : best;
                                     };
                                     for (std::int64_t oh = 0; oh < d.oh; ++oh)
                                     {
                                         const std::int64_t r0 = rows[static_cast<std::size_t>(oh)].offset;
                                         std::int64_t* out_row = out + oh * idx_strides[2];
                                         for (std::int64_t ow = 0; ow < d.ow; ++ow)
                                         {
                                             const std::int64_t a = r0 + cols[static_cast<std::size_t>(ow)].offset;
                                             const std::int64_t b = a + step_j, c0 = a + step_i, c1 = c0 + step_j;
                                             std::int64_t best = a;
                                             S best_v = detail::widen<S>(plane[a]);
                                             pick(best_v, best, detail::widen<S>(plane[b]), b);
                                             pick(best_v, best, detail::widen<S>(plane[c0]), c0);
                                             pick(best_v, best, detail::widen<S>(plane[c1]), c1);
                                             out_row[ow * idx_strides[3]] = plane_offset + best;
                                         }
                                     }
                                     continue;
                                 }
                                 for (std::int64_t oh = 0; oh < d.oh; ++oh)
                                 {
                                     const span r = rows[static_cast<std::size_t>(oh)];
                                     std::int64_t* out_row = out + oh * idx_strides[2];
                                     for (std::int64_t ow = 0; ow < d.ow; ++ow)
                                     {
                                         const span q = cols[static_cast<std::size_t>(ow)];
                                         const std::int64_t origin = r.offset + q.offset;
                                         // The op guarantees every window reaches the input, so the tap
                                         // ranges are not empty; start from the first tap inside.
                                         std::int64_t best = origin + r.first * step_i + q.first * step_j;
                                         S best_v = detail::widen<S>(plane[best]);
                                         // The first maximum wins. `!(v <= best_v)` is true for a larger v
                                         // and for a NaN v; a NaN ends the search (the first NaN wins and
                                         // propagates, as in xgrad::max).
                                         if (best_v == best_v)
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
                                         out_row[ow * idx_strides[3]] = plane_offset + best;
                                     }
                                 }
                             }
                         });
        });
    }

    std::int64_t take(void* out, const void* x, std::int64_t x_numel, const std::int64_t* idx, dtype dt, std::int64_t n)
    {
        for (std::int64_t i = 0; i < n; ++i)
            if (idx[i] < 0 || idx[i] >= x_numel)
                return i;
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
        for (std::int64_t i = 0; i < n; ++i)
            if (idx[i] < 0 || idx[i] >= out_numel)
                return i;
        detail::visit_with_stats(dt, [&](auto tag, auto stats) {
            using T = decltype(tag);
            using S = decltype(stats);
            T* o = static_cast<T*>(out);
            const T* gp = static_cast<const T*>(g);
            // Serial, in index order, so that colliding indices (overlapping windows) always
            // add in the same order. 16-bit sums accumulate in float32 and round once.
            if constexpr (std::is_same_v<T, S>)
            {
                std::fill(o, o + out_numel, T(0));
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
