// The reference window kernels, unfold2d (im2col) and fold2d (col2im): the oracle the fast
// kernels of kernels/unfold.cpp are tested against, and what every build runs at simd_level::scalar
// or with XGRAD_SIMD=scalar.
//
// Deliberately plain: one single-threaded walk over the six indices (n, c, kh, kw, oh, ow) in
// row-major order, with a bounds test per element. fold2d adds each cols entry into a
// zero-initialised accumulator the size of x (float64 for float64, float32 otherwise), then
// rounds it into x once. For a fixed x element the walk meets its terms in the order of
// (kh, kw): a tap (kh, kw) reads a given input position from at most one window (oh, ow),
// because the position determines oh * sh and ow * sw. That is the order the fast kernel keeps.
#include <cstdint>
#include <type_traits>
#include <vector>

#include "backends/common/convert.hpp"
#include "backends/cpu/cpu_kernels.hpp"

namespace xgrad::cpu::reference
{
    namespace
    {
        /// Calls f(cols_offset, x_offset, inside) for every (n, c, kh, kw, oh, ow) in row-major
        /// order; x_offset is meaningful only when inside.
        template <class F>
        void for_each_tap(const std::int64_t* cs, const std::int64_t* xs, const kernels::window2d_dims& d, F f)
        {
            for (std::int64_t n = 0; n < d.n; ++n)
                for (std::int64_t c = 0; c < d.c; ++c)
                    for (std::int64_t kh = 0; kh < d.kh; ++kh)
                        for (std::int64_t kw = 0; kw < d.kw; ++kw)
                            for (std::int64_t oh = 0; oh < d.oh; ++oh)
                                for (std::int64_t ow = 0; ow < d.ow; ++ow)
                                {
                                    const std::int64_t h = oh * d.sh - d.ph + kh * d.dh;
                                    const std::int64_t w = ow * d.sw - d.pw + kw * d.dw;
                                    const bool inside = h >= 0 && h < d.h && w >= 0 && w < d.w;
                                    const std::int64_t co = n * cs[0] + c * cs[1] + kh * cs[2] + kw * cs[3] +
                                                            oh * cs[4] + ow * cs[5];
                                    const std::int64_t xo = inside ? n * xs[0] + c * xs[1] + h * xs[2] + w * xs[3] : 0;
                                    f(co, xo, inside);
                                }
        }

        template <class T>
        void unfold_impl(T* cols, const std::int64_t* cs, const T* x, const std::int64_t* xs,
                         const kernels::window2d_dims& d, T pad)
        {
            for_each_tap(cs, xs, d,
                         [&](std::int64_t co, std::int64_t xo, bool inside) { cols[co] = inside ? x[xo] : pad; });
        }

        template <class T>
        void fold_impl(T* x, const std::int64_t* xs, const T* cols, const std::int64_t* cs,
                       const kernels::window2d_dims& d)
        {
            using acc_t = std::conditional_t<std::is_same_v<T, double>, double, float>;
            // The accumulator is contiguous [n, c, h, w]; acc_strides maps x offsets onto it.
            const std::int64_t as[4] = {d.c * d.h * d.w, d.h * d.w, d.w, 1};
            std::vector<acc_t> acc(static_cast<std::size_t>(d.n * d.c * d.h * d.w), acc_t(0));
            for_each_tap(cs, as, d, [&](std::int64_t co, std::int64_t ao, bool inside) {
                if (inside)
                    acc[static_cast<std::size_t>(ao)] += cpu::detail::widen<acc_t>(cols[co]);
            });
            for (std::int64_t n = 0; n < d.n; ++n)
                for (std::int64_t c = 0; c < d.c; ++c)
                    for (std::int64_t h = 0; h < d.h; ++h)
                        for (std::int64_t w = 0; w < d.w; ++w)
                            x[n * xs[0] + c * xs[1] + h * xs[2] + w * xs[3]] = cpu::detail::convert<T>(
                                acc[static_cast<std::size_t>(n * as[0] + c * as[1] + h * as[2] + w)]);
        }

        /// Calls f(T{}) for the floating element type of dt.
        template <class F>
        void visit_floating(dtype dt, F&& f)
        {
            cpu::detail::visit_dtype(dt, [&](auto tag) {
                using T = decltype(tag);
                if constexpr (!std::is_same_v<T, std::int64_t>)
                    f(T{});
            });
        }
    }

    void unfold2d(void* cols, const std::int64_t* cols_strides, const void* x, const std::int64_t* x_strides, dtype dt,
                  const kernels::window2d_dims& d, double pad_value)
    {
        visit_floating(dt, [&](auto tag) {
            using T = decltype(tag);
            unfold_impl(static_cast<T*>(cols), cols_strides, static_cast<const T*>(x), x_strides, d,
                        cpu::detail::convert<T>(pad_value));
        });
    }

    void fold2d(void* x, const std::int64_t* x_strides, const void* cols, const std::int64_t* cols_strides, dtype dt,
                const kernels::window2d_dims& d)
    {
        visit_floating(dt, [&](auto tag) {
            using T = decltype(tag);
            fold_impl(static_cast<T*>(x), x_strides, static_cast<const T*>(cols), cols_strides, d);
        });
    }
}
