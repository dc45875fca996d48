// STUB: to be written (issue 6).
#include <stdexcept>

#include "backends/cuda/device_loop.hpp"

namespace xgrad::cuda
{
    void bn_moments(void* mean, void* var, const void* x, dtype xdt, std::int64_t outer, std::int64_t C, std::int64_t inner)
    {
        throw std::logic_error("cuda::bn_moments: not written yet");
    }
    void bn_normalize(void* y, const void* x, const void* scale, const void* offset, const void* mean, const void* var, double eps, bool relu, dtype xdt, std::int64_t outer, std::int64_t C, std::int64_t inner)
    {
        throw std::logic_error("cuda::bn_normalize: not written yet");
    }
    void bn_forward_training(void* y, void* mean, void* var, const void* x, const void* scale, const void* offset, double eps, bool relu, dtype xdt, std::int64_t outer, std::int64_t C, std::int64_t inner)
    {
        throw std::logic_error("cuda::bn_forward_training: not written yet");
    }
    void bn_grad_reduce(void* sum_dy, void* sum_dy_xc, const void* dy, const void* x, const void* mean, dtype xdt, std::int64_t outer, std::int64_t C, std::int64_t inner)
    {
        throw std::logic_error("cuda::bn_grad_reduce: not written yet");
    }
    void bn_grad_apply(void* dx, const void* dy, const void* x, const void* scale, const void* mean, const void* var, const void* sum_dy, const void* sum_dy_xc, double eps, dtype xdt, std::int64_t outer, std::int64_t C, std::int64_t inner)
    {
        throw std::logic_error("cuda::bn_grad_apply: not written yet");
    }
    void bn_grad_training(void* dx, void* sum_dy, void* sum_dy_xc, const void* dy, const void* x, const void* y, const void* scale, const void* mean, const void* var, double eps, dtype xdt, std::int64_t outer, std::int64_t C, std::int64_t inner)
    {
        throw std::logic_error("cuda::bn_grad_training: not written yet");
    }
    void bn_grad_inference(void* dx, void* sum_dy, void* sum_dy_xc, const void* dy, const void* x, const void* y, const void* scale, const void* mean, const void* var, double eps, dtype xdt, std::int64_t outer, std::int64_t C, std::int64_t inner)
    {
        throw std::logic_error("cuda::bn_grad_inference: not written yet");
    }
    void bn_grad_grad_reduce(void* sums, const void* A, const void* g, const void* x, const void* mean, const void* var, double eps, dtype xdt, std::int64_t outer, std::int64_t C, std::int64_t inner)
    {
        throw std::logic_error("cuda::bn_grad_grad_reduce: not written yet");
    }
    void bn_grad_grad_apply(void* d_g, void* d_x, const void* A, const void* g, const void* x, const void* scale, const void* mean, const void* var, const void* a, const void* b, const void* sums, double eps, bool training, dtype xdt, std::int64_t outer, std::int64_t C, std::int64_t inner)
    {
        throw std::logic_error("cuda::bn_grad_grad_apply: not written yet");
    }
}
