// The fast batch-norm kernels (batch_norm_kernels.hpp): blocking, threading, 16-bit conversion
// and dispatch around the SIMD inner loops of batch_norm_simd.hpp. At simd_level::scalar every
// kernel forwards to its xgrad::cpu::reference twin (batch_norm_reference.cpp).
//
// Design:
// - Every x-like tensor is [outer, C, inner], walked natively in one of two shapes (no
//   transposes):
//   * tiles (inner < run_min_inner: channels-last, and channels-first with a small spatial
//     size): rows of `cols` = merge * C * inner consecutive elements, one column per
//     (channel, inner index) pair; `merge` outer indices share a row so that rows are at least
//     min_cols wide (C = 1 and small C still fill the vector lanes). SIMD across columns, rows
//     read in memory order, column sums kept in a small cache-resident buffer. Work items are
//     tiles of rows_block rows by col_block columns (a multiple of inner; reductions take up to
//     16 tiles of a column block per item), per-channel values expanded per column in the item.
//   * runs (inner >= run_min_inner: channels-first): SIMD along inner, per-channel values
//     broadcast. A work item covers adjacent channels (about run_span elements per outer index,
//     read in memory order) and, per channel, at most run_item elements: several outer indices,
//     or a chunk of one long row.
//   Work items are fixed by the shape alone; small and large C, N = 1 and C = 1 all give many
//   of them for parallel_for (grain: ~32K elements a chunk, so tensors below 64K elements stay
//   on the calling thread).
// - Sums accumulate in the statistics type S (float, or double for float64 tensors). Each work
//   item writes its partial sums to its own slot; partials are combined in a fixed pairwise
//   order afterwards, so results are bitwise independent of the thread count.
// - Memory passes: bn_moments two (the mean; then, around it, the sums of d = x - mean and d^2,
//   with the corrected two-pass formula var = (sum d^2 - (sum d)^2 / R) / R, which also refines
//   the mean to mean + sum d / R); bn_grad_inference one (the sums and dx together); the others
//   one each.
// - 16-bit tensors are converted to float in cache-resident pieces (at most `piece` or
//   run_span elements per input) just before the SIMD code reads them, and outputs rounded to
//   16 bits once, after it: float16 with F16C (simd::f16_to_f32_f16c / f32_to_f16_f16c of
//   kernels_avx2.cpp) when use_f16c(), bfloat16 with SSE2 integer code equal to
//   xgrad::to_bfloat16, else convert.hpp.
// - Per-channel coefficients (1/sqrt(var + eps) and the products of the formulas) are computed
//   in double from the S inputs and rounded once to S; every elementwise output is one fused
//   affine expression per element, cA*(A - mA) + cG*(g - mG) + cX*(x - mX) + cK (centred
//   operands keep cancellation out of the per-channel constants).
//
// Error bound of a sum of terms t_i (R per channel; u = unit roundoff of S: 2^-24 float, 2^-53
// double). Each term is formed with relative error <= 2u (d = x - m rounded once, the product
// rounded at most once). Summation is a fixed tree whose depth (roundings on the path from a
// term to the result) is at most:
// - tiles: 63 (<= rows_block terms of a column added in order) + 5 (pairwise over the inner
//   columns of a channel, inner <= 31) + 4 (pairwise over the <= 16 tiles of an item) +
//   ceil(log2 items) + 6 (pairwise over the merged outer indices, merge <= 64)
//   <= 78 + ceil(log2 R);
// - runs: per channel an item has <= run_item = 512 elements in <= 16 segments; each of the two
//   vector accumulators takes <= 512 / (2W) + 16 batches (W lanes), +1 to add them, +log2 W
//   lane levels, + ceil(log2 items) <= ceil(log2 R) pairwise levels over the items:
//   83 + ceil(log2 R) for float with SSE2 (W = 4), 52 + ceil(log2 R) with AVX2 (W = 8);
//   146 / 83 for double;
// so |computed - exact| <= (85 + ceil(log2 R)) * u * sum |t_i| for float (148 for double):
// for R = 10^6 float terms, 105 u = 6.3e-6 relative to sum |t_i|, against R u ~ 0.06 for a
// naive left-to-right float loop. tests/test_batch_norm_kernels.cpp checks these bounds.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <type_traits>
#include <vector>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "backends/cpu/batch_norm_kernels.hpp"
#include "backends/cpu/batch_norm_simd.hpp"
#include "backends/cpu/convert.hpp"
#include "backends/cpu/dispatch.hpp"
#include "backends/cpu/simd_kernels.hpp"
#include "xgrad/thread_pool.hpp"

namespace xgrad::cpu
{
    namespace
    {
        using detail::grain;
        using detail::simd_call;
        using detail::use_f16c;
        using detail::use_reference;
        using simd::bn_sums;

        /// Tiles: rows summed in order per column before the pairwise combination.
        constexpr std::int64_t rows_block = 64;
        /// Tiles: columns per work item (rounded down to a multiple of inner).
        constexpr std::int64_t col_block = 256;
        /// Tiles: narrower rows of C * inner elements are merged, `merge` of them per row.
        constexpr std::int64_t min_cols = 64;
        /// Runs are used from this inner size on (below it, segments would be mostly tails).
        constexpr std::int64_t run_min_inner = 32;
        /// Runs: elements of one channel per work item (at most).
        constexpr std::int64_t run_item = 512;
        /// Runs: a work item takes adjacent channels, about this many elements per outer index.
        constexpr std::int64_t run_span = 1024;
        /// 16-bit conversion pieces: elements per input (at most) converted at a time.
        constexpr std::int64_t piece = 1024;
        /// Tiles, reductions: a work item takes up to 16 row blocks, about this many elements, and
        /// combines their sums pairwise itself (fewer, smaller partial sums to combine later).
        constexpr std::int64_t item_target = 32768;

