#pragma once
// What this build and this machine have of the CUDA backend, and its caching allocator's
// counters (implemented by the dispatch point, core/src/dispatch.cpp, which loads the backend).
#include <string>

#include "xgrad/device.hpp"

namespace xgrad
{
    /// Whether this build of xgrad has the CUDA backend (XGRAD_USE_CUDA, or the
    /// XGRAD_CUDA_ON_CPU test build, whose one device cuda:0 runs on the CPU).
    bool cuda_is_built() noexcept;
    /// Number of CUDA devices visible at run time (0 without CUDA support, driver or device).
    int cuda_device_count() noexcept;
    /// "CUDA" or "Thrust on OpenMP (host memory)" (the XGRAD_CUDA_ON_CPU build); "" without
    /// CUDA support.
    std::string cuda_runtime_name();

    /// The counters of `dev` (a cuda device). Throws std::runtime_error naming the device when
    /// it is not available (as every op on it does), std::invalid_argument for a cpu device.
    cuda_memory_stats cuda_memory(device dev);
    /// Hands the cached free blocks of `dev` back to the device (same errors as cuda_memory).
    void cuda_empty_cache(device dev);
    /// Waits until every kernel queued on `dev` has run; throws a kernel's error.
    void cuda_synchronize(device dev);
}
