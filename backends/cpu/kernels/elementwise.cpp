// The fast elementwise kernels (unary, binary, where): layout analysis, threading and dispatch
// around the SIMD inner loops unary_fn, binary_fn and where_fn of simd/kernels.hpp.
//
// Why it is built this way:
// - The layout is first normalised (layout.hpp): drop size-1 dimensions, order the rest by
//   the output's strides, and merge dimensions that are contiguous for every operand. Most
//   calls then become one flat contiguous run, or rows whose innermost stride is 1 for every
//   operand, or 0 for an input (a broadcast scalar, e.g. a per-channel bias over H*W).
//   Those runs go straight to the SIMD functor. Anything else (permuted views, short rows)
//   is gathered into a small contiguous buffer (and the output scattered back), so every
//   layout runs the same vector math and an element's result never depends on the layout.
// - Threads split the flat element range (parallel_for, >= `grain` elements a chunk, so small
//   tensors stay on the calling thread). Elementwise results cannot depend on the chunking.
// - The instruction set is picked at run time (simd_call, dispatch.hpp). At
//   simd_level::scalar the dispatch serves their xgrad::cpu::reference twins instead.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "backends/common/layout.hpp"
#include "backends/cpu/cpu_kernels.hpp"
#include "backends/cpu/dispatch.hpp"
#include "backends/cpu/simd/kernels.hpp"
#include "xgrad/thread_pool.hpp"

namespace xgrad::cpu
{
    namespace
    {
        using detail::cursor;
        using detail::for_each_run;
        using detail::grain;
        using detail::make_space;
        using detail::simd_call;
        using detail::space;
        using detail::visit_compute;

        /// Runs row(out_run, input_runs, input_strides, n) over the flat range [begin, end) of
        /// sp (operand 0 = out), where out_run is contiguous and each input run is contiguous
        /// (stride 1) or one scalar (stride 0): what the SIMD functors take. Operands that are
        /// neither, and all non-flat operands when rows are short, go through buffers of
        /// `chunk` elements (gather inputs, scatter the output).
        template <class T, std::size_t NIn, class Row>
        void simd_elementwise(const space<NIn + 1>& sp, T* out, const std::array<const T*, NIn>& in, std::int64_t begin,
                              std::int64_t end, Row&& row)
        {
            constexpr std::size_t N = NIn + 1;
            constexpr std::int64_t chunk = 1024;
            // Rows at least this long are handed over in place when their stride allows;
            // shorter rows are gathered across row boundaries into full-length buffers.
            constexpr std::int64_t long_row = 128;

            std::array<const T*, NIn> p{};
            std::array<std::int64_t, NIn> s{};
            bool all_flat = sp.flat_contiguous[0];
            for (std::size_t i = 0; i < NIn; ++i)
            {
                all_flat = all_flat && (sp.flat_contiguous[i + 1] || sp.flat_scalar[i + 1]);
                p[i] = sp.flat_contiguous[i + 1] ? in[i] + begin : in[i];
                s[i] = sp.flat_contiguous[i + 1] ? 1 : 0;
            }
            if (all_flat)
            {
                row(out + begin, p, s, end - begin);
                return;
            }

            const bool long_rows = sp.inner() >= long_row;
            std::array<bool, N> in_place{};
            bool any_buffered = false;
            for (std::size_t k = 0; k < N; ++k)
            {
                const std::int64_t st = sp.inner_stride(k);
                in_place[k] = sp.flat_contiguous[k] || (k > 0 && sp.flat_scalar[k]) ||
                              (long_rows && (st == 1 || (k > 0 && st == 0)));
                any_buffered = any_buffered || !in_place[k];
            }
            std::vector<T> buffers(any_buffered ? N * chunk : 0);
            cursor<N> c(sp), scratch(sp);
            c.seek(begin);
            for (std::int64_t pos = begin; pos < end;)
            {
                std::int64_t len = end - pos;
                if (long_rows)
                    len = std::min(len, c.row_left());
                if (any_buffered)
                    len = std::min(len, chunk);
                for (std::size_t i = 0; i < NIn; ++i)
                {
                    const std::size_t k = i + 1;
                    if (sp.flat_contiguous[k])
                        p[i] = in[i] + pos, s[i] = 1;
                    else if (sp.flat_scalar[k])
                        p[i] = in[i], s[i] = 0;
                    else if (in_place[k])
                        p[i] = in[i] + c.offset()[k], s[i] = sp.inner_stride(k);
                    else
                    {
                        T* dst = buffers.data() + k * chunk;
                        const std::int64_t st = sp.inner_stride(k);
                        scratch = c;
                        scratch.walk(len, [&](const auto& off, std::int64_t n) {
                            const T* src = in[i] + off[k];
                            for (std::int64_t j = 0; j < n; ++j)
                                *dst++ = src[j * st];
                        });
                        p[i] = buffers.data() + k * chunk, s[i] = 1;
                    }
                }
                T* o = sp.flat_contiguous[0] ? out + pos : in_place[0] ? out + c.offset()[0] : buffers.data();
                row(o, p, s, len);
                if (!in_place[0])
                {
                    const T* src = buffers.data();
                    const std::int64_t st = sp.inner_stride(0);
                    scratch = c;
                    scratch.walk(len, [&](const auto& off, std::int64_t n) {
                        for (std::int64_t j = 0; j < n; ++j)
                            out[off[0] + j * st] = *src++;
                    });
                }
                c.advance(len);
                pos += len;
            }
        }