        /// Calls f(T{}, S{}) with T the element type of xdt and S the statistics type.
        template <class F>
        void visit(dtype xdt, F&& f)
        {
            detail::visit_dtype(xdt, [&](auto t) {
                using T = decltype(t);
                if constexpr (!std::is_same_v<T, std::int64_t>)
                {
                    using S = std::conditional_t<std::is_same_v<T, double>, double, float>;
                    f(T{}, S{});
                }
            });
        }

        /// How a [outer, C, inner] tensor is cut into work items (a function of the shape only).
        struct geometry
        {
            std::int64_t outer = 0, C = 0, inner = 0, numel = 0;
            bool tiles = true;
            // Tiles.
            std::int64_t merge = 1;     // outer indices per row
            std::int64_t cols = 0;      // merge * C * inner
            std::int64_t groups = 0;    // cols / inner: (merged copy, channel) pairs per row
            std::int64_t full_rows = 0; // outer / merge
            std::int64_t tail_cols = 0; // (outer % merge) * C * inner: the last, shorter row
            std::int64_t cb = 0;        // columns per work item, a multiple of inner
            std::int64_t row_blocks = 0, col_blocks = 0;
            std::int64_t blocks_per_item = 1; // reductions: row blocks per work item
            // Runs.
            std::int64_t seg_per_item = 1; // inner <= run_item: outer indices per item
            std::int64_t chunks = 1;       // inner > run_item: items per row
            std::int64_t chunk_len = 0;
            std::int64_t items_per_channel = 0; // per channel: groups of outer indices, or chunks
            std::int64_t run_cb = 1;            // channels per work item (each summed separately)

            geometry(std::int64_t o, std::int64_t c, std::int64_t i) : outer(o), C(c), inner(i), numel(o * c * i)
            {
                if (numel <= 0) // nothing to walk (callers return before using the geometry)
                    return;
                tiles = inner < run_min_inner;
                if (tiles)
                {
                    const std::int64_t ci = C * inner;
                    if (ci < min_cols)
                    {
                        // A multiple of 8 columns (whole AVX2 float batches) when that is cheap.
                        const std::int64_t l = std::lcm(ci, std::int64_t{8});
                        const std::int64_t base = l <= 256 ? l / ci : 1;
                        merge = base * ((min_cols + base * ci - 1) / (base * ci));
                    }
                    cols = merge * ci;
                    groups = cols / inner;
                    full_rows = outer / merge;
                    tail_cols = (outer % merge) * ci;
                    cb = std::min(cols, std::max<std::int64_t>(1, col_block / inner) * inner);
                    row_blocks = (full_rows + rows_block - 1) / rows_block + (tail_cols > 0 ? 1 : 0);
                    col_blocks = (cols + cb - 1) / cb;
                    blocks_per_item = std::clamp<std::int64_t>(item_target / (rows_block * cb), 1, 16);
                }
                else if (inner <= run_item)
                {
                    seg_per_item = run_item / inner;
                    chunk_len = inner;
                    items_per_channel = (outer + seg_per_item - 1) / seg_per_item;
                    // Adjacent channels in one item: contiguous runs of ~run_span elements per
                    // outer index, read in memory order.
                    run_cb = std::clamp<std::int64_t>(run_span / inner, 1, C);
                }
                else
                {
                    chunks = (inner + run_item - 1) / run_item;
                    chunk_len = (inner + chunks - 1) / chunks;
                    items_per_channel = outer * chunks;
                }
            }

            /// Tile item: rows [r0, r0 + nr) of the row view, columns [j0, j0 + nc) of which the
            /// first nvalid exist (fewer only in the tail row).
            struct tile_item
            {
                std::int64_t rb, r0, nr, j0, nc, nvalid;
            };
            tile_item tile_at(std::int64_t item) const noexcept
            {
                tile_item t{};
                t.rb = item / col_blocks;
                t.j0 = (item % col_blocks) * cb;
                t.nc = std::min(cb, cols - t.j0);
                t.r0 = t.rb * rows_block;
                if (t.r0 < full_rows)
                {
                    t.nr = std::min(rows_block, full_rows - t.r0);
                    t.nvalid = t.nc;
                }
                else // the tail row
                {
                    t.r0 = full_rows;
                    t.nr = 1;
                    t.nvalid = std::clamp<std::int64_t>(tail_cols - t.j0, 0, t.nc);
                }
                return t;
            }
            std::int64_t tile_items() const noexcept { return row_blocks * col_blocks; }
            std::int64_t tile_elems() const noexcept
            {
                return std::max<std::int64_t>(1, std::min(rows_block, std::max<std::int64_t>(full_rows, 1)) * cb);
            }
            std::int64_t channel_of_col(std::int64_t j) const noexcept { return (j / inner) % C; }
            /// f(jj, channel of column j0 + jj) for jj < n.
            template <class F>
            void expand(std::int64_t j0, std::int64_t n, F&& f) const
            {
                std::int64_t c = channel_of_col(j0), i = j0 % inner;
                for (std::int64_t jj = 0; jj < n; ++jj)
                {
                    f(jj, c);
                    if (++i == inner)
                    {
                        i = 0;
                        if (++c == C)
                            c = 0;
                    }
                }
            }

