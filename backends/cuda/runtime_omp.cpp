// The device runtime of the XGRAD_CUDA_ON_CPU build: the CUDA backend's Thrust code runs on
// Thrust's OpenMP device system, so "device" memory is host memory and there is one device,
// cuda:0. This build exists to test the backend's logic on machines without a GPU.
#include <cstdlib>
#include <cstring>
#include <new>
#include <stdexcept>
#include <string>

#include "backends/cuda/runtime.hpp"
#include "xgrad/checked.hpp"

namespace xgrad::cuda
{
    int device_count() noexcept { return 1; }

    void set_device(int index)
    {
        if (index != 0)
            throw std::runtime_error("cuda:" + std::to_string(index) +
                                     " does not exist: the Thrust-on-OpenMP build has one device, cuda:0");
    }

    int current_device() { return 0; }

    const char* runtime_name() noexcept { return "Thrust on OpenMP (host memory)"; }

    void* device_malloc(std::size_t nbytes)
    {
        // 256-byte alignment, as cudaMalloc gives.
        void* p = std::aligned_alloc(256, checked_round_up(nbytes, 256, "device_malloc: bytes"));
        if (!p)
            throw std::bad_alloc();
        return p;
    }

    void device_free(void* p) noexcept { std::free(p); }

    void memcpy_to_host(void* host_dst, const void* src, std::size_t nbytes)
    {
        if (nbytes)
            std::memcpy(host_dst, src, nbytes);
    }

    void memcpy_from_host(void* dst, const void* host_src, std::size_t nbytes)
    {
        if (nbytes)
            std::memcpy(dst, host_src, nbytes);
    }

    void memcpy_device(void* dst, const void* src, std::size_t nbytes)
    {
        if (nbytes)
            std::memcpy(dst, src, nbytes);
    }

    void synchronize() {}
}
