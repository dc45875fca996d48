#pragma once
// Bodies of the SIMD functors declared in simd/kernels.hpp. Included ONLY by the
// per-instruction-set translation units (simd/sse2.cpp, simd/avx2.cpp), each compiled with
// its own flags and explicitly instantiating the functors for its one architecture.
//
// Every helper here is a template on the architecture, so each translation unit emits only
// its own instantiations: no inline function compiled with -mavx2 can be merged by the linker
// into code that a pre-AVX2 processor runs. For the same reason this file calls no standard
// library math; the scalar tails go through the same vector code (one padded batch), so an
// element's result does not depend on its position in the array.
//
// Accuracy, measured with this code at both sse2 and avx2_fma: max error in ulp against glibc's
// std:: function / against the true value (computed in double for float32, long double for
// float64). float32: every 61st bit pattern of all 2^32 floats (7*10^7 values); float64: 2*10^7
// values (random bit patterns, uniform on [-800, 800], log-uniform over every exponent).
//             float32      float64
//   exp       1 / 1        1 / 1     for |x| <= 80 (float32), 700 (float64)
//             3 / 3        2 / 2     beyond that (exp_full squares e^(x/2))
//   log       1 / 1        1 / 1     subnormal inputs included (log_full)
//   tanh      2 / 1        2 / 1
//   sigmoid   3 / 3        2 / 2
//   log1p     1            1         against glibc, 4*10^6 values each, uniform on (-1, 1e4) and
//   expm1     2            2         log-uniform on (0, 1e-30) of both signs (expm1: up to the
//   erf       3            --        overflow thresholds); float64 erf is libm's, not this code
//   sqrt, rsqrt: exact (sqrt is IEEE-exact; rsqrt is 1 / sqrt(x), not the approximate rsqrt
//   instruction, so it equals the scalar 1 / std::sqrt(x) bit for bit).
// NaN results agree everywhere. tests/backends/cpu/test_cpu_kernels_elementwise.cpp allows 4 ulp against the
// reference.
#include <algorithm>
#include <cstring>
#include <type_traits>

#include "backends/cpu/simd/kernels.hpp"

namespace xgrad::cpu::simd
{
    namespace impl
    {
        template <class Arch, class T>
        using batch = xsimd::batch<T, Arch>;

        template <class Arch, class T>
        constexpr std::int64_t lanes = static_cast<std::int64_t>(batch<Arch, T>::size);

        /// An input of an elementwise loop: contiguous, or one scalar broadcast to every lane.
        template <class Arch, class T, bool Contiguous>
        struct operand;

        template <class Arch, class T>
        struct operand<Arch, T, true>
        {
            const T* p;

            batch<Arch, T> load(std::int64_t i) const noexcept { return batch<Arch, T>::load_unaligned(p + i); }
            /// The last, partial batch: rem < lanes valid elements, padded with 1 (harmless for
            /// every op: no division by zero, no log of zero).
            batch<Arch, T> load_tail(std::int64_t i, std::int64_t rem) const noexcept
            {
                alignas(64) T buf[lanes<Arch, T>];
                for (std::int64_t j = 0; j < lanes<Arch, T>; ++j)
                    buf[j] = j < rem ? p[i + j] : T(1);
                return batch<Arch, T>::load_aligned(buf);
            }
        };

        template <class Arch, class T>
        struct operand<Arch, T, false>
        {
            batch<Arch, T> value;

            batch<Arch, T> load(std::int64_t) const noexcept { return value; }
            batch<Arch, T> load_tail(std::int64_t, std::int64_t) const noexcept { return value; }
        };

        /// Calls k(operand) with the operand kind picked by stride (0: broadcast, else contiguous),
        /// so the loops below are compiled once per combination with no branch inside.
        template <class Arch, class T, class K>
        void with_operand(const T* p, std::int64_t stride, K&& k) noexcept
        {
            if (stride != 0)
                k(operand<Arch, T, true>{p});
            else
                k(operand<Arch, T, false>{batch<Arch, T>(*p)});
        }

        /// out[i] = f(inputs at i...) for i < n, whole batches then one padded batch.
        template <class Arch, class T, class F, class... Operands>
        void map(T* out, std::int64_t n, F f, const Operands&... in) noexcept
        {
            constexpr std::int64_t w = lanes<Arch, T>;
            std::int64_t i = 0;
            for (; i + w <= n; i += w)
                f(in.load(i)...).store_unaligned(out + i);
            if (i < n)
            {
                alignas(64) T buf[w];
                f(in.load_tail(i, n - i)...).store_aligned(buf);
                for (std::int64_t j = 0; j < n - i; ++j)
                    out[i + j] = buf[j];
            }
        }

