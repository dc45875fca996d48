// The device runtime on the CUDA runtime API (nvcc builds). Every call names itself in the
// error it throws, so a failed launch or copy says where it happened.
#include <cuda_runtime.h>

#include <new>
#include <stdexcept>
#include <string>

#include "backends/cuda/runtime.hpp"

namespace xgrad::cuda
{
    namespace
    {
        void check(cudaError_t err, const char* what)
        {
            if (err == cudaSuccess)
                return;
            (void)cudaGetLastError(); // clear a non-sticky error so later calls can go on
            throw std::runtime_error(std::string("CUDA error in ") + what + ": " + cudaGetErrorName(err) + " (" +
                                     cudaGetErrorString(err) + ")");
        }
    }

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

    void set_device(int index)
    {
        int current = -1;
        check(cudaGetDevice(&current), "cudaGetDevice");
        if (current != index)
            check(cudaSetDevice(index), "cudaSetDevice");
    }

    int current_device()
    {
        int current = 0;
        check(cudaGetDevice(&current), "cudaGetDevice");
        return current;
    }

    const char* runtime_name() noexcept { return "CUDA"; }

    void* device_malloc(std::size_t nbytes)
    {
        void* p = nullptr;
        const cudaError_t err = cudaMalloc(&p, nbytes);
        if (err == cudaErrorMemoryAllocation)
        {
            (void)cudaGetLastError();
            throw std::bad_alloc();
        }
        check(err, "cudaMalloc");
        return p;
    }

    void device_free(void* p) noexcept { (void)cudaFree(p); }

    void memcpy_to_host(void* host_dst, const void* src, std::size_t nbytes)
    {
        check(cudaMemcpy(host_dst, src, nbytes, cudaMemcpyDeviceToHost), "cudaMemcpy (device to host)");
    }

    void memcpy_from_host(void* dst, const void* host_src, std::size_t nbytes)
    {
        check(cudaMemcpy(dst, host_src, nbytes, cudaMemcpyHostToDevice), "cudaMemcpy (host to device)");
    }

    void memcpy_device(void* dst, const void* src, std::size_t nbytes)
    {
        check(cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyDeviceToDevice, 0), "cudaMemcpyAsync (device to device)");
    }

    void synchronize() { check(cudaDeviceSynchronize(), "cudaDeviceSynchronize"); }
}
