// The fast matmul kernel: matmul hands each matrix to cblas_sgemm/dgemm; OpenBLAS is far
// faster than anything hand-written here. Operands BLAS cannot read in place are first packed
// row-major. At simd_level::scalar the dispatch serves its xgrad::cpu::reference twin instead.
//
// Threading: OpenBLAS runs single-threaded (set once, when libxgrad is loaded) and the GEMMs
// are spread over xgrad's own pool instead. OpenBLAS's worker threads spin after every GEMM
// (OPENBLAS_THREAD_TIMEOUT, read only when OpenBLAS initialises, before any code of ours can
// set it); in a training step GEMMs alternate with xgrad's parallel kernels, and those spinning
// threads took the cores from xgrad's pool. With one BLAS thread no OpenBLAS worker ever gets
// work, so none spins, whatever the environment says.
#include <algorithm>
#include <climits>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include <cblas.h>

#include "backends/common/matmul_dims.hpp"
#include "backends/cpu/cpu_kernels.hpp"
#include "backends/cpu/dispatch.hpp"
#include "xgrad/thread_pool.hpp"

namespace xgrad::cpu
{
    namespace
    {
        using detail::grain;
        using detail::visit_compute;

        /// Sets OpenBLAS to one thread when libxgrad is loaded. OpenBLAS (a dependency of
        /// libxgrad) has initialised by then, so its own environment settings are already read
        /// and this overrides OPENBLAS_NUM_THREADS / GOTO_NUM_THREADS / OMP_NUM_THREADS for
        /// OpenBLAS. Its workers, started at its initialisation, spin out their timeout once
        /// and then sleep for good.
        struct single_threaded_blas
        {
            single_threaded_blas() { openblas_set_num_threads(1); }
        };
        const single_threaded_blas blas_threads_set_once;

        /// Below this many multiply-adds (m * n * k over the whole call) a matmul runs on the
        /// calling thread: OpenBLAS's own threshold for threading a GEMM (65536 * 4).
        constexpr std::int64_t parallel_work = 262144;
        /// The least work of one thread's block when one product is split.
        constexpr std::int64_t block_work = 65536;
        /// When one product is split over threads, its blocks of rows (or columns) start at
        /// multiples of this many. OpenBLAS computes a row with the micro-kernel tile that its
        /// position in the call selects, and a row moved to another tile position can change
        /// in its last bits: measured with OpenBLAS 0.3.21's Haswell sgemm (which AMD Zen
        /// processors run), splitting 257 rows gives the unsplit result only at multiples of
        /// 24 rows, and dgemm only at even ones. 96 is a multiple of every tile height of its
        /// x86 kernels (2 to 32), so each row keeps its tile position whatever the thread count
        /// and a row split does not change the result (test_ops: "results do not depend on the
        /// thread count"). A column split (more columns than rows) is not made exact by any
        /// alignment there: the same kernels give a row's values in another order when the
        /// call's column count changes, so such products depend on the thread count in their
        /// last bits on those processors.
        constexpr std::int64_t block_align = 96;
        /// Depth splits (see k_chunks): a chunk is at least this deep, there are at most
        /// max_k_chunks of them, and their partial products hold at most k_split_scratch
        /// elements beside the output.
        constexpr std::int64_t k_chunk_min = 512;
        constexpr std::int64_t max_k_chunks = 64;
        constexpr std::int64_t k_split_scratch = std::int64_t{1} << 20;

        /// How many chunks of k a product is summed in (1: not cut), from its shape alone, so
        /// that the same shape gives the same bits at every thread count. A product whose
        /// output is small beside its depth (a weight gradient: dY [O, N*L] x cols^T, or a
        /// linear layer on a small batch) has too few 96-line blocks of output rows or columns
        /// to give every thread one (conv2d's 64 x 288 x 12544 weight gradient has 3, a
        /// 32 x 9 x 50176 one none), so it is cut along k instead: each chunk's partial
        /// product is a GEMM of its own, on any thread, and the partials are added in chunk
        /// order. Cut only where the output is narrower than 8 blocks both ways and every chunk
        /// is at least k_chunk_min deep (OpenBLAS's own depth blocking is 256-384, so such a
        /// chunk still runs its kernels at full speed).
        std::int64_t k_chunks(std::int64_t m, std::int64_t n, std::int64_t k)
        {
            if (std::max(m, n) >= 8 * block_align || k < 2 * k_chunk_min ||
                static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k) <
                    static_cast<double>(parallel_work))
                return 1;
            return std::clamp<std::int64_t>(std::min(k / k_chunk_min, k_split_scratch / (m * n)), 1, max_k_chunks);
        }

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

        /// C = A B (beta 0: OpenBLAS never reads C) or C += A B (accumulate: beta 1).
        void gemm(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int m, int n, int k, const float* a, int lda, const float* b,
                  int ldb, float* c, int ldc, bool accumulate)
        {
            cblas_sgemm(CblasRowMajor, ta, tb, m, n, k, 1.0f, a, lda, b, ldb, accumulate ? 1.0f : 0.0f, c, ldc);
        }

