// The dispatch point (dispatch.hpp) and the CUDA runtime queries of the public API.
//
// The CUDA backend is reached through its interface table (backends/cuda/cuda_kernels.hpp).
// In a shared build (XGRAD_CUDA_LIBRARY) the table comes from the backend's own library,
// libxgrad_cuda.so, loaded with dlopen the first time anything asks about CUDA: libxgrad itself
// then needs none of the CUDA libraries, so a CUDA-enabled install runs on a machine without
// them, and an error says so only when a CUDA device is asked for. The library is looked for
// in XGRAD_CUDA_LIBRARY (a path) when that is set, else beside libxgrad, else on the loader's
// search path (base/src/plugin_library.cpp). A static build links the backend in and takes its
// table directly.
#include "dispatch.hpp"

#include <stdexcept>
#include <string>

#include "backends/cpu/cpu_kernels.hpp"
#include "backends/cpu/simd/level.hpp"
#include "core/src/profiler/record.hpp"
#include "xgrad/cuda.hpp"
#include "xgrad/errors.hpp"

#ifdef XGRAD_WITH_CUDA
#include "backends/cuda/cuda_kernels.hpp"
#ifdef XGRAD_CUDA_LIBRARY
#include "xgrad/plugin_library.hpp"
#endif
#endif

namespace xgrad::detail
{
#ifdef XGRAD_WITH_CUDA
    namespace
    {
        struct cuda_backend_state
        {
            const cuda::backend_interface* backend = nullptr;
            std::string error; // why there is none
        };

#ifdef XGRAD_CUDA_LIBRARY
        /// The backend of libxgrad_cuda.so (xgrad/plugin_library.hpp says where it is looked
        /// for), or nullptr with `error` saying why.
        const cuda::backend_interface* open_library(std::string& error)
        {
            const plugin_library lib = open_plugin_library("libxgrad_cuda.so", "XGRAD_CUDA_LIBRARY",
                                                           "xgrad_cuda_backend_v1", false);
            if (!lib.entry)
            {
                error = lib.error;
                return nullptr;
            }
            using entry_type = const cuda::backend_interface* (*)() noexcept;
            const cuda::backend_interface* b = reinterpret_cast<entry_type>(lib.entry)();
            if (!b || b->kernel_count != static_cast<std::size_t>(kernels::kernel_count) ||
                b->table_size != sizeof(kernels::kernel_table))
            {
                error = lib.path + ": was built from another version of xgrad (its kernel table differs from this "
                                   "libxgrad's)";
                return nullptr;
            }
            return b;
        }
#endif

        const cuda_backend_state& cuda_state()
        {
            // Loaded once, by the first thread that asks (a static local's initialisation is
            // thread-safe).
            static const cuda_backend_state state = [] {
                cuda_backend_state s;
#ifdef XGRAD_CUDA_LIBRARY
                s.backend = open_library(s.error);
#else
                s.backend = &cuda::backend();
#endif
                return s;
            }();
            return state;
        }

        /// The backend, or a std::runtime_error naming `dev` and saying why there is none.
        const cuda::backend_interface& cuda_backend(device dev)
        {
            const cuda_backend_state& s = cuda_state();
            if (!s.backend)
                throw std::runtime_error("cannot use device " + to_string(dev) +
                                         ": this build of xgrad has CUDA support, but its CUDA backend library "
                                         "could not be loaded (are the CUDA libraries, such as libcublas, "
                                         "installed?): " +
                                         s.error);
            return *s.backend;
        }
    }
#endif

    namespace
    {
        const backend_kernels& real_backend_for(device dev);
    }

    const backend_kernels& backend_for(device dev)
    {
        // While the profiler records, every kernel call goes through a timing wrapper.
        const backend_kernels& real = real_backend_for(dev);
        return profiler::enabled() ? profiler::detail::profiled_table(real) : real;
    }

    namespace
    {
        const backend_kernels& real_backend_for(device dev)
        {
            // The CPU has two tables: the fast kernels, and their single-threaded reference twins.
            // simd_level::scalar (a debugging switch, and the only level of an XGRAD_SIMD=scalar
            // build) selects the reference table here, once, so no kernel branches on it.
            if (dev.type == device_type::cpu)
                return cpu::simd_level_in_use() == cpu::simd_level::scalar ? cpu::reference_kernels()
                                                                           : cpu::fast_kernels();
            if (!cuda_is_built())
                throw std::runtime_error("cannot use device " + to_string(dev) +
                                         ": this build of xgrad has no CUDA support (configure with "
                                         "-DXGRAD_USE_CUDA=ON where the CUDA toolkit is installed)");
#ifdef XGRAD_WITH_CUDA
            const cuda::backend_interface& backend = cuda_backend(dev);
            const int count = cuda_device_count();
            if (count == 0)
                throw std::runtime_error("cannot use device " + to_string(dev) +
                                         ": no CUDA device is available (no GPU, or no NVIDIA driver loaded)");
            if (dev.index >= count)
                throw std::runtime_error("cannot use device " + to_string(dev) + ": " + std::to_string(count) +
                                         " CUDA device(s) available");
            // Kernels, allocations and copies act on the current device: make it dev's.
            backend.set_device(dev.index);
            return *backend.table;
#else
            return cpu::fast_kernels(); // not reached: cuda_is_built() is false here
#endif
        }
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
        // Asked once: every op on a device checks it. No backend library: no device.
        static const int count = [] {
            const auto* b = detail::cuda_state().backend;
            return b ? b->device_count() : 0;
        }();
        return count;
#else
        return 0;
#endif
    }

    std::string cuda_runtime_name()
    {
#ifdef XGRAD_WITH_CUDA
        const auto* b = detail::cuda_state().backend;
        return b ? b->runtime_name() : "";
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
        return detail::cuda_state().backend->memory_stats();
#else
        return {};
#endif
    }

    void cuda_empty_cache(device dev)
    {
        check_cuda_device(dev, "cuda_empty_cache");
#ifdef XGRAD_WITH_CUDA
        detail::cuda_state().backend->empty_cache();
#endif
    }

    void cuda_synchronize(device dev)
    {
        check_cuda_device(dev, "cuda_synchronize");
#ifdef XGRAD_WITH_CUDA
        detail::cuda_state().backend->synchronize();
#endif
    }
}
