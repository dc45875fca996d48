#include "dispatch.hpp"

#include <stdexcept>
#include <string>

#ifdef XGRAD_WITH_CUDA
#include "backends/cuda/runtime.hpp"
#endif

namespace xgrad::detail
{
    namespace
    {
        constexpr backend_kernels cpu_kernels{
            &cpu::allocate, &cpu::deallocate, &cpu::copy_to_host, &cpu::copy_from_host,
            &cpu::fill,     &cpu::copy,       &cpu::unary,        &cpu::binary,
            &cpu::where,    &cpu::reduce,     &cpu::matmul,       &cpu::one_hot,
            &cpu::max_pool2d_argmax, &cpu::take, &cpu::put_add,
            &cpu::unfold2d, &cpu::fold2d,
            &cpu::bn_moments, &cpu::bn_normalize, &cpu::bn_forward_training, &cpu::bn_grad_reduce,
            &cpu::bn_grad_apply, &cpu::bn_grad_training,
            &cpu::bn_grad_inference, &cpu::bn_grad_grad_reduce, &cpu::bn_grad_grad_apply,
        };
    }

    const backend_kernels& backend_for(device dev)
    {
        if (dev.type == device_type::cpu)
            return cpu_kernels;
        if (!cuda_is_built())
            throw std::runtime_error("cannot use device " + to_string(dev) +
                                     ": this build of xgrad has no CUDA support (configure with "
                                     "-DXGRAD_USE_CUDA=ON where the CUDA toolkit is installed)");
        const int count = cuda_device_count();
        if (dev.index >= count)
            throw std::runtime_error("cannot use device " + to_string(dev) + ": " + std::to_string(count) +
                                     " CUDA device(s) available");
        throw std::runtime_error("cannot use device " + to_string(dev) +
                                 ": the CUDA kernels are not part of this version of xgrad");
    }
}

namespace xgrad
{
    bool cuda_is_built() noexcept
    {
#ifdef XGRAD_WITH_CUDA
        return true;
#else
        return false;
#endif
    }

    int cuda_device_count() noexcept
    {
#ifdef XGRAD_WITH_CUDA
        return cuda::device_count();
#else
        return 0;
#endif
    }
}
