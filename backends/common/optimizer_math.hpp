#pragma once
// The fused optimizer updates (kernels sgd_step and adam_step of kernel_list.hpp): their
// hyperparameters and the formula of one element, written once for every backend: T is a float
// or double for the element-at-a-time paths (the CPU reference kernels, the CUDA kernels) and an
// xsimd batch for the CPU fast kernels (backends/cpu/simd/optim_impl.hpp), which therefore run
// the very same operations on several elements at a time.
//
// The formulas are the optimizers' composite update rules (train/src/optim/sgd.cpp and adam.cpp,
// kept there as these kernels' oracle) operation for operation: every constant is converted to
// the compute type T once (as a double scalar operand of an op takes the tensor's dtype), and
// each product, sum, quotient and square root is one IEEE operation in T, in the same order.
// So a kernel that does not contract a * b + c into an fma gives the composite's bits: the
// products below go through mul(), which on the device is the never-contracted __fmul_rn /
// __dmul_rn (nvcc contracts by default), and the host compilers see no fma instruction in the
// files that include this header (none of them is built with -mfma).
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "xgrad/half.hpp" // XGRAD_HOST_DEVICE
#include "xgrad/optim_params.hpp"

namespace xgrad::kernels
{
    /// The steps' hyperparameters (xgrad/optim_params.hpp, where their formulas are stated),
    /// under the kernels' names: the kernels and the core op take the very same structs.
    using sgd_step_coefficients = xgrad::sgd_step_params;
    using adam_step_coefficients = xgrad::adam_step_params;

    namespace detail
    {
        /// a * b rounded once, never fused with a following addition.
        template <class T>
        XGRAD_HOST_DEVICE T mul(T a, T b)
        {
#if defined(__CUDA_ARCH__)
            if constexpr (std::is_same_v<T, float>)
                return __fmul_rn(a, b);
            else
                return __dmul_rn(a, b);
#else
            return a * b;
#endif
        }

        /// The SGD constants in the compute type T (a scalar, or a batch of its broadcasts).
        template <class T>
        struct sgd_constants
        {
            T lr, weight_decay, momentum, damp_keep; // damp_keep = 1 - dampening
            bool decay, has_momentum, damped, nesterov;

            explicit sgd_constants(const sgd_step_coefficients& c)
                : lr(T(c.lr)), weight_decay(T(c.weight_decay)), momentum(T(c.momentum)),
                  damp_keep(T(1.0 - c.dampening)), decay(c.weight_decay != 0.0), has_momentum(c.momentum != 0.0),
                  damped(c.dampening != 0.0), nesterov(c.nesterov)
            {
            }
        };

        /// One element of sgd_step: returns the new parameter and sets b_out (when the rule
        /// has momentum). first: no buffer yet (b is not read).
        template <class T>
        XGRAD_HOST_DEVICE T sgd_element(const sgd_constants<T>& k, T p, T g, T b, bool first, T& b_out)
        {
            T d = k.decay ? g + mul(p, k.weight_decay) : g;
            if (k.has_momentum)
            {
                if (first)
                    b = d;
                else if (!k.damped)
                    b = mul(b, k.momentum) + d;
                else
                    b = mul(b, k.momentum) + mul(d, k.damp_keep);
                b_out = b;
                d = k.nesterov ? d + mul(b, k.momentum) : b;
            }
            return p - mul(d, k.lr);
        }

        /// The Adam constants in the compute type T (a scalar, or a batch of its broadcasts).
        template <class T>
        struct adam_constants
        {
            T base_scale, weight_decay, beta1, beta1_keep, beta2, beta2_keep, inv_sqrt_c2, eps, step_size;
            bool decoupled_decay, coupled_decay;

            explicit adam_constants(const adam_step_coefficients& c)
                : base_scale(T(1.0 - c.lr * c.weight_decay)), weight_decay(T(c.weight_decay)), beta1(T(c.beta1)),
                  beta1_keep(T(1.0 - c.beta1)), beta2(T(c.beta2)), beta2_keep(T(1.0 - c.beta2)),
                  inv_sqrt_c2(T(1.0 / std::sqrt(c.bias_correction2))), eps(T(c.eps)),
                  step_size(T(c.lr / c.bias_correction1)), decoupled_decay(c.decoupled && c.weight_decay != 0.0),
                  coupled_decay(!c.decoupled && c.weight_decay != 0.0)
            {
            }
        };

        /// One element of adam_step: returns the new parameter and sets m_out, v_out. first:
        /// the buffers start at zero (m and v are not read): b m + (1 - b) g is then exactly
        /// (1 - b) g, as the composite computes it.
        template <class T>
        XGRAD_HOST_DEVICE T adam_element(const adam_constants<T>& k, T p, T g, T m, T v, bool first, T& m_out, T& v_out)
        {
            const T base = k.decoupled_decay ? mul(p, k.base_scale) : p;
            const T grad = k.coupled_decay ? g + mul(p, k.weight_decay) : g;
            const T scaled = mul(grad, k.beta1_keep);
            m = first ? scaled : mul(m, k.beta1) + scaled;
            const T scaled_sq = mul(mul(grad, grad), k.beta2_keep);
            v = first ? scaled_sq : mul(v, k.beta2) + scaled_sq;
            m_out = m;
            v_out = v;
            using std::sqrt; // xsimd::sqrt for batches, by argument-dependent lookup
            const T denom = mul(T(sqrt(v)), k.inv_sqrt_c2) + k.eps;
            return base - mul(m / denom, k.step_size);
        }
    }
}
