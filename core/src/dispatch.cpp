#include "dispatch.hpp"

#include <stdexcept>
#include <string>

#ifdef XGRAD_WITH_CUDA
#include "backends/cuda/cuda_kernels.hpp"
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
#ifdef XGRAD_WITH_CUDA
        // The same table over the CUDA backend; a signature that differs from the CPU's does
        // not compile here.
        constexpr backend_kernels cuda_kernels{
            &cuda::allocate, &cuda::deallocate, &cuda::copy_to_host, &cuda::copy_from_host,
            &cuda::fill,     &cuda::copy,       &cuda::unary,        &cuda::binary,
            &cuda::where,    &cuda::reduce,     &cuda::matmul,       &cuda::one_hot,
            &cuda::max_pool2d_argmax, &cuda::take, &cuda::put_add,
            &cuda::unfold2d, &cuda::fold2d,
            &cuda::bn_moments, &cuda::bn_normalize, &cuda::bn_forward_training, &cuda::bn_grad_reduce,
            &cuda::bn_grad_apply, &cuda::bn_grad_training,
            &cuda::bn_grad_inference, &cuda::bn_grad_grad_reduce, &cuda::bn_grad_grad_apply,
        };
#endif
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
        if (count == 0)
            throw std::runtime_error("cannot use device " + to_string(dev) +
                                     ": no CUDA device is available (no GPU, or no NVIDIA driver loaded)");
        if (dev.index >= count)
            throw std::runtime_error("cannot use device " + to_string(dev) + ": " + std::to_string(count) +
                                     " CUDA device(s) available");
#ifdef XGRAD_WITH_CUDA
        // Kernels, allocations and copies act on the current device: make it dev's.
        cuda::set_device(dev.index);
        return cuda_kernels;
#else
        return cpu_kernels; // not reached: cuda_is_built() is false here
#endif
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
        static const int count = cuda::device_count(); // asked once: every op on a device checks it
        return count;
#else
        return 0;
#endif
    }

    std::string cuda_runtime_name()
    {
#ifdef XGRAD_WITH_CUDA
        return cuda::runtime_name();
#else
        return "";
#endif
    }

    namespace
    {
        void check_cuda_device(device dev, const char* what)
        {
            if (dev.type != device_type::cuda)
                throw std::invalid_argument(std::string(what) + ": " + to_string(dev) + " is not a CUDA device");
            (void)detail::backend_for(dev); // throws naming the device; makes it current
        }
    }

    cuda_memory_stats cuda_memory(device dev)
    {
        check_cuda_device(dev, "cuda_memory");
#ifdef XGRAD_WITH_CUDA
        return cuda::memory_stats();
#else
        return {};
#endif
    }

    void cuda_empty_cache(device dev)
    {
        check_cuda_device(dev, "cuda_empty_cache");
#ifdef XGRAD_WITH_CUDA
        cuda::empty_cache();
#endif
    }

    void cuda_synchronize(device dev)
    {
        check_cuda_device(dev, "cuda_synchronize");
#ifdef XGRAD_WITH_CUDA
        cuda::synchronize();
#endif
    }
}
