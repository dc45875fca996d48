// The reference CPU kernels: the oracle the fast kernels are tested against, and the path
// every kernel takes in an XGRAD_SIMD=scalar build or at simd_level::scalar.
//
// Deliberately plain: one single-threaded walk over every N-d index in row-major order, the
// std:: math functions, sums accumulated left to right in the dtype itself (float for
// float32), matmul as the triple loop. Nothing here is clever, so that the result of each
// element is obvious from the contract.
#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <vector>

#include "backends/common/convert.hpp"
#include "backends/common/matmul_dims.hpp"
#include "backends/common/op_math.hpp"
#include "backends/cpu/cpu_kernels.hpp"

namespace xgrad::cpu::reference
{
    namespace
    {
        /// Calls f(offsets) for every index of `shape` in row-major order, where offsets[k] is
        /// the element offset of operand k (sum of index * strides[k]). ndim 0: one call.
        template <std::size_t N, class F>
        void for_each_index(int ndim, const std::int64_t* shape, const std::array<const std::int64_t*, N>& strides, F f)
        {
            for (int d = 0; d < ndim; ++d)
                if (shape[d] == 0)
                    return;
            std::vector<std::int64_t> index(static_cast<std::size_t>(ndim), 0);
            std::array<std::int64_t, N> offsets{};
            for (;;)
            {
                f(offsets);
                int d = ndim - 1;
                for (; d >= 0; --d)
                {
                    ++index[d];
                    for (std::size_t k = 0; k < N; ++k)
                        offsets[k] += strides[k][d];
                    if (index[d] < shape[d])
                        break;
                    for (std::size_t k = 0; k < N; ++k)
                        offsets[k] -= shape[d] * strides[k][d];
                    index[d] = 0;
                }
                if (d < 0)
                    return;
            }
        }

        using kernels::apply;
        using kernels::visit_compute;
    }

    void fill(void* out, const std::int64_t* out_strides, dtype dt, int ndim, const std::int64_t* shape, double value)
    {
        detail::visit_dtype(dt, [&](auto tag) {
            using T = decltype(tag);
            const T v = detail::convert<T>(value);
            T* o = static_cast<T*>(out);
            for_each_index<1>(ndim, shape, {out_strides}, [&](const auto& off) { o[off[0]] = v; });
        });
    }

    void copy(void* out, const std::int64_t* out_strides, dtype out_dt, const void* x, const std::int64_t* x_strides,
              dtype x_dt, int ndim, const std::int64_t* shape)
    {
        detail::visit_dtype(out_dt, [&](auto out_tag) {
            detail::visit_dtype(x_dt, [&](auto x_tag) {
                using O = decltype(out_tag);
                using X = decltype(x_tag);
                O* o = static_cast<O*>(out);
                const X* in = static_cast<const X*>(x);
                for_each_index<2>(ndim, shape, {out_strides, x_strides},
                                  [&](const auto& off) { o[off[0]] = detail::convert<O>(in[off[1]]); });
            });
        });
    }

    void unary(void* out, const std::int64_t* out_strides, const void* x, const std::int64_t* x_strides, dtype dt,
               int ndim, const std::int64_t* shape, unary_op op)
    {
        visit_compute(dt, [&](auto tag) {
            using T = decltype(tag);
            T* o = static_cast<T*>(out);
            const T* in = static_cast<const T*>(x);
            for_each_index<2>(ndim, shape, {out_strides, x_strides},
                              [&](const auto& off) { o[off[0]] = apply(op, in[off[1]]); });
        });
    }

    void binary(void* out, const std::int64_t* out_strides, const void* a, const std::int64_t* a_strides, const void* b,
                const std::int64_t* b_strides, dtype dt, int ndim, const std::int64_t* shape, binary_op op)
    {
        visit_compute(dt, [&](auto tag) {
            using T = decltype(tag);
            T* o = static_cast<T*>(out);
            const T* pa = static_cast<const T*>(a);
            const T* pb = static_cast<const T*>(b);
            for_each_index<3>(ndim, shape, {out_strides, a_strides, b_strides},
                              [&](const auto& off) { o[off[0]] = apply(op, pa[off[1]], pb[off[2]]); });
        });
    }

