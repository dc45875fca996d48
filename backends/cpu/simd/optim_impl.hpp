#pragma once
// Bodies of the optimizer-update functors declared in simd/kernels.hpp (sgd_step_fn,
// adam_step_fn). Included ONLY by their per-instruction-set translation units
// (simd/optim_sse2.cpp, simd/optim_avx2.cpp), like simd/kernels_impl.hpp and for the same
// reasons.
//
// The math is the shared element formula of backends/common/optimizer_math.hpp instantiated
// with T = an xsimd batch, so every lane runs exactly the operations the reference kernel runs
// on one element. The last partial batch is padded (with 1: harmless for every operation of
// the rules) and goes through the same vector code, so an element's result does not depend on
// its position. Those files are built with -ffp-contract=off: a product and a sum fused into an
// fma would round once instead of twice, and the fast kernels would no longer give the
// reference's bits, which tests/backends/cpu/test_cpu_kernels_optim.cpp requires.
#include "backends/cpu/simd/kernels.hpp"

namespace xgrad::cpu::simd
{
    namespace optim_impl
    {
        template <class Arch, class T>
        using batch = xsimd::batch<T, Arch>;

        /// Lanes of a batch (a variable template, so that the lambdas below use it uncaptured).
        template <class Arch, class T>
        constexpr std::int64_t lanes = static_cast<std::int64_t>(batch<Arch, T>::size);

        /// n elements of a run, whole batches then one padded batch: f(i, load) where load(p)
        /// reads the batch of p at i (null p: zeros), then store(q, value) writes it (null q:
        /// nothing), both honouring the tail length.
        template <class Arch, class T, class F>
        void for_each_batch(std::int64_t n, F&& f) noexcept
        {
            constexpr std::int64_t w = lanes<Arch, T>;
            std::int64_t i = 0;
            for (; i + w <= n; i += w)
                f([i](const T* p) { return p ? batch<Arch, T>::load_unaligned(p + i) : batch<Arch, T>(T(0)); },
                  [i](T* q, const batch<Arch, T>& v) {
                      if (q)
                          v.store_unaligned(q + i);
                  });
            if (i < n)
            {
                const std::int64_t rem = n - i;
                f(
                    [i, rem](const T* p) {
                        alignas(64) T buf[lanes<Arch, T>];
                        for (std::int64_t j = 0; j < lanes<Arch, T>; ++j)
                            buf[j] = p ? (j < rem ? p[i + j] : T(1)) : T(0);
                        return batch<Arch, T>::load_aligned(buf);
                    },
                    [i, rem](T* q, const batch<Arch, T>& v) {
                        if (!q)
                            return;
                        alignas(64) T buf[lanes<Arch, T>];
                        v.store_aligned(buf);
                        for (std::int64_t j = 0; j < rem; ++j)
                            q[i + j] = buf[j];
                    });
            }
        }
    }

    template <class Arch, class T>
    void sgd_step_fn::operator()(Arch, T* param_out, T* momentum_out, const T* param, const T* grad, const T* momentum,
                                 std::int64_t n, const kernels::sgd_step_coefficients& c) const noexcept
    {
        using B = optim_impl::batch<Arch, T>;
        const kernels::detail::sgd_constants<B> k(c);
        const bool first = momentum == nullptr;
        optim_impl::for_each_batch<Arch, T>(n, [&](auto load, auto store) {
            B b_new(T(0));
            const B p_new = kernels::detail::sgd_element<B>(k, load(param), load(grad), load(momentum), first, b_new);
            store(momentum_out, b_new);
            store(param_out, p_new);
        });
    }

    template <class Arch, class T>
    void adam_step_fn::operator()(Arch, T* param_out, T* exp_avg_out, T* exp_avg_sq_out, const T* param, const T* grad,
                                  const T* exp_avg, const T* exp_avg_sq, std::int64_t n,
                                  const kernels::adam_step_coefficients& c) const noexcept
    {
        using B = optim_impl::batch<Arch, T>;
        const kernels::detail::adam_constants<B> k(c);
        const bool first = exp_avg == nullptr;
        optim_impl::for_each_batch<Arch, T>(n, [&](auto load, auto store) {
            B m_new(T(0)), v_new(T(0));
            const B p_new = kernels::detail::adam_element<B>(k, load(param), load(grad), load(exp_avg),
                                                             load(exp_avg_sq), first, m_new, v_new);
            store(exp_avg_out, m_new);
            store(exp_avg_sq_out, v_new);
            store(param_out, p_new);
        });
    }
}
