// The CPU backend's two kernel tables, filled by name from the kernel list
// (backends/common/kernel_list.hpp): an entry the list gains but a table misses, or a kernel
// whose signature differs from the list's, does not compile here.
#include "backends/cpu/cpu_kernels.hpp"

// The reference table's entry for a kernel: its twin, or the one function when it has none.
#define XGRAD_CPU_REFERENCE_OF_reference(name) &::xgrad::cpu::reference::name
#define XGRAD_CPU_REFERENCE_OF_shared(name) &::xgrad::cpu::name

namespace xgrad::cpu
{
    namespace
    {
        constexpr kernels::kernel_table make_reference_table() noexcept
        {
            kernels::kernel_table t{};
#define XGRAD_CPU_SET_REFERENCE(name, twin) t.name = XGRAD_CPU_REFERENCE_OF_##twin(name);
            XGRAD_KERNEL_LIST(XGRAD_CPU_SET_REFERENCE)
#undef XGRAD_CPU_SET_REFERENCE
            return t;
        }
        constexpr kernels::kernel_table reference_table = make_reference_table();

#ifndef XGRAD_CPU_SCALAR_ONLY
        constexpr kernels::kernel_table make_fast_table() noexcept
        {
            kernels::kernel_table t{};
#define XGRAD_CPU_SET_FAST(name, twin) t.name = &::xgrad::cpu::name;
            XGRAD_KERNEL_LIST(XGRAD_CPU_SET_FAST)
#undef XGRAD_CPU_SET_FAST
            return t;
        }
        constexpr kernels::kernel_table fast_table = make_fast_table();
#endif
    }

    const kernels::kernel_table& fast_kernels() noexcept
    {
#ifdef XGRAD_CPU_SCALAR_ONLY
        return reference_table; // the fast kernels with a twin are not compiled in this build
#else
        return fast_table;
#endif
    }

    const kernels::kernel_table& reference_kernels() noexcept { return reference_table; }
}