    void where(void* out, const std::int64_t* out_strides, const void* cond, const std::int64_t* cond_strides,
               const void* a, const std::int64_t* a_strides, const void* b, const std::int64_t* b_strides, dtype dt,
               int ndim, const std::int64_t* shape)
    {
        visit_compute(dt, [&](auto tag) {
            using T = decltype(tag);
            T* o = static_cast<T*>(out);
            const T* pc = static_cast<const T*>(cond);
            const T* pa = static_cast<const T*>(a);
            const T* pb = static_cast<const T*>(b);
            for_each_index<4>(ndim, shape, {out_strides, cond_strides, a_strides, b_strides},
                              [&](const auto& off) { o[off[0]] = pc[off[1]] != T(0) ? pa[off[2]] : pb[off[3]]; });
        });
    }

    void reduce(void* out, const std::int64_t* out_strides, const void* x, const std::int64_t* x_strides, dtype dt,
                int ndim, int n_keep, const std::int64_t* shape, reduce_op op)
    {
        visit_compute(dt, [&](auto tag) {
            using T = decltype(tag);
            T* o = static_cast<T*>(out);
            const T* in = static_cast<const T*>(x);
            // sum of nothing is 0; max of nothing (rejected by the ops layer) is -inf.
            const T identity = op == reduce_op::sum ? T(0) : -std::numeric_limits<T>::infinity();
            if (std::any_of(shape + n_keep, shape + ndim, [](std::int64_t e) { return e == 0; }))
            {
                // x is empty and never read: its offsets (which need not fit int64) are not formed.
                for_each_index<1>(n_keep, shape, {out_strides}, [&](const auto& kept) { o[kept[0]] = identity; });
                return;
            }
            for_each_index<2>(n_keep, shape, {out_strides, x_strides}, [&](const auto& kept) {
                T acc = identity;
                bool first = true;
                for_each_index<1>(ndim - n_keep, shape + n_keep, {x_strides + n_keep}, [&](const auto& red) {
                    const T v = in[kept[1] + red[0]];
                    if (op == reduce_op::sum)
                        acc += v;
                    else if (first || v > acc || std::isnan(v)) // NaN propagates: it is never replaced
                        acc = v;
                    first = false;
                });
                o[kept[0]] = acc;
            });
        });
    }

    void matmul(void* out, const void* a, const std::int64_t* a_strides, const void* b, const std::int64_t* b_strides,
                dtype dt, std::int64_t batch, std::int64_t m, std::int64_t n, std::int64_t k, bool accumulate)
    {
        detail::check_matmul_dims(m, n, k);
        visit_compute(dt, [&](auto tag) {
            using T = decltype(tag);
            T* o = static_cast<T*>(out);
            const T* pa = static_cast<const T*>(a);
            const T* pb = static_cast<const T*>(b);
            for (std::int64_t p = 0; p < batch; ++p)
                for (std::int64_t i = 0; i < m; ++i)
                    for (std::int64_t j = 0; j < n; ++j)
                    {
                        T acc = T(0);
                        for (std::int64_t q = 0; q < k; ++q)
                            acc += pa[p * a_strides[0] + i * a_strides[1] + q * a_strides[2]] *
                                   pb[p * b_strides[0] + q * b_strides[1] + j * b_strides[2]];
                        // The addend joins after the whole dot product (a BLAS with beta = 1 may add
                        // it between blocks of k: the same sum in another order).
                        T& dst = o[(p * m + i) * n + j];
                        dst = accumulate ? dst + acc : acc;
                    }
        });
    }

    void argmax(std::int64_t* out, const std::int64_t* out_strides, const void* x, const std::int64_t* x_strides,
                dtype dt, int ndim, const std::int64_t* shape)
    {
        auto run = [&](auto tag) {
            using T = decltype(tag);
            const T* in = static_cast<const T*>(x);
            const int n_keep = ndim - 1;
            for_each_index<2>(n_keep, shape, {out_strides, x_strides}, [&](const auto& kept) {
                std::int64_t at = 0;
                for (std::int64_t r = 1; r < shape[n_keep]; ++r)
                {
                    const T v = in[kept[1] + r * x_strides[n_keep]];
                    const T best = in[kept[1] + at * x_strides[n_keep]];
                    if (std::isnan(static_cast<double>(best)))
                        break; // the first NaN is the maximum
                    if (std::isnan(static_cast<double>(v)) || v > best)
                        at = r;
                }
                out[kept[0]] = at;
            });
        };
        if (dt == dtype::int64)
            run(std::int64_t{});
        else
            visit_compute(dt, run);
    }
}
