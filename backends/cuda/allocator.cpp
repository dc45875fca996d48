// Device memory for tensors: a caching allocator over the runtime's device_malloc.
//
// cudaMalloc and cudaFree are slow (cudaFree also waits for the whole device), and a
// training step allocates and frees the same few dozen buffers every iteration. So freed
// blocks are kept on a free list per device and size class and handed out again; in the
// steady state of a training loop every allocation is a cache hit and the device allocator
// is never called (memory_stats().device_allocations stops growing; a test checks it).
//
// Size classes: multiples of 512 bytes up to 1 MiB, then four classes per power of two (at
// most 25% slack). A freed block is reused only for its own class. Blocks are reused in
// stream order: every kernel runs on the device's one stream, so a kernel that reads a
// block's old contents is queued before any kernel that writes its new ones.
// When the device is out of memory, the cache of that device is released and the call tried
// once more. Under AddressSanitizer (the XGRAD_CUDA_ON_CPU test build) nothing is cached, so a
// use after free is caught rather than hidden by a reused block.
#include <cstdint>
#include <map>
#include <mutex>
#include <new>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

#include "backends/cuda/cuda_kernels.hpp"
#include "backends/cuda/runtime.hpp"
#include "xgrad/checked.hpp"

namespace xgrad::cuda
{
    namespace
    {
#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define XGRAD_CUDA_ASAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__) || defined(XGRAD_CUDA_ASAN)
        constexpr bool caching = false;
#else
        constexpr bool caching = true;
#endif

        std::size_t size_class(std::size_t n)
        {
            constexpr std::size_t small_unit = 512, small_max = std::size_t(1) << 20;
            if (n <= small_max)
                return checked_round_up(n, small_unit, "cuda allocate: size class of a request");
            // Four classes per power of two: round up to a multiple of 2^(floor(log2 n) - 2).
            // Checked: near SIZE_MAX the rounding would wrap to a small block.
            int top = 63 - __builtin_clzll(n);
            const std::size_t unit = std::size_t(1) << (top - 2);
            return checked_round_up(n, unit, "cuda allocate: size class of a request");
        }

        struct block
        {
            std::size_t size;
            int device;
        };

        struct pool
        {
            std::mutex mutex;
            std::unordered_map<void*, block> live;
            // per device: size class -> free blocks
            std::map<int, std::multimap<std::size_t, void*>> free;
            std::map<int, cuda_memory_stats> counters;
        };

        pool& the_pool()
        {
            static pool* p = new pool; // never destroyed: tensors may outlive static destructors
            return *p;
        }

        std::string mib(std::int64_t bytes) { return std::to_string(bytes / (1 << 20)) + " MiB"; }

        void release_cached(pool& p, int device)
        {
            auto& list = p.free[device];
            auto& c = p.counters[device];
            for (auto& [size, ptr] : list)
            {
                device_free(ptr);
                c.reserved_bytes -= static_cast<std::int64_t>(size);
            }
            list.clear();
        }
    }

    void* allocate(std::size_t nbytes)
    {
        const int device = current_device();
        const std::size_t size = size_class(nbytes == 0 ? 1 : nbytes);
        pool& p = the_pool();
        std::lock_guard<std::mutex> lock(p.mutex);
        auto& c = p.counters[device];
        auto& list = p.free[device];
        if (const auto it = list.find(size); it != list.end())
        {
            void* ptr = it->second;
            list.erase(it);
            p.live.emplace(ptr, block{size, device});
            c.allocated_bytes += static_cast<std::int64_t>(size);
            ++c.cache_hits;
            return ptr;
        }
        void* ptr = nullptr;
        try
        {
            ptr = device_malloc(size);
        }
        catch (const std::bad_alloc&)
        {
            release_cached(p, device);
            try
            {
                ptr = device_malloc(size);
            }
            catch (const std::bad_alloc&)
            {
                throw std::runtime_error("cuda:" + std::to_string(device) + ": out of device memory allocating " +
                                         std::to_string(size) + " bytes (" + mib(c.allocated_bytes) +
                                         " held by tensors)");
            }
        }
        p.live.emplace(ptr, block{size, device});
        c.allocated_bytes += static_cast<std::int64_t>(size);
        c.reserved_bytes += static_cast<std::int64_t>(size);
        ++c.device_allocations;
        return ptr;
    }

    void deallocate(void* ptr) noexcept
    {
        if (!ptr)
            return;
        pool& p = the_pool();
        std::lock_guard<std::mutex> lock(p.mutex);
        const auto it = p.live.find(ptr);
        if (it == p.live.end())
            return; // not ours: nothing to do (never happens through storage)
        const block b = it->second;
        p.live.erase(it);
        auto& c = p.counters[b.device];
        c.allocated_bytes -= static_cast<std::int64_t>(b.size);
        if (caching)
        {
            p.free[b.device].emplace(b.size, ptr);
            return;
        }
        device_free(ptr);
        c.reserved_bytes -= static_cast<std::int64_t>(b.size);
    }

    cuda_memory_stats memory_stats()
    {
        const int device = current_device();
        pool& p = the_pool();
        std::lock_guard<std::mutex> lock(p.mutex);
        return p.counters[device];
    }

    void empty_cache()
    {
        const int device = current_device();
        pool& p = the_pool();
        std::lock_guard<std::mutex> lock(p.mutex);
        release_cached(p, device);
    }

    void copy_to_host(void* host_dst, const void* src, std::size_t nbytes) { memcpy_to_host(host_dst, src, nbytes); }

    void copy_from_host(void* dst, const void* host_src, std::size_t nbytes)
    {
        memcpy_from_host(dst, host_src, nbytes);
    }
}
