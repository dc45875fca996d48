#pragma once
// The CUDA backend's kernels: the kernel set of backends/kernels.hpp, in `xgrad::cuda`.
//
// Every kernel is declared with the type of its CPU namesake (`decltype`), so the two
// backends' signatures are identical by construction; backends/cpu/cpu_kernels.hpp and
// backends/cpu/batch_norm_kernels.hpp hold each kernel's contract, which holds here too, with
// these differences:
// - Pointers are device pointers (memory from cuda::allocate), except the host buffers of
//   copy_to_host / copy_from_host. Kernels run in the order they are called on one stream per
//   device; copy_to_host and the kernels that return a value (take, put_add, one_hot) wait for
//   the work before them.
// - Reductions (reduce, the batch-norm sums) are deterministic: a fixed split of each sum into
//   partial sums that depends on the shape only, combined in a fixed order, with no float
//   atomics. Their rounding differs from the CPU backend's (another summation order), within
//   float tolerance; fold2d, put_add and the elementwise kernels give the CPU's bits.
// - Every kernel ASSIGNS its outputs, as on the CPU.
// - Shapes that merge into more than 8 dimensions (after size-1 dimensions are dropped and
//   contiguous ones merged) throw std::invalid_argument.
//
// The sources are Thrust code: nvcc compiles them for the GPU (XGRAD_USE_CUDA), and g++
// compiles the same files with Thrust's OpenMP device system (XGRAD_CUDA_ON_CPU), where device
// memory is host memory. Only runtime.cu / runtime_omp.cpp (memory, copies, devices) and
// matmul.cu / matmul_omp.cpp (cuBLAS / the CPU GEMM) differ between the two.
#include <cstddef>
#include <cstdint>

#include "backends/cpu/batch_norm_kernels.hpp"
#include "backends/cpu/cpu_kernels.hpp"

namespace xgrad::cuda
{
    using kernels::binary_op;
    using kernels::reduce_op;
    using kernels::unary_op;

    // memory (allocator.cpp: a caching allocator over the runtime's device memory)
    decltype(cpu::allocate) allocate;
    decltype(cpu::deallocate) deallocate;
    decltype(cpu::copy_to_host) copy_to_host;
    decltype(cpu::copy_from_host) copy_from_host;
    // elementwise.cpp
    decltype(cpu::fill) fill;
    decltype(cpu::copy) copy;
    decltype(cpu::unary) unary;
    decltype(cpu::binary) binary;
    decltype(cpu::where) where;
    // reduce.cpp
    decltype(cpu::reduce) reduce;
    // matmul.cu (cuBLAS) / matmul_omp.cpp
    decltype(cpu::matmul) matmul;
    // index.cpp
    decltype(cpu::one_hot) one_hot;
    decltype(cpu::max_pool2d_argmax) max_pool2d_argmax;
    decltype(cpu::take) take;
    decltype(cpu::put_add) put_add;
    // unfold.cpp
    decltype(cpu::unfold2d) unfold2d;
    decltype(cpu::fold2d) fold2d;
    // batch_norm.cpp
    decltype(cpu::bn_moments) bn_moments;
    decltype(cpu::bn_normalize) bn_normalize;
    decltype(cpu::bn_forward_training) bn_forward_training;
    decltype(cpu::bn_grad_reduce) bn_grad_reduce;
    decltype(cpu::bn_grad_apply) bn_grad_apply;
    decltype(cpu::bn_grad_training) bn_grad_training;
    decltype(cpu::bn_grad_inference) bn_grad_inference;
    decltype(cpu::bn_grad_grad_reduce) bn_grad_grad_reduce;
    decltype(cpu::bn_grad_grad_apply) bn_grad_grad_apply;

    /// The caching allocator's counters for the current device (allocator.cpp).
    cuda_memory_stats memory_stats();
    /// Hands every cached (free) block of the current device back to the device.
    void empty_cache();
}
