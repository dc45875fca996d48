// The dispatch point (dispatch.hpp) and the CUDA runtime queries of the public API.
#include "dispatch.hpp"

#include <stdexcept>
#include <string>

#include "backends/cpu/cpu_kernels.hpp"
#include "backends/cpu/simd/level.hpp"
#include "xgrad/errors.hpp"

#ifdef XGRAD_WITH_CUDA
#include "backends/cuda/cuda_kernels.hpp"
#include "backends/cuda/runtime.hpp"
#endif

namespace xgrad::detail
{
    const backend_kernels& backend_for(device dev)
    {
        // The CPU has two tables: the fast kernels, and their single-threaded reference twins.
        // simd_level::scalar (a debugging switch, and the only level of an XGRAD_SIMD=scalar
        // build) selects the reference table here, once, so no kernel branches on it.
        if (dev.type == device_type::cpu)
            return cpu::simd_level_in_use() == cpu::simd_level::scalar ? cpu::reference_kernels() : cpu::fast_kernels();
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
        return cuda::device_kernels();
#else
        return cpu::fast_kernels(); // not reached: cuda_is_built() is false here
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
                throw xgrad::invalid_argument(std::string(what) + ": " + to_string(dev) + " is not a CUDA device");
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
