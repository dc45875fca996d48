// STUB: to be written (issue 6).
#include <stdexcept>

#include "backends/cuda/device_loop.hpp"

namespace xgrad::cuda
{
    std::int64_t one_hot(void* out, const std::int64_t* labels, dtype dt, std::int64_t n, std::int64_t classes)
    {
        throw std::logic_error("cuda::one_hot: not written yet");
    }
    void max_pool2d_argmax(std::int64_t* idx, const std::int64_t* idx_strides, const void* x, const std::int64_t* x_strides, dtype dt, const kernels::window2d_dims& d)
    {
        throw std::logic_error("cuda::max_pool2d_argmax: not written yet");
    }
    std::int64_t take(void* out, const void* x, std::int64_t x_numel, const std::int64_t* idx, dtype dt, std::int64_t n)
    {
        throw std::logic_error("cuda::take: not written yet");
    }
    std::int64_t put_add(void* out, std::int64_t out_numel, const void* g, const std::int64_t* idx, dtype dt, std::int64_t n)
    {
        throw std::logic_error("cuda::put_add: not written yet");
    }
}
