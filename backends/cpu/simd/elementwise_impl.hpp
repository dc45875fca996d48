#pragma once
// The elementwise SIMD functors' bodies (unary_fn, binary_fn, where_fn): the operands
// (contiguous or broadcast), the loop of whole batches and one padded tail batch, and the
// full-range exp and log that the unary ops build on.
// Included ONLY through simd/kernels_impl.hpp by the per-instruction-set translation units
// (simd/sse2.cpp, avx2.cpp, avx512.cpp); every helper is a template on the architecture, and no
// standard-library math is called (the rule and its reason: kernels_impl.hpp).
//
// The scalar tails go through the same vector code (one padded batch), so an element's result
// does not depend on its position in the array.
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
#include <cstdint>

#include "backends/cpu/simd/batch_impl.hpp"

namespace xgrad::cpu::simd
{
    namespace impl
    {
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
}
