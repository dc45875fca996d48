// The CUDA backend's optimizer updates (sgd_step, adam_step), with the contracts of
// backends/common/kernel_list.hpp: one device thread per element, each computing the shared
// element formula of backends/common/optimizer_math.hpp (whose products are never contracted
// into an fma on the device), so the bits are the CPU's. 16-bit elements load as float and
// store rounded to nearest even (device_loop.hpp's element).
#include <cstdint>

#include "backends/common/optimizer_math.hpp"
#include "backends/cuda/device_loop.hpp"

namespace xgrad::cuda
{
    namespace
    {
        using detail::element;

        template <class E>
        void sgd_step_typed(void* param_out, void* momentum_out, const void* param, const void* grad,
                            const void* momentum, std::int64_t n, const kernels::sgd_step_coefficients& c)
        {
            using C = typename element<E>::compute_type;
            const kernels::detail::sgd_constants<C> k(c);
            detail::for_each_index(n, [=] XGRAD_HOST_DEVICE(std::int64_t i) {
                const bool first = momentum == nullptr;
                C b_new = C(0);
                const C p_new =
                    kernels::detail::sgd_element<C>(k, element<E>::load(param, i), element<E>::load(grad, i),
                                                    first ? C(0) : element<E>::load(momentum, i), first, b_new);
                if (momentum_out)
                    element<E>::store(momentum_out, i, b_new);
                element<E>::store(param_out, i, p_new);
            });
        }

        template <class E>
        void adam_step_typed(void* param_out, void* exp_avg_out, void* exp_avg_sq_out, const void* param,
                             const void* grad, const void* exp_avg, const void* exp_avg_sq, std::int64_t n,
                             const kernels::adam_step_coefficients& c)
        {
            using C = typename element<E>::compute_type;
            const kernels::detail::adam_constants<C> k(c);
            detail::for_each_index(n, [=] XGRAD_HOST_DEVICE(std::int64_t i) {
                const bool first = exp_avg == nullptr;
                C m_new = C(0), v_new = C(0);
                const C p_new = kernels::detail::adam_element<C>(
                    k, element<E>::load(param, i), element<E>::load(grad, i),
                    first ? C(0) : element<E>::load(exp_avg, i), first ? C(0) : element<E>::load(exp_avg_sq, i), first,
                    m_new, v_new);
                element<E>::store(exp_avg_out, i, m_new);
                element<E>::store(exp_avg_sq_out, i, v_new);
                element<E>::store(param_out, i, p_new);
            });
        }
    }

    void sgd_step(void* param_out, void* momentum_out, const void* param, const void* grad, const void* momentum,
                  dtype dt, std::int64_t n, const kernels::sgd_step_coefficients& c)
    {
        switch (dt)
        {
        case dtype::float32: return sgd_step_typed<float>(param_out, momentum_out, param, grad, momentum, n, c);
        case dtype::float64: return sgd_step_typed<double>(param_out, momentum_out, param, grad, momentum, n, c);
        case dtype::float16: return sgd_step_typed<float16_t>(param_out, momentum_out, param, grad, momentum, n, c);
        case dtype::bfloat16: return sgd_step_typed<bfloat16_t>(param_out, momentum_out, param, grad, momentum, n, c);
        case dtype::int64: break;
        }
        throw xgrad::invalid_argument("sgd_step: the dtype must be floating point, got int64");
    }

    void adam_step(void* param_out, void* exp_avg_out, void* exp_avg_sq_out, const void* param, const void* grad,
                   const void* exp_avg, const void* exp_avg_sq, dtype dt, std::int64_t n,
                   const kernels::adam_step_coefficients& c)
    {
        switch (dt)
        {
        case dtype::float32:
            return adam_step_typed<float>(param_out, exp_avg_out, exp_avg_sq_out, param, grad, exp_avg, exp_avg_sq, n,
                                          c);
        case dtype::float64:
            return adam_step_typed<double>(param_out, exp_avg_out, exp_avg_sq_out, param, grad, exp_avg, exp_avg_sq, n,
                                           c);
        case dtype::float16:
            return adam_step_typed<float16_t>(param_out, exp_avg_out, exp_avg_sq_out, param, grad, exp_avg, exp_avg_sq,
                                              n, c);
        case dtype::bfloat16:
            return adam_step_typed<bfloat16_t>(param_out, exp_avg_out, exp_avg_sq_out, param, grad, exp_avg, exp_avg_sq,
                                               n, c);
        case dtype::int64: break;
        }
        throw xgrad::invalid_argument("adam_step: the dtype must be floating point, got int64");
    }
}
