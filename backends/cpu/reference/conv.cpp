// The reference convolution kernels: the fast ones' oracle, and what simd_level::scalar and
// XGRAD_SIMD=scalar builds run. The same products over the reference kernels (the plain loops of
// unfold2d, matmul and fold2d), single-threaded and unblocked: the whole batch is one block
// and the weight gradient one sum, so the blocking and the threading of the fast kernels are
// what the comparison checks. `block` and `chains` only order sums, and are ignored here.
#include <algorithm>

#include "backends/common/conv_blocks.hpp"
#include "backends/cpu/cpu_kernels.hpp"

namespace xgrad::cpu::reference
{
    namespace
    {
        const auto in_order = [](std::int64_t count, const auto& fn) { fn(0, count); };

        std::int64_t whole_batch(const kernels::window2d_dims& d) { return std::max<std::int64_t>(d.n, 1); }
    }

    void conv2d_forward(void* y, const void* x, const std::int64_t* x_strides, const void* w, const void* bias,
                        dtype dt, const kernels::window2d_dims& d, std::int64_t o, bool channels_last, std::int64_t)
    {
        kernels::conv_blocks::forward(reference_kernels(), in_order, y, x, x_strides, w, bias, dt, d, o, channels_last,
                                      whole_batch(d));
    }

    void conv2d_input_grad(void* dx, const std::int64_t* dx_strides, const void* dy, const void* w, dtype dt,
                           const kernels::window2d_dims& d, std::int64_t o, bool channels_last, std::int64_t)
    {
        kernels::conv_blocks::input_grad(reference_kernels(), in_order, dx, dx_strides, dy, w, dt, d, o, channels_last,
                                         whole_batch(d));
    }

    void conv2d_weight_grad(void* dw, const void* x, const std::int64_t* x_strides, const void* dy, dtype dt,
                            const kernels::window2d_dims& d, std::int64_t o, bool channels_last, std::int64_t,
                            std::int64_t)
    {
        kernels::conv_blocks::weight_grad(reference_kernels(), in_order, dw, x, x_strides, dy, dt, d, o, channels_last,
                                          whole_batch(d), 1);
    }
}
