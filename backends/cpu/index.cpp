// Index kernels of the CPU backend: the window argmax of max pooling, and take / put_add, the
// adjoint pair that gathers elements at int64 positions and scatters them back. They move one
// element per index and compare, with nothing to vectorise, so (like one_hot) they have no
// reference twin and are the same in every XGRAD_SIMD configuration.
#include <cmath>
#include <vector>

#include "backends/cpu/convert.hpp"
#include "backends/cpu/cpu_kernels.hpp"
#include "xgrad/thread_pool.hpp"

namespace xgrad::cpu
{
    namespace
    {
        constexpr std::int64_t grain = 32768;

        template <class T>
        auto wide(T v) noexcept
        {
            if constexpr (std::is_same_v<T, double>)
                return v;
            else
                return detail::convert<float>(v);
        }
    }

    void max_pool2d_argmax(std::int64_t* idx, const std::int64_t* idx_strides, const void* x,
                           const std::int64_t* x_strides, dtype dt, const kernels::window2d_dims& d)
    {
        detail::visit_with_stats(dt, [&](auto tag, auto) {
            using T = decltype(tag);
            const T* xp = static_cast<const T*>(x);
            // One (n, c) plane per work item: each writes only its own outputs, so the result
            // does not depend on the thread count.
            const std::int64_t per_plane = std::max<std::int64_t>(1, d.oh * d.ow * d.kh * d.kw);
            parallel_for(0, d.n * d.c, std::max<std::int64_t>(1, grain / per_plane), [&](std::int64_t b, std::int64_t e) {
                for (std::int64_t p = b; p < e; ++p)
                {
                    const std::int64_t n = p / d.c, c = p % d.c;
                    const std::int64_t base = n * x_strides[0] + c * x_strides[1];
                    std::int64_t* out = idx + n * idx_strides[0] + c * idx_strides[1];
                    for (std::int64_t oh = 0; oh < d.oh; ++oh)
                        for (std::int64_t ow = 0; ow < d.ow; ++ow)
                        {
                            std::int64_t best = -1;
                            decltype(wide(T{})) best_v{};
                            bool best_nan = false;
                            for (std::int64_t i = 0; i < d.kh; ++i)
                            {
                                const std::int64_t h = oh * d.sh - d.ph + i * d.dh;
                                if (h < 0 || h >= d.h)
                                    continue;
                                for (std::int64_t j = 0; j < d.kw; ++j)
                                {
                                    const std::int64_t w = ow * d.sw - d.pw + j * d.dw;
                                    if (w < 0 || w >= d.w)
                                        continue;
                                    const std::int64_t off = base + h * x_strides[2] + w * x_strides[3];
                                    const auto v = wide(xp[off]);
                                    // The first maximum wins; a NaN wins over any number and
                                    // the first NaN stays (NaN propagates, as in xgrad::max).
                                    if (best < 0 || (!best_nan && (v > best_v || std::isnan(v))))
                                    {
                                        best = off;
                                        best_v = v;
                                        best_nan = std::isnan(v);
                                    }
                                }
                            }
                            out[oh * idx_strides[2] + ow * idx_strides[3]] = best;
                        }
                }
            });
        });
    }

    std::int64_t take(void* out, const void* x, std::int64_t x_numel, const std::int64_t* idx, dtype dt,
                      std::int64_t n)
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