            /// Run work item: channels [c0, c0 + nc), outer indices [o0, o0 + no), elements
            /// [i0, i0 + n) of each segment; q: the item's index among its channels' items (the
            /// same for all nc channels). Items are numbered in memory order.
            struct run_block_t
            {
                std::int64_t q, c0, nc, o0, no, i0, n;
            };
            std::int64_t run_items() const noexcept
            {
                return chunks == 1 ? items_per_channel * ((C + run_cb - 1) / run_cb) : outer * C * chunks;
            }
            std::int64_t run_item_elems() const noexcept
            {
                return chunks == 1 ? seg_per_item * run_cb * inner : chunk_len;
            }
            run_block_t run_block(std::int64_t item) const noexcept
            {
                run_block_t b{};
                if (chunks == 1)
                {
                    const std::int64_t ncb = (C + run_cb - 1) / run_cb;
                    b.q = item / ncb;
                    b.c0 = (item % ncb) * run_cb;
                    b.nc = std::min(run_cb, C - b.c0);
                    b.o0 = b.q * seg_per_item;
                    b.no = std::min(seg_per_item, outer - b.o0);
                    b.i0 = 0;
                    b.n = inner;
                }
                else
                {
                    const std::int64_t ch = item % chunks, oc = item / chunks;
                    b.c0 = oc % C;
                    b.nc = 1;
                    b.o0 = oc / C;
                    b.no = 1;
                    b.q = b.o0 * chunks + ch;
                    b.i0 = ch * chunk_len;
                    b.n = std::min(chunk_len, inner - b.i0);
                }
                return b;
            }
        };

        // ---------------------------------------------------------------------------------
        // 16-bit conversion of pieces (rows of n elements, `stride` apart in the tensor, packed
        // in the scratch buffer).

