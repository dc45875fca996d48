// The fast convolution kernels: backends/common/conv_blocks.hpp over the CPU's fast kernels,
// with the blocks spread over the thread pool. Each thread unfolds, multiplies (a one-thread
// GEMM: the kernels it calls run inline, since the pool runs nested parallel_for calls on the
// calling thread) and folds its own blocks, so a block's cols matrix stays in that core's
// cache. Splitting one small block's kernels over the threads instead, as the ops would when
// calling unfold2d, matmul and fold2d a block at a time, was measured slower at 2 threads than
// the unblocked composition (each of a block's kernels pays the pool's hand-offs, and a
// block's weight-gradient product is too shallow for matmul's depth split); see
// docs/training_performance.md. A call of one block runs on the caller (parallel_for does not
// split a range of one), where the kernels it calls use every thread themselves.
#include "backends/common/conv_blocks.hpp"
#include "backends/cpu/cpu_kernels.hpp"
#include "xgrad/thread_pool.hpp"

namespace xgrad::cpu
{
    namespace
    {
        const auto over_threads = [](std::int64_t count, const auto& fn) {
            parallel_for(0, count, 1, [&](std::int64_t first, std::int64_t last) { fn(first, last); });
        };
    }

    void conv2d_forward(void* y, const void* x, const std::int64_t* x_strides, const void* w, const void* bias,
                        dtype dt, const kernels::window2d_dims& d, std::int64_t o, bool channels_last,
                        std::int64_t block)
    {
        kernels::conv_blocks::forward(fast_kernels(), over_threads, y, x, x_strides, w, bias, dt, d, o, channels_last,
                                      block);
    }

    void conv2d_input_grad(void* dx, const std::int64_t* dx_strides, const void* dy, const void* w, dtype dt,
                           const kernels::window2d_dims& d, std::int64_t o, bool channels_last, std::int64_t block)
    {
        kernels::conv_blocks::input_grad(fast_kernels(), over_threads, dx, dx_strides, dy, w, dt, d, o, channels_last,
                                         block);
    }

    void conv2d_weight_grad(void* dw, const void* x, const std::int64_t* x_strides, const void* dy, dtype dt,
                            const kernels::window2d_dims& d, std::int64_t o, bool channels_last, std::int64_t block,
                            std::int64_t chains)
    {
        kernels::conv_blocks::weight_grad(fast_kernels(), over_threads, dw, x, x_strides, dy, dt, d, o, channels_last,
                                          block, chains);
    }
}
