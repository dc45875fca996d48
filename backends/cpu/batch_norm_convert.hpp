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
#include <algorithm>
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

    /// g[j] = y[j] > 0 ? g[j] : 0 for j < n (the fused ReLU's backward; NaN in y masks).
    template <class S>
    void mask_by_positive(S* g, const S* y, std::int64_t n) noexcept
    {
        for (std::int64_t j = 0; j < n; ++j)
            g[j] = y[j] > S(0) ? g[j] : S(0);
    }

    /// Rows of n elements, `stride` apart, copied into a packed buffer (or back).
    template <class S>
    void pack_rows(S* dst, const S* src, std::int64_t rows, std::int64_t n, std::int64_t stride) noexcept
    {
        for (std::int64_t r = 0; r < rows; ++r)
            std::copy(src + r * stride, src + r * stride + n, dst + r * n);
    }
    template <class S>
    void unpack_rows(S* dst, const S* src, std::int64_t rows, std::int64_t n, std::int64_t stride) noexcept
    {
        for (std::int64_t r = 0; r < rows; ++r)
            std::copy(src + r * n, src + r * n + n, dst + r * stride);
    }

    /// The x-like operands of one kernel call, handed to the SIMD functors in place (as T: when
    /// T is S, or bfloat16, which the functors convert in registers; a fused ReLU's output y
    /// is then handed over too, and the functors mask g with it), or staged piece by piece into
    /// per-thread scratch in S: always for float16 (converted, g masked here), and when
    /// force_stage (an output written beside staged inputs, so that all pointers share the
    /// packed row stride).
    template <class T, class S>
    struct operands
    {
        static constexpr bool direct = std::is_same_v<T, S>;
        /// Whether the functors read and write T themselves.
        static constexpr bool in_place = direct || (std::is_same_v<S, float> && std::is_same_v<T, bfloat16_t>);
        const T* x;
        const T* g;
        const T* a;
        T* out;
        bool f16c;
        /// Not null: g is read as (y > 0 ? g : 0).
        const T* y = nullptr;
        bool force_stage = false;

        bool staged() const noexcept { return !in_place || force_stage; }

        /// Per-thread buffers for one piece (empty when nothing is staged).
        struct scratch
        {
            std::vector<S> x, g, a, out, y;
            scratch(std::int64_t n, bool staged)
            {
                const auto m = static_cast<std::size_t>(staged ? n : 0);
                x.resize(m), g.resize(m), a.resize(m), out.resize(m), y.resize(m);
            }
        };

        /// Pointers to rows [0, rows) of n elements starting at element `offset`, rows `stride`
        /// apart; `stride_out` receives the row stride of the pointers returned. P is T when
        /// !staged() (the tensors themselves; py: y, for the functors to mask g with), S when
        /// staged() (scratch: inputs are staged now, g already masked, py null; a staged output
        /// is written back by finish()).
        template <class P>
        void begin(scratch& s, std::int64_t offset, std::int64_t rows, std::int64_t n, std::int64_t stride,
                   const P*& px, const P*& pg, const P*& pa, P*& pout, const P*& py, std::int64_t& stride_out) const
        {
            py = nullptr;
            if (!staged())
            {
                if constexpr (std::is_same_v<P, T>)
                {
                    px = x ? x + offset : nullptr;
                    pg = g ? g + offset : nullptr;
                    pa = a ? a + offset : nullptr;
                    pout = out ? out + offset : nullptr;
                    py = g && y ? y + offset : nullptr;
                    stride_out = stride;
                }
                return;
            }
            if constexpr (std::is_same_v<P, S>)
                stage(s, offset, rows, n, stride, px, pg, pa, pout, stride_out);
        }

        void stage(scratch& s, std::int64_t offset, std::int64_t rows, std::int64_t n, std::int64_t stride,
                   const S*& px, const S*& pg, const S*& pa, S*& pout, std::int64_t& stride_out) const
        {
            auto stage = [&](std::vector<S>& dst, const T* src) {
                if constexpr (direct)
                    pack_rows(dst.data(), src + offset, rows, n, stride);
                else
                    widen_rows(dst.data(), src + offset, rows, n, stride, f16c);
                return dst.data();
            };
            px = x ? stage(s.x, x) : nullptr;
            pg = g ? stage(s.g, g) : nullptr;
            pa = a ? stage(s.a, a) : nullptr;
            if (g && y)
                mask_by_positive(s.g.data(), stage(s.y, y), rows * n);
            pout = out ? s.out.data() : nullptr;
            stride_out = n;
        }

        void finish(const scratch& s, std::int64_t offset, std::int64_t rows, std::int64_t n,
                    std::int64_t stride) const
        {
            if (!out || !staged())
                return;
            if constexpr (direct)
                unpack_rows(out + offset, s.out.data(), rows, n, stride);
            else
                narrow_rows(out + offset, s.out.data(), rows, n, stride, f16c);
        }
    };
}
