// matmul on the GPU through cuBLAS (nvcc builds; the Thrust-on-OpenMP build uses
// matmul_omp.cpp). One strided-batched GEMM per call.
//
// cuBLAS is column-major and xgrad's out is row-major [batch, m, n]. A row-major m x n
// matrix is the column-major n x m matrix of its transpose, so out^T = b^T a^T is computed:
// cuBLAS's "A" is our b and its "B" is our a. A matrix that a row-major BLAS reads
// untransposed with leading dimension ld (gemm_view_of, shared with the CPU backend) is, to a
// column-major BLAS, its transpose with the same ld: exactly the operand it needs with op N.
// Operands no BLAS can read in place (broadcast or overlapping rows) are packed row-major
// first with the backend's own copy kernel. Float32 uses plain FP32 arithmetic (cuBLAS's
// default math mode, no TF32), so results match the CPU within float rounding.
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <array>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include "backends/common/matmul_dims.hpp"
#include "backends/cuda/cuda_kernels.hpp"
#include "backends/cuda/runtime.hpp"

namespace xgrad::cuda
{
    namespace
    {
        void check(cublasStatus_t s, const char* what)
        {
            if (s != CUBLAS_STATUS_SUCCESS)
                throw std::runtime_error(std::string("cuBLAS error in ") + what + ": status " +
                                         std::to_string(static_cast<int>(s)));
        }

        /// One cuBLAS handle per device, created on first use and kept for the process.
        cublasHandle_t handle_for(int device)
        {
            static std::mutex mutex;
            static std::vector<cublasHandle_t> handles;
            std::lock_guard<std::mutex> lock(mutex);
            if (handles.size() <= static_cast<std::size_t>(device))
                handles.resize(static_cast<std::size_t>(device) + 1, nullptr);
            auto& h = handles[static_cast<std::size_t>(device)];
            if (!h)
                check(cublasCreate(&h), "cublasCreate");
            return h;
        }

        cublasStatus_t gemm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                            const float* a, int lda, long long sa, const float* b, int ldb, long long sb, float* c,
                            int ldc, long long sc, int batch, bool accumulate)
        {
            const float one = 1.0f, beta = accumulate ? 1.0f : 0.0f;
            return cublasSgemmStridedBatched(h, ta, tb, m, n, k, &one, a, lda, sa, b, ldb, sb, &beta, c, ldc, sc,
                                             batch);
        }

        cublasStatus_t gemm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                            const double* a, int lda, long long sa, const double* b, int ldb, long long sb, double* c,
                            int ldc, long long sc, int batch, bool accumulate)
        {
            const double one = 1.0, beta = accumulate ? 1.0 : 0.0;
            return cublasDgemmStridedBatched(h, ta, tb, m, n, k, &one, a, lda, sa, b, ldb, sb, &beta, c, ldc, sc,
                                             batch);
        }

        /// A matrix operand as cuBLAS reads it: its pointer, view and batch stride, packed
        /// row-major into `pack` when it cannot be read in place.
        struct operand
        {
            const void* ptr;
            kernels::detail::gemm_view view;
            long long batch_stride;
        };

        operand prepare(const void* src, const std::int64_t* strides, std::int64_t batch, std::int64_t rows,
                        std::int64_t cols, dtype dt, void*& pack)
        {
            if (const auto v = kernels::detail::gemm_view_of(rows, cols, strides[1], strides[2]))
                return {src, *v, static_cast<long long>(strides[0])};
            pack = allocate(static_cast<std::size_t>(batch * rows * cols) * itemsize(dt));
            const std::array<std::int64_t, 3> shape{batch, rows, cols};
            const std::array<std::int64_t, 3> packed{rows * cols, cols, 1};
            copy(pack, packed.data(), dt, src, strides, dt, 3, shape.data());
            return {pack, kernels::detail::gemm_view{false, static_cast<int>(std::max<std::int64_t>(cols, 1))},
                    static_cast<long long>(rows * cols)};
        }

        template <class T>
        void matmul_impl(void* out, const void* a, const std::int64_t* a_strides, const void* b,
                         const std::int64_t* b_strides, dtype dt, std::int64_t batch, std::int64_t m, std::int64_t n,
                         std::int64_t k, bool accumulate)
        {
            if (k == 0)
            {
                if (accumulate)
                    return; // out += an empty product
                const std::array<std::int64_t, 1> shape{batch * m * n}, strides{1};
                fill(out, strides.data(), dt, 1, shape.data(), 0.0);
                return;
            }
            void* pack_a = nullptr;
            void* pack_b = nullptr;
            try
            {
                const operand oa = prepare(a, a_strides, batch, m, k, dt, pack_a);
                const operand ob = prepare(b, b_strides, batch, k, n, dt, pack_b);
                // out^T (n x m, column-major, ld n) = b^T (n x k) * a^T (k x m).
                const cublasOperation_t tb = ob.view.transposed ? CUBLAS_OP_T : CUBLAS_OP_N;
                const cublasOperation_t ta = oa.view.transposed ? CUBLAS_OP_T : CUBLAS_OP_N;
                cublasHandle_t h = handle_for(current_device());
                check(cublasSetStream(h, 0), "cublasSetStream");
                // cuBLAS takes at most 65535 batches per grid dimension on some versions; the
                // int batch count is the interface limit.
                for (std::int64_t p0 = 0; p0 < batch; p0 += 65535)
                {
                    const int nb = static_cast<int>(std::min<std::int64_t>(65535, batch - p0));
                    check(gemm(h, tb, ta, static_cast<int>(n), static_cast<int>(m), static_cast<int>(k),
                               static_cast<const T*>(ob.ptr) + p0 * ob.batch_stride, ob.view.ld, ob.batch_stride,
                               static_cast<const T*>(oa.ptr) + p0 * oa.batch_stride, oa.view.ld, oa.batch_stride,
                               static_cast<T*>(out) + p0 * m * n, static_cast<int>(n), static_cast<long long>(m * n),
                               nb, accumulate),
                          "cublas?gemmStridedBatched");
                }
            }
            catch (...)
            {
                deallocate(pack_a);
                deallocate(pack_b);
                throw;
            }
            deallocate(pack_a);
            deallocate(pack_b);
        }
    }

    void matmul(void* out, const void* a, const std::int64_t* a_strides, const void* b, const std::int64_t* b_strides,
                dtype dt, std::int64_t batch, std::int64_t m, std::int64_t n, std::int64_t k, bool accumulate)
    {
        kernels::detail::check_matmul_dims(m, n, k);
        if (batch <= 0 || m == 0 || n == 0)
            return;
        if (dt == dtype::float64)
            matmul_impl<double>(out, a, a_strides, b, b_strides, dt, batch, m, n, k, accumulate);
        else
            matmul_impl<float>(out, a, a_strides, b, b_strides, dt, batch, m, n, k, accumulate);
    }
}
