// The fast reduction kernels: reduce (sum and max over the trailing dimensions), with blocking,
// threading and dispatch around the SIMD inner loops reduce_contiguous_fn and reduce_rows_fn of
// simd/kernels.hpp; and argmax over the last dimension, a plain scan per row threaded over the
// rows (its comparisons are data-dependent branches, which gain little from SIMD).
//
// Why it is built this way:
// - Reductions use a fixed blocking that depends only on the shape and strides, never on the
//   thread count: threads compute fixed blocks, and block results are combined by a fixed
//   pairwise tree. See reduce_impl for the two fast paths and the error bounds.
// - Kept and reduced dimensions are normalised like every fast kernel's layout (layout.hpp);
//   the instruction set is picked at run time (simd_call, dispatch.hpp). At
//   simd_level::scalar the dispatch serves its xgrad::cpu::reference twin instead.
#include <algorithm>
#include <cstdint>
#include <limits>
#include <vector>

#include "backends/common/layout.hpp"
#include "backends/cpu/cpu_kernels.hpp"
#include "backends/cpu/dispatch.hpp"
#include "backends/cpu/simd/kernels.hpp"
#include "xgrad/thread_pool.hpp"

namespace xgrad::cpu
{
    namespace
    {
        using detail::cursor;
        using detail::for_each_run;
        using detail::grain;
        using detail::make_space;
        using detail::simd_call;
        using detail::visit_compute;

        // ---------------------------------------------------------------------------------
        // Reductions

        /// Path (a): elements per block of a row reduction.
        constexpr std::int64_t reduce_block = 1024;
        /// Path (a): blocks shorter than this are reduced by a scalar loop (not worth a call).
        constexpr std::int64_t tiny_block = 8;
        /// Path (b): reduced rows per block.
        constexpr std::int64_t rows_block = 64;
        /// Path (b): columns per work item (only splits the work; results do not depend on it).
        constexpr std::int64_t cols_block = 512;

        template <class T>
        T combine(reduce_op op, T acc, T v) noexcept
        {
            if (op == reduce_op::sum)
                return acc + v;
            return (v > acc || v != v) ? v : acc; // max; a NaN acc stays, a NaN v wins
        }

        template <class T>
        T reduce_scalar(reduce_op op, const T* x, std::int64_t n) noexcept
        {
            T acc = op == reduce_op::sum ? T(0) : x[0];
            for (std::int64_t i = 0; i < n; ++i)
                acc = combine(op, acc, x[i]);
            return acc;
        }

        /// Combines `count` vectors of `width` values, vector i at v + i * stride, into vector 0
        /// by a fixed pairwise tree (ceil(log2 count) levels).
        template <class T>
        void tree_combine(reduce_op op, T* v, std::int64_t count, std::int64_t stride, std::int64_t width) noexcept
        {
            for (std::int64_t step = 1; step < count; step *= 2)
                for (std::int64_t i = 0; i + step < count; i += 2 * step)
                {
                    T* dst = v + i * stride;
                    const T* src = v + (i + step) * stride;
                    for (std::int64_t j = 0; j < width; ++j)
                        dst[j] = combine(op, dst[j], src[j]);
                }
        }

