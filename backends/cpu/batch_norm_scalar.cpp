// The batch-norm kernels of an XGRAD_SIMD=scalar build (see kernels_scalar.cpp): every kernel is
// its single-threaded reference twin (batch_norm_reference.cpp). batch_norm.cpp, with the
// SIMD units batch_norm_sse2.cpp and batch_norm_avx2.cpp, stands in for this file in an
// XGRAD_SIMD=dispatch build.
#include "backends/cpu/batch_norm_kernels.hpp"

namespace xgrad::cpu
{
    std::int64_t bn_set_resident_budget(std::int64_t bytes) noexcept
    {
        // The reference kernels do not block; the value is only kept for the tests' guard.
        static std::int64_t budget = std::int64_t{4} << 20;
        const std::int64_t old = budget;
        budget = bytes;
        return old;
    }

    void bn_moments(void* mean, void* var, const void* x, dtype xdt, std::int64_t outer, std::int64_t C,
                    std::int64_t inner)
    {
        reference::bn_moments(mean, var, x, xdt, outer, C, inner);
    }

    void bn_normalize(void* y, const void* x, const void* scale, const void* offset, const void* mean,
                      const void* var, double eps, bool relu, dtype xdt, std::int64_t outer, std::int64_t C,
                      std::int64_t inner)
    {
        reference::bn_normalize(y, x, scale, offset, mean, var, eps, relu, xdt, outer, C, inner);
    }

    void bn_forward_training(void* y, void* mean, void* var, const void* x, const void* scale, const void* offset,
                             double eps, bool relu, dtype xdt, std::int64_t outer, std::int64_t C, std::int64_t inner)
    {
        reference::bn_forward_training(y, mean, var, x, scale, offset, eps, relu, xdt, outer, C, inner);
    }

    void bn_grad_reduce(void* sum_dy, void* sum_dy_xc, const void* dy, const void* x, const void* mean, dtype xdt,
                        std::int64_t outer, std::int64_t C, std::int64_t inner)
    {
        reference::bn_grad_reduce(sum_dy, sum_dy_xc, dy, x, mean, xdt, outer, C, inner);
    }

    void bn_grad_apply(void* dx, const void* dy, const void* x, const void* scale, const void* mean, const void* var,
                       const void* sum_dy, const void* sum_dy_xc, double eps, dtype xdt, std::int64_t outer,
                       std::int64_t C, std::int64_t inner)
    {
        reference::bn_grad_apply(dx, dy, x, scale, mean, var, sum_dy, sum_dy_xc, eps, xdt, outer, C, inner);
    }

    void bn_grad_training(void* dx, void* sum_dy, void* sum_dy_xc, const void* dy, const void* x, const void* y,
                          const void* scale, const void* mean, const void* var, double eps, dtype xdt,
                          std::int64_t outer, std::int64_t C, std::int64_t inner)
    {
        reference::bn_grad_training(dx, sum_dy, sum_dy_xc, dy, x, y, scale, mean, var, eps, xdt, outer, C, inner);
    }

    void bn_grad_inference(void* dx, void* sum_dy, void* sum_dy_xc, const void* dy, const void* x, const void* y,
                           const void* scale, const void* mean, const void* var, double eps, dtype xdt,
                           std::int64_t outer, std::int64_t C, std::int64_t inner)
    {
        reference::bn_grad_inference(dx, sum_dy, sum_dy_xc, dy, x, y, scale, mean, var, eps, xdt, outer, C, inner);
    }

    void bn_grad_grad_reduce(void* sums, const void* A, const void* g, const void* x, const void* mean,
                             const void* var, double eps, dtype xdt, std::int64_t outer, std::int64_t C,
                             std::int64_t inner)
    {
        reference::bn_grad_grad_reduce(sums, A, g, x, mean, var, eps, xdt, outer, C, inner);
    }

    void bn_grad_grad_apply(void* d_g, void* d_x, const void* A, const void* g, const void* x, const void* scale,
                            const void* mean, const void* var, const void* a, const void* b, const void* sums,
                            double eps, bool training, dtype xdt, std::int64_t outer, std::int64_t C,
                            std::int64_t inner)
    {
        reference::bn_grad_grad_apply(d_g, d_x, A, g, x, scale, mean, var, a, b, sums, eps, training, xdt, outer, C,
                                      inner);
    }
}
