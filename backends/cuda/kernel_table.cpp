// The CUDA backend's kernel table, filled by name from the kernel list
// (backends/common/kernel_list.hpp): an entry the list gains but this table misses, or a kernel
// whose signature differs from the list's, does not compile here.
#include "backends/cuda/cuda_kernels.hpp"

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
}
