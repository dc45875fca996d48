// STUB: to be written (issue 6).
#include <stdexcept>

#include "backends/cuda/device_loop.hpp"

namespace xgrad::cuda
{
    void fill(void* out, const std::int64_t* out_strides, dtype dt, int ndim, const std::int64_t* shape, double value)
    {
        throw std::logic_error("cuda::fill: not written yet");
    }
    void copy(void* out, const std::int64_t* out_strides, dtype out_dt, const void* x, const std::int64_t* x_strides, dtype x_dt, int ndim, const std::int64_t* shape)
    {
        throw std::logic_error("cuda::copy: not written yet");
    }
    void unary(void* out, const std::int64_t* out_strides, const void* x, const std::int64_t* x_strides, dtype dt, int ndim, const std::int64_t* shape, unary_op op)
    {
        throw std::logic_error("cuda::unary: not written yet");
    }
    void binary(void* out, const std::int64_t* out_strides, const void* a, const std::int64_t* a_strides, const void* b, const std::int64_t* b_strides, dtype dt, int ndim, const std::int64_t* shape, binary_op op)
    {
        throw std::logic_error("cuda::binary: not written yet");
    }
    void where(void* out, const std::int64_t* out_strides, const void* cond, const std::int64_t* cond_strides, const void* a, const std::int64_t* a_strides, const void* b, const std::int64_t* b_strides, dtype dt, int ndim, const std::int64_t* shape)
    {
        throw std::logic_error("cuda::where: not written yet");
    }
}
