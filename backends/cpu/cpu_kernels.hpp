#pragma once
// The CPU backend's kernels: the kernel list of backends/common/kernel_list.hpp, declared from
// the list (signatures and contracts are there). All of them ASSIGN into their outputs.
//
// Two sets share the names:
// - xgrad::cpu: the fast kernels (xsimd, dispatched at run time to the best instruction set the
//   processor has, multithreaded over the thread pool). An XGRAD_SIMD=scalar build compiles
//   only those of them that have no reference twin (`shared` in the list).
// - xgrad::cpu::reference: plain single-threaded loops with the identical signatures, for the
//   kernels marked `reference` in the list. The tests check the fast kernels against them.
// Each set is also a kernel_table (kernel_table.cpp fills both by name); core/src/dispatch.cpp
// serves the reference table at simd_level::scalar and in a scalar build, the fast one
// otherwise. The kernels themselves never switch between the two.
#include <cstdint>

#include "backends/common/kernel_list.hpp"

namespace xgrad::cpu
{
    using kernels::binary_op;
    using kernels::reduce_op;
    using kernels::unary_op;

    XGRAD_KERNEL_LIST(XGRAD_DECLARE_KERNEL)

    namespace reference
    {
#define XGRAD_CPU_DECLARE_REFERENCE_reference(name) ::xgrad::kernels::name##_fn name;
#define XGRAD_CPU_DECLARE_REFERENCE_shared(name)
#define XGRAD_CPU_DECLARE_REFERENCE(name, twin) XGRAD_CPU_DECLARE_REFERENCE_##twin(name)
        XGRAD_KERNEL_LIST(XGRAD_CPU_DECLARE_REFERENCE)
#undef XGRAD_CPU_DECLARE_REFERENCE
#undef XGRAD_CPU_DECLARE_REFERENCE_shared
#undef XGRAD_CPU_DECLARE_REFERENCE_reference
    }

    /// The fast kernels as a table (in an XGRAD_SIMD=scalar build, where they are not compiled:
    /// the reference table). Every entry is set.
    const kernels::kernel_table& fast_kernels() noexcept;
    /// The reference kernels as a table; the kernels without a twin are the fast ones. Every
    /// entry is set.
    const kernels::kernel_table& reference_kernels() noexcept;

    /// The bytes of x-shaped tensors that bn_forward_training / bn_grad_training keep resident
    /// in the cache at a time (default: a quarter of the last-level cache, 4..16 MiB;
    /// batch_norm/kernels.cpp explains the choice). Results do not depend on it. Sets it and
    /// returns the previous value. For tests and benchmarks: a small budget exercises the
    /// channel blocks on small tensors. Not thread-safe against running kernels.
    std::int64_t bn_set_resident_budget(std::int64_t bytes) noexcept;
}