        void gemm(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int m, int n, int k, const double* a, int lda,
                  const double* b, int ldb, double* c, int ldc, bool accumulate)
        {
            cblas_dgemm(CblasRowMajor, ta, tb, m, n, k, 1.0, a, lda, b, ldb, accumulate ? 1.0 : 0.0, c, ldc);
        }

        /// One operand as BLAS reads it: the memory (the tensor's, or a packed copy), its CBLAS
        /// view, and the steps between its rows and its columns in that memory (to address a
        /// block of rows of A or of columns of B).
        template <class T>
        struct blas_operand
        {
            const T* data;
            blas_view view;
            std::int64_t row_step, col_step;
        };

        /// The operand at `src`, packed row-major into `pack` when BLAS cannot read it in place.
        template <class T>
        blas_operand<T> operand(const T* src, std::int64_t rows, std::int64_t cols, std::int64_t rs, std::int64_t cs,
                                const std::optional<blas_view>& view, std::vector<T>& pack)
        {
            if (view)
                return {src, *view, rs, cs};
            pack.resize(static_cast<std::size_t>(rows * cols));
            for (std::int64_t i = 0; i < rows; ++i)
                for (std::int64_t j = 0; j < cols; ++j)
                    pack[static_cast<std::size_t>(i * cols + j)] = src[i * rs + j * cs];
            return {pack.data(), blas_view{CblasNoTrans, static_cast<int>(cols)}, cols, 1};
        }

        /// Memory for the partial products of depth-split GEMMs, kept per thread between calls
        /// (at most k_split_scratch elements) so that a training step's products do not map
        /// and fault in fresh pages every time.
        template <class T>
        T* k_split_partials(std::size_t elements)
        {
            thread_local std::vector<T> partials;
            if (partials.size() < elements)
                partials.resize(elements);
            return partials.data();
        }

        /// C = A B (or C += A B when accumulate) as `chunks` partial products over consecutive
        /// ranges of k (chunk i covers [i k / chunks, (i + 1) k / chunks)), chunk 0 written
        /// (accumulated) into c and the others into
        /// `partials` ((chunks - 1) * m * n elements), then added into c in chunk order. The
        /// chunks run over the pool when `parallel` (the caller's thread is not inside a
        /// parallel_for), otherwise on the calling thread; the bits are the same either way.
        template <class T>
        void gemm_k_split(const blas_operand<T>& a, const blas_operand<T>& b, int m, int n, std::int64_t k,
                          std::int64_t chunks, T* c, T* partials, bool parallel, bool accumulate)
        {
            const std::int64_t mn = std::int64_t{m} * n;
            const auto chunk = [&](std::int64_t first, std::int64_t last) {
                for (std::int64_t i = first; i < last; ++i)
                {
                    const std::int64_t begin = i * k / chunks, end = (i + 1) * k / chunks;
                    gemm(a.view.trans, b.view.trans, m, n, static_cast<int>(end - begin), a.data + begin * a.col_step,
                         a.view.ld, b.data + begin * b.row_step, b.view.ld, i == 0 ? c : partials + (i - 1) * mn, n,
                         i == 0 && accumulate);
                }
            };
            const auto add = [&](std::int64_t first, std::int64_t last) {
                for (std::int64_t i = 1; i < chunks; ++i)
                {
                    const T* part = partials + (i - 1) * mn;
                    for (std::int64_t e = first; e < last; ++e)
                        c[e] += part[e];
                }
            };
            if (!parallel)
            {
                chunk(0, chunks);
                add(0, mn);
                return;
            }
            parallel_for(0, chunks, 1, chunk);
            parallel_for(0, mn, grain, add);
        }

