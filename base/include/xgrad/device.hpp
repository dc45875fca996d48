#pragma once
// Devices: where a tensor's storage lives, one of the two tags every tensor carries (the other,
// the dtype, is in xgrad/dtype.hpp). Plain values only: what a build or machine has is asked
// of the dispatch point, through xgrad/cuda.hpp.
#include <cstdint>
#include <ostream>
#include <string>
#include <string_view>

namespace xgrad
{
    enum class device_type : std::uint8_t
    {
        cpu,
        cuda
    };

    /// Where a tensor's storage lives. `index` is the device ordinal (always 0 for cpu).
    struct device
    {
        device_type type = device_type::cpu;
        int index = 0;

        friend bool operator==(const device& a, const device& b) noexcept
        {
            return a.type == b.type && a.index == b.index;
        }
        friend bool operator!=(const device& a, const device& b) noexcept { return !(a == b); }
    };

    /// Parses "cpu", "cuda", "cuda:1". Throws std::invalid_argument naming the text otherwise.
    device parse_device(std::string_view text);
    std::string to_string(const device& d);
    std::ostream& operator<<(std::ostream& os, const device& d);

    inline constexpr device cpu_device{device_type::cpu, 0};

    /// Counters of the CUDA backend's caching allocator for one device. Tensor memory comes
    /// from a cache of freed blocks, so a training loop's steady state allocates no device
    /// memory: `device_allocations` stops growing while `cache_hits` counts every reuse.
    struct cuda_memory_stats
    {
        std::int64_t allocated_bytes = 0;    // held by live tensors (sizes rounded to the block classes)
        std::int64_t reserved_bytes = 0;     // taken from the device: live blocks plus the cache
        std::int64_t device_allocations = 0; // calls to the device allocator (cudaMalloc) so far
        std::int64_t cache_hits = 0;         // allocations served from the cache so far
    };
}
