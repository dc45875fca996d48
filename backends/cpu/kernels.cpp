// The fast CPU kernels: layout analysis, threading and dispatch around the SIMD inner loops of
// simd_kernels.hpp, plus copy/fill (typed loops and memcpy) and matmul (OpenBLAS).
//
// Why it is built this way:
// - Elementwise kernels first normalise the layout: drop size-1 dimensions, order the rest by
//   the output's strides, and merge dimensions that are contiguous for every operand. Most
//   calls then become one flat contiguous run, or rows whose innermost stride is 1 for every
//   operand, or 0 for an input (a broadcast scalar, e.g. a per-channel bias over H*W).
//   Those runs go straight to the SIMD functor. Anything else (permuted views, short rows)
//   is gathered into a small contiguous buffer (and the output scattered back), so every
//   layout runs the same vector math and an element's result never depends on the layout.
// - Threads split the flat element range (parallel_for, >= `grain` elements a chunk, so small
//   tensors stay on the calling thread). Elementwise results cannot depend on the chunking.
// - Reductions use a fixed blocking that depends only on the shape and strides, never on the
//   thread count: threads compute fixed blocks, and block results are combined by a fixed
//   pairwise tree. See reduce_impl for the two fast paths and the error bounds.
// - The SIMD code is compiled per instruction set in kernels_<arch>.cpp; xsimd::dispatch picks
//   one at run time (simd_call), capped by limit_simd_level (simd_level.hpp). At
//   simd_level::scalar every kernel forwards to its xgrad::cpu::reference twin.
// - matmul hands each matrix to cblas_sgemm/dgemm; OpenBLAS is far faster than anything
//   hand-written here and threads each product itself.
#include <algorithm>
#include <array>
#include <atomic>
#include <climits>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <type_traits>
#include <vector>

#include <cblas.h>
#include <cpuid.h>

#include "backends/cpu/convert.hpp"
#include "backends/cpu/cpu_kernels.hpp"
#include "backends/cpu/matmul_dims.hpp"
#include "backends/cpu/simd_kernels.hpp"
#include "backends/cpu/simd_level.hpp"
#include "xgrad/thread_pool.hpp"

namespace xgrad::cpu
{
    namespace
    {
        /// Minimum elements per thread chunk: about 10-30 us of work for the cheapest kernels,
        /// well above the cost of waking a worker, so tensors below 64K elements run inline.
        constexpr std::int64_t grain = 32768;

        // ---------------------------------------------------------------------------------
        // Instruction set selection

        std::atomic<simd_level> g_limit{simd_level::avx2_fma};

        bool processor_has_f16c() noexcept
        {
            unsigned a = 0, b = 0, c = 0, d = 0;
            return __get_cpuid(1, &a, &b, &c, &d) != 0 && (c & bit_F16C) != 0;
        }

        /// Whether the OS saves the AVX register state on context switches (OSXSAVE, and XCR0
        /// enabling SSE and AVX state). AVX code needs this besides the CPUID feature bits,
        /// which are all xsimd 8.1 checks.
        bool os_saves_avx_state() noexcept
        {
            unsigned a = 0, b = 0, c = 0, d = 0;
            if (__get_cpuid(1, &a, &b, &c, &d) == 0 || (c & bit_OSXSAVE) == 0)
                return false;
            unsigned xcr0 = 0, high = 0;
            __asm__("xgetbv" : "=a"(xcr0), "=d"(high) : "c"(0));
            return (xcr0 & 0x6u) == 0x6u;
        }

        bool use_reference() noexcept { return simd_level_in_use() == simd_level::scalar; }

        bool use_f16c() noexcept
        {
            static const bool has_f16c = processor_has_f16c();
            return has_f16c && simd_level_in_use() == simd_level::avx2_fma;
        }