        /// Batched GEMM through CBLAS (one single-threaded cblas_?gemm per block), over xgrad's
        /// pool: batch entries go to the threads whole when there are at least as many as
        /// threads; otherwise each product is split into blocks of rows of C (or of columns,
        /// when C is wider than tall), one per thread, the products one after the other.
        ///
        /// Products that are small beside their depth are cut along k instead (k_chunks), by a
        /// rule of the shape alone.
        ///
        /// What holds across thread counts: every element of C is one dot product over the whole
        /// of k (or the chunk-order sum of k_chunks(m, n, k) such products over fixed ranges of
        /// k) computed by OpenBLAS from the same row of A and column of B; blocks only choose
        /// which call computes it. Splitting batches and depth-split products therefore give
        /// bit-identical results, and so do row splits (block_align). A column split can differ
        /// in the last bits, because OpenBLAS may pick other kernels for a block's edge than for
        /// the whole matrix; OpenBLAS's own threading splits rows and columns the same way, so
        /// the guarantee is the one it gives: equal up to the rounding of a k-term dot product.
        /// At a fixed thread count every result is reproducible (the blocks depend only on the
        /// shapes and the thread count).
        template <class T>
        void matmul_impl(T* out, const T* a, const std::int64_t* a_strides, const T* b, const std::int64_t* b_strides,
                         std::int64_t batch, std::int64_t m, std::int64_t n, std::int64_t k, bool accumulate)
        {
            detail::check_matmul_dims(m, n, k);
            if (batch <= 0 || m == 0 || n == 0 || (k == 0 && accumulate))
                return;
            const std::int64_t mn = m * n;
            if (k == 0)
            {
                parallel_for(0, batch * mn, grain,
                             [&](std::int64_t begin, std::int64_t end) { std::fill(out + begin, out + end, T(0)); });
                return;
            }
            const auto view_a = view_for_blas(m, k, a_strides[1], a_strides[2]);
            const auto view_b = view_for_blas(k, n, b_strides[1], b_strides[2]);
            const auto product = [&](std::int64_t p, std::vector<T>& pack_a, std::vector<T>& pack_b) {
                return std::make_pair(operand(a + p * a_strides[0], m, k, a_strides[1], a_strides[2], view_a, pack_a),
                                      operand(b + p * b_strides[0], k, n, b_strides[1], b_strides[2], view_b, pack_b));
            };
            const std::int64_t threads = get_num_threads();
            // Work in multiply-adds, in double: batch * m * n * k can pass 2^63.
            const double product_work = static_cast<double>(mn) * static_cast<double>(k);
            const bool is_small = static_cast<double>(batch) * product_work < static_cast<double>(parallel_work);
            const int im = static_cast<int>(m), in = static_cast<int>(n), ik = static_cast<int>(k);
            const std::int64_t chunks = k_chunks(m, n, k);
            if (threads == 1 || is_small || batch >= threads)
            {
                // Whole products, at least parallel_work of them a chunk (all inline when small).
                const auto min_batches = static_cast<std::int64_t>(
                    std::ceil(static_cast<double>(parallel_work) / std::max(1.0, product_work)));
                parallel_for(0, batch, is_small ? batch : min_batches, [&](std::int64_t begin, std::int64_t end) {
                    std::vector<T> pack_a, pack_b;
                    T* partials = chunks > 1 ? k_split_partials<T>(static_cast<std::size_t>((chunks - 1) * mn))
                                             : nullptr;
                    for (std::int64_t p = begin; p < end; ++p)
                    {
                        const auto [oa, ob] = product(p, pack_a, pack_b);
                        if (chunks > 1)
                            gemm_k_split(oa, ob, im, in, k, chunks, out + p * mn, partials, false, accumulate);
                        else
                            gemm(oa.view.trans, ob.view.trans, im, in, ik, oa.data, oa.view.ld, ob.data, ob.view.ld,
                                 out + p * mn, in, accumulate);
                    }
                });
                return;
            }
            if (chunks > 1)
            {
                std::vector<T> pack_a, pack_b;
                T* partials = k_split_partials<T>(static_cast<std::size_t>((chunks - 1) * mn));
                for (std::int64_t p = 0; p < batch; ++p)
                {
                    const auto [oa, ob] = product(p, pack_a, pack_b);
                    gemm_k_split(oa, ob, im, in, k, chunks, out + p * mn, partials, true, accumulate);
                }
                return;
            }
            const bool split_rows = m >= n;
            const std::int64_t extent = split_rows ? m : n;
            const double line_work = static_cast<double>(split_rows ? n : m) * static_cast<double>(k);
            const auto min_block = static_cast<std::int64_t>(std::ceil(static_cast<double>(block_work) / line_work));
            // Blocks of block_align lines, the lines left over joining the last block: a block of
            // one line would go to OpenBLAS's GEMV path, which sums in yet another order.
            const std::int64_t groups = std::max<std::int64_t>(1, extent / block_align);
            const std::int64_t min_groups = std::max<std::int64_t>(1, (min_block + block_align - 1) / block_align);
            std::vector<T> pack_a, pack_b;
            for (std::int64_t p = 0; p < batch; ++p)
            {
                const auto [oa, ob] = product(p, pack_a, pack_b);
                T* c = out + p * mn;
                parallel_for(0, groups, min_groups, [&, oa = oa, ob = ob](std::int64_t first, std::int64_t last) {
                    const std::int64_t begin = first * block_align;
                    const std::int64_t end = last == groups ? extent : last * block_align;
                    const int size = static_cast<int>(end - begin);
                    if (split_rows)
                        gemm(oa.view.trans, ob.view.trans, size, in, ik, oa.data + begin * oa.row_step, oa.view.ld,
                             ob.data, ob.view.ld, c + begin * n, in, accumulate);
                    else
                        gemm(oa.view.trans, ob.view.trans, im, size, ik, oa.data, oa.view.ld,
                             ob.data + begin * ob.col_step, ob.view.ld, c + begin, in, accumulate);
                });
            }
        }
    }

    void matmul(void* out, const void* a, const std::int64_t* a_strides, const void* b, const std::int64_t* b_strides,
                dtype dt, std::int64_t batch, std::int64_t m, std::int64_t n, std::int64_t k, bool accumulate)
    {
        visit_compute(dt, [&](auto tag) {
            using T = decltype(tag);
            matmul_impl(static_cast<T*>(out), static_cast<const T*>(a), a_strides, static_cast<const T*>(b), b_strides,
                        batch, m, n, k, accumulate);
        });
    }
}
