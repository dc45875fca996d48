#pragma once
// Internal to the CPU backend: how the fast batch-norm kernels (kernels.cpp) cut a tensor into
// work items, and the fixed-order combination of the partial sums those items produce. Kept
// apart from the kernels because it depends on the shape alone (no dtype, no SIMD level, no
// data): it decides the summation tree, and with it the error bound below and the bitwise
// independence of results from the thread count.
//
// Layout:
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
// - The order is also independent of the channel blocks of the one-read kernels (kernels.cpp),
//   so that their cache budget can follow the machine: a channel's terms are summed the same
//   way whether its tensor is walked whole or in blocks of channels. Tiles: the rows of each
//   column in fixed chunks of rows_block, in order; a column's inner indices pairwise per
//   chunk; the chunks by one bottom-up tree (step 1, 2, 4, ...: chunk i takes chunk i + step),
//   which work items of a power-of-two count of chunks, aligned, reproduce whatever their
//   size; then the merged outer indices pairwise (merging is a function of the shape: a tensor
//   whose rows are merged is never blocked). Runs: segments and chunks depend on outer and
//   inner alone, and each channel is summed apart from the others in its item.
//   tests/backends/cpu/test_batch_norm_kernels.cpp runs the kernels with several budgets.
//
// Error bound of a sum of terms t_i (R per channel; u = unit roundoff of S: 2^-24 float, 2^-53
// double). Each term is formed with relative error <= 2u (d = x - m rounded once, the product
// rounded at most once). Summation is a fixed tree whose depth (roundings on the path from a
// term to the result) is at most:
// - tiles: 63 (<= rows_block terms of a column added in order) + 5 (pairwise over the inner
//   columns of a channel, inner <= 31) + 4 (pairwise over the <= 16 tiles of an item) +
//   ceil(log2 items) + 6 (pairwise over the merged outer indices, merge <= 64)
//   <= 78 + ceil(log2 R);
// - runs: per channel an item has <= run_item = 4096 elements in <= 128 segments (inner >= 32);
//   each of the two vector accumulators takes <= 4096 / (2W) + 128 batches (W lanes), +1 to
//   add them, +log2 W lane levels, + ceil(log2 items) <= ceil(log2 R) pairwise levels over the
//   items: 643 + ceil(log2 R) for float with SSE2 (W = 4), 388 with AVX2 (W = 8), 259 with
//   AVX-512 (W = 16); 1154 / 643 / 388 for double;
// so |computed - exact| <= (645 + ceil(log2 R)) * u * sum |t_i| for float (1156 for double):
// for R = 10^6 float terms, 665 u = 4.0e-5 relative to sum |t_i|, against R u ~ 0.06 for a
// naive left-to-right float loop. tests/backends/cpu/test_batch_norm_kernels.cpp checks these
// bounds. Items of 512 elements gave a bound eight times tighter, but each item's fixed costs
// (its accumulators, lane sums, partial slot and call) then weighed on the short rows of small
// images: 4096 ran the channels-first kernels 1.47x faster (geometric mean of the bench's
// channels-first float32 cases, 1 and 2 threads; 1.8-2.2x for the training gradient and
// forward on 28x28 images).
#include <algorithm>
#include <cstdint>
#include <numeric>

#include "backends/cpu/dispatch.hpp"
#include "xgrad/thread_pool.hpp"

namespace xgrad::cpu::bn_detail
{
    using detail::grain;

    /// Tiles: rows summed in order per column before the pairwise combination.
    constexpr std::int64_t rows_block = 64;
    /// Tiles: columns per work item (rounded down to a multiple of inner).
    constexpr std::int64_t col_block = 256;
    /// Tiles: narrower rows of C * inner elements are merged, `merge` of them per row.
    constexpr std::int64_t min_cols = 64;
    /// Runs are used from this inner size on (below it, segments would be mostly tails).
    constexpr std::int64_t run_min_inner = 32;
    /// Runs: elements of one channel per work item (at most). It sets the summation tree (and
    /// the bound above); run_span does not.
    constexpr std::int64_t run_item = 4096;
    /// Runs: a work item takes adjacent channels, about this many elements per outer index.
    constexpr std::int64_t run_span = 8192;
    /// D - ceil(log2 R) of the error bound above, for every kernel and SIMD level: the runs in
    /// double at SSE2 (W = 2) are the deepest, run_item / (2W) batches per accumulator plus a
    /// tail batch per segment, +1 to add the two accumulators, +1 lane level, and +2 for
    /// forming a term (the tiles' 78 + 2 is less). The kernel tests take their bounds from it.
    constexpr std::int64_t error_depth = run_item / 4 + run_item / run_min_inner + 4;
    static_assert(error_depth >= 80, "the tiles' depth must stay within the bound");
    /// Tiles, reductions: a work item takes up to 16 row blocks, about this many elements, and
    /// combines their sums pairwise itself (fewer, smaller partial sums to combine later).
    constexpr std::int64_t item_target = 32768;

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

        /// Distance between consecutive outer indices: C * inner for a whole tensor, more for a
        /// block of channels [c0, c0 + C) of a wider tensor (a view; no outer indices merged).
        std::int64_t ostride = 0;
        /// Tiles: distance between consecutive rows (cols for a whole tensor, else ostride).
        std::int64_t rstride = 0;

        /// The whole [o, c, i] tensor, or (os > c * i) channels [c0, c0 + c) of a tensor with
        /// os / i channels, the caller's pointers already advanced by c0 * i.
        geometry(std::int64_t o, std::int64_t c, std::int64_t i, std::int64_t os = -1)
            : outer(o), C(c), inner(i), numel(o * c * i), ostride(os < 0 ? c * i : os)
        {
            if (numel <= 0) // nothing to walk (callers return before using the geometry)
                return;
            tiles = inner < run_min_inner;
            if (tiles)
            {
                const std::int64_t ci = C * inner;
                if (ci < min_cols && ostride == ci)
                {
                    // A multiple of 8 columns (whole AVX2 float batches) when that is cheap.
                    const std::int64_t l = std::lcm(ci, std::int64_t{8});
                    const std::int64_t base = l <= 256 ? l / ci : 1;
                    merge = base * ((min_cols + base * ci - 1) / (base * ci));
                }
                cols = merge * ci;
                rstride = ostride == ci ? cols : ostride;
                groups = cols / inner;
                full_rows = outer / merge;
                tail_cols = (outer % merge) * ci;
                cb = std::min(cols, std::max<std::int64_t>(1, col_block / inner) * inner);
                row_blocks = (full_rows + rows_block - 1) / rows_block + (tail_cols > 0 ? 1 : 0);
                col_blocks = (cols + cb - 1) / cb;
                // A power of two: an item's row blocks then start at a multiple of their count,
                // so combining them bottom-up in the item and the items bottom-up afterwards is
                // the one bottom-up tree over all row blocks, whatever cb (and with it the
                // channel block) is.
                const std::int64_t want = std::clamp<std::int64_t>(item_target / (rows_block * cb), 1, 16);
                while (blocks_per_item * 2 <= want)
                    blocks_per_item *= 2;
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
        std::int64_t run_item_elems() const noexcept { return chunks == 1 ? seg_per_item * run_cb * inner : chunk_len; }
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
}
