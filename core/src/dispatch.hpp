#pragma once
// The one dispatch point: the table of kernels for a device. Ops call
// `backend_for(t.device()).unary(...)` and never branch on the backend themselves; a backend
// is a set of free functions with the signatures of backends/cpu/cpu_kernels.hpp.
#include "backends/cpu/batch_norm_kernels.hpp"
#include "backends/cpu/cpu_kernels.hpp"

namespace xgrad::detail
{
    struct backend_kernels
    {
        decltype(&cpu::allocate) allocate;
        decltype(&cpu::deallocate) deallocate;
        decltype(&cpu::copy_to_host) copy_to_host;
        decltype(&cpu::copy_from_host) copy_from_host;
        decltype(&cpu::fill) fill;
        decltype(&cpu::copy) copy;
        decltype(&cpu::unary) unary;
        decltype(&cpu::binary) binary;
        decltype(&cpu::where) where;
        decltype(&cpu::reduce) reduce;
        decltype(&cpu::matmul) matmul;
        decltype(&cpu::one_hot) one_hot;
        decltype(&cpu::max_pool2d_argmax) max_pool2d_argmax;
        decltype(&cpu::take) take;
        decltype(&cpu::put_add) put_add;
        // the window primitives of conv2d and pooling (im2col, col2im)
        decltype(&cpu::unfold2d) unfold2d;
        decltype(&cpu::fold2d) fold2d;
        // the fused batch-norm family (backends/cpu/batch_norm_kernels.hpp)
        decltype(&cpu::bn_moments) bn_moments;
        decltype(&cpu::bn_normalize) bn_normalize;
        decltype(&cpu::bn_forward_training) bn_forward_training;
        decltype(&cpu::bn_grad_reduce) bn_grad_reduce;
        decltype(&cpu::bn_grad_apply) bn_grad_apply;
        decltype(&cpu::bn_grad_training) bn_grad_training;
        decltype(&cpu::bn_grad_inference) bn_grad_inference;
        decltype(&cpu::bn_grad_grad_reduce) bn_grad_grad_reduce;
        decltype(&cpu::bn_grad_grad_apply) bn_grad_grad_apply;
    };

    /// The kernels for `dev`. Throws std::runtime_error naming the device when this build has
    /// no backend for it (a CUDA device in a build without XGRAD_USE_CUDA).
    const backend_kernels& backend_for(device dev);
}
