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
//   ../simd/avx2.cpp) when use_f16c(), else backends/common/convert.hpp. widen_rows /
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

    /// The x-like inputs of one kernel call, handed to the SIMD functors in place (as T: when T
    /// is S, or bfloat16, which the functors convert in registers; a fused ReLU's output y is
    /// then handed over too, and the functors mask g with it), or, for float16, staged piece by
    /// piece into per-thread scratch in S (converted, g masked here). Built from the inputs a
    /// kernel has, e.g. operands<T, S>(f16c).with_x(x).with_g(dy, y); absent inputs stay null.
    template <class T, class S>
    struct operands
    {
        static constexpr bool direct = std::is_same_v<T, S>;
        /// Whether the functors read and write T themselves.
        static constexpr bool in_place = direct || (std::is_same_v<S, float> && std::is_same_v<T, bfloat16_t>);
        static constexpr bool staged() noexcept { return !in_place; }
        /// The element type of the pointers begin() hands out: S (scratch) when staged, else T.
        using ptr_type = std::conditional_t<staged(), S, T>;

        const T* x = nullptr;
        const T* g = nullptr;
        const T* a = nullptr;
        /// Not null (with g): g is read as (y > 0 ? g : 0).
        const T* y = nullptr;
        bool f16c = false;

        explicit operands(bool use_f16c) noexcept : f16c(use_f16c) {}
        operands with_x(const T* p) const noexcept
        {
            operands o = *this;
            o.x = p;
            return o;
        }
        /// g, read as (y > 0 ? g : 0) when the fused ReLU's output y is given.
        operands with_g(const T* p, const T* relu_y = nullptr) const noexcept
        {
            operands o = *this;
            o.g = p;
            o.y = relu_y;
            return o;
        }
        operands with_a(const T* p) const noexcept
        {
            operands o = *this;
            o.a = p;
            return o;
        }

        /// Per-thread buffers for one piece of the inputs and of one output (empty when nothing
        /// is staged).
        struct scratch
        {
            std::vector<S> x, g, a, out, y;
            explicit scratch(std::int64_t n)
            {
                const auto m = static_cast<std::size_t>(staged() ? n : 0);
                x.resize(m), g.resize(m), a.resize(m), out.resize(m), y.resize(m);
            }
        };

        /// The input pointers of one piece (null where the input is absent) and their row stride.
        struct piece
        {
            const ptr_type* x = nullptr;
            const ptr_type* g = nullptr;
            const ptr_type* a = nullptr;
            /// In place only: y for the functors to mask g with (staged: g is masked already).
            const ptr_type* y = nullptr;
            std::int64_t stride = 0;
        };

        /// Rows [0, rows) of n elements starting at element `offset`, rows `stride` apart. Not
        /// staged: the tensors themselves. Staged: scratch, converted now.
        piece begin(scratch& s, std::int64_t offset, std::int64_t rows, std::int64_t n, std::int64_t stride) const
        {
            piece p;
            if constexpr (staged())
            {
                auto stage = [&](std::vector<S>& dst, const T* src) {
                    widen_rows(dst.data(), src + offset, rows, n, stride, f16c);
                    return dst.data();
                };
                p.x = x ? stage(s.x, x) : nullptr;
                p.g = g ? stage(s.g, g) : nullptr;
                p.a = a ? stage(s.a, a) : nullptr;
                if (g && y)
                    mask_by_positive(s.g.data(), stage(s.y, y), rows * n);
                p.stride = n;
            }
            else
            {
                p.x = x ? x + offset : nullptr;
                p.g = g ? g + offset : nullptr;
                p.a = a ? a + offset : nullptr;
                p.y = g && y ? y + offset : nullptr;
                p.stride = stride;
            }
            return p;
        }
    };

    /// One x-like output, staged exactly when the inputs of the same T and S are (operands):
    /// written by the functors in place, or into scratch and rounded to T by finish().
    template <class T, class S>
    struct output_operand
    {
        using ptr_type = typename operands<T, S>::ptr_type;
        using scratch = typename operands<T, S>::scratch;

        T* out;
        bool f16c;

        /// Where the functors write one piece (as operands::begin) and its row stride.
        struct piece
        {
            ptr_type* out;
            std::int64_t stride;
        };

        piece begin(scratch& s, std::int64_t offset, std::int64_t n, std::int64_t stride) const noexcept
        {
            if constexpr (operands<T, S>::staged())
                return {s.out.data(), n};
            else
                return {out + offset, stride};
        }

        /// Writes a staged piece back (rounded once to T); nothing when in place.
        void finish(const scratch& s, std::int64_t offset, std::int64_t rows, std::int64_t n, std::int64_t stride) const
        {
            if constexpr (operands<T, S>::staged())
                narrow_rows(out + offset, s.out.data(), rows, n, stride, f16c);
        }
    };
}