        /// F{}(arch, args...) for the instruction set in use. xsimd::dispatch is reached only
        /// when simd_supported() allows AVX2 (it would pick AVX2 from the CPUID bits alone).
        template <class F, class... Args>
        auto simd_call(Args... args) noexcept
        {
            if (simd_level_in_use() == simd_level::sse2)
                return F{}(xsimd::sse2{}, args...);
            static auto dispatched = xsimd::dispatch<simd::archs>(F{});
            return dispatched(args...);
        }

        // ---------------------------------------------------------------------------------
        // Iteration spaces

        /// The index space of N operands of one shape, normalised: no size-1 dimensions,
        /// ordered by operand 0's strides (largest first), adjacent dimensions merged when they
        /// are contiguous for every operand. At least one dimension (shape {1}: one element).
        template <std::size_t N>
        struct space
        {
            std::vector<std::int64_t> shape;
            std::array<std::vector<std::int64_t>, N> strides;
            std::int64_t numel = 1;
            /// Operand k walks memory contiguously in flat order / is one scalar throughout.
            std::array<bool, N> flat_contiguous{};
            std::array<bool, N> flat_scalar{};

            int last() const noexcept { return static_cast<int>(shape.size()) - 1; }
            std::int64_t inner() const noexcept { return shape.back(); }
            std::int64_t inner_stride(std::size_t k) const noexcept { return strides[k].back(); }
        };

        template <std::size_t N>
        space<N> make_space(int ndim, const std::int64_t* shape, const std::array<const std::int64_t*, N>& strides)
        {
            space<N> sp;
            std::vector<int> dims;
            for (int d = 0; d < ndim; ++d)
            {
                if (shape[d] == 0)
                {
                    sp.numel = 0;
                    return sp;
                }
                if (shape[d] != 1)
                    dims.push_back(d);
                sp.numel *= shape[d];
            }
            std::stable_sort(dims.begin(), dims.end(), [&](int p, int q) { return strides[0][p] > strides[0][q]; });
            for (const int d : dims)
            {
                bool merge = !sp.shape.empty();
                for (std::size_t k = 0; k < N && merge; ++k)
                    merge = sp.strides[k].back() == strides[k][d] * shape[d];
                if (merge)
                {
                    sp.shape.back() *= shape[d];
                    for (std::size_t k = 0; k < N; ++k)
                        sp.strides[k].back() = strides[k][d];
                    continue;
                }
                sp.shape.push_back(shape[d]);
                for (std::size_t k = 0; k < N; ++k)
                    sp.strides[k].push_back(strides[k][d]);
            }
            if (sp.shape.empty())
            {
                sp.shape.push_back(1);
                for (std::size_t k = 0; k < N; ++k)
                    sp.strides[k].push_back(0);
            }
            for (std::size_t k = 0; k < N; ++k)
            {
                bool contiguous = true, scalar = true;
                std::int64_t expected = 1;
                for (int d = sp.last(); d >= 0; --d)
                {
                    contiguous = contiguous && (sp.shape[d] == 1 || sp.strides[k][d] == expected);
                    scalar = scalar && sp.strides[k][d] == 0;
                    expected *= sp.shape[d];
                }
                sp.flat_contiguous[k] = contiguous;
                sp.flat_scalar[k] = scalar && !contiguous;
            }
            return sp;
        }

        /// A position in a space: the multi-index and each operand's element offset.
        template <std::size_t N>
        class cursor
        {
        public:
            explicit cursor(const space<N>& sp) : m_sp(&sp), m_index(sp.shape.size(), 0) {}

            const std::array<std::int64_t, N>& offset() const noexcept { return m_offset; }
            std::int64_t row_left() const noexcept { return m_sp->inner() - m_index.back(); }

            void seek(std::int64_t flat) noexcept
            {
                m_offset = {};
                for (int d = m_sp->last(); d >= 0; --d)
                {
                    const std::int64_t i = flat % m_sp->shape[d];
                    flat /= m_sp->shape[d];
                    m_index[d] = i;
                    for (std::size_t k = 0; k < N; ++k)
                        m_offset[k] += i * m_sp->strides[k][d];
                }
            }

