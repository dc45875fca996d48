// The CUDA backend's kernel table, filled by name from the kernel list
// (backends/common/kernel_list.hpp): an entry the list gains but this table misses, or a kernel
// whose signature differs from the list's, does not compile here. Also the backend's entry
// point, the table of everything libxgrad calls (cuda_kernels.hpp).
#include "backends/cuda/cuda_kernels.hpp"
#include "backends/cuda/runtime.hpp"

namespace xgrad::cuda
{
    namespace
    {
        constexpr kernels::kernel_table make_table() noexcept
        {
            kernels::kernel_table t{};
#define XGRAD_CUDA_SET(name, twin) t.name = &::xgrad::cuda::name;
            XGRAD_KERNEL_LIST(XGRAD_CUDA_SET)
#undef XGRAD_CUDA_SET
            return t;
        }
        constexpr kernels::kernel_table table = make_table();
    }

    const kernels::kernel_table& device_kernels() noexcept { return table; }

    const backend_interface& backend() noexcept
    {
        static const backend_interface b{static_cast<std::size_t>(kernels::kernel_count),
                                         sizeof(kernels::kernel_table),
                                         &device_count,
                                         &runtime_name,
                                         &set_device,
                                         &table,
                                         &memory_stats,
                                         &empty_cache,
                                         &synchronize};
        return b;
    }
}

extern "C" __attribute__((visibility("default"))) const xgrad::cuda::backend_interface* xgrad_cuda_backend_v1() noexcept
{
    return &xgrad::cuda::backend();
}
