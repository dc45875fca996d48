#pragma once
// Internal to the CPU backend: the 16-bit staging of the fast batch-norm kernels
// (batch_norm.cpp). Kept apart from the kernels because it is a separate concern: the kernels
// and the SIMD functors (batch_norm_simd.hpp) work in the statistics type S only, and this is
// where float16 / bfloat16 tensors meet them.
//
// - 16-bit tensors are converted to float in cache-resident pieces (at most `piece` or
//   run_span elements per input) just before the SIMD code reads them, and outputs rounded to
//   16 bits once, after it: float16 with F16C (simd::f16_to_f32_f16c / f32_to_f16_f16c of
//   kernels_avx2.cpp) when use_f16c(), bfloat16 with SSE2 integer code equal to
//   xgrad::to_bfloat16, else convert.hpp.
// widen_rows / narrow_rows are defined, with the SSE2 bfloat16 code, in batch_norm_convert.cpp
// (built with the default flags, like batch_norm.cpp), for T = float16_t and bfloat16_t only:
// operands never converts when T is S.
#include <cstdint>
#include <type_traits>
#include <vector>

#include "xgrad/half.hpp" // float16_t, bfloat16_t

namespace xgrad::cpu::bn_detail
{
    /// 16-bit conversion of rows of n elements, `stride` apart in the tensor, packed in the
    /// scratch buffer (one run when the rows are contiguous).
    template <class T>
    void widen_rows(float* dst, const T* src, std::int64_t rows, std::int64_t n, std::int64_t stride, bool f16c);

    template <class T>
    void narrow_rows(T* dst, const float* src, std::int64_t rows, std::int64_t n, std::int64_t stride, bool f16c);

    extern template void widen_rows(float*, const float16_t*, std::int64_t, std::int64_t, std::int64_t, bool);
    extern template void widen_rows(float*, const bfloat16_t*, std::int64_t, std::int64_t, std::int64_t, bool);
    extern template void narrow_rows(float16_t*, const float*, std::int64_t, std::int64_t, std::int64_t, bool);
    extern template void narrow_rows(bfloat16_t*, const float*, std::int64_t, std::int64_t, std::int64_t, bool);

    /// The x-like operands of one kernel call, in S when T is S (read in place) or converted
    /// piece by piece into per-thread scratch (16-bit T).
    template <class T, class S>
    struct operands
    {
        static constexpr bool direct = std::is_same_v<T, S>;
        const T* x;
        const T* g;
        const T* a;
        T* out;
        bool f16c;

        /// Per-thread buffers for one piece.
        struct scratch
        {
            std::vector<S> x, g, a, out;
            explicit scratch(std::int64_t n)
                : x(direct ? 0 : static_cast<std::size_t>(n)), g(direct ? 0 : static_cast<std::size_t>(n)),
                  a(direct ? 0 : static_cast<std::size_t>(n)), out(direct ? 0 : static_cast<std::size_t>(n))
            {
            }
        };

        /// Pointers (S) to rows [0, rows) of n elements starting at element `offset`, rows
        /// `stride` apart; `stride_out` receives the row stride of the pointers returned.
        /// Inputs are converted now; the output is written back by finish().
        void begin(scratch& s, std::int64_t offset, std::int64_t rows, std::int64_t n, std::int64_t stride,
                   const S*& px, const S*& pg, const S*& pa, S*& pout, std::int64_t& stride_out) const
        {
            if constexpr (direct)
            {
                px = x ? x + offset : nullptr;
                pg = g ? g + offset : nullptr;
                pa = a ? a + offset : nullptr;
                pout = out ? out + offset : nullptr;
                stride_out = stride;
            }
            else
            {
                px = pg = pa = nullptr;
                if (x)
                    widen_rows(s.x.data(), x + offset, rows, n, stride, f16c), px = s.x.data();
                if (g)
                    widen_rows(s.g.data(), g + offset, rows, n, stride, f16c), pg = s.g.data();
                if (a)
                    widen_rows(s.a.data(), a + offset, rows, n, stride, f16c), pa = s.a.data();
                pout = out ? s.out.data() : nullptr;
                stride_out = n;
            }
        }

        void finish(const scratch& s, std::int64_t offset, std::int64_t rows, std::int64_t n,
                    std::int64_t stride) const
        {
            if constexpr (!direct)
                if (out)
                    narrow_rows(out + offset, s.out.data(), rows, n, stride, f16c);
        }
    };
}