        /// d[j] = s[j] as float, j < n (exact).
        template <class T>
        void widen_run(float* d, const T* s, std::int64_t n, bool f16c)
        {
            std::int64_t j = 0;
            if constexpr (std::is_same_v<T, float16_t>)
            {
                if (f16c)
                    return simd::f16_to_f32_f16c(d, reinterpret_cast<const std::uint16_t*>(s), n);
            }
#if defined(__SSE2__)
            else if constexpr (std::is_same_v<T, bfloat16_t>)
            {
                // A bfloat16 is the top half of a float: interleave zeros below it.
                const __m128i zero = _mm_setzero_si128();
                for (; j + 8 <= n; j += 8)
                {
                    const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + j));
                    _mm_storeu_ps(d + j, _mm_castsi128_ps(_mm_unpacklo_epi16(zero, v)));
                    _mm_storeu_ps(d + j + 4, _mm_castsi128_ps(_mm_unpackhi_epi16(zero, v)));
                }
            }
#endif
            for (; j < n; ++j)
                d[j] = detail::widen<float>(s[j]);
        }

        /// d[j] = s[j] rounded to T (nearest even; convert.hpp's rules), j < n.
        template <class T>
        void narrow_run(T* d, const float* s, std::int64_t n, bool f16c)
        {
            std::int64_t j = 0;
            if constexpr (std::is_same_v<T, float16_t>)
            {
                if (f16c)
                    return simd::f32_to_f16_f16c(reinterpret_cast<std::uint16_t*>(d), s, n);
            }
#if defined(__SSE2__)
            else if constexpr (std::is_same_v<T, bfloat16_t>)
            {
                // xgrad::to_bfloat16, 4 lanes at a time: NaN -> (u >> 16) | 0x40 (quiet, sign and
                // top payload kept), else (u + 0x7fff + ((u >> 16) & 1)) >> 16.
                auto round4 = [](__m128i u) {
                    const __m128i hi = _mm_srli_epi32(u, 16);
                    const __m128i rounded =
                        _mm_srli_epi32(_mm_add_epi32(_mm_add_epi32(u, _mm_set1_epi32(0x7fff)),
                                                     _mm_and_si128(hi, _mm_set1_epi32(1))),
                                       16);
                    const __m128i nan = _mm_cmpgt_epi32(_mm_and_si128(u, _mm_set1_epi32(0x7fffffff)),
                                                        _mm_set1_epi32(0x7f800000));
                    const __m128i r = _mm_or_si128(_mm_and_si128(nan, _mm_or_si128(hi, _mm_set1_epi32(0x40))),
                                                   _mm_andnot_si128(nan, rounded));
                    // Sign-extend the 16-bit result so the signed saturating pack keeps its bits.
                    return _mm_srai_epi32(_mm_slli_epi32(r, 16), 16);
                };
                for (; j + 8 <= n; j += 8)
                {
                    const __m128i lo = round4(_mm_castps_si128(_mm_loadu_ps(s + j)));
                    const __m128i hi = round4(_mm_castps_si128(_mm_loadu_ps(s + j + 4)));
                    _mm_storeu_si128(reinterpret_cast<__m128i*>(d + j), _mm_packs_epi32(lo, hi));
                }
            }
#endif
            for (; j < n; ++j)
                d[j] = detail::convert<T>(s[j]);
        }

        /// 16-bit conversion of rows of n elements, `stride` apart in the tensor, packed in the
        /// scratch buffer (one run when the rows are contiguous).
        template <class T>
        void widen_rows(float* dst, const T* src, std::int64_t rows, std::int64_t n, std::int64_t stride, bool f16c)
        {
            if (stride == n)
                return widen_run(dst, src, rows * n, f16c);
            for (std::int64_t r = 0; r < rows; ++r)
                widen_run(dst + r * n, src + r * stride, n, f16c);
        }

        template <class T>
        void narrow_rows(T* dst, const float* src, std::int64_t rows, std::int64_t n, std::int64_t stride, bool f16c)
        {
            if (stride == n)
                return narrow_run(dst, src, rows * n, f16c);
            for (std::int64_t r = 0; r < rows; ++r)
                narrow_run(dst + r * stride, src + r * n, n, f16c);
        }

        /// The x-like operands of one kernel call, in S when T is S (read in place) or converted
        /// piece by piece into per-thread scratch (16-bit T).
        template <class T, class S>
        struct operands
        {
            static constexpr bool direct = std::is_same_v<T, S>;
            const T* x;
            const T* g;
            const T* a;
            T* out;
            bool f16c;

            /// Per-thread buffers for one piece.
            struct scratch
            {
                std::vector<S> x, g, a, out;
                explicit scratch(std::int64_t n)
                    : x(direct ? 0 : static_cast<std::size_t>(n)), g(direct ? 0 : static_cast<std::size_t>(n)),
                      a(direct ? 0 : static_cast<std::size_t>(n)), out(direct ? 0 : static_cast<std::size_t>(n))
                {
                }
            };

            /// Pointers (S) to rows [0, rows) of n elements starting at element `offset`, rows
            /// `stride` apart; `stride_out` receives the row stride of the pointers returned.
            /// Inputs are converted now; the output is written back by finish().
            void begin(scratch& s, std::int64_t offset, std::int64_t rows, std::int64_t n, std::int64_t stride,
                       const S*& px, const S*& pg, const S*& pa, S*& pout, std::int64_t& stride_out) const
            {
                if constexpr (direct)
                {
                    px = x ? x + offset : nullptr;
                    pg = g ? g + offset : nullptr;
                    pa = a ? a + offset : nullptr;
                    pout = out ? out + offset : nullptr;
                    stride_out = stride;
                }
                else
                {
                    px = pg = pa = nullptr;
                    if (x)
                        widen_rows(s.x.data(), x + offset, rows, n, stride, f16c), px = s.x.data();
                    if (g)
                        widen_rows(s.g.data(), g + offset, rows, n, stride, f16c), pg = s.g.data();
                    if (a)
                        widen_rows(s.a.data(), a + offset, rows, n, stride, f16c), pa = s.a.data();
                    pout = out ? s.out.data() : nullptr;
                    stride_out = n;
                }
            }

            void finish(const scratch& s, std::int64_t offset, std::int64_t rows, std::int64_t n,
                        std::int64_t stride) const
            {
                if constexpr (!direct)
                    if (out)
                        narrow_rows(out + offset, s.out.data(), rows, n, stride, f16c);
            }
        };

        /// Pairwise sum of v[0], v[stride], ..., v[(n-1) stride]: ceil(log2 n) levels.
        template <class S>
        S pairwise(const S* v, std::int64_t n, std::int64_t stride) noexcept
        {
            if (n <= 0)
                return S(0);
            if (n == 1)
                return v[0];
            const std::int64_t h = (n + 1) / 2;
            return pairwise(v, h, stride) + pairwise(v + h * stride, n - h, stride);
        }

        /// Combines `count` vectors, vector i at v + i * stride, into vector 0 by a fixed pairwise
        /// tree (ceil(log2 count) levels), for the values [j0, j1) of each vector.
        template <class S>
        void tree_combine_span(S* v, std::int64_t count, std::int64_t stride, std::int64_t j0, std::int64_t j1) noexcept
        {
            for (std::int64_t step = 1; step < count; step *= 2)
                for (std::int64_t i = 0; i + step < count; i += 2 * step)
                {
                    S* dst = v + i * stride;
                    const S* src = v + (i + step) * stride;
                    for (std::int64_t j = j0; j < j1; ++j)
                        dst[j] += src[j];
                }
        }

        /// tree_combine_span over [0, width), threaded over the width.
        template <class S>
        void tree_combine(S* v, std::int64_t count, std::int64_t stride, std::int64_t width)
        {
            if (count <= 1)
                return;
            constexpr std::int64_t span = 1024;
            const std::int64_t spans = (width + span - 1) / span;
            parallel_for(0, spans, std::max<std::int64_t>(1, grain / (span * count)),
                         [&](std::int64_t begin, std::int64_t end) {
                             for (std::int64_t sp = begin; sp < end; ++sp)
                                 tree_combine_span(v, count, stride, sp * span, std::min(width, sp * span + span));
                         });
        }

        // ---------------------------------------------------------------------------------
        // Reductions: sums[s * C + c] for s < bn_sum_count(kind); kind grad_out also writes
        // out = g * k[c]. m, k: per channel (null when the kind does not read them).

        template <class T, class S>
        void reduce_tiles(const geometry& geo, bn_sums kind, const operands<T, S>& io, const S* m, const S* k,
                          S* sums)
        {
            const int K = simd::bn_sum_count(kind);
            const std::int64_t G = geo.groups, inner = geo.inner, C = geo.C, cols = geo.cols, cb = geo.cb;
            const std::int64_t B = geo.blocks_per_item, groups_of_blocks = (geo.row_blocks + B - 1) / B;
            // partial[(gb * K + s) * G + group]: one per group of B row blocks.
            std::vector<S> partial(static_cast<std::size_t>(groups_of_blocks * K * G));
            parallel_for(
                0, groups_of_blocks * geo.col_blocks, std::max<std::int64_t>(1, grain / (B * geo.tile_elems())),
                [&](std::int64_t begin, std::int64_t end) {
                    const std::int64_t gpb = cb / inner; // groups per column block
                    std::vector<S> acc(static_cast<std::size_t>(K * cb)), mcol(static_cast<std::size_t>(cb)),
                        kcol(static_cast<std::size_t>(cb)), blocks(static_cast<std::size_t>(B * K * gpb));
                    const std::int64_t sub_rows = std::max<std::int64_t>(1, piece / cb);
                    typename operands<T, S>::scratch scr(sub_rows * cb);
                    for (std::int64_t item = begin; item < end; ++item)
                    {
                        const std::int64_t gb = item / geo.col_blocks, cbi = item % geo.col_blocks;
                        const std::int64_t j0 = cbi * cb, nc = std::min(cb, cols - j0), ng = nc / inner;
                        geo.expand(j0, nc, [&](std::int64_t j, std::int64_t c) {
                            mcol[j] = m ? m[c] : S(0);
                            kcol[j] = k ? k[c] : S(0);
                        });
                        const std::int64_t nb = std::min(B, geo.row_blocks - gb * B);
                        for (std::int64_t bi = 0; bi < nb; ++bi)
                        {
                            // Block bi's sums per group, at blocks[(bi * K + s) * ng + q].
                            const auto t = geo.tile_at((gb * B + bi) * geo.col_blocks + cbi);
                            S* bp = blocks.data() + bi * K * ng;
                            const std::int64_t nvg = t.nvalid / inner;
                            for (int s = 0; s < K; ++s)
                                std::fill(bp + s * ng + nvg, bp + s * ng + ng, S(0));
                            if (t.nvalid == 0)
                                continue;
                            const std::int64_t base = t.r0 * cols + t.j0;
                            const std::int64_t step = operands<T, S>::direct ? t.nr : sub_rows;
                            for (std::int64_t r = 0; r < t.nr; r += step)
                            {
                                const std::int64_t rows = std::min(step, t.nr - r);
                                simd::bn_tile<S> tile{};
                                io.begin(scr, base + r * cols, rows, t.nvalid, cols, tile.x, tile.g, tile.a, tile.out,
                                         tile.in_stride);
                                tile.out_stride = tile.in_stride;
                                tile.nrows = rows;
                                tile.ncols = t.nvalid;
                                tile.m = mcol.data();
                                tile.k = kcol.data();
                                tile.acc = acc.data();
                                tile.acc_stride = cb;
                                tile.accumulate = r > 0;
                                simd_call<simd::bn_tile_fn>(static_cast<const simd::bn_tile<S>*>(&tile), kind);
                                io.finish(scr, base + r * cols, rows, t.nvalid, cols);
                            }
                            for (int s = 0; s < K; ++s)
                            {
                                const S* a = acc.data() + s * cb;
                                if (inner == 1)
                                    std::copy(a, a + nvg, bp + s * ng);
                                else
                                    for (std::int64_t q = 0; q < nvg; ++q)
                                        bp[s * ng + q] = pairwise(a + q * inner, inner, std::int64_t{1});
                            }
                        }
                        tree_combine_span(blocks.data(), nb, K * ng, 0, K * ng);
                        for (int s = 0; s < K; ++s)
                            std::copy(blocks.data() + s * ng, blocks.data() + (s + 1) * ng,
                                      partial.data() + (gb * K + s) * G + j0 / inner);
                    }
                });
            tree_combine(partial.data(), groups_of_blocks, K * G, K * G);
            for (int s = 0; s < K; ++s)
                for (std::int64_t c = 0; c < C; ++c)
                    sums[s * C + c] = pairwise(partial.data() + s * G + c, geo.merge, C);
        }

        template <class T, class S>
        void reduce_runs(const geometry& geo, bn_sums kind, const operands<T, S>& io, const S* m, const S* k,
                         S* sums)
        {
            const int K = simd::bn_sum_count(kind);
            const std::int64_t C = geo.C, ipc = geo.items_per_channel, o_stride = C * geo.inner;
            // partial[(c * ipc + q) * K + s]
            std::vector<S> partial(static_cast<std::size_t>(C * ipc * K));
            parallel_for(0, geo.run_items(), std::max<std::int64_t>(1, grain / geo.run_item_elems()),
                         [&](std::int64_t begin, std::int64_t end) {
                             std::vector<S> state(static_cast<std::size_t>(geo.run_cb * simd::bn_run_state_size(kind))),
                                 local(static_cast<std::size_t>(geo.run_cb * K));
                             typename operands<T, S>::scratch scr(std::max(run_span, run_item));
                             for (std::int64_t item = begin; item < end; ++item)
                             {
                                 const auto b = geo.run_block(item);
                                 const std::int64_t base = (b.o0 * C + b.c0) * geo.inner + b.i0;
                                 simd::bn_run<S> run{};
                                 run.o_stride = o_stride;
                                 run.nc = b.nc;
                                 run.n = b.n;
                                 run.m = m ? m + b.c0 : nullptr;
                                 run.k = k ? k + b.c0 : nullptr;
                                 run.state = state.data();
                                 run.sums = local.data();
                                 // In place: one call. 16-bit: one outer index (nc segments) at a time.
                                 const std::int64_t step = operands<T, S>::direct ? b.no : 1;
                                 for (std::int64_t o = 0; o < b.no; o += step)
                                 {
                                     const std::int64_t off = base + o * o_stride;
                                     io.begin(scr, off, b.nc, b.n, geo.inner, run.x, run.g, run.a, run.out,
                                              run.c_stride);
                                     run.no = step;
                                     run.init = o == 0;
                                     run.finish = o + step == b.no;
                                     simd_call<simd::bn_run_fn>(static_cast<const simd::bn_run<S>*>(&run), kind);
                                     io.finish(scr, off, b.nc, b.n, geo.inner);
                                 }
                                 for (std::int64_t ci = 0; ci < b.nc; ++ci)
                                     for (int s = 0; s < K; ++s)
                                         partial[static_cast<std::size_t>(((b.c0 + ci) * ipc + b.q) * K + s)] =
                                             local[static_cast<std::size_t>(ci * K + s)];
                             }
                         });
            for (int s = 0; s < K; ++s)
                for (std::int64_t c = 0; c < C; ++c)
                    sums[s * C + c] = pairwise(partial.data() + c * ipc * K + s, ipc, K);
        }

        /// The per-channel sums of `kind`; zeros when there are no elements.
        template <class T, class S>
        std::vector<S> reduce(const geometry& geo, bn_sums kind, const operands<T, S>& io, const S* m,
                              const S* k)
        {
            std::vector<S> sums(static_cast<std::size_t>(simd::bn_sum_count(kind) * geo.C), S(0));
            if (geo.numel == 0)
                return sums;
            if (geo.tiles)
                reduce_tiles(geo, kind, io, m, k, sums.data());
            else
                reduce_runs(geo, kind, io, m, k, sums.data());
            return sums;
        }

        // ---------------------------------------------------------------------------------
        // Elementwise outputs: out = cA*(a - mA) + cG*(g - mG) + cX*(x - mX) + cK, the
        // coefficients per channel in coef[q * C + c], q = 0..6 (cA, mA, cG, mG, cX, mX, cK).

        template <class T, class S>
        struct affine_out
        {
            T* out = nullptr;
            bool a = false, g = false, x = false; // which operands the expression uses
            const S* coef = nullptr;
        };

        template <class T, class S>
        void apply(const geometry& geo, const T* a, const T* g, const T* x, const affine_out<T, S>* outs, int nouts,
                   bool f16c)
        {
            if (geo.numel == 0)
                return;
            bool need_a = false, need_g = false, need_x = false;
            for (int o = 0; o < nouts; ++o)
                need_a |= outs[o].a, need_g |= outs[o].g, need_x |= outs[o].x;
            // Inputs converted once per piece for every output; each output written back itself.
            const operands<T, S> in{need_x ? x : nullptr, need_g ? g : nullptr, need_a ? a : nullptr, nullptr, f16c};
            const std::int64_t C = geo.C;
            auto call = [&](const affine_out<T, S>& o, typename operands<T, S>::scratch& scr, std::int64_t offset,
                            std::int64_t rows, std::int64_t n, std::int64_t stride, const S* pa, const S* pg,
                            const S* px, const S* const* coef, std::int64_t coef_stride, std::int64_t coef_row_stride) {
                const operands<T, S> out{nullptr, nullptr, nullptr, o.out, f16c};
                const S *unused_x, *unused_g, *unused_a;
                S* pout;
                std::int64_t pstride;
                out.begin(scr, offset, rows, n, stride, unused_x, unused_g, unused_a, pout, pstride);
                simd::bn_affine<S> p{};
                p.out = pout;
                p.a = o.a ? pa : nullptr;
                p.g = o.g ? pg : nullptr;
                p.x = o.x ? px : nullptr;
                for (int q = 0; q < 7; ++q)
                    p.coef[q] = coef[q];
                p.coef_stride = coef_stride;
                p.coef_row_stride = coef_row_stride;
                p.nrows = rows;
                p.n = n;
                p.stride = pstride;
                simd_call<simd::bn_affine_fn>(static_cast<const simd::bn_affine<S>*>(&p));
                out.finish(scr, offset, rows, n, stride);
            };

            if (geo.tiles)
            {
                const std::int64_t cols = geo.cols;
                parallel_for(0, geo.tile_items(), std::max<std::int64_t>(1, grain / geo.tile_elems()),
                             [&](std::int64_t begin, std::int64_t end) {
                                 const std::int64_t cb = geo.cb;
                                 std::vector<S> cexp(static_cast<std::size_t>(nouts * 7 * cb));
                                 const std::int64_t sub_rows = std::max<std::int64_t>(1, piece / cb);
                                 typename operands<T, S>::scratch scr(sub_rows * cb);
                                 for (std::int64_t item = begin; item < end; ++item)
                                 {
                                     const auto t = geo.tile_at(item);
                                     if (t.nvalid == 0)
                                         continue;
                                     const S* coef[2][7];
                                     for (int o = 0; o < nouts; ++o)
                                         for (int q = 0; q < 7; ++q)
                                         {
                                             S* e = cexp.data() + (o * 7 + q) * cb;
                                             const S* src = outs[o].coef + q * C;
                                             geo.expand(t.j0, t.nvalid,
                                                        [&](std::int64_t j, std::int64_t c) { e[j] = src[c]; });
                                             coef[o][q] = e;
                                         }
                                     const std::int64_t base = t.r0 * cols + t.j0;
                                     const std::int64_t step = operands<T, S>::direct ? t.nr : sub_rows;
                                     for (std::int64_t r = 0; r < t.nr; r += step)
                                     {
                                         const std::int64_t rows = std::min(step, t.nr - r), off = base + r * cols;
                                         const S *px, *pg, *pa;
                                         S* unused_out;
                                         std::int64_t pstride;
                                         in.begin(scr, off, rows, t.nvalid, cols, px, pg, pa, unused_out, pstride);
                                         for (int o = 0; o < nouts; ++o)
                                             call(outs[o], scr, off, rows, t.nvalid, cols, pa, pg, px, coef[o], 1, 0);
                                     }
                                 }
                             });
                return;
            }
            parallel_for(0, geo.run_items(), std::max<std::int64_t>(1, grain / geo.run_item_elems()),
                         [&](std::int64_t begin, std::int64_t end) {
                             typename operands<T, S>::scratch scr(std::max(run_span, run_item));
                             for (std::int64_t item = begin; item < end; ++item)
                             {
                                 const auto b = geo.run_block(item);
                                 for (std::int64_t o = 0; o < b.no; ++o)
                                 {
                                     // The nc segments of one outer index: rows with one coefficient each.
                                     const std::int64_t off = ((b.o0 + o) * C + b.c0) * geo.inner + b.i0;
                                     const S *px, *pg, *pa;
                                     S* unused_out;
                                     std::int64_t pstride;
                                     in.begin(scr, off, b.nc, b.n, geo.inner, px, pg, pa, unused_out, pstride);
                                     for (int q = 0; q < nouts; ++q)
                                     {
                                         const S* coef[7];
                                         for (int k = 0; k < 7; ++k)
                                             coef[k] = outs[q].coef + k * C + b.c0;
                                         call(outs[q], scr, off, b.nc, b.n, geo.inner, pa, pg, px, coef, 0, 1);
                                     }
                                 }
                             }
                         });
        }

        /// A per-channel coefficient table for apply(), all zero.
        template <class S>
        std::vector<S> coef_table(std::int64_t C)
        {
            return std::vector<S>(static_cast<std::size_t>(7 * C), S(0));
        }
        enum coef_index : int
        {
            cA,
            mA,
            cG,
            mG,
            cX,
            mX,
            cK
        };

        template <class S>
        double at(const void* p, std::int64_t i) noexcept
        {
            return static_cast<double>(static_cast<const S*>(p)[i]);
        }

        template <class S>
        double inv_std(const void* var, std::int64_t c, double eps) noexcept
        {
            return 1.0 / std::sqrt(at<S>(var, c) + eps);
        }
    }

    void bn_moments(void* mean, void* var, const void* x, dtype xdt, std::int64_t outer, std::int64_t C,
                    std::int64_t inner)
    {
        if (use_reference())
            return reference::bn_moments(mean, var, x, xdt, outer, C, inner);
        visit(xdt, [&](auto t, auto s) {
            using T = decltype(t);
            using S = decltype(s);
            S* mo = static_cast<S*>(mean);
            S* vo = static_cast<S*>(var);
            const geometry geo(outer, C, inner);
            const std::int64_t R = outer * inner;
            if (R == 0)
            {
                std::fill(mo, mo + C, std::numeric_limits<S>::quiet_NaN());
                std::fill(vo, vo + C, std::numeric_limits<S>::quiet_NaN());
                return;
            }
            const operands<T, S> io{static_cast<const T*>(x), nullptr, nullptr, nullptr, use_f16c()};
            const auto dR = static_cast<double>(R);
            const S* none = nullptr;
            std::vector<S> m = reduce(geo, bn_sums::x, io, none, none);
            for (auto& v : m)
                v = static_cast<S>(static_cast<double>(v) / dR);
            const std::vector<S> d = reduce(geo, bn_sums::centred, io, m.data(), none);
            for (std::int64_t c = 0; c < C; ++c)
            {
                // Corrected two-pass: exact in exact arithmetic for any centre m[c].
                const double sd = d[c], sq = d[C + c];
                const double v = (sq - sd * sd / dR) / dR;
                mo[c] = static_cast<S>(static_cast<double>(m[c]) + sd / dR);
                vo[c] = static_cast<S>(v < 0 ? 0.0 : v); // NaN stays NaN
            }
        });
    }

    void bn_normalize(void* y, const void* x, const void* scale, const void* offset, const void* mean,
                      const void* var, double eps, dtype xdt, std::int64_t outer, std::int64_t C, std::int64_t inner)
    {
        if (use_reference())
            return reference::bn_normalize(y, x, scale, offset, mean, var, eps, xdt, outer, C, inner);
        visit(xdt, [&](auto t, auto s) {
            using T = decltype(t);
            using S = decltype(s);
            auto coef = coef_table<S>(C);
            for (std::int64_t c = 0; c < C; ++c)
            {
                coef[cX * C + c] = static_cast<S>(at<S>(scale, c) * inv_std<S>(var, c, eps));
                coef[mX * C + c] = static_cast<const S*>(mean)[c];
                coef[cK * C + c] = static_cast<const S*>(offset)[c];
            }
            affine_out<T, S> o;
            o.out = static_cast<T*>(y);
            o.x = true;
            o.coef = coef.data();
            apply<T, S>(geometry(outer, C, inner), nullptr, nullptr, static_cast<const T*>(x), &o, 1, use_f16c());
        });
    }

    void bn_grad_reduce(void* sum_dy, void* sum_dy_xc, const void* dy, const void* x, const void* mean, dtype xdt,
                        std::int64_t outer, std::int64_t C, std::int64_t inner)
    {
        if (use_reference())
            return reference::bn_grad_reduce(sum_dy, sum_dy_xc, dy, x, mean, xdt, outer, C, inner);
        visit(xdt, [&](auto t, auto s) {
            using T = decltype(t);
            using S = decltype(s);
            const operands<T, S> io{static_cast<const T*>(x), static_cast<const T*>(dy), nullptr, nullptr, use_f16c()};
            const auto sums = reduce(geometry(outer, C, inner), bn_sums::grad, io, static_cast<const S*>(mean),
                                     static_cast<const S*>(nullptr));
            std::copy(sums.begin(), sums.begin() + C, static_cast<S*>(sum_dy));
            std::copy(sums.begin() + C, sums.begin() + 2 * C, static_cast<S*>(sum_dy_xc));
        });
    }

    void bn_grad_apply(void* dx, const void* dy, const void* x, const void* scale, const void* mean, const void* var,
                       const void* sum_dy, const void* sum_dy_xc, double eps, dtype xdt, std::int64_t outer,
                       std::int64_t C, std::int64_t inner)
    {
        if (use_reference())
            return reference::bn_grad_apply(dx, dy, x, scale, mean, var, sum_dy, sum_dy_xc, eps, xdt, outer, C, inner);
        visit(xdt, [&](auto t, auto s) {
            using T = decltype(t);
            using S = decltype(s);
            const auto R = static_cast<double>(outer * inner);
            auto coef = coef_table<S>(C);
            for (std::int64_t c = 0; c < C; ++c)
            {
                // dx = k1 (dy - sum_dy/R) - k1 r^2 sum_dy_xc/R (x - mean), k1 = scale r.
                const double r = inv_std<S>(var, c, eps), k1 = at<S>(scale, c) * r;
                coef[cG * C + c] = static_cast<S>(k1);
                coef[mG * C + c] = static_cast<S>(at<S>(sum_dy, c) / R);
                coef[cX * C + c] = static_cast<S>(-k1 * r * r * at<S>(sum_dy_xc, c) / R);
                coef[mX * C + c] = static_cast<const S*>(mean)[c];
            }
            affine_out<T, S> o;
            o.out = static_cast<T*>(dx);
            o.g = o.x = true;
            o.coef = coef.data();
            apply<T, S>(geometry(outer, C, inner), nullptr, static_cast<const T*>(dy), static_cast<const T*>(x), &o, 1,
                        use_f16c());
        });
    }

    void bn_grad_inference(void* dx, void* sum_dy, void* sum_dy_xc, const void* dy, const void* x, const void* scale,
                           const void* mean, const void* var, double eps, dtype xdt, std::int64_t outer,
                           std::int64_t C, std::int64_t inner)
    {
        if (use_reference())
            return reference::bn_grad_inference(dx, sum_dy, sum_dy_xc, dy, x, scale, mean, var, eps, xdt, outer, C,
                                                inner);
        visit(xdt, [&](auto t, auto s) {
            using T = decltype(t);
            using S = decltype(s);
            std::vector<S> k(static_cast<std::size_t>(C));
            for (std::int64_t c = 0; c < C; ++c)
                k[c] = static_cast<S>(at<S>(scale, c) * inv_std<S>(var, c, eps));
            const operands<T, S> io{static_cast<const T*>(x), static_cast<const T*>(dy), nullptr, static_cast<T*>(dx),
                                    use_f16c()};
            const auto sums =
                reduce(geometry(outer, C, inner), bn_sums::grad_out, io, static_cast<const S*>(mean), k.data());
            std::copy(sums.begin(), sums.begin() + C, static_cast<S*>(sum_dy));
            std::copy(sums.begin() + C, sums.begin() + 2 * C, static_cast<S*>(sum_dy_xc));
        });
    }

    void bn_grad_grad_reduce(void* sums, const void* A, const void* g, const void* x, const void* mean,
                             const void* var, double eps, dtype xdt, std::int64_t outer, std::int64_t C,
                             std::int64_t inner)
    {
        if (use_reference())
            return reference::bn_grad_grad_reduce(sums, A, g, x, mean, var, eps, xdt, outer, C, inner);
        visit(xdt, [&](auto t, auto s) {
            using T = decltype(t);
            using S = decltype(s);
            const operands<T, S> io{static_cast<const T*>(x), static_cast<const T*>(g), static_cast<const T*>(A),
                                    nullptr, use_f16c()};
            auto r = reduce(geometry(outer, C, inner), bn_sums::grad_grad, io, static_cast<const S*>(mean),
                            static_cast<const S*>(nullptr));
            // Sums of g (x - mean) and A (x - mean), times r: sums of g xh and A xh.
            for (std::int64_t c = 0; c < C; ++c)
            {
                const double rc = inv_std<S>(var, c, eps);
                r[C + c] = static_cast<S>(static_cast<double>(r[C + c]) * rc);
                r[3 * C + c] = static_cast<S>(static_cast<double>(r[3 * C + c]) * rc);
            }
            std::copy(r.begin(), r.end(), static_cast<S*>(sums));
        });
    }

    void bn_grad_grad_apply(void* d_g, void* d_x, const void* A, const void* g, const void* x, const void* scale,
                            const void* mean, const void* var, const void* a, const void* b, const void* sums,
                            double eps, bool training, dtype xdt, std::int64_t outer, std::int64_t C,
                            std::int64_t inner)
    {
        if (use_reference())
            return reference::bn_grad_grad_apply(d_g, d_x, A, g, x, scale, mean, var, a, b, sums, eps, training, xdt,
                                                 outer, C, inner);
        if (!d_g && !d_x)
            return;
        visit(xdt, [&](auto t, auto s) {
            using T = decltype(t);
            using S = decltype(s);
            const auto R = static_cast<double>(outer * inner);
            auto cg = coef_table<S>(C), cx = coef_table<S>(C);
            for (std::int64_t c = 0; c < C; ++c)
            {
                const double r = inv_std<S>(var, c, eps), gamma = at<S>(scale, c), ac = at<S>(a, c), bc = at<S>(b, c);
                const S m = static_cast<const S*>(mean)[c];
                cg[mX * C + c] = cx[mX * C + c] = m;
                cg[cK * C + c] = static_cast<S>(bc);
                if (!training)
                {
                    // d_g = gamma r A + a r (x - mean) + b; d_x = a r g.
                    cg[cA * C + c] = static_cast<S>(gamma * r);
                    cg[cX * C + c] = static_cast<S>(ac * r);
                    cx[cG * C + c] = static_cast<S>(ac * r);
                    continue;
                }
                const double g_mean = at<S>(sums, c) / R, gxh_mean = at<S>(sums, C + c) / R;
                const double A_mean = at<S>(sums, 2 * C + c) / R, Axh_mean = at<S>(sums, 3 * C + c) / R;
                const double A_gc_mean = at<S>(sums, 4 * C + c) / R - A_mean * g_mean; // mean(A (g - mean g))
                // d_g = gamma r (A - mean A) + r (a - gamma r mean(A xh)) (x - mean) + b
                cg[cA * C + c] = static_cast<S>(gamma * r);
                cg[mA * C + c] = static_cast<S>(A_mean);
                cg[cX * C + c] = static_cast<S>(r * (ac - gamma * r * Axh_mean));
                // d_x = -gamma r^2 mean(g xh) (A - mean A) + (a r - gamma r^2 mean(A xh)) (g - mean g)
                //       + (gamma r^3 (3 mean(A xh) mean(g xh) - mean(A (g - mean g))) - a r^2 mean(g xh)) (x - mean)
                cx[cA * C + c] = static_cast<S>(-gamma * r * r * gxh_mean);
                cx[mA * C + c] = static_cast<S>(A_mean);
                cx[cG * C + c] = static_cast<S>(ac * r - gamma * r * r * Axh_mean);
                cx[mG * C + c] = static_cast<S>(g_mean);
                cx[cX * C + c] =
                    static_cast<S>(gamma * r * r * r * (3 * Axh_mean * gxh_mean - A_gc_mean) - ac * r * r * gxh_mean);
            }
            affine_out<T, S> outs[2];
            int n = 0;
            if (d_g)
            {
                outs[n].out = static_cast<T*>(d_g);
                outs[n].a = outs[n].x = true;
                outs[n].coef = cg.data();
                ++n;
            }
            if (d_x)
            {
                outs[n].out = static_cast<T*>(d_x);
                outs[n].g = true;
                outs[n].a = outs[n].x = training;
                outs[n].coef = cx.data();
                ++n;
            }
            apply<T, S>(geometry(outer, C, inner), static_cast<const T*>(A), static_cast<const T*>(g),
                        static_cast<const T*>(x), outs, n, use_f16c());
        });
    }
}
