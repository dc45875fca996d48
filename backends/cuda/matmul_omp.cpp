// matmul of the Thrust-on-OpenMP build, where device memory is host memory: the CPU
// backend's matmul, which has the same signature and contract (the kernel list's). It is taken
// from the CPU backend's table, so an XGRAD_SIMD=scalar build gets its reference loop. The GPU
// build uses cuBLAS instead (matmul.cu).
#include "backends/cuda/cuda_kernels.hpp"

namespace xgrad::cpu
{
    const kernels::kernel_table& fast_kernels() noexcept; // the CPU backend's table (kernel_table.cpp)
}

namespace xgrad::cuda
{
    void matmul(void* out, const void* a, const std::int64_t* a_strides, const void* b, const std::int64_t* b_strides,
                dtype dt, std::int64_t batch, std::int64_t m, std::int64_t n, std::int64_t k, bool accumulate)
    {
        cpu::fast_kernels().matmul(out, a, a_strides, b, b_strides, dt, batch, m, n, k, accumulate);
    }
}
