// STUB: to be written (issue 6).
#include <stdexcept>

#include "backends/cuda/device_loop.hpp"

namespace xgrad::cuda
{
    void reduce(void* out, const std::int64_t* out_strides, const void* x, const std::int64_t* x_strides, dtype dt, int ndim, int n_keep, const std::int64_t* shape, reduce_op op)
    {
        throw std::logic_error("cuda::reduce: not written yet");
    }
}
