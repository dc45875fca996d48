#pragma once
// Internal to the CPU backend: the float16 staging of the fast batch-norm kernels
// (kernels.cpp), and `operands`, which hands the SIMD functors (simd.hpp) their
// x-like pointers. Kept apart from the kernels because it is a separate concern: where the
// tensors' dtypes meet the functors' arithmetic type S.
//
// - float32, float64 and bfloat16 tensors are read and written in place by the functors
//   (bfloat16 converted in registers).
// - float16 tensors are converted to float in cache-resident pieces (at most `piece` or
//   run_span elements per input) just before the SIMD code reads them, and outputs rounded to
//   16 bits once, after it: with F16C (simd::f16_to_f32_f16c / f32_to_f16_f16c of
//   ../simd_avx2.cpp) when use_f16c(), else backends/cpu/convert.hpp. widen_rows /
//   narrow_rows are defined in convert.cpp (built with the default flags, like kernels.cpp).
#include <cstdint>
#include <type_traits>
#include <vector>

#include "xgrad/half.hpp" // float16_t, bfloat16_t

namespace xgrad::cpu::bn_detail
{
    /// float16 rows of n elements, `stride` apart in the tensor, converted to and from the
    /// packed scratch buffer (one run when the rows are contiguous).
    void widen_rows(float* dst, const float16_t* src, std::int64_t rows, std::int64_t n, std::int64_t stride,
                    bool f16c);
    void narrow_rows(float16_t* dst, const float* src, std::int64_t rows, std::int64_t n, std::int64_t stride,
                     bool f16c);

    /// g[j] = y[j] > 0 ? g[j] : 0 for j < n (the fused ReLU's backward; NaN in y masks).
    template <class S>
    void mask_by_positive(S* g, const S* y, std::int64_t n) noexcept
    {
        for (std::int64_t j = 0; j < n; ++j)
            g[j] = y[j] > S(0) ? g[j] : S(0);
    }

    /// The x-like operands of one kernel call, handed to the SIMD functors in place (as T: when
    /// T is S, or bfloat16, which the functors convert in registers; a fused ReLU's output y
    /// is then handed over too, and the functors mask g with it), or, for float16, staged piece
    /// by piece into per-thread scratch in S (converted, g masked here; outputs converted back
    /// by finish()).
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

        static constexpr bool staged() noexcept { return !in_place; }
        /// The element type of the pointers begin() hands out: S (scratch) when staged, else T.
        using ptr_type = std::conditional_t<staged(), S, T>;

        /// Per-thread buffers for one piece (empty when nothing is staged).
        struct scratch
        {
            std::vector<S> x, g, a, out, y;
            explicit scratch(std::int64_t n)
            {
                const auto m = static_cast<std::size_t>(staged() ? n : 0);
                x.resize(m), g.resize(m), a.resize(m), out.resize(m), y.resize(m);
            }
        };

        /// Pointers to rows [0, rows) of n elements starting at element `offset`, rows `stride`
        /// apart; `stride_out` receives the row stride of the pointers returned. Not staged: the
        /// tensors themselves, and py = y for the functors to mask g with. Staged: scratch
        /// (inputs are staged now, g already masked, py null; a staged output is written back by
        /// finish()).
        void begin(scratch& s, std::int64_t offset, std::int64_t rows, std::int64_t n, std::int64_t stride,
                   const ptr_type*& px, const ptr_type*& pg, const ptr_type*& pa, ptr_type*& pout,
                   const ptr_type*& py, std::int64_t& stride_out) const
        {
            py = nullptr;
            if constexpr (staged())
                stage(s, offset, rows, n, stride, px, pg, pa, pout, stride_out);
            else
            {
                px = x ? x + offset : nullptr;
                pg = g ? g + offset : nullptr;
                pa = a ? a + offset : nullptr;
                pout = out ? out + offset : nullptr;
                py = g && y ? y + offset : nullptr;
                stride_out = stride;
            }
        }

        void stage(scratch& s, std::int64_t offset, std::int64_t rows, std::int64_t n, std::int64_t stride,
                   const S*& px, const S*& pg, const S*& pa, S*& pout, std::int64_t& stride_out) const
        {
            auto stage = [&](std::vector<S>& dst, const T* src) {
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
            if constexpr (staged())
                if (out)
                    narrow_rows(out + offset, s.out.data(), rows, n, stride, f16c);
        }
    };
}