        /// max that propagates NaN: takes v when v > acc or v is NaN; a NaN acc stays. (Not
        /// v != v: xsimd's AVX != is the ordered compare, false for NaN.)
        template <class Arch, class T>
        batch<Arch, T> max_nan(const batch<Arch, T>& acc, const batch<Arch, T>& v) noexcept
        {
            return xsimd::select((v > acc) | xsimd::isnan(v), v, acc);
        }

        /// e^x over the whole range. xsimd::exp scales by 2^k with an exponent-field ldexp, so
        /// it returns inf from x = 127.5 ln 2 (88.38) in float and 1023.5 ln 2 (709.4) in double,
        /// below the true overflow thresholds (88.72, 709.78), and 0 where the result is
        /// subnormal. Beyond |x| > edge, e^x = (e^(x/2))^2: x/2 is exact and e^(x/2) normal, so
        /// this costs up to two more ulps (see the file comment), and only on those lanes.
        template <class Arch, class T>
        batch<Arch, T> exp_full(const batch<Arch, T>& x) noexcept
        {
            using B = batch<Arch, T>;
            const B edge(sizeof(T) == 4 ? T(80) : T(700));
            const B e = xsimd::exp(x);
            const auto outside = xsimd::abs(x) > edge;
            if (!xsimd::any(outside))
                return e;
            const B half = xsimd::exp(x * B(T(0.5)));
            return xsimd::select(outside, B(half * half), e);
        }

        /// ln x over the whole range. xsimd::log reads the exponent field directly and is wrong
        /// for subnormal x; those are scaled by 2^64 into the normal range first:
        /// ln x = ln(x 2^64) - 64 ln 2.
        template <class Arch, class T>
        batch<Arch, T> log_full(const batch<Arch, T>& x) noexcept
        {
            using B = batch<Arch, T>;
            const B smallest_normal(sizeof(T) == 4 ? T(0x1p-126f) : T(0x1p-1022));
            const auto subnormal = (x < smallest_normal) & (x > B(T(0)));
            if (!xsimd::any(subnormal))
                return xsimd::log(x);
            const B scaled = xsimd::select(subnormal, B(x * B(T(0x1p64))), x);
            return xsimd::log(scaled) - xsimd::select(subnormal, B(T(44.361419555836499802702855773323)), B(T(0)));
        }

        template <class Arch, class T>
        T max_nan_scalar(T acc, T v) noexcept
        {
            return (v > acc || v != v) ? v : acc;
        }

