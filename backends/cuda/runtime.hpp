#pragma once
// The device runtime under the CUDA backend: devices, raw device memory and copies. Two
// implementations with these declarations: runtime.cu (the CUDA runtime API, nvcc builds) and
// runtime_omp.cpp (Thrust's OpenMP system: one device whose memory is host memory). Errors
// throw std::runtime_error naming the call and the CUDA error, except where noexcept.
#include <cstddef>

namespace xgrad::cuda
{
    /// Number of usable devices; 0 when there is no driver or no device.
    int device_count() noexcept;
    /// Makes `index` the current device of the calling thread (cheap when it already is).
    void set_device(int index);
    /// The calling thread's current device.
    int current_device();
    /// A short description of the runtime: "CUDA 13.0" or "Thrust on OpenMP (host memory)".
    const char* runtime_name() noexcept;

    /// Memory of the current device; throws std::bad_alloc when the device has none left.
    void* device_malloc(std::size_t nbytes);
    void device_free(void* p) noexcept;
    /// Byte copies; the host side is ordinary host memory. They wait for earlier kernels.
    void memcpy_to_host(void* host_dst, const void* src, std::size_t nbytes);
    void memcpy_from_host(void* dst, const void* host_src, std::size_t nbytes);
    void memcpy_device(void* dst, const void* src, std::size_t nbytes);
    /// Waits for every kernel launched on the current device; throws a kernel's error.
    void synchronize();
}
