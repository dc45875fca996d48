// CPU device memory: 64-byte aligned host allocations (one cache line, and the widest vector
// load, AVX-512, so SIMD kernels never straddle a line at an array's start), and memcpy for
// the host transfers, since CPU device memory is host memory.
//
// Large blocks are cached. A training step allocates and frees the same few dozen
// activation-sized buffers (megabytes each) every iteration; handed back to the C library,
// such blocks go back to the kernel (mmap/munmap or a heap trim), and every reuse pays a page
// fault and a page clear per 4 KiB — measured at about a tenth of a training step's time. So
// blocks of at least `cached_min` bytes are rounded up to a size class (four per power of two,
// at most 25% slack) and kept on a free list of their class when freed, up to `cache_limit`
// bytes in all; beyond that they are released. Every block carries a 64-byte header with its
// class, so deallocate needs only the pointer.
#include <cstdint>
#include <cstring>
#include <map>
#include <mutex>
#include <new>
#include <vector>

#include "backends/cpu/cpu_kernels.hpp"
#include "xgrad/checked.hpp"

namespace xgrad::cpu
{
    namespace
    {
        constexpr std::size_t alignment = 64;
        constexpr std::size_t header = alignment; // keeps the user pointer aligned
#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define XGRAD_ASAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__) || defined(XGRAD_ASAN)
        // Under AddressSanitizer every block goes back to the allocator, so that a use after
        // free is caught rather than hidden by a reused block.
        constexpr std::size_t cached_min = SIZE_MAX;
#else
        constexpr std::size_t cached_min = std::size_t(1) << 16;
#endif
        constexpr std::size_t cache_limit = std::size_t(1) << 30;

        /// The size class of a large block: n rounded up to 2^k * {4, 5, 6, 7} / 4.
        std::size_t size_class(std::size_t n)
        {
            // p, the largest power of two <= n (n >= cached_min >= 4), from the top bit: a
            // doubling loop would overflow, and never end, for n >= 2^63.
            const std::size_t p = std::size_t(1) << (63 - __builtin_clzll(static_cast<unsigned long long>(n)));
            if (p == n)
                return n;
            return checked_round_up(n, p / 4, "cpu allocate: size class of a request");
        }

        struct block_cache
        {
            std::mutex m_mutex;
            std::map<std::size_t, std::vector<void*>> m_free; // class -> raw blocks
            std::size_t m_cached_bytes = 0;

            ~block_cache()
            {
                for (auto& [size, blocks] : m_free)
                    for (void* raw : blocks)
                        ::operator delete (raw, std::align_val_t{alignment});
            }
        };

        block_cache& cache()
        {
            // Leaked on purpose: tensors held by static objects may be freed after it would be
            // destroyed; the operating system reclaims the memory at exit.
            static block_cache* c = new block_cache;
            return *c;
        }

        void* raw_new(std::size_t total) { return ::operator new (total, std::align_val_t{alignment}); }
    }

    void* allocate(std::size_t nbytes)
    {
        const std::size_t size = nbytes >= cached_min ? size_class(nbytes) : nbytes;
        void* raw = nullptr;
        if (size >= cached_min)
        {
            block_cache& c = cache();
            std::lock_guard<std::mutex> lock(c.m_mutex);
            const auto it = c.m_free.find(size);
            if (it != c.m_free.end() && !it->second.empty())
            {
                raw = it->second.back();
                it->second.pop_back();
                c.m_cached_bytes -= size;
            }
        }
        if (!raw)
        {
            // Checked: a request near SIZE_MAX would wrap to a small block once the header is added.
            const char* what = "cpu allocate: bytes with the block header";
            const std::int64_t total = checked_add(static_cast<std::int64_t>(checked_round_up(size, 1, what)),
                                                   static_cast<std::int64_t>(header), what);
            raw = raw_new(static_cast<std::size_t>(total)); // throws std::bad_alloc
        }
        std::memcpy(raw, &size, sizeof size);
        return static_cast<char*>(raw) + header;
    }

    void deallocate(void* p) noexcept
    {
        if (!p)
            return;
        void* raw = static_cast<char*>(p) - header;
        std::size_t size = 0;
        std::memcpy(&size, raw, sizeof size);
        if (size >= cached_min)
        {
            block_cache& c = cache();
            std::lock_guard<std::mutex> lock(c.m_mutex);
            if (c.m_cached_bytes + size <= cache_limit)
            {
                try
                {
                    c.m_free[size].push_back(raw);
                    c.m_cached_bytes += size;
                    return;
                }
                catch (...) // no memory for the list entry: release the block instead
                {
                }
            }
        }
        ::operator delete (raw, std::align_val_t{alignment});
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