        /// The lanes of s combined pairwise (lane j with lane j + half, halving).
        template <class Arch, class T, bool Sum>
        T combine_lanes(const batch<Arch, T>& s) noexcept
        {
            constexpr std::int64_t w = lanes<Arch, T>;
            alignas(64) T v[w];
            s.store_aligned(v);
            for (std::int64_t half = w / 2; half >= 1; half /= 2)
                for (std::int64_t j = 0; j < half; ++j)
                    v[j] = Sum ? v[j] + v[j + half] : max_nan_scalar<Arch, T>(v[j], v[j + half]);
            return v[0];
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
    void unary_fn::operator()(Arch, T* out, const T* x, std::int64_t x_stride, std::int64_t n,
                              kernels::unary_op op) const noexcept
    {
        using B = impl::batch<Arch, T>;
        using kernels::unary_op;
        impl::with_operand<Arch>(x, x_stride, [&](const auto& in) {
            auto run = [&](auto f) { impl::map<Arch>(out, n, f, in); };
            switch (op)
            {
            case unary_op::neg: return run([](const B& v) { return B(-v); });
            case unary_op::exp: return run([](const B& v) { return impl::exp_full(v); });
            case unary_op::log: return run([](const B& v) { return impl::log_full(v); });
            case unary_op::sqrt: return run([](const B& v) { return xsimd::sqrt(v); });
            case unary_op::rsqrt: return run([](const B& v) { return B(B(T(1)) / xsimd::sqrt(v)); });
            case unary_op::abs: return run([](const B& v) { return xsimd::abs(v); });
            // v < 0 is false for NaN, so relu(NaN) = NaN.
            case unary_op::relu: return run([](const B& v) { return xsimd::select(v < B(T(0)), B(T(0)), v); });
            case unary_op::sigmoid:
                // e = exp(-|v|) <= 1 never overflows: 1 / (1 + e) for v >= 0, e / (1 + e) below.
                return run([](const B& v) {
                    const B e = impl::exp_full(B(-xsimd::abs(v)));
                    const B d = B(T(1)) + e;
                    return xsimd::select(v >= B(T(0)), B(B(T(1)) / d), B(e / d));
                });
            case unary_op::tanh: return run([](const B& v) { return xsimd::tanh(v); });
            case unary_op::log1p: return run([](const B& v) { return xsimd::log1p(v); });
            case unary_op::expm1:
                // xsimd::expm1 overflows early as xsimd::exp does; above the edge e^x - 1 is
                // e^x to the last bit, so exp_full serves there.
                return run([](const B& v) {
                    const B edge(sizeof(T) == 4 ? T(80) : T(700));
                    return xsimd::select(v > edge, impl::exp_full(v), xsimd::expm1(v));
                });
            // Used for float32 only: xsimd's float64 erf is off by up to 68 ulp, so the fast
            // kernel computes float64 erf with libm (backends/cpu/kernels/elementwise.cpp).
            case unary_op::erf: return run([](const B& v) { return xsimd::erf(v); });
            }
        });
    }

    template <class Arch, class T>
    void binary_fn::operator()(Arch, T* out, const T* a, std::int64_t a_stride, const T* b, std::int64_t b_stride,
                               std::int64_t n, kernels::binary_op op) const noexcept
    {
        using B = impl::batch<Arch, T>;
        using kernels::binary_op;
        impl::with_operand<Arch>(a, a_stride, [&](const auto& in_a) {
            impl::with_operand<Arch>(b, b_stride, [&](const auto& in_b) {
                auto run = [&](auto f) { impl::map<Arch>(out, n, f, in_a, in_b); };
                const B one(T(1)), zero(T(0));
                switch (op)
                {
                case binary_op::add: return run([](const B& x, const B& y) { return B(x + y); });
                case binary_op::sub: return run([](const B& x, const B& y) { return B(x - y); });
                case binary_op::mul: return run([](const B& x, const B& y) { return B(x * y); });
                case binary_op::div: return run([](const B& x, const B& y) { return B(x / y); });
                case binary_op::pow:
                    return; // never passed here (see simd/kernels.hpp)
                // Ordered comparisons are false with a NaN operand, as in C++. ne is !(x == y):
                // xsimd's AVX != is the ordered _CMP_NEQ_OQ, which is false for NaN.
                case binary_op::eq:
                    return run([&](const B& x, const B& y) { return xsimd::select(x == y, one, zero); });
                case binary_op::ne:
                    return run([&](const B& x, const B& y) { return xsimd::select(x == y, zero, one); });
                case binary_op::lt: return run([&](const B& x, const B& y) { return xsimd::select(x < y, one, zero); });
                case binary_op::le:
                    return run([&](const B& x, const B& y) { return xsimd::select(x <= y, one, zero); });
                case binary_op::gt: return run([&](const B& x, const B& y) { return xsimd::select(x > y, one, zero); });
                case binary_op::ge:
                    return run([&](const B& x, const B& y) { return xsimd::select(x >= y, one, zero); });
                }
            });
        });
    }

    template <class Arch, class T>
    void where_fn::operator()(Arch, T* out, const T* cond, std::int64_t c_stride, const T* a, std::int64_t a_stride,
                              const T* b, std::int64_t b_stride, std::int64_t n) const noexcept
    {
        using B = impl::batch<Arch, T>;
        impl::with_operand<Arch>(cond, c_stride, [&](const auto& in_c) {
            impl::with_operand<Arch>(a, a_stride, [&](const auto& in_a) {
                impl::with_operand<Arch>(b, b_stride, [&](const auto& in_b) {
                    // c == 0 is false for NaN, so a NaN condition selects a (NaN != 0 in C++).
                    impl::map<Arch>(
                        out, n, [](const B& c, const B& x, const B& y) { return xsimd::select(c == B(T(0)), y, x); },
                        in_c, in_a, in_b);
                });
            });
        });
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

    // The max-pooling row and channel loops are plain loops, not xsimd batches: GCC vectorises
    // both at -O3 in each instruction set's translation unit (the 2x2 one with its even/odd
    // permutes, which xsimd 8 does not offer); the plane loop gathers with xsimd, which GCC does
    // not do on its own here. The selection is exact comparisons, so the result of an element
    // does not depend on the vector width or on whether it falls in a tail.
    // `take` below is the kernel's rule: the best so far is a number and v is larger or NaN.

    namespace impl
    {
        /// Max pooling compares bfloat16 elements as the floats they are (their bits shifted
        /// up, exact) and writes back the chosen element's own bits: `key` widens, `from_key`
        /// narrows a key that came from an element (exact: no rounding, NaN payloads kept).
        /// For float and double both are the identity.
        template <class T>
        auto key(T v) noexcept
        {
            if constexpr (std::is_same_v<T, bfloat16_t>)
            {
                const std::uint32_t u = std::uint32_t{v.bits} << 16;
                float f;
                std::memcpy(&f, &u, 4);
                return f;
            }
            else
                return v;
        }
        template <class T, class K>
        T from_key(K k) noexcept
        {
            if constexpr (std::is_same_v<T, bfloat16_t>)
            {
                std::uint32_t u;
                std::memcpy(&u, &k, 4);
                return T{static_cast<std::uint16_t>(u >> 16)};
            }
            else
                return k;
        }

        /// One step of max pooling's search: takes tap v (at position p) when the best so far is
        /// a number and v is larger or NaN, so that the first maximum in tap order wins and the
        /// first NaN wins over numbers. Branch-free, so that the loops calling it vectorise.
        template <class T>
        void max_pool_pick(T& best, std::int64_t& at, T v, std::int64_t p) noexcept
        {
            const bool take = best == best && !(v <= best);
            best = take ? v : best;
            at = take ? p : at;
        }

        /// The 2x2 window with its first tap at x[q]: taps q, q + 1, q + row, q + row + 1 in
        /// that order; writes their maximum to best and returns the chosen tap's offset.
        template <class T>
        std::int64_t max_pool_2x2(const T* x, std::int64_t q, std::int64_t row, T& best) noexcept
        {
            const T b = x[q + 1], c = x[q + row], d = x[q + row + 1];
            best = x[q];
            std::int64_t at = q;
            max_pool_pick(best, at, b, q + 1);
            max_pool_pick(best, at, c, q + row);
            max_pool_pick(best, at, d, q + row + 1);
            return at;
        }
    }

    template <class Arch, class T>
    void max_pool_2x2_row_fn::operator()(Arch, T* out, std::int64_t* idx, const T* r0, std::int64_t row,
                                         std::int64_t base, std::int64_t n) const noexcept
    {
        for (std::int64_t o = 0; o < n; ++o)
            idx[o] = base + impl::max_pool_2x2(r0, 2 * o, row, out[o]);
    }

    template <class Arch, class T>
    void max_pool_2x2_plane_fn::operator()(Arch, T* out, std::int64_t* idx, const T* x, const std::int32_t* offsets,
                                           std::int32_t row, std::int64_t base, std::int64_t n) const noexcept
    {
        // Four gathers per batch of windows; the chosen tap is kept as a code 0..3 (exact in
        // T) and turned into its offset when stored. `take` is the rule of the row loop above,
        // written with isnan because xsimd's != is the ordered compare on some sets.
        std::int64_t o = 0;
        if constexpr (std::is_same_v<T, float>)
        {
            using B = impl::batch<Arch, float>;
            using I = impl::batch<Arch, std::int32_t>;
            constexpr std::int64_t w = impl::lanes<Arch, float>;
            static_assert(static_cast<std::int64_t>(I::size) == w, "one int32 offset per float lane");
            const I one(1), down(row);
            for (; o + w <= n; o += w)
            {
                const I p = I::load_unaligned(offsets + o);
                B best = B::gather(x, p), code(0.0f);
                const auto pick = [&](const B& v, float k) {
                    const auto take = ~xsimd::isnan(best) & ((v > best) | xsimd::isnan(v));
                    best = xsimd::select(take, v, best);
                    code = xsimd::select(take, B(k), code);
                };
                pick(B::gather(x, p + one), 1.0f);
                pick(B::gather(x, p + down), 2.0f);
                pick(B::gather(x, p + down + one), 3.0f);
                best.store_unaligned(out + o);
                alignas(64) float chosen[w];
                code.store_aligned(chosen);
                for (std::int64_t j = 0; j < w; ++j)
                {
                    const auto c = static_cast<std::int64_t>(chosen[j]);
                    idx[o + j] = base + offsets[o + j] + (c >> 1) * row + (c & 1);
                }
            }
        }
        for (; o < n; ++o)
            idx[o] = base + impl::max_pool_2x2(x, offsets[o], row, out[o]);
    }

    template <class Arch, class T>
    void max_pool_taps_fn::operator()(Arch, T* out, std::int64_t out_step, std::int64_t* idx, std::int64_t idx_step,
                                      const T* x, std::int64_t x_step, const std::int64_t* offsets, std::int64_t ntaps,
                                      std::int64_t base, std::int64_t n, std::int64_t windows) const noexcept
    {
        // A whole output row per call: with the 32 or 64 channels of a small CNN a window is
        // only a few vectors, and a dispatched call per window cost about as much as its loads
        // (kernels_bench's channels-last pool ran 25-35% faster against the copy probe).
        for (std::int64_t w = 0; w < windows; ++w)
        {
            T* __restrict o = out + w * out_step;
            std::int64_t* __restrict id = idx + w * idx_step;
            const T* xw = x + w * x_step;
            const std::int64_t at = base + w * x_step;
            if (ntaps == 4)
            {
                // The 2x2 window: the four taps of a channel in registers, the maximum and its
                // position selected without branches, one store of each.
                const T *x0 = xw + offsets[0], *x1 = xw + offsets[1], *x2 = xw + offsets[2], *x3 = xw + offsets[3];
                const std::int64_t p0 = at + offsets[0], p1 = at + offsets[1], p2 = at + offsets[2],
                                   p3 = at + offsets[3];
                for (std::int64_t j = 0; j < n; ++j)
                {
                    auto best = impl::key(x0[j]);
                    std::int64_t pos = p0;
                    impl::max_pool_pick(best, pos, impl::key(x1[j]), p1);
                    impl::max_pool_pick(best, pos, impl::key(x2[j]), p2);
                    impl::max_pool_pick(best, pos, impl::key(x3[j]), p3);
                    o[j] = impl::from_key<T>(best);
                    id[j] = pos + j;
                }
                continue;
            }
            // Any other window, tap by tap over the run (o and id stay in L1 for the channel
            // counts of a CNN), so that the inner loop is contiguous; id holds the chosen
            // tap's offset until the last pass adds the window's position and the channel.
            const T* x0 = xw + offsets[0];
            for (std::int64_t j = 0; j < n; ++j)
            {
                o[j] = x0[j];
                id[j] = offsets[0];
            }
            for (std::int64_t k = 1; k < ntaps; ++k)
            {
                const T* xk = xw + offsets[k];
                const std::int64_t off = offsets[k];
                for (std::int64_t j = 0; j < n; ++j)
                {
                    auto best = impl::key(o[j]);
                    impl::max_pool_pick(best, id[j], impl::key(xk[j]), off);
                    o[j] = impl::from_key<T>(best);
                }
            }
            for (std::int64_t j = 0; j < n; ++j)
                id[j] += at + j;
        }
    }

    namespace impl
    {
        /// max_pool_grad_row_fn's loops, with (Masked) or without the ReLU mask y > 0.
        template <bool Masked, class T>
        void max_pool_grad_row(T* dx, std::int64_t dx_step, const T* g, std::int64_t g_step, const std::int64_t* idx,
                               std::int64_t idx_step, const T* y, const std::int64_t* window, std::int64_t pos,
                               std::int64_t width, std::int64_t c) noexcept
        {
            for (std::int64_t w = 0; w < width; ++w)
            {
                T* __restrict o = dx + w * dx_step;
                const std::int64_t ow = window[w];
                if (ow < 0)
                {
                    for (std::int64_t j = 0; j < c; ++j)
                        o[j] = T{};
                    continue;
                }
                const T* __restrict gw = g + ow * g_step;
                const T* __restrict yw = Masked ? y + ow * idx_step : nullptr;
                const std::int64_t* __restrict iw = idx + ow * idx_step;
                const std::int64_t p = pos + w * dx_step;
                if constexpr (std::is_same_v<T, bfloat16_t>)
                {
                    // The same on the bits, so that the loop vectorises: y > 0 is a positive
                    // number (sign clear, not zero, not NaN); 0 + g is g with -0 made +0 and a
                    // NaN quieted.
                    for (std::int64_t j = 0; j < c; ++j)
                    {
                        const std::uint16_t gb = gw[j].bits, yb = Masked ? yw[j].bits : std::uint16_t{1};
                        const bool open = !Masked || (yb != 0 && yb <= 0x7f80u);
                        const std::uint16_t sum = gb == 0x8000u              ? std::uint16_t{0}
                                                  : (gb & 0x7fffu) > 0x7f80u ? std::uint16_t(gb | 0x40u)
                                                                             : gb;
                        o[j].bits = iw[j] == p + j && open ? sum : std::uint16_t{0};
                    }
                }
                else
                    for (std::int64_t j = 0; j < c; ++j)
                        o[j] = iw[j] == p + j && (!Masked || yw[j] > T(0)) ? T(0) + gw[j] : T(0);
            }
        }
    }

    template <class Arch, class T>
    void max_pool_grad_row_fn::operator()(Arch, T* dx, std::int64_t dx_step, const T* g, std::int64_t g_step,
                                          const std::int64_t* idx, std::int64_t idx_step, const T* y,
                                          const std::int64_t* window, std::int64_t pos, std::int64_t width,
                                          std::int64_t c) const noexcept
    {
        // Plain channel loops that the compiler vectorises at each level (a 64-bit compare
        // selecting between the term and zero, and with y a second compare); 0 + g keeps
        // put_add's sum, which turns -0 into +0.
        if (y)
            impl::max_pool_grad_row<true>(dx, dx_step, g, g_step, idx, idx_step, y, window, pos, width, c);
        else
            impl::max_pool_grad_row<false>(dx, dx_step, g, g_step, idx, idx_step, y, window, pos, width, c);
    }
    // The direct convolution's products (kernels/conv.cpp): xsimd batches across output
    // channels, each tap's input broadcast. The last o % lanes channels go through the same
    // vector code on zero-padded copies (of the weights' and bias's last columns, of dy's), so
    // a channel's result does not depend on whether it falls in a tail.
    namespace impl
    {
        /// The forward's register tile: P positions by J batches of output channels, J * P
        /// accumulators, J weight batches and one broadcast input live at once: J is 4 where
        /// there are 32 vector registers (AVX-512) and 2 where there are 16, and P at most what
        /// the registers left hold, 12 at most. Per tap, the tile makes J * P fused
        /// multiply-adds from J loads and P broadcasts: 24 from 10 at AVX-512 for 4 x 6, within
        /// the two loads per cycle that two fma units need.
        template <class Arch, class T>
        constexpr int conv_tile_vectors = sizeof(batch<Arch, T>) == 64 ? 4 : 2;
        template <class Arch, class T, int J>
        constexpr int conv_tile_positions = std::min((sizeof(batch<Arch, T>) == 64 ? 32 : 16) - J - 1, 12 * J) / J;

        /// Taps per pass over a row's positions: the pass's weights (J batches per tap) take
        /// 24 KiB, so that they stay in L1 (32-48 KiB on the machines measured) while every
        /// tile of the row uses them, beside the few input rows a tile reads. The partial sums
        /// wait in y between passes, which changes no bit (each element's fma chain runs in
        /// the same order). On the example's second convolution (288 taps, 64 channels, 14
        /// positions a row) 96 taps a pass ran 1.66-1.77 ms against 1.83 ms for one pass of all
        /// 288 (kernels_bench, AVX-512, 2 threads).
        template <class Arch, class T, int J>
        constexpr std::int64_t conv_tap_chunk = (24 << 10) / (J * static_cast<std::int64_t>(sizeof(batch<Arch, T>)));

        /// y[q * o + v * lanes + i] = init + the taps of position q (at x + q * x_step) times
        /// weight row t (w + t * w_step + v * lanes), tap by tap, for q < P, v < J; the last
        /// batch stores only its first `last` lanes. init is bias[v * lanes + i], or 0 where
        /// bias is null.
        template <class Arch, class T, int P, int J>
        void conv_taps_tile(T* y, std::int64_t o, const T* x, std::int64_t x_step, const std::int64_t* taps,
                            std::int64_t k, const T* w, std::int64_t w_step, const T* bias, std::int64_t last,
                            bool first) noexcept
        {
            using b = batch<Arch, T>;
            constexpr std::int64_t L = lanes<Arch, T>;
            b acc[P][J];
            if (first)
                for (int v = 0; v < J; ++v)
                {
                    const b init = bias != nullptr ? b::load_unaligned(bias + v * L) : b(T(0));
                    for (int q = 0; q < P; ++q)
                        acc[q][v] = init;
                }
            else
                for (int q = 0; q < P; ++q)
                    for (int v = 0; v < J; ++v)
                    {
                        if (v + 1 < J || last == L)
                            acc[q][v] = b::load_unaligned(y + q * o + v * L);
                        else
                        {
                            alignas(64) T tmp[L] = {};
                            std::copy(y + q * o + v * L, y + q * o + v * L + last, tmp);
                            acc[q][v] = b::load_aligned(tmp);
                        }
                    }
            for (std::int64_t t = 0; t < k; ++t)
            {
                b wv[J];
                for (int v = 0; v < J; ++v)
                    wv[v] = b::load_unaligned(w + t * w_step + v * L);
                const T* xt = x + taps[t];
                for (int q = 0; q < P; ++q)
                {
                    const b xv(xt[q * x_step]);
                    for (int v = 0; v < J; ++v)
                        acc[q][v] = xsimd::fma(xv, wv[v], acc[q][v]);
                }
            }
            for (int q = 0; q < P; ++q)
            {
                for (int v = 0; v + 1 < J; ++v)
                    acc[q][v].store_unaligned(y + q * o + v * L);
                if (last == L)
                    acc[q][J - 1].store_unaligned(y + q * o + (J - 1) * L);
                else
                {
                    alignas(64) T tmp[L];
                    acc[q][J - 1].store_aligned(tmp);
                    std::copy(tmp, tmp + last, y + q * o + (J - 1) * L);
                }
            }
        }

        /// One tile of 1 <= n <= M positions, n chosen at run time.
        template <class Arch, class T, int J, int M>
        void conv_taps_tail(std::int64_t n, T* y, std::int64_t o, const T* x, std::int64_t x_step,
                            const std::int64_t* taps, std::int64_t k, const T* w, std::int64_t w_step, const T* bias,
                            std::int64_t last, bool first) noexcept
        {
            if constexpr (M >= 1)
            {
                if (n == M)
                    conv_taps_tile<Arch, T, M, J>(y, o, x, x_step, taps, k, w, w_step, bias, last, first);
                else
                    conv_taps_tail<Arch, T, J, M - 1>(n, y, o, x, x_step, taps, k, w, w_step, bias, last, first);
            }
        }

        /// Positions [0, np) over J batches of channels: whole tiles, then one narrower tile.
        template <class Arch, class T, int J>
        void conv_taps_columns(T* y, std::int64_t o, const T* x, std::int64_t x_step, const std::int64_t* taps,
                               std::int64_t k, const T* w, std::int64_t w_step, const T* bias, std::int64_t np,
                               std::int64_t last) noexcept
        {
            // A row's positions go in tiles of nearly equal size, at most P: with tiles of P and
            // one short tile, the example's 14-position rows left 2-position tiles, whose few
            // independent fma chains run at half speed (22% of its input gradient's time in a
            // profile, for 1/7 of the work).
            constexpr int P = conv_tile_positions<Arch, T, J>;
            constexpr std::int64_t chunk = conv_tap_chunk<Arch, T, J>;
            const std::int64_t tiles = (np + P - 1) / P;
            for (std::int64_t t0 = 0; t0 < k; t0 += chunk)
            {
                const std::int64_t kc = std::min(chunk, k - t0);
                const T* wc = w + t0 * w_step;
                const std::int64_t* tc = taps + t0;
                for (std::int64_t p = 0, tile = 0; p < np; ++tile)
                {
                    const std::int64_t n = (np - p + (tiles - tile) - 1) / (tiles - tile);
                    conv_taps_tail<Arch, T, J, P>(n, y + p * o, o, x + p * x_step, x_step, tc, kc, wc, w_step, bias,
                                                  last, t0 == 0);
                    p += n;
                }
            }
        }

        /// NT taps of the weight gradient over JV batches of channels: dw[i * dw_step + v *
        /// lanes] += the sum over r < rows and p < np of x[r * x_row + p * x_step + taps[i]] *
        /// dy[(r * np + p) * dy_step + v * lanes], (r, p) in order, for i < NT and v < JV. The
        /// NT * JV accumulators stay in registers for all the rows, and are that many
        /// independent fma chains.
        template <class Arch, class T, int NT, int JV>
        void conv_taps_grad_tile(T* dw, std::int64_t dw_step, const T* x, std::int64_t x_step, const std::int64_t* taps,
                                 const T* dy, std::int64_t dy_step, std::int64_t np, std::int64_t rows,
                                 std::int64_t x_row) noexcept
        {
            constexpr std::int64_t w = lanes<Arch, T>;
            batch<Arch, T> acc[NT][JV];
            std::int64_t off[NT];
            for (int i = 0; i < NT; ++i)
            {
                off[i] = taps[i];
                for (int v = 0; v < JV; ++v)
                    acc[i][v] = batch<Arch, T>::load_unaligned(dw + i * dw_step + v * w);
            }
            for (std::int64_t r = 0; r < rows; ++r)
                for (std::int64_t p = 0; p < np; ++p)
                {
                    batch<Arch, T> d[JV];
                    for (int v = 0; v < JV; ++v)
                        d[v] = batch<Arch, T>::load_unaligned(dy + (r * np + p) * dy_step + v * w);
                    const T* xp = x + r * x_row + p * x_step;
                    for (int i = 0; i < NT; ++i)
                    {
                        const batch<Arch, T> xv(xp[off[i]]);
                        for (int v = 0; v < JV; ++v)
                            acc[i][v] = xsimd::fma(xv, d[v], acc[i][v]);
                    }
                }
            for (int i = 0; i < NT; ++i)
                for (int v = 0; v < JV; ++v)
                    acc[i][v].store_unaligned(dw + i * dw_step + v * w);
        }

        /// Every tap over JV batches of channels, in tiles of nearly equal size of at most 8
        /// taps (6 for two batches where there are only 16 vector registers).
        template <class Arch, class T, int JV>
        void conv_taps_grad_column(T* dw, std::int64_t dw_step, const T* x, std::int64_t x_step,
                                   const std::int64_t* taps, std::int64_t k, const T* dy, std::int64_t dy_step,
                                   std::int64_t np, std::int64_t rows, std::int64_t x_row) noexcept
        {
            constexpr std::int64_t most = JV == 1 || sizeof(batch<Arch, T>) == 64 ? 8 : 6;
            const std::int64_t tiles = (k + most - 1) / most;
            for (std::int64_t t0 = 0, tile = 0; t0 < k; ++tile)
            {
                const std::int64_t nt = (k - t0 + (tiles - tile) - 1) / (tiles - tile);
                T* d = dw + t0 * dw_step;
                const std::int64_t* tp = taps + t0;
                switch (nt)
                {
                case 1:
                    conv_taps_grad_tile<Arch, T, 1, JV>(d, dw_step, x, x_step, tp, dy, dy_step, np, rows, x_row);
                    break;
                case 2:
                    conv_taps_grad_tile<Arch, T, 2, JV>(d, dw_step, x, x_step, tp, dy, dy_step, np, rows, x_row);
                    break;
                case 3:
                    conv_taps_grad_tile<Arch, T, 3, JV>(d, dw_step, x, x_step, tp, dy, dy_step, np, rows, x_row);
                    break;
                case 4:
                    conv_taps_grad_tile<Arch, T, 4, JV>(d, dw_step, x, x_step, tp, dy, dy_step, np, rows, x_row);
                    break;
                case 5:
                    conv_taps_grad_tile<Arch, T, 5, JV>(d, dw_step, x, x_step, tp, dy, dy_step, np, rows, x_row);
                    break;
                case 6:
                    conv_taps_grad_tile<Arch, T, 6, JV>(d, dw_step, x, x_step, tp, dy, dy_step, np, rows, x_row);
                    break;
                case 7:
                    conv_taps_grad_tile<Arch, T, 7, JV>(d, dw_step, x, x_step, tp, dy, dy_step, np, rows, x_row);
                    break;
                default:
                    conv_taps_grad_tile<Arch, T, 8, JV>(d, dw_step, x, x_step, tp, dy, dy_step, np, rows, x_row);
                    break;
                }
                t0 += nt;
            }
        }
    }

    template <class Arch, class T>
    void conv_taps_forward_fn::operator()(Arch, T* y, const T* x, std::int64_t x_step, const std::int64_t* taps,
                                          const T* w, std::int64_t w_step, const T* bias, std::int64_t np,
                                          std::int64_t k, std::int64_t o) const noexcept
    {
        constexpr std::int64_t L = impl::lanes<Arch, T>;
        constexpr int JM = impl::conv_tile_vectors<Arch, T>;
        const std::int64_t vectors = (o + L - 1) / L;
        for (std::int64_t j = 0; j < vectors; j += JM)
        {
            const std::int64_t nj = std::min<std::int64_t>(JM, vectors - j);
            const std::int64_t last = j + nj == vectors ? o - (vectors - 1) * L : L;
            T* yj = y + j * L;
            const T* wj = w + j * L;
            const T* bj = bias != nullptr ? bias + j * L : nullptr;
            if (nj == 1)
                impl::conv_taps_columns<Arch, T, 1>(yj, o, x, x_step, taps, k, wj, w_step, bj, np, last);
            else if (nj == 2)
                impl::conv_taps_columns<Arch, T, 2>(yj, o, x, x_step, taps, k, wj, w_step, bj, np, last);
            else if constexpr (JM == 4)
            {
                if (nj == 3)
                    impl::conv_taps_columns<Arch, T, 3>(yj, o, x, x_step, taps, k, wj, w_step, bj, np, last);
                else
                    impl::conv_taps_columns<Arch, T, 4>(yj, o, x, x_step, taps, k, wj, w_step, bj, np, last);
            }
        }
    }

    template <class Arch, class T>
    void conv_taps_weight_grad_fn::operator()(Arch, T* dw, const T* x, std::int64_t x_step, const std::int64_t* taps,
                                              const T* dy, std::int64_t np, std::int64_t rows, std::int64_t x_row,
                                              std::int64_t k, std::int64_t o) const noexcept
    {
        constexpr std::int64_t lanes = impl::lanes<Arch, T>;
        const std::int64_t full = o / lanes * lanes, rem = o - full;
        std::int64_t j = 0;
        for (; j + 2 * lanes <= full; j += 2 * lanes)
            impl::conv_taps_grad_column<Arch, T, 2>(dw + j, o, x, x_step, taps, k, dy + j, o, np, rows, x_row);
        if (j < full)
            impl::conv_taps_grad_column<Arch, T, 1>(dw + j, o, x, x_step, taps, k, dy + j, o, np, rows, x_row);
        if (rem == 0)
            return;
        // The last channels: dw's and dy's columns padded with zeros, dy 64 positions of a row
        // at a time (the positions still in order, so each sum's order is unchanged).
        constexpr std::int64_t piece = 64;
        alignas(64) T dwt[conv_taps_max * lanes];
        alignas(64) T dyt[piece * lanes];
        for (std::int64_t t = 0; t < k; ++t)
            for (std::int64_t i = 0; i < lanes; ++i)
                dwt[t * lanes + i] = i < rem ? dw[t * o + full + i] : T(0);
        for (std::int64_t r = 0; r < rows; ++r)
            for (std::int64_t p = 0; p < np; p += piece)
            {
                const std::int64_t n = std::min<std::int64_t>(piece, np - p);
                const T* dyr = dy + (r * np + p) * o;
                for (std::int64_t q = 0; q < n; ++q)
                    for (std::int64_t i = 0; i < lanes; ++i)
                        dyt[q * lanes + i] = i < rem ? dyr[q * o + full + i] : T(0);
                impl::conv_taps_grad_column<Arch, T, 1>(dwt, lanes, x + r * x_row + p * x_step, x_step, taps, k, dyt,
                                                        lanes, n, 1, 0);
            }
        for (std::int64_t t = 0; t < k; ++t)
            for (std::int64_t i = 0; i < rem; ++i)
                dw[t * o + full + i] = dwt[t * lanes + i];
    }
}
