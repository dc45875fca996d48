// CPU device memory: 64-byte aligned host allocations (one cache line, and the widest vector
// load, AVX-512, so SIMD kernels never straddle a line at an array's start), and memcpy for
// the host transfers, since CPU device memory is host memory.
#include <cstring>
#include <new>

#include "backends/cpu/cpu_kernels.hpp"

namespace xgrad::cpu
{
    namespace
    {
        constexpr std::align_val_t alignment{64};
    }

    void* allocate(std::size_t nbytes)
    {
        // Aligned operator new throws std::bad_alloc and returns a unique pointer for 0 bytes.
        return ::operator new(nbytes, alignment);
    }

    void deallocate(void* p) noexcept
    {
        ::operator delete(p, alignment); // a no-op for nullptr
    }

    void copy_to_host(void* host_dst, const void* src, std::size_t nbytes)
    {
        if (nbytes != 0)
            std::memcpy(host_dst, src, nbytes);
    }

    void copy_from_host(void* dst, const void* host_src, std::size_t nbytes)
    {
        if (nbytes != 0)
            std::memcpy(dst, host_src, nbytes);
    }
}
