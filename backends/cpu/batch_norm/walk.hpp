#pragma once
// Internal to the CPU backend: the threaded walks of the fast batch-norm kernels
// (kernels.cpp): the per-channel reductions and the elementwise affine outputs over an
// [outer, C, inner] tensor (or a block of its channels), in the work items of
// plan.hpp, calling the SIMD functors of simd.hpp on pointers that
// operands (convert.hpp) hands out: the tensors themselves, or staged float pieces.
// Kept apart from the kernels, which only say what each one computes.
#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <vector>

#include <emmintrin.h> // _mm_sfence

#include "backends/cpu/batch_norm/convert.hpp"
#include "backends/cpu/batch_norm/plan.hpp"
#include "backends/cpu/batch_norm/simd.hpp"
#include "backends/cpu/dispatch.hpp"
#include "xgrad/thread_pool.hpp"

namespace xgrad::cpu::bn_detail
{
    using detail::simd_call;
    using simd::bn_sums;

    // ---------------------------------------------------------------------------------
    // Reductions: sums[s * C + c] for s < bn_sum_count(kind); kind grad_out also writes
    // out = g * k[c]. m, k: per channel (null when the kind does not read them).

    template <class T, class S>
    void reduce_tiles(const geometry& geo, bn_sums kind, const operands<T, S>& io, const S* m, const S* k,
                      S* sums)
    {
        using P = typename operands<T, S>::ptr_type;
        const int K = simd::bn_sum_count(kind);
        const std::int64_t G = geo.groups, inner = geo.inner, C = geo.C, cols = geo.cols, cb = geo.cb,
                           rs = geo.rstride;
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
                        const std::int64_t base = t.r0 * rs + t.j0;
                        const std::int64_t step = io.staged() ? sub_rows : t.nr;
                        for (std::int64_t r = 0; r < t.nr; r += step)
                        {
                            const std::int64_t rows = std::min(step, t.nr - r);
                            simd::bn_tile<S, P> tile{};
                            io.begin(scr, base + r * rs, rows, t.nvalid, rs, tile.x, tile.g, tile.a, tile.out,
                                     tile.y, tile.in_stride);
                            tile.out_stride = tile.in_stride;
                            tile.nrows = rows;
                            tile.ncols = t.nvalid;
                            tile.m = mcol.data();
                            tile.k = kcol.data();
                            tile.acc = acc.data();
                            tile.acc_stride = cb;
                            tile.accumulate = r > 0;
                            simd_call<simd::bn_tile_fn>(static_cast<const simd::bn_tile<S, P>*>(&tile), kind);
                            io.finish(scr, base + r * rs, rows, t.nvalid, rs);
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
        using P = typename operands<T, S>::ptr_type;
        const int K = simd::bn_sum_count(kind);
        const std::int64_t C = geo.C, ipc = geo.items_per_channel, o_stride = geo.ostride;
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
                             const std::int64_t base = b.o0 * o_stride + b.c0 * geo.inner + b.i0;
                             // In place: one call. Staged: one outer index (nc segments) at a time.
                             const std::int64_t step = io.staged() ? 1 : b.no;
                             for (std::int64_t o = 0; o < b.no; o += step)
                             {
                                 const std::int64_t off = base + o * o_stride;
                                 simd::bn_run<S, P> run{};
                                 run.o_stride = o_stride;
                                 run.nc = b.nc;
                                 run.n = b.n;
                                 run.m = m ? m + b.c0 : nullptr;
                                 run.k = k ? k + b.c0 : nullptr;
                                 run.state = state.data();
                                 run.sums = local.data();
                                 io.begin(scr, off, b.nc, b.n, geo.inner, run.x, run.g, run.a, run.out, run.y,
                                          run.c_stride);
                                 run.no = step;
                                 run.init = o == 0;
                                 run.finish = o + step == b.no;
                                 simd_call<simd::bn_run_fn>(static_cast<const simd::bn_run<S, P>*>(&run), kind);
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
        bool relu = false;   // max(out, 0) on store
        bool stream = false; // non-temporal stores where the output is written in place
    };

    /// y: when not null, g is read as (y > 0 ? g : 0) (the fused ReLU's backward).
    template <class T, class S>
    void apply(const geometry& geo, const T* a, const T* g, const T* x, const affine_out<T, S>* outs, int nouts,
               bool f16c, const T* y = nullptr)
    {
        if (geo.numel == 0)
            return;
        bool need_a = false, need_g = false, need_x = false;
        for (int o = 0; o < nouts; ++o)
            need_a |= outs[o].a, need_g |= outs[o].g, need_x |= outs[o].x;
        // Inputs converted once per piece for every output; each output written back itself.
        const operands<T, S> in{need_x ? x : nullptr, need_g ? g : nullptr, need_a ? a : nullptr, nullptr, f16c,
                                need_g ? y : nullptr};
        const std::int64_t C = geo.C;
        // Streaming only pays when whole cache lines are written: rows (runs: segments;
        // tiles: the columns of an item) a multiple of 64 bytes long and apart.
        const auto line = [](std::int64_t elems) { return elems * static_cast<std::int64_t>(sizeof(T)) % 64 == 0; };
        const bool lines = geo.tiles ? line(geo.rstride) && line(geo.cb) && line(geo.cols)
                                     : line(geo.inner) && (geo.chunks == 1 || line(geo.chunk_len));
        bool streaming = false;
        for (int o = 0; o < nouts; ++o)
            streaming |= outs[o].stream && lines && !in.staged();
        // Non-temporal stores are weakly ordered: fence them before the chunk ends (the
        // thread pool's join then publishes them).
        const auto fence = [streaming] {
            if (streaming)
                _mm_sfence();
        };
        // pa, pg, px, py: as in.begin handed them out (scratch when staged, else the tensors).
        using P = typename operands<T, S>::ptr_type;
        auto call = [&](const affine_out<T, S>& o, typename operands<T, S>::scratch& scr, std::int64_t offset,
                        std::int64_t rows, std::int64_t n, std::int64_t stride, const P* pa, const P* pg,
                        const P* px, const P* py, const S* const* coef, std::int64_t coef_stride,
                        std::int64_t coef_row_stride) {
            const operands<T, S> out{nullptr, nullptr, nullptr, o.out, f16c}; // staged iff the inputs are
            const P *unused_x, *unused_g, *unused_a, *unused_y;
            P* pout = nullptr;
            std::int64_t pstride = 0;
            out.begin(scr, offset, rows, n, stride, unused_x, unused_g, unused_a, pout, unused_y, pstride);
            simd::bn_affine<S, P> p{};
            p.out = pout;
            p.a = o.a ? pa : nullptr;
            p.g = o.g ? pg : nullptr;
            p.y = o.g ? py : nullptr;
            p.x = o.x ? px : nullptr;
            for (int q = 0; q < 7; ++q)
                p.coef[q] = coef[q];
            p.coef_stride = coef_stride;
            p.coef_row_stride = coef_row_stride;
            p.nrows = rows;
            p.n = n;
            p.stride = pstride;
            p.relu = o.relu;
            p.stream = streaming && o.stream;
            simd_call<simd::bn_affine_fn>(static_cast<const simd::bn_affine<S, P>*>(&p));
            out.finish(scr, offset, rows, n, stride);
        };

        if (geo.tiles)
        {
            const std::int64_t rs = geo.rstride;
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
                                 const std::int64_t base = t.r0 * rs + t.j0;
                                 const std::int64_t step = in.staged() ? sub_rows : t.nr;
                                 for (std::int64_t r = 0; r < t.nr; r += step)
                                 {
                                     const std::int64_t rows = std::min(step, t.nr - r), off = base + r * rs;
                                     const P *px = nullptr, *pg = nullptr, *pa = nullptr, *py = nullptr;
                                     P* unused_out = nullptr;
                                     std::int64_t pstride = 0;
                                     in.begin(scr, off, rows, t.nvalid, rs, px, pg, pa, unused_out, py, pstride);
                                     for (int o = 0; o < nouts; ++o)
                                         call(outs[o], scr, off, rows, t.nvalid, rs, pa, pg, px, py, coef[o], 1,
                                              0);
                                 }
                             }
                             fence();
                         });
            return;
        }
        parallel_for(0, geo.run_items(), std::max<std::int64_t>(1, grain / geo.run_item_elems()),
                     [&](std::int64_t begin, std::int64_t end) {
                         typename operands<T, S>::scratch scr(std::max(run_span, run_item));
                         for (std::int64_t item = begin; item < end; ++item)
                         {
                             const auto b = geo.run_block(item);
                             for (std::int64_t ci = 0; ci < b.nc; ++ci)
                             {
                                 // The no segments of one channel (one row per outer index, all
                                 // with the channel's coefficients): one call, not one per segment.
                                 const std::int64_t off = b.o0 * geo.ostride + (b.c0 + ci) * geo.inner + b.i0;
                                 const P *px = nullptr, *pg = nullptr, *pa = nullptr, *py = nullptr;
                                 P* unused_out = nullptr;
                                 std::int64_t pstride = 0;
                                 in.begin(scr, off, b.no, b.n, geo.ostride, px, pg, pa, unused_out, py, pstride);
                                 for (int q = 0; q < nouts; ++q)
                                 {
                                     const S* coef[7];
                                     for (int k = 0; k < 7; ++k)
                                         coef[k] = outs[q].coef + k * C + b.c0 + ci;
                                     call(outs[q], scr, off, b.no, b.n, geo.ostride, pa, pg, px, py, coef, 0,
                                          0);
                                 }
                             }
                         }
                         fence();
                     });
    }
}