            /// Visits the next len elements as runs inside rows, f(offsets, run_length), and
            /// moves past them.
            template <class F>
            void walk(std::int64_t len, F&& f)
            {
                const int last = m_sp->last();
                while (len > 0)
                {
                    const std::int64_t run = std::min(len, row_left());
                    f(m_offset, run);
                    len -= run;
                    m_index[last] += run;
                    for (std::size_t k = 0; k < N; ++k)
                        m_offset[k] += run * m_sp->strides[k][last];
                    if (m_index[last] == m_sp->shape[last])
                        carry();
                }
            }

            void advance(std::int64_t len)
            {
                walk(len, [](const auto&, std::int64_t) {});
            }

        private:
            void carry() noexcept
            {
                for (int d = m_sp->last();;)
                {
                    for (std::size_t k = 0; k < N; ++k)
                        m_offset[k] -= m_sp->shape[d] * m_sp->strides[k][d];
                    m_index[d] = 0;
                    if (--d < 0)
                        return;
                    ++m_index[d];
                    for (std::size_t k = 0; k < N; ++k)
                        m_offset[k] += m_sp->strides[k][d];
                    if (m_index[d] < m_sp->shape[d])
                        return;
                }
            }

            const space<N>* m_sp;
            std::vector<std::int64_t> m_index;
            std::array<std::int64_t, N> m_offset{};
        };

        /// Calls run(offsets, inner_strides, n) over the flat range [begin, end) of sp: one call
        /// when every operand is flat (contiguous or scalar), else one per row segment.
        template <std::size_t N, class Run>
        void for_each_run(const space<N>& sp, std::int64_t begin, std::int64_t end, Run&& run)
        {
            std::array<std::int64_t, N> offsets{}, strides{};
            bool all_flat = true;
            for (std::size_t k = 0; k < N; ++k)
            {
                all_flat = all_flat && (sp.flat_contiguous[k] || sp.flat_scalar[k]);
                offsets[k] = sp.flat_contiguous[k] ? begin : 0;
                strides[k] = sp.flat_contiguous[k] ? 1 : 0;
            }
            if (all_flat)
            {
                run(offsets, strides, end - begin);
                return;
            }
            for (std::size_t k = 0; k < N; ++k)
                strides[k] = sp.inner_stride(k);
            cursor<N> c(sp);
            c.seek(begin);
            c.walk(end - begin, [&](const auto& off, std::int64_t n) { run(off, strides, n); });
        }

