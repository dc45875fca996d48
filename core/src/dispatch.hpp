#pragma once
// The one dispatch point: the table of kernels for a device. Ops call
// `backend_for(t.device()).unary(...)` and never branch on the backend themselves. A backend is
// a set of free functions declared from the kernel list (backends/common/kernel_list.hpp), and
// its table has one entry per kernel of that list, filled by name in the backend.
#include "backends/common/kernel_list.hpp"
#include "xgrad/dtype.hpp"

namespace xgrad::detail
{
    using backend_kernels = kernels::kernel_table;

    /// The kernels for `dev`. For the CPU: the reference table when the SIMD level in use is
    /// simd_level::scalar (always so in an XGRAD_SIMD=scalar build), else the fast table.
    /// Throws std::runtime_error naming the device when this build has no backend for it (a
    /// CUDA device in a build without XGRAD_USE_CUDA) or the device does not exist.
    const backend_kernels& backend_for(device dev);
}
