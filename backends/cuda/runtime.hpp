#pragma once
// CUDA runtime queries (backends/cuda/runtime.cu), built only with XGRAD_USE_CUDA.
namespace xgrad::cuda
{
    /// Number of usable CUDA devices; 0 when there is no driver or no device.
    int device_count() noexcept;
}