        /// Runs row(out_run, input_runs, input_strides, n) over the flat range [begin, end) of
        /// sp (operand 0 = out), where out_run is contiguous and each input run is contiguous
        /// (stride 1) or one scalar (stride 0): what the SIMD functors take. Operands that are
        /// neither, and all non-flat operands when rows are short, go through buffers of
        /// `chunk` elements (gather inputs, scatter the output).
        template <class T, std::size_t NIn, class Row>
        void simd_elementwise(const space<NIn + 1>& sp, T* out, const std::array<const T*, NIn>& in,
                              std::int64_t begin, std::int64_t end, Row&& row)
        {
            constexpr std::size_t N = NIn + 1;
            constexpr std::int64_t chunk = 1024;
            // Rows at least this long are handed over in place when their stride allows;
            // shorter rows are gathered across row boundaries into full-length buffers.
            constexpr std::int64_t long_row = 128;

            std::array<const T*, NIn> p{};
            std::array<std::int64_t, NIn> s{};
            bool all_flat = sp.flat_contiguous[0];
            for (std::size_t i = 0; i < NIn; ++i)
            {
                all_flat = all_flat && (sp.flat_contiguous[i + 1] || sp.flat_scalar[i + 1]);
                p[i] = sp.flat_contiguous[i + 1] ? in[i] + begin : in[i];
                s[i] = sp.flat_contiguous[i + 1] ? 1 : 0;
            }
            if (all_flat)
            {
                row(out + begin, p, s, end - begin);
                return;
            }

            const bool long_rows = sp.inner() >= long_row;
            std::array<bool, N> in_place{};
            bool any_buffered = false;
            for (std::size_t k = 0; k < N; ++k)
            {
                const std::int64_t st = sp.inner_stride(k);
                in_place[k] = sp.flat_contiguous[k] || (k > 0 && sp.flat_scalar[k]) ||
                              (long_rows && (st == 1 || (k > 0 && st == 0)));
                any_buffered = any_buffered || !in_place[k];
            }
            std::vector<T> buffers(any_buffered ? N * chunk : 0);
            cursor<N> c(sp), scratch(sp);
            c.seek(begin);
            for (std::int64_t pos = begin; pos < end;)
            {
                std::int64_t len = end - pos;
                if (long_rows)
                    len = std::min(len, c.row_left());
                if (any_buffered)
                    len = std::min(len, chunk);
                for (std::size_t i = 0; i < NIn; ++i)
                {
                    const std::size_t k = i + 1;
                    if (sp.flat_contiguous[k])
                        p[i] = in[i] + pos, s[i] = 1;
                    else if (sp.flat_scalar[k])
                        p[i] = in[i], s[i] = 0;
                    else if (in_place[k])
                        p[i] = in[i] + c.offset()[k], s[i] = sp.inner_stride(k);
                    else
                    {
                        T* dst = buffers.data() + k * chunk;
                        const std::int64_t st = sp.inner_stride(k);
                        scratch = c;
                        scratch.walk(len, [&](const auto& off, std::int64_t n) {
                            const T* src = in[i] + off[k];
                            for (std::int64_t j = 0; j < n; ++j)
                                *dst++ = src[j * st];
                        });
                        p[i] = buffers.data() + k * chunk, s[i] = 1;
                    }
                }
                T* o = sp.flat_contiguous[0] ? out + pos : in_place[0] ? out + c.offset()[0] : buffers.data();
                row(o, p, s, len);
                if (!in_place[0])
                {
                    const T* src = buffers.data();
                    const std::int64_t st = sp.inner_stride(0);
                    scratch = c;
                    scratch.walk(len, [&](const auto& off, std::int64_t n) {
                        for (std::int64_t j = 0; j < n; ++j)
                            out[off[0] + j * st] = *src++;
                    });
                }
                c.advance(len);
                pos += len;
            }
        }

        /// Calls f(T{}) for the compute dtypes (the ops layer passes only these to math kernels).
        template <class F>
        void visit_compute(dtype dt, F&& f)
        {
            if (dt == dtype::float64)
                f(double{});
            else
                f(float{});
        }

        // ---------------------------------------------------------------------------------
        // Elementwise math

        template <class T>
        void unary_impl(T* out, const std::int64_t* out_strides, const T* x, const std::int64_t* x_strides, int ndim,
                        const std::int64_t* shape, unary_op op)
        {
            const auto sp = make_space<2>(ndim, shape, {out_strides, x_strides});
            parallel_for(0, sp.numel, grain, [&](std::int64_t b, std::int64_t e) {
                simd_elementwise<T, 1>(sp, out, {x}, b, e, [&](T* o, const auto& p, const auto& s, std::int64_t n) {
                    simd_call<simd::unary_fn>(o, p[0], s[0], n, op);
                });
            });
        }

