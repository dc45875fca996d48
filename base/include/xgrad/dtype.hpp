#pragma once
// Element types: one of the two tags every tensor carries (the other, the device, is in
// xgrad/device.hpp, included here).
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

#include "xgrad/device.hpp"

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
}
