#pragma once
// The CUDA backend's kernels: the kernel list of backends/common/kernel_list.hpp, declared
// from the list in `xgrad::cuda`, so its signatures are the CPU backend's by construction. The
// contracts there hold here too, with these differences:
// - Pointers are device pointers (memory from cuda::allocate), except the host buffers of
//   copy_to_host / copy_from_host. Kernels run in the order they are called on one stream per
//   device; copy_to_host and the kernels that return a value (take, put_add, one_hot) wait for
//   the work before them.
// - argmax scans each reduced row in order on the device, so it picks the CPU's index.
// - Reductions (reduce, the batch-norm sums) are deterministic: a fixed split of each sum into
//   partial sums that depends on the shape only, combined in a fixed order, with no float
//   atomics. Their rounding differs from the CPU backend's (another summation order), within
//   float tolerance; fold2d, put_add, max_pool2d_grad, copy, fill and the exactly rounded elementwise ops (add,
//   sub, mul, div, the comparisons, where) give the CPU's bits, while exp, log, tanh, sigmoid
//   and pow use the device's math library and may differ by a few ulp (elementwise.cpp).
// - Every kernel ASSIGNS its outputs, as on the CPU.
// - Shapes that merge into more than 8 dimensions (after size-1 dimensions are dropped and
//   contiguous ones merged) throw std::invalid_argument.
//
// The sources are Thrust code: nvcc compiles them for the GPU (XGRAD_USE_CUDA), and g++
// compiles the same files with Thrust's OpenMP device system (XGRAD_CUDA_ON_CPU), where device
// memory is host memory. Only runtime.cu / runtime_omp.cpp (memory, copies, devices) and
// matmul.cu / matmul_omp.cpp (cuBLAS / the CPU GEMM) differ between the two.
#include <cstddef>

#include "backends/common/kernel_list.hpp"
#include "xgrad/device.hpp" // cuda_memory_stats
#include "xgrad/dtype.hpp"

namespace xgrad::cuda
{
    using kernels::binary_op;
    using kernels::reduce_op;
    using kernels::unary_op;

    // Where they are defined: allocate, deallocate, copy_to_host, copy_from_host in
    // allocator.cpp (a caching allocator over the runtime's device memory); fill, copy, unary,
    // binary, where in elementwise.cpp; reduce and argmax in reduce.cpp; matmul in matmul.cu
    // (cuBLAS) / matmul_omp.cpp; one_hot, max_pool2d, max_pool2d_grad, take, put_add in index.cpp;
    // unfold2d, fold2d in unfold.cpp; the conv2d_ kernels in conv.cpp (blocks of images over the
    // kernels above, backends/common/conv_blocks.hpp); the bn_ kernels in batch_norm.cpp.
    XGRAD_KERNEL_LIST(XGRAD_DECLARE_KERNEL)

    /// The kernels as a table (kernel_table.cpp fills it by name); every entry is set.
    const kernels::kernel_table& device_kernels() noexcept;

    /// The caching allocator's counters for the current device (allocator.cpp).
    cuda_memory_stats memory_stats();
    /// Hands every cached (free) block of the current device back to the device.
    void empty_cache();

    /// Everything libxgrad asks of the backend, as one table of entry points (kernel_table.cpp),
    /// so that the backend can live in a shared library of its own, libxgrad_cuda.so, which
    /// libxgrad loads when a CUDA device is first used (core/src/dispatch.cpp): a CUDA-enabled
    /// libxgrad then runs on a machine without the CUDA libraries, and says why only when a
    /// CUDA device is asked for. kernel_count and table_size are the library's own build's,
    /// so a library from another version of xgrad is refused rather than called.
    struct backend_interface
    {
        std::size_t kernel_count;
        std::size_t table_size;
        int (*device_count)() noexcept;
        const char* (*runtime_name)() noexcept;
        void (*set_device)(int);
        const kernels::kernel_table* table;
        cuda_memory_stats (*memory_stats)();
        void (*empty_cache)();
        void (*synchronize)();
    };
    const backend_interface& backend() noexcept;
}

/// The backend library's entry point, found by name (dlsym): the interface above.
extern "C" const xgrad::cuda::backend_interface* xgrad_cuda_backend_v1() noexcept;
