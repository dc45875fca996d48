// The fast matmul kernel: matmul hands each matrix to cblas_sgemm/dgemm; OpenBLAS is far
// faster than anything hand-written here and threads each product itself. Operands BLAS
// cannot read in place are first packed row-major. At simd_level::scalar the dispatch serves
// its xgrad::cpu::reference twin instead.
#include <algorithm>
#include <climits>
#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include <cblas.h>

#include "backends/cpu/cpu_kernels.hpp"
#include "backends/cpu/dispatch.hpp"
#include "backends/common/matmul_dims.hpp"
#include "xgrad/thread_pool.hpp"

namespace xgrad::cpu
{
    namespace
    {
        using detail::grain;
        using detail::visit_compute;

        // ---------------------------------------------------------------------------------
        // matmul

        /// The CBLAS form of a gemm_view (matmul_dims.hpp).
        struct blas_view
        {
            CBLAS_TRANSPOSE trans;
            int ld;
        };

        std::optional<blas_view> view_for_blas(std::int64_t rows, std::int64_t cols, std::int64_t row_stride,
                                               std::int64_t col_stride)
        {
            const auto v = detail::gemm_view_of(rows, cols, row_stride, col_stride);
            if (!v)
                return std::nullopt;
            return blas_view{v->transposed ? CblasTrans : CblasNoTrans, v->ld};
        }

        void gemm(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int m, int n, int k, const float* a, int lda, const float* b,
                  int ldb, float* c)
        {
            cblas_sgemm(CblasRowMajor, ta, tb, m, n, k, 1.0f, a, lda, b, ldb, 0.0f, c, n);
        }

        void gemm(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int m, int n, int k, const double* a, int lda, const double* b,
                  int ldb, double* c)
        {
            cblas_dgemm(CblasRowMajor, ta, tb, m, n, k, 1.0, a, lda, b, ldb, 0.0, c, n);
        }

        /// Batched GEMM through CBLAS, one cblas_?gemm per batch entry, in order.
        ///
        /// Threading: OpenBLAS threads each large GEMM itself (its own pool; it stays on one
        /// thread below m*n*k ~ 2.6e5). Batches are not spread over our pool on top of that:
        /// OpenBLAS has a history of races when called from several threads at once (OpenBLAS
        /// issues #1401, #1761, #2126), and on the development machine spreading batches of
        /// small products over threads gave no measurable gain.
        template <class T>
        void matmul_impl(T* out, const T* a, const std::int64_t* a_strides, const T* b, const std::int64_t* b_strides,
                         std::int64_t batch, std::int64_t m, std::int64_t n, std::int64_t k)
        {
            detail::check_matmul_dims(m, n, k);
            if (batch <= 0 || m == 0 || n == 0)
                return;
            const std::int64_t mn = m * n;
            if (k == 0)
            {
                parallel_for(0, batch * mn, grain, [&](std::int64_t begin, std::int64_t end) {
                    std::fill(out + begin, out + end, T(0));
                });
                return;
            }
            const auto view_a = view_for_blas(m, k, a_strides[1], a_strides[2]);
            const auto view_b = view_for_blas(k, n, b_strides[1], b_strides[2]);
            // Operands BLAS cannot read in place are packed row-major (ld = their width).
            auto operand = [](const T* src, std::int64_t rows, std::int64_t cols, std::int64_t rs, std::int64_t cs,
                              const std::optional<blas_view>& view, std::vector<T>& pack) {
                if (view)
                    return std::make_pair(src, *view);
                pack.resize(static_cast<std::size_t>(rows * cols));
                for (std::int64_t i = 0; i < rows; ++i)
                    for (std::int64_t j = 0; j < cols; ++j)
                        pack[static_cast<std::size_t>(i * cols + j)] = src[i * rs + j * cs];
                return std::make_pair(static_cast<const T*>(pack.data()), blas_view{CblasNoTrans, static_cast<int>(cols)});
            };
            std::vector<T> pack_a, pack_b;
            for (std::int64_t p = 0; p < batch; ++p)
            {
                const auto [pa, va] = operand(a + p * a_strides[0], m, k, a_strides[1], a_strides[2], view_a, pack_a);
                const auto [pb, vb] = operand(b + p * b_strides[0], k, n, b_strides[1], b_strides[2], view_b, pack_b);
                gemm(va.trans, vb.trans, static_cast<int>(m), static_cast<int>(n), static_cast<int>(k), pa, va.ld, pb,
                     vb.ld, out + p * mn);
            }
        }
    }

    void matmul(void* out, const void* a, const std::int64_t* a_strides, const void* b, const std::int64_t* b_strides,
                dtype dt, std::int64_t batch, std::int64_t m, std::int64_t n, std::int64_t k)
    {
        visit_compute(dt, [&](auto tag) {
            using T = decltype(tag);
            matmul_impl(static_cast<T*>(out), static_cast<const T*>(a), a_strides, static_cast<const T*>(b), b_strides,
                        batch, m, n, k);
        });
    }
}