        template <class T>
        void binary_impl(T* out, const std::int64_t* out_strides, const T* a, const std::int64_t* a_strides, const T* b,
                         const std::int64_t* b_strides, int ndim, const std::int64_t* shape, binary_op op)
        {
            const auto sp = make_space<3>(ndim, shape, {out_strides, a_strides, b_strides});
            if (op == binary_op::pow)
            {
                // std::pow, element by element: exact special cases and correctly rounded in
                // glibc; xsimd's pow is exp(b * log(a)) and loses accuracy for large results.
                parallel_for(0, sp.numel, grain, [&](std::int64_t begin, std::int64_t end) {
                    for_each_run(sp, begin, end, [&](const auto& off, const auto& st, std::int64_t n) {
                        for (std::int64_t j = 0; j < n; ++j)
                            out[off[0] + j * st[0]] = std::pow(a[off[1] + j * st[1]], b[off[2] + j * st[2]]);
                    });
                });
                return;
            }
            parallel_for(0, sp.numel, grain, [&](std::int64_t begin, std::int64_t end) {
                simd_elementwise<T, 2>(sp, out, {a, b}, begin, end,
                                       [&](T* o, const auto& p, const auto& s, std::int64_t n) {
                                           simd_call<simd::binary_fn>(o, p[0], s[0], p[1], s[1], n, op);
                                       });
            });
        }

