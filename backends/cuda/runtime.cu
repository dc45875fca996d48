// CUDA runtime queries, compiled by nvcc when XGRAD_USE_CUDA is on. The CUDA kernels
// themselves (the backend behind backends/kernels.hpp) are not part of xgrad yet; this file
// is what the build needs now: knowing whether a device is present.
#include <cuda_runtime.h>

#include "backends/cuda/runtime.hpp"

namespace xgrad::cuda
{
    int device_count() noexcept
    {
        int n = 0;
        // No driver or no device is an error here, not a count of 0; both mean "none".
        if (cudaGetDeviceCount(&n) != cudaSuccess)
        {
            (void)cudaGetLastError(); // clear the sticky error state
            return 0;
        }
        return n;
    }
}
