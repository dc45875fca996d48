// The reference optimizer updates (sgd_step, adam_step): one single-threaded loop over the
// elements, each computed by the shared element formula (backends/common/optimizer_math.hpp)
// in the compute type (double for float64, float otherwise), 16-bit elements widened on load
// and rounded once on store. The fast kernels are tested against these.
#include <type_traits>

#include "backends/common/convert.hpp"
#include "backends/cpu/cpu_kernels.hpp"

namespace xgrad::cpu::reference
{
    using kernels::detail::convert;

    void sgd_step(void* param_out, void* momentum_out, const void* param, const void* grad, const void* momentum,
                  dtype dt, std::int64_t n, const kernels::sgd_step_coefficients& c)
    {
        kernels::detail::visit_with_stats(dt, [&](auto e, auto ct) {
            using E = decltype(e);
            using C = decltype(ct);
            const kernels::detail::sgd_constants<C> k(c);
            E* po = static_cast<E*>(param_out);
            E* bo = static_cast<E*>(momentum_out);
            const E* p = static_cast<const E*>(param);
            const E* g = static_cast<const E*>(grad);
            const E* b = static_cast<const E*>(momentum);
            for (std::int64_t i = 0; i < n; ++i)
            {
                C b_new = C(0);
                const C p_new = kernels::detail::sgd_element<C>(k, convert<C>(p[i]), convert<C>(g[i]),
                                                                b ? convert<C>(b[i]) : C(0), b == nullptr, b_new);
                if (bo)
                    bo[i] = convert<E>(b_new);
                po[i] = convert<E>(p_new);
            }
        });
    }

    void adam_step(void* param_out, void* exp_avg_out, void* exp_avg_sq_out, const void* param, const void* grad,
                   const void* exp_avg, const void* exp_avg_sq, dtype dt, std::int64_t n,
                   const kernels::adam_step_coefficients& c)
    {
        kernels::detail::visit_with_stats(dt, [&](auto e, auto ct) {
            using E = decltype(e);
            using C = decltype(ct);
            const kernels::detail::adam_constants<C> k(c);
            E* po = static_cast<E*>(param_out);
            E* mo = static_cast<E*>(exp_avg_out);
            E* vo = static_cast<E*>(exp_avg_sq_out);
            const E* p = static_cast<const E*>(param);
            const E* g = static_cast<const E*>(grad);
            const E* m = static_cast<const E*>(exp_avg);
            const E* v = static_cast<const E*>(exp_avg_sq);
            const bool first = m == nullptr;
            for (std::int64_t i = 0; i < n; ++i)
            {
                C m_new = C(0), v_new = C(0);
                const C p_new = kernels::detail::adam_element<C>(k, convert<C>(p[i]), convert<C>(g[i]),
                                                                 first ? C(0) : convert<C>(m[i]),
                                                                 first ? C(0) : convert<C>(v[i]), first, m_new, v_new);
                mo[i] = convert<E>(m_new);
                vo[i] = convert<E>(v_new);
                po[i] = convert<E>(p_new);
            }
        });
    }
}