        template <class T>
        void where_impl(T* out, const std::int64_t* out_strides, const T* cond, const std::int64_t* cond_strides,
                        const T* a, const std::int64_t* a_strides, const T* b, const std::int64_t* b_strides, int ndim,
                        const std::int64_t* shape)
        {
            const auto sp = make_space<4>(ndim, shape, {out_strides, cond_strides, a_strides, b_strides});
            parallel_for(0, sp.numel, grain, [&](std::int64_t begin, std::int64_t end) {
                simd_elementwise<T, 3>(sp, out, {cond, a, b}, begin, end,
                                       [&](T* o, const auto& p, const auto& s, std::int64_t n) {
                                           simd_call<simd::where_fn>(o, p[0], s[0], p[1], s[1], p[2], s[2], n);
                                       });
            });
        }

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
                const T identity = op == reduce_op::sum ? T(0) : -std::numeric_limits<T>::infinity();
                for_each_run(kept, 0, k_total, [&](const auto& off, const auto& st, std::int64_t n) {
                    for (std::int64_t j = 0; j < n; ++j)
                        out[off[1] + j * st[1]] = identity;
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
                                     const std::int64_t r0 = rb * rows_block, nrows = std::min(rows_block, r_total - r0);
                                     kc.seek(ko * cols);
                                     rc.seek(r0);
                                     std::int64_t* o = offsets;
                                     rc.walk(nrows, [&](const auto& off, std::int64_t n) {
                                         for (std::int64_t j = 0; j < n; ++j)
                                             *o++ = off[0] + j * red_stride;
                                     });
                                     T* acc = row_blocks > 1 ? partial.data() + (ko * row_blocks + rb) * cols + c0
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
                                         const std::int64_t c0 = cb * cols_block, ncols = std::min(cols_block, cols - c0);
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

        // ---------------------------------------------------------------------------------
        // copy / fill

        template <class O, class X>
        void copy_impl(O* out, const std::int64_t* out_strides, const X* x, const std::int64_t* x_strides, int ndim,
                       const std::int64_t* shape)
        {
            const auto sp = make_space<2>(ndim, shape, {out_strides, x_strides});
            const bool f16c = use_f16c();
            parallel_for(0, sp.numel, grain, [&](std::int64_t begin, std::int64_t end) {
                for_each_run(sp, begin, end, [&](const auto& off, const auto& st, std::int64_t n) {
                    O* o = out + off[0];
                    const X* in = x + off[1];
                    if (st[0] == 1 && st[1] == 1)
                    {
                        if constexpr (std::is_same_v<O, X>)
                            std::memcpy(o, in, static_cast<std::size_t>(n) * sizeof(O));
                        else if constexpr (std::is_same_v<O, float16_t> && std::is_same_v<X, float>)
                        {
                            if (f16c)
                                return simd::f32_to_f16_f16c(reinterpret_cast<std::uint16_t*>(o), in, n);
                        }
                        else if constexpr (std::is_same_v<O, float> && std::is_same_v<X, float16_t>)
                        {
                            if (f16c)
                                return simd::f16_to_f32_f16c(o, reinterpret_cast<const std::uint16_t*>(in), n);
                        }
                        if constexpr (!std::is_same_v<O, X>)
                            for (std::int64_t j = 0; j < n; ++j)
                                o[j] = detail::convert<O>(in[j]);
                    }
                    else if (st[0] == 1 && st[1] == 0)
                        std::fill_n(o, n, detail::convert<O>(in[0]));
                    else
                        for (std::int64_t j = 0; j < n; ++j)
                            o[j * st[0]] = detail::convert<O>(in[j * st[1]]);
                });
            });
        }

        template <class T>
        void fill_impl(T* out, const std::int64_t* out_strides, int ndim, const std::int64_t* shape, T value)
        {
            const auto sp = make_space<1>(ndim, shape, {out_strides});
            parallel_for(0, sp.numel, grain, [&](std::int64_t begin, std::int64_t end) {
                for_each_run(sp, begin, end, [&](const auto& off, const auto& st, std::int64_t n) {
                    if (st[0] == 1)
                        std::fill_n(out + off[0], n, value);
                    else
                        for (std::int64_t j = 0; j < n; ++j)
                            out[off[0] + j * st[0]] = value;
                });
            });
        }

        // ---------------------------------------------------------------------------------
        // matmul

        /// How CBLAS (row-major) reads a rows x cols matrix in place: NoTrans when rows are
        /// contiguous (column stride 1, ld = row stride), Trans when columns are (the matrix is
        /// the transpose of a row-major cols x rows one, ld = column stride).
        struct blas_view
        {
            CBLAS_TRANSPOSE trans;
            int ld;
        };

        /// nullopt when BLAS cannot read it in place (overlapping or broadcast rows/columns, or
        /// a leading dimension above INT_MAX): the caller packs a row-major copy.
        std::optional<blas_view> view_for_blas(std::int64_t rows, std::int64_t cols, std::int64_t row_stride,
                                               std::int64_t col_stride)
        {
            // A stride of a size-1 dimension is never used: BLAS just needs ld >= max(1, width).
            if ((col_stride == 1 || cols == 1) && (rows == 1 || row_stride >= std::max<std::int64_t>(1, cols)))
            {
                const std::int64_t ld = rows == 1 ? std::max<std::int64_t>(1, cols) : row_stride;
                if (ld <= INT_MAX)
                    return blas_view{CblasNoTrans, static_cast<int>(ld)};
            }
            if ((row_stride == 1 || rows == 1) && (cols == 1 || col_stride >= std::max<std::int64_t>(1, rows)))
            {
                const std::int64_t ld = cols == 1 ? std::max<std::int64_t>(1, rows) : col_stride;
                if (ld <= INT_MAX)
                    return blas_view{CblasTrans, static_cast<int>(ld)};
            }
            return std::nullopt;
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

    simd_level simd_supported() noexcept
    {
        // The test xsimd::dispatch applies when it walks simd::archs, plus the OS check.
        static const simd_level best =
            xsimd::available_architectures().best >= xsimd::fma3<xsimd::avx2>::version() && os_saves_avx_state()
                ? simd_level::avx2_fma
                : simd_level::sse2;
        return best;
    }

    simd_level simd_level_in_use() noexcept
    {
        return std::min(simd_supported(), g_limit.load(std::memory_order_relaxed));
    }

    void limit_simd_level(simd_level max_level) noexcept { g_limit.store(max_level, std::memory_order_relaxed); }

    void fill(void* out, const std::int64_t* out_strides, dtype dt, int ndim, const std::int64_t* shape, double value)
    {
        if (use_reference())
            return reference::fill(out, out_strides, dt, ndim, shape, value);
        detail::visit_dtype(dt, [&](auto tag) {
            using T = decltype(tag);
            fill_impl(static_cast<T*>(out), out_strides, ndim, shape, detail::convert<T>(value));
        });
    }

    void copy(void* out, const std::int64_t* out_strides, dtype out_dt, const void* x, const std::int64_t* x_strides,
              dtype x_dt, int ndim, const std::int64_t* shape)
    {
        if (use_reference())
            return reference::copy(out, out_strides, out_dt, x, x_strides, x_dt, ndim, shape);
        detail::visit_dtype(out_dt, [&](auto out_tag) {
            detail::visit_dtype(x_dt, [&](auto x_tag) {
                using O = decltype(out_tag);
                using X = decltype(x_tag);
                copy_impl(static_cast<O*>(out), out_strides, static_cast<const X*>(x), x_strides, ndim, shape);
            });
        });
    }

    void unary(void* out, const std::int64_t* out_strides, const void* x, const std::int64_t* x_strides, dtype dt,
               int ndim, const std::int64_t* shape, unary_op op)
    {
        if (use_reference())
            return reference::unary(out, out_strides, x, x_strides, dt, ndim, shape, op);
        visit_compute(dt, [&](auto tag) {
            using T = decltype(tag);
            unary_impl(static_cast<T*>(out), out_strides, static_cast<const T*>(x), x_strides, ndim, shape, op);
        });
    }

    void binary(void* out, const std::int64_t* out_strides, const void* a, const std::int64_t* a_strides, const void* b,
                const std::int64_t* b_strides, dtype dt, int ndim, const std::int64_t* shape, binary_op op)
    {
        if (use_reference())
            return reference::binary(out, out_strides, a, a_strides, b, b_strides, dt, ndim, shape, op);
        visit_compute(dt, [&](auto tag) {
            using T = decltype(tag);
            binary_impl(static_cast<T*>(out), out_strides, static_cast<const T*>(a), a_strides,
                        static_cast<const T*>(b), b_strides, ndim, shape, op);
        });
    }

    void where(void* out, const std::int64_t* out_strides, const void* cond, const std::int64_t* cond_strides,
               const void* a, const std::int64_t* a_strides, const void* b, const std::int64_t* b_strides, dtype dt,
               int ndim, const std::int64_t* shape)
    {
        if (use_reference())
            return reference::where(out, out_strides, cond, cond_strides, a, a_strides, b, b_strides, dt, ndim, shape);
        visit_compute(dt, [&](auto tag) {
            using T = decltype(tag);
            where_impl(static_cast<T*>(out), out_strides, static_cast<const T*>(cond), cond_strides,
                       static_cast<const T*>(a), a_strides, static_cast<const T*>(b), b_strides, ndim, shape);
        });
    }

    void reduce(void* out, const std::int64_t* out_strides, const void* x, const std::int64_t* x_strides, dtype dt,
                int ndim, int n_keep, const std::int64_t* shape, reduce_op op)
    {
        if (use_reference())
            return reference::reduce(out, out_strides, x, x_strides, dt, ndim, n_keep, shape, op);
        visit_compute(dt, [&](auto tag) {
            using T = decltype(tag);
            reduce_impl(static_cast<T*>(out), out_strides, static_cast<const T*>(x), x_strides, ndim, n_keep, shape,
                        op);
        });
    }

    void matmul(void* out, const void* a, const std::int64_t* a_strides, const void* b, const std::int64_t* b_strides,
                dtype dt, std::int64_t batch, std::int64_t m, std::int64_t n, std::int64_t k)
    {
        if (use_reference())
            return reference::matmul(out, a, a_strides, b, b_strides, dt, batch, m, n, k);
        visit_compute(dt, [&](auto tag) {
            using T = decltype(tag);
            matmul_impl(static_cast<T*>(out), static_cast<const T*>(a), a_strides, static_cast<const T*>(b), b_strides,
                        batch, m, n, k);
        });
    }
}