        /// Reduction with results independent of the thread count: the work is cut into blocks
        /// fixed by the shape and strides alone, and block results are combined by a fixed
        /// pairwise tree; threads only decide who computes which block.
        ///
        /// Layout: kept dims are ordered by x's strides and merged (the output's strides follow);
        /// reduced dims are ordered by x's strides, largest first, and merged.
        ///
        /// Path (b), "columns": the innermost reduced dim is not contiguous but the innermost
        /// kept dim is (x[r, c] with c contiguous, reducing r: what the ops layer's permutation
        /// of reduced dims to the back gives for sum(x, 0) of a contiguous x). Blocks of
        /// rows_block rows are accumulated as whole vectors (SIMD over columns), block results
        /// combined pairwise. Float sum error per output <= (rows_block - 1 + ceil(log2 nblocks))
        /// * u * sum|x| (u = 2^-24 for float32): 77u ~ 4.6e-6 relative to sum|x| for 10^6 rows.
        ///
        /// Path (a), "rows": everything else. Each output's reduced elements, in flat order, are
        /// cut into blocks of reduce_block; a block is reduced in place when it is contiguous
        /// (the usual row reduction), else gathered first, by reduce_contiguous_fn (four vector
        /// accumulators of W lanes, error <= (1024 / (4W) + 5 + log2 W) u sum|x|: 40u for
        /// float32 with AVX2 (W = 8), 71u with SSE2 (W = 4); 71u / 134u for float64); blocks are
        /// combined pairwise: + ceil(log2 nblocks) u. For 2^24 float32 elements with SSE2 that is
        /// 85u ~ 5.1e-6 relative to sum|x|, against 2^24 u ~ 1 for a naive left-to-right loop.
        /// Sums accumulate in the dtype (float for float32), not in double.
        template <class T>
        void reduce_impl(T* out, const std::int64_t* out_strides, const T* x, const std::int64_t* x_strides, int ndim,
                         int n_keep, const std::int64_t* shape, reduce_op op)
        {
            const auto kept = make_space<2>(n_keep, shape, {x_strides, out_strides}); // operand 0: x, 1: out
            if (kept.numel == 0)
                return;
            const auto red = make_space<1>(ndim - n_keep, shape + n_keep, {x_strides + n_keep});
            const std::int64_t k_total = kept.numel, r_total = red.numel;
            if (r_total == 0)
            {
                // Nothing of x is read, so its offsets are not formed: an empty x may have
                // strides whose products over the kept extents do not fit int64.
                const auto out_space = make_space<1>(n_keep, shape, {out_strides});
                const T identity = op == reduce_op::sum ? T(0) : -std::numeric_limits<T>::infinity();
                for_each_run(out_space, 0, k_total, [&](const auto& off, const auto& st, std::int64_t n) {
                    for (std::int64_t j = 0; j < n; ++j)
                        out[off[0] + j * st[0]] = identity;
                });
                return;
            }
            const std::int64_t red_stride = red.inner_stride(0);

            if (r_total > 1 && red_stride != 1 && kept.inner_stride(0) == 1 && kept.inner() >= 16)
            {
                // Path (b).
                const std::int64_t cols = kept.inner(), outer = k_total / cols;
                const std::int64_t row_blocks = (r_total + rows_block - 1) / rows_block;
                const std::int64_t col_blocks = (cols + cols_block - 1) / cols_block;
                const std::int64_t out_stride = kept.inner_stride(1);
                std::vector<T> partial(row_blocks > 1 ? static_cast<std::size_t>(outer * row_blocks * cols) : 0);
                const std::int64_t item_size = std::min(r_total, rows_block) * std::min(cols, cols_block);
                parallel_for(0, outer * col_blocks * row_blocks, std::max<std::int64_t>(1, grain / item_size),
                             [&](std::int64_t begin, std::int64_t end) {
                                 cursor<2> kc(kept);
                                 cursor<1> rc(red);
                                 std::int64_t offsets[rows_block];
                                 std::vector<T> scatter(row_blocks == 1 && out_stride != 1 ? cols_block : 0);
                                 for (std::int64_t item = begin; item < end; ++item)
                                 {
                                     const std::int64_t rb = item % row_blocks, cb = (item / row_blocks) % col_blocks,
                                                        ko = item / row_blocks / col_blocks;
                                     const std::int64_t c0 = cb * cols_block, ncols = std::min(cols_block, cols - c0);
                                     const std::int64_t r0 = rb * rows_block,
                                                        nrows = std::min(rows_block, r_total - r0);
                                     kc.seek(ko * cols);
                                     rc.seek(r0);
                                     std::int64_t* o = offsets;
                                     rc.walk(nrows, [&](const auto& off, std::int64_t n) {
                                         for (std::int64_t j = 0; j < n; ++j)
                                             *o++ = off[0] + j * red_stride;
                                     });
                                     T* acc = row_blocks > 1    ? partial.data() + (ko * row_blocks + rb) * cols + c0
                                              : out_stride == 1 ? out + kc.offset()[1] + c0
                                                                : scatter.data();
                                     simd_call<simd::reduce_rows_fn>(acc, x + kc.offset()[0] + c0,
                                                                     static_cast<const std::int64_t*>(offsets), nrows,
                                                                     ncols, op);
                                     if (row_blocks == 1 && out_stride != 1)
                                         for (std::int64_t j = 0; j < ncols; ++j)
                                             out[kc.offset()[1] + (c0 + j) * out_stride] = acc[j];
                                 }
                             });
                if (row_blocks > 1)
                    parallel_for(0, outer * col_blocks, std::max<std::int64_t>(1, grain / (row_blocks * cols_block)),
                                 [&](std::int64_t begin, std::int64_t end) {
                                     cursor<2> kc(kept);
                                     for (std::int64_t item = begin; item < end; ++item)
                                     {
                                         const std::int64_t cb = item % col_blocks, ko = item / col_blocks;
                                         const std::int64_t c0 = cb * cols_block,
                                                            ncols = std::min(cols_block, cols - c0);
                                         T* v = partial.data() + ko * row_blocks * cols + c0;
                                         tree_combine(op, v, row_blocks, cols, ncols);
                                         kc.seek(ko * cols);
                                         for (std::int64_t j = 0; j < ncols; ++j)
                                             out[kc.offset()[1] + (c0 + j) * out_stride] = v[j];
                                     }
                                 });
                return;
            }

            // Path (a).
            const std::int64_t blocks = (r_total + reduce_block - 1) / reduce_block;
            const std::int64_t block_len = std::min(r_total, reduce_block);
            std::vector<T> partial(blocks > 1 ? static_cast<std::size_t>(k_total * blocks) : 0);
            parallel_for(0, k_total * blocks, std::max<std::int64_t>(1, grain / block_len),
                         [&](std::int64_t begin, std::int64_t end) {
                             cursor<2> kc(kept);
                             cursor<1> rc(red);
                             std::vector<T> gathered(red.flat_contiguous[0] ? 0 : static_cast<std::size_t>(block_len));
                             for (std::int64_t item = begin; item < end; ++item)
                             {
                                 const std::int64_t k = item / blocks, r0 = (item % blocks) * reduce_block;
                                 const std::int64_t n = std::min(reduce_block, r_total - r0);
                                 kc.seek(k);
                                 const T* xk = x + kc.offset()[0];
                                 const T* p = xk + r0;
                                 if (!red.flat_contiguous[0])
                                 {
                                     rc.seek(r0);
                                     if (red_stride == 1 && rc.row_left() >= n)
                                         p = xk + rc.offset()[0];
                                     else
                                     {
                                         T* dst = gathered.data();
                                         rc.walk(n, [&](const auto& off, std::int64_t len) {
                                             const T* src = xk + off[0];
                                             for (std::int64_t j = 0; j < len; ++j)
                                                 *dst++ = src[j * red_stride];
                                         });
                                         p = gathered.data();
                                     }
                                 }
                                 const T v = n < tiny_block ? reduce_scalar(op, p, n)
                                                            : simd_call<simd::reduce_contiguous_fn>(p, n, op);
                                 if (blocks == 1)
                                     out[kc.offset()[1]] = v;
                                 else
                                     partial[static_cast<std::size_t>(item)] = v;
                             }
                         });
            if (blocks > 1)
                parallel_for(0, k_total, std::max<std::int64_t>(1, grain / blocks),
                             [&](std::int64_t begin, std::int64_t end) {
                                 cursor<2> kc(kept);
                                 for (std::int64_t k = begin; k < end; ++k)
                                 {
                                     T* v = partial.data() + k * blocks;
                                     tree_combine(op, v, blocks, 1, 1);
                                     kc.seek(k);
                                     out[kc.offset()[1]] = v[0];
                                 }
                             });
        }
    }

