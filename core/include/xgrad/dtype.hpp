#pragma once
// Element types and devices: the two tags every tensor carries.
//
// Compute dtypes are float32 and float64. float16 and bfloat16 are storage types: every op
// converts them to float32, computes, and rounds the result back (round-to-nearest-even).
// int64 holds labels and indices; it can be created, copied, cast and printed, and math ops
// reject it with a clear error.
#include <cstddef>
#include <cstdint>
#include <ostream>
#include <string>
#include <string_view>

namespace xgrad
{
    enum class dtype : std::uint8_t
    {
        float32,
        float64,
        float16,
        bfloat16,
        int64
    };

    /// Size of one element in bytes.
    std::size_t itemsize(dtype dt) noexcept;
    /// "float32", "float64", "float16", "bfloat16", "int64".
    std::string_view name(dtype dt) noexcept;
    /// True for the four floating-point dtypes.
    bool is_floating(dtype dt) noexcept;
    /// The dtype kernels compute in: float16/bfloat16 -> float32, others unchanged.
    dtype compute_dtype(dtype dt) noexcept;
    std::ostream& operator<<(std::ostream& os, dtype dt);

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

    /// Whether this build of xgrad has the CUDA backend (XGRAD_USE_CUDA, or the
    /// XGRAD_CUDA_ON_CPU test build, whose one device cuda:0 runs on the CPU).
    bool cuda_is_built() noexcept;
    /// Number of CUDA devices visible at run time (0 without CUDA support, driver or device).
    int cuda_device_count() noexcept;
    /// "CUDA" or "Thrust on OpenMP (host memory)" (the XGRAD_CUDA_ON_CPU build); "" without
    /// CUDA support.
    std::string cuda_runtime_name();

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
    /// The counters of `dev` (a cuda device). Throws std::runtime_error naming the device when
    /// it is not available (as every op on it does), std::invalid_argument for a cpu device.
    cuda_memory_stats cuda_memory(device dev);
    /// Hands the cached free blocks of `dev` back to the device (same errors as cuda_memory).
    void cuda_empty_cache(device dev);
    /// Waits until every kernel queued on `dev` has run; throws a kernel's error.
    void cuda_synchronize(device dev);
}
