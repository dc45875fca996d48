#pragma once
// The reduction SIMD functors' bodies (reduce_contiguous_fn, reduce_rows_fn): sum and a max that
// propagates NaN, over one contiguous run or over rows column by column, in the fixed order
// that simd/kernels.hpp states.
// Included ONLY through simd/kernels_impl.hpp by the per-instruction-set translation units
// (simd/sse2.cpp, avx2.cpp, avx512.cpp); every helper is a template on the architecture, and no
// standard-library math is called (the rule and its reason: kernels_impl.hpp).
#include <cstdint>

#include "backends/cpu/simd/batch_impl.hpp"

namespace xgrad::cpu::simd
{
    namespace impl
    {
        /// max that propagates NaN: takes v when v > acc or v is NaN; a NaN acc stays. (Not
        /// v != v: xsimd's AVX != is the ordered compare, false for NaN.)
        template <class Arch, class T>
        batch<Arch, T> max_nan(const batch<Arch, T>& acc, const batch<Arch, T>& v) noexcept
        {
            return xsimd::select((v > acc) | xsimd::isnan(v), v, acc);
        }

        template <class Arch, class T>
        T max_nan_scalar(T acc, T v) noexcept
        {
            return (v > acc || v != v) ? v : acc;
        }

        /// The lanes of s combined pairwise (batch_impl.hpp's order): sums, or NaN-propagating maxima.
        template <class Arch, class T, bool Sum>
        T combine_lanes(const batch<Arch, T>& s) noexcept
        {
            return combine_lanes_pairwise(s, [](T a, T b) { return Sum ? a + b : max_nan_scalar<Arch, T>(a, b); });
        }

        template <class Arch, class T, bool Sum>
        T reduce_contiguous(const T* x, std::int64_t n) noexcept
        {
            using B = batch<Arch, T>;
            constexpr std::int64_t w = lanes<Arch, T>;
            auto step = [](const B& acc, const B& v) { return Sum ? B(acc + v) : max_nan<Arch, T>(acc, v); };
            // Sum starts from 0; max from x[0] (repeating an element does not change a max), which
            // is also what pads the tail.
            const T init = Sum ? T(0) : x[0];
            B a0(init), a1(init), a2(init), a3(init);
            std::int64_t i = 0;
            for (; i + 4 * w <= n; i += 4 * w)
            {
                a0 = step(a0, B::load_unaligned(x + i));
                a1 = step(a1, B::load_unaligned(x + i + w));
                a2 = step(a2, B::load_unaligned(x + i + 2 * w));
                a3 = step(a3, B::load_unaligned(x + i + 3 * w));
            }
            for (; i + w <= n; i += w)
                a0 = step(a0, B::load_unaligned(x + i));
            if (i < n)
            {
                alignas(64) T buf[w];
                for (std::int64_t j = 0; j < w; ++j)
                    buf[j] = i + j < n ? x[i + j] : init;
                a1 = step(a1, B::load_aligned(buf));
            }
            return combine_lanes<Arch, T, Sum>(step(step(a0, a1), step(a2, a3)));
        }

        /// One batch of columns [j, j + w) (or the last rem < w of them) reduced over the rows.
        template <class Arch, class T, bool Sum>
        batch<Arch, T> reduce_rows_tail(const T* x, const std::int64_t* offs, std::int64_t nrows, std::int64_t j,
                                        std::int64_t rem) noexcept
        {
            using B = batch<Arch, T>;
            constexpr std::int64_t w = lanes<Arch, T>;
            auto load = [&](std::int64_t r) {
                alignas(64) T buf[w];
                for (std::int64_t c = 0; c < w; ++c)
                    buf[c] = c < rem ? x[offs[r] + j + c] : T(0);
                return B::load_aligned(buf);
            };
            B acc = load(0);
            for (std::int64_t r = 1; r < nrows; ++r)
                acc = Sum ? B(acc + load(r)) : max_nan<Arch, T>(acc, load(r));
            return acc;
        }

        template <class Arch, class T, bool Sum>
        void reduce_rows(T* acc, const T* x, const std::int64_t* offs, std::int64_t nrows, std::int64_t ncols) noexcept
        {
            using B = batch<Arch, T>;
            constexpr std::int64_t w = lanes<Arch, T>;
            auto step = [](const B& a, const B& v) { return Sum ? B(a + v) : max_nan<Arch, T>(a, v); };
            std::int64_t j = 0;
            // Four batches of columns stay in registers while the rows stream past.
            for (; j + 4 * w <= ncols; j += 4 * w)
            {
                const T* p = x + offs[0] + j;
                B a0 = B::load_unaligned(p), a1 = B::load_unaligned(p + w), a2 = B::load_unaligned(p + 2 * w),
                  a3 = B::load_unaligned(p + 3 * w);
                for (std::int64_t r = 1; r < nrows; ++r)
                {
                    p = x + offs[r] + j;
                    a0 = step(a0, B::load_unaligned(p));
                    a1 = step(a1, B::load_unaligned(p + w));
                    a2 = step(a2, B::load_unaligned(p + 2 * w));
                    a3 = step(a3, B::load_unaligned(p + 3 * w));
                }
                a0.store_unaligned(acc + j);
                a1.store_unaligned(acc + j + w);
                a2.store_unaligned(acc + j + 2 * w);
                a3.store_unaligned(acc + j + 3 * w);
            }
            for (; j + w <= ncols; j += w)
            {
                B a = B::load_unaligned(x + offs[0] + j);
                for (std::int64_t r = 1; r < nrows; ++r)
                    a = step(a, B::load_unaligned(x + offs[r] + j));
                a.store_unaligned(acc + j);
            }
            if (j < ncols)
            {
                alignas(64) T buf[w];
                reduce_rows_tail<Arch, T, Sum>(x, offs, nrows, j, ncols - j).store_aligned(buf);
                for (std::int64_t c = 0; c < ncols - j; ++c)
                    acc[j + c] = buf[c];
            }
        }
    }

    template <class Arch, class T>
    T reduce_contiguous_fn::operator()(Arch, const T* x, std::int64_t n, kernels::reduce_op op) const noexcept
    {
        return op == kernels::reduce_op::sum ? impl::reduce_contiguous<Arch, T, true>(x, n)
                                             : impl::reduce_contiguous<Arch, T, false>(x, n);
    }

    template <class Arch, class T>
    void reduce_rows_fn::operator()(Arch, T* acc, const T* x, const std::int64_t* row_offsets, std::int64_t nrows,
                                    std::int64_t ncols, kernels::reduce_op op) const noexcept
    {
        if (op == kernels::reduce_op::sum)
            impl::reduce_rows<Arch, T, true>(acc, x, row_offsets, nrows, ncols);
        else
            impl::reduce_rows<Arch, T, false>(acc, x, row_offsets, nrows, ncols);
    }
}
