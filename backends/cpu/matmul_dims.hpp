#pragma once
// Internal to the CPU backend: the dimension limit every CPU matmul enforces (fast and
// reference alike, so that the error does not depend on the build or the SIMD level).
#include <climits>
#include <cstdint>
#include <stdexcept>
#include <string>

namespace xgrad::cpu::detail
{
    /// Throws std::invalid_argument unless m, n and k fit the int dimensions of BLAS.
    inline void check_matmul_dims(std::int64_t m, std::int64_t n, std::int64_t k)
    {
        if (m > INT_MAX || n > INT_MAX || k > INT_MAX)
            throw std::invalid_argument("matmul: m = " + std::to_string(m) + ", n = " + std::to_string(n) +
                                        ", k = " + std::to_string(k) +
                                        ": every dimension must be at most INT_MAX (the BLAS limit)");
    }
}