    void reduce(void* out, const std::int64_t* out_strides, const void* x, const std::int64_t* x_strides, dtype dt,
                int ndim, int n_keep, const std::int64_t* shape, reduce_op op)
    {
        visit_compute(dt, [&](auto tag) {
            using T = decltype(tag);
            reduce_impl(static_cast<T*>(out), out_strides, static_cast<const T*>(x), x_strides, ndim, n_keep, shape,
                        op);
        });
    }

    namespace
    {
        /// The index of the largest element of the n >= 1 elements row[0], row[stride], ...:
        /// the first maximum, or the first NaN (a NaN counts as the largest value).
        template <class T>
        std::int64_t argmax_row(const T* row, std::int64_t stride, std::int64_t n) noexcept
        {
            T best = row[0];
            if (best != best)
                return 0;
            std::int64_t at = 0;
            for (std::int64_t r = 1; r < n; ++r)
            {
                const T v = row[r * stride];
                if (v != v)
                    return r;
                if (v > best) // strict: a tie keeps the first index
                {
                    best = v;
                    at = r;
                }
            }
            return at;
        }
    }

    void argmax(std::int64_t* out, const std::int64_t* out_strides, const void* x, const std::int64_t* x_strides,
                dtype dt, int ndim, const std::int64_t* shape)
    {
        const int n_keep = ndim - 1;
        const std::int64_t n = shape[n_keep];
        const std::int64_t stride = x_strides[n_keep];
        std::int64_t rows = 1;
        for (int d = 0; d < n_keep; ++d)
            rows *= shape[d];
        auto run = [&](auto tag) {
            using T = decltype(tag);
            const T* in = static_cast<const T*>(x);
            // Rows split over threads; each row is one scan, so the result cannot depend on it.
            const std::int64_t row_grain = std::max<std::int64_t>(1, grain / std::max<std::int64_t>(n, 1));
            parallel_for(0, rows, row_grain, [&](std::int64_t begin, std::int64_t end) {
                for (std::int64_t k = begin; k < end; ++k)
                {
                    std::int64_t rest = k, x_off = 0, o_off = 0;
                    for (int d = n_keep - 1; d >= 0; --d)
                    {
                        const std::int64_t i = rest % shape[d];
                        rest /= shape[d];
                        x_off += i * x_strides[d];
                        o_off += i * out_strides[d];
                    }
                    out[o_off] = argmax_row(in + x_off, stride, n);
                }
            });
        };
        if (dt == dtype::int64)
            run(std::int64_t{});
        else
            visit_compute(dt, run);
    }
}