        // ---------------------------------------------------------------------------------
        // Elementwise math

        template <class T>
        void unary_impl(T* out, const std::int64_t* out_strides, const T* x, const std::int64_t* x_strides, int ndim,
                        const std::int64_t* shape, unary_op op)
        {
            const auto sp = make_space<2>(ndim, shape, {out_strides, x_strides});
            if (op == unary_op::erf && std::is_same_v<T, double>)
            {
                // std::erf, element by element: xsimd's float64 erf is off by up to 68 ulp
                // (near |x| = 2), where glibc's is within 1.
                parallel_for(0, sp.numel, grain, [&](std::int64_t begin, std::int64_t end) {
                    for_each_run(sp, begin, end, [&](const auto& off, const auto& st, std::int64_t n) {
                        for (std::int64_t j = 0; j < n; ++j)
                            out[off[0] + j * st[0]] = std::erf(x[off[1] + j * st[1]]);
                    });
                });
                return;
            }
            parallel_for(0, sp.numel, grain, [&](std::int64_t b, std::int64_t e) {
                simd_elementwise<T, 1>(sp, out, {x}, b, e, [&](T* o, const auto& p, const auto& s, std::int64_t n) {
                    simd_call<simd::unary_fn>(o, p[0], s[0], n, op);
                });
            });
        }

        template <class T>
        void binary_impl(T* out, const std::int64_t* out_strides, const T* a, const std::int64_t* a_strides, const T* b,
                         const std::int64_t* b_strides, int ndim, const std::int64_t* shape, binary_op op)
        {
            const auto sp = make_space<3>(ndim, shape, {out_strides, a_strides, b_strides});
            if (op == binary_op::pow)
            {
                // std::pow, element by element: exact special cases and correctly rounded in
                // glibc; xsimd's pow is exp(b * log(a)) and loses accuracy for large results.
                parallel_for(0, sp.numel, grain, [&](std::int64_t begin, std::int64_t end) {
                    for_each_run(sp, begin, end, [&](const auto& off, const auto& st, std::int64_t n) {
                        for (std::int64_t j = 0; j < n; ++j)
                            out[off[0] + j * st[0]] = std::pow(a[off[1] + j * st[1]], b[off[2] + j * st[2]]);
                    });
                });
                return;
            }
            parallel_for(0, sp.numel, grain, [&](std::int64_t begin, std::int64_t end) {
                simd_elementwise<T, 2>(sp, out, {a, b}, begin, end,
                                       [&](T* o, const auto& p, const auto& s, std::int64_t n) {
                                           simd_call<simd::binary_fn>(o, p[0], s[0], p[1], s[1], n, op);
                                       });
            });
        }

        template <class T>
        void where_impl(T* out, const std::int64_t* out_strides, const T* cond, const std::int64_t* cond_strides,
                        const T* a, const std::int64_t* a_strides, const T* b, const std::int64_t* b_strides, int ndim,
                        const std::int64_t* shape)
        {
            const auto sp = make_space<4>(ndim, shape, {out_strides, cond_strides, a_strides, b_strides});
            parallel_for(0, sp.numel, grain, [&](std::int64_t begin, std::int64_t end) {
                simd_elementwise<T, 3>(sp, out, {cond, a, b}, begin, end,
                                       [&](T* o, const auto& p, const auto& s, std::int64_t n) {
                                           simd_call<simd::where_fn>(o, p[0], s[0], p[1], s[1], p[2], s[2], n);
                                       });
            });
        }
    }

    void unary(void* out, const std::int64_t* out_strides, const void* x, const std::int64_t* x_strides, dtype dt,
               int ndim, const std::int64_t* shape, unary_op op)
    {
        visit_compute(dt, [&](auto tag) {
            using T = decltype(tag);
            unary_impl(static_cast<T*>(out), out_strides, static_cast<const T*>(x), x_strides, ndim, shape, op);
        });
    }

    void binary(void* out, const std::int64_t* out_strides, const void* a, const std::int64_t* a_strides, const void* b,
                const std::int64_t* b_strides, dtype dt, int ndim, const std::int64_t* shape, binary_op op)
    {
        visit_compute(dt, [&](auto tag) {
            using T = decltype(tag);
            binary_impl(static_cast<T*>(out), out_strides, static_cast<const T*>(a), a_strides,
                        static_cast<const T*>(b), b_strides, ndim, shape, op);
        });
    }

    void where(void* out, const std::int64_t* out_strides, const void* cond, const std::int64_t* cond_strides,
               const void* a, const std::int64_t* a_strides, const void* b, const std::int64_t* b_strides, dtype dt,
               int ndim, const std::int64_t* shape)
    {
        visit_compute(dt, [&](auto tag) {
            using T = decltype(tag);
            where_impl(static_cast<T*>(out), out_strides, static_cast<const T*>(cond), cond_strides,
                       static_cast<const T*>(a), a_strides, static_cast<const T*>(b), b_strides, ndim, shape);
        });
    }
}
