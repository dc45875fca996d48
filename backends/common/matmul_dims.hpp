#pragma once
// Internal to the backends: the dimension limit every matmul enforces (CPU fast and reference
// alike, and the CUDA backend, so that the error does not depend on the build), and how a
// BLAS reads a strided matrix in place (CBLAS here, cuBLAS in backends/cuda/matmul.cu).
#include <algorithm>
#include <climits>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>

#include "xgrad/errors.hpp"

namespace xgrad::kernels::detail
{
    /// Throws std::invalid_argument unless m, n and k fit the int dimensions of BLAS.
    inline void check_matmul_dims(std::int64_t m, std::int64_t n, std::int64_t k)
    {
        if (m > INT_MAX || n > INT_MAX || k > INT_MAX)
            throw xgrad::invalid_argument("matmul: m = " + std::to_string(m) + ", n = " + std::to_string(n) +
                                          ", k = " + std::to_string(k) +
                                          ": every dimension must be at most INT_MAX (the BLAS limit)");
    }

    /// How a row-major BLAS reads a rows x cols matrix in place: untransposed when rows are
    /// contiguous (column stride 1, ld = row stride), transposed when columns are (the matrix
    /// is the transpose of a row-major cols x rows one, ld = column stride).
    struct gemm_view
    {
        bool transposed;
        int ld;
    };

    /// nullopt when BLAS cannot read it in place (overlapping or broadcast rows/columns, or
    /// a leading dimension above INT_MAX): the caller packs a row-major copy.
    inline std::optional<gemm_view> gemm_view_of(std::int64_t rows, std::int64_t cols, std::int64_t row_stride,
                                                 std::int64_t col_stride)
    {
        // A stride of a size-1 dimension is never used: BLAS just needs ld >= max(1, width).
        if ((col_stride == 1 || cols == 1) && (rows == 1 || row_stride >= std::max<std::int64_t>(1, cols)))
        {
            const std::int64_t ld = rows == 1 ? std::max<std::int64_t>(1, cols) : row_stride;
            if (ld <= INT_MAX)
                return gemm_view{false, static_cast<int>(ld)};
        }
        if ((row_stride == 1 || rows == 1) && (cols == 1 || col_stride >= std::max<std::int64_t>(1, rows)))
        {
            const std::int64_t ld = cols == 1 ? std::max<std::int64_t>(1, rows) : col_stride;
            if (ld <= INT_MAX)
                return gemm_view{true, static_cast<int>(ld)};
        }
        return std::nullopt;
    }
}

namespace xgrad::cpu::detail
{
    // The CPU backend's code names these detail::... from inside xgrad::cpu.
    using namespace ::xgrad::kernels::detail;
}
