// The CUDA backend's convolution kernels: backends/common/conv_blocks.hpp over this backend's
// own kernels (unfold2d, the cuBLAS matmul, fold2d), the blocks one after the other on the
// device's stream, with scratch from the caching allocator. Compiled by the host compiler in
// both forms of the backend: it launches nothing itself.
#include "backends/common/conv_blocks.hpp"
#include "backends/cuda/cuda_kernels.hpp"

namespace xgrad::cuda
{
    namespace
    {
        const auto in_order = [](std::int64_t count, const auto& fn) { fn(0, count); };
    }

    void conv2d_forward(void* y, const void* x, const std::int64_t* x_strides, const void* w, const void* bias,
                        dtype dt, const kernels::window2d_dims& d, std::int64_t o, bool channels_last,
                        std::int64_t block)
    {
        kernels::conv_blocks::forward(device_kernels(), in_order, y, x, x_strides, w, bias, dt, d, o, channels_last,
                                      block);
    }

    void conv2d_input_grad(void* dx, const std::int64_t* dx_strides, const void* dy, const void* w, dtype dt,
                           const kernels::window2d_dims& d, std::int64_t o, bool channels_last, std::int64_t block)
    {
        kernels::conv_blocks::input_grad(device_kernels(), in_order, dx, dx_strides, dy, w, dt, d, o, channels_last,
                                         block);
    }

    void conv2d_weight_grad(void* dw, const void* x, const std::int64_t* x_strides, const void* dy, dtype dt,
                            const kernels::window2d_dims& d, std::int64_t o, bool channels_last, std::int64_t block,
                            std::int64_t chains)
    {
        kernels::conv_blocks::weight_grad(device_kernels(), in_order, dw, x, x_strides, dy, dt, d, o, channels_last,
                                          block, chains);
    }
}
