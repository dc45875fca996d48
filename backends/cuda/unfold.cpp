// STUB: to be written (issue 6).
#include <stdexcept>

#include "backends/cuda/device_loop.hpp"

namespace xgrad::cuda
{
    void unfold2d(void* cols, const std::int64_t* cols_strides, const void* x, const std::int64_t* x_strides, dtype dt, const kernels::window2d_dims& d, double pad_value)
    {
        throw std::logic_error("cuda::unfold2d: not written yet");
    }
    void fold2d(void* x, const std::int64_t* x_strides, const void* cols, const std::int64_t* cols_strides, dtype dt, const kernels::window2d_dims& d)
    {
        throw std::logic_error("cuda::fold2d: not written yet");
    }
}
