#pragma once
// Internal to the CPU backend: the threaded walks of the fast batch-norm kernels
// (kernels.cpp): the per-channel reductions and the elementwise affine outputs over an
// [outer, C, inner] tensor (or a block of its channels), in the work items of
// plan.hpp, calling the SIMD functors of simd.hpp on the tensors themselves (operands.hpp).
// Kept apart from the kernels, which only say what each one computes.
#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <vector>

#include <emmintrin.h> // _mm_sfence

#include "backends/cpu/batch_norm/operands.hpp"
#include "backends/cpu/batch_norm/plan.hpp"
#include "backends/cpu/batch_norm/simd.hpp"
#include "backends/cpu/dispatch.hpp"
#include "xgrad/thread_pool.hpp"

namespace xgrad::cpu::bn_detail
{
    using simd::bn_sums;

    /// Calls functor F on a work item p of tensors of T at the instruction set in use
    /// (detail::simd_call), bfloat16 tensors with AVX512-BF16's conversion where
    /// avx512_bf16_in_use() (simd.hpp's avx512bw_bf16).
    template <class F, template <class, class> class Item, class S, class T, class... Rest>
    void bn_call(const Item<S, T>* p, Rest... rest) noexcept
    {
        if constexpr (std::is_same_v<T, bfloat16_t>)
            if (avx512_bf16_in_use())
                return F{}(simd::avx512bw_bf16{}, p, rest...);
        detail::simd_call<F>(p, rest...);
    }

    // ---------------------------------------------------------------------------------
    // Reductions: sums[s * C + c] for s < bn_sum_count(kind). m, k: per channel (null when the
    // kind does not read them); out: the output of kind grad_out (out = g * k[c]), else null.

    template <class T, class S>
    void reduce_tiles(const geometry& geo, bn_sums kind, const operands<T, S>& io, const S* m, const S* k, T* out,
                      S* sums)
    {
        const int K = simd::bn_sum_count(kind);
        const std::int64_t G = geo.groups, inner = geo.inner, C = geo.C, cols = geo.cols, cb = geo.cb, rs = geo.rstride;
        const std::int64_t B = geo.blocks_per_item, groups_of_blocks = (geo.row_blocks + B - 1) / B;
        // partial[(gb * K + s) * G + group]: one per group of B row blocks.
        std::vector<S> partial(static_cast<std::size_t>(groups_of_blocks * K * G));
        parallel_for(0, groups_of_blocks * geo.col_blocks, std::max<std::int64_t>(1, grain / (B * geo.tile_elems())),
                     [&](std::int64_t begin, std::int64_t end) {
                         const std::int64_t gpb = cb / inner; // groups per column block
                         std::vector<S> acc(static_cast<std::size_t>(K * cb)), mcol(static_cast<std::size_t>(cb)),
                             kcol(static_cast<std::size_t>(cb)), blocks(static_cast<std::size_t>(B * K * gpb));
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
                                 const std::int64_t off = t.r0 * rs + t.j0;
                                 const operands<T, S> in = io.at(off);
                                 simd::bn_tile<S, T> tile{};
                                 tile.x = in.x;
                                 tile.g = in.g;
                                 tile.a = in.a;
                                 tile.y = in.y;
                                 tile.out = out ? out + off : nullptr;
                                 tile.in_stride = tile.out_stride = rs;
                                 tile.nrows = t.nr;
                                 tile.ncols = t.nvalid;
                                 tile.m = mcol.data();
                                 tile.k = kcol.data();
                                 tile.acc = acc.data();
                                 tile.acc_stride = cb;
                                 bn_call<simd::bn_tile_fn>(static_cast<const simd::bn_tile<S, T>*>(&tile), kind);
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
    void reduce_runs(const geometry& geo, bn_sums kind, const operands<T, S>& io, const S* m, const S* k, T* out,
                     S* sums)
    {
        const int K = simd::bn_sum_count(kind);
        const std::int64_t C = geo.C, ipc = geo.items_per_channel, o_stride = geo.ostride;
        // partial[(c * ipc + q) * K + s]
        std::vector<S> partial(static_cast<std::size_t>(C * ipc * K));
        parallel_for(0, geo.run_items(), std::max<std::int64_t>(1, grain / geo.run_item_elems()),
                     [&](std::int64_t begin, std::int64_t end) {
                         std::vector<S> state(static_cast<std::size_t>(geo.run_cb * simd::bn_run_state_size(kind))),
                             local(static_cast<std::size_t>(geo.run_cb * K));
                         for (std::int64_t item = begin; item < end; ++item)
                         {
                             const auto b = geo.run_block(item);
                             const std::int64_t off = b.o0 * o_stride + b.c0 * geo.inner + b.i0;
                             const operands<T, S> in = io.at(off);
                             simd::bn_run<S, T> run{};
                             run.o_stride = o_stride;
                             run.c_stride = geo.inner;
                             run.nc = b.nc;
                             run.no = b.no;
                             run.n = b.n;
                             run.m = m ? m + b.c0 : nullptr;
                             run.k = k ? k + b.c0 : nullptr;
                             run.state = state.data();
                             run.sums = local.data();
                             run.x = in.x;
                             run.g = in.g;
                             run.a = in.a;
                             run.y = in.y;
                             run.out = out ? out + off : nullptr;
                             bn_call<simd::bn_run_fn>(static_cast<const simd::bn_run<S, T>*>(&run), kind);
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

    template <class T, class S>
    std::vector<S> reduce_impl(const geometry& geo, bn_sums kind, const operands<T, S>& io, const S* m, const S* k,
                               T* out)
    {
        std::vector<S> sums(static_cast<std::size_t>(simd::bn_sum_count(kind) * geo.C), S(0));
        if (geo.numel == 0)
            return sums;
        if (geo.tiles)
            reduce_tiles(geo, kind, io, m, k, out, sums.data());
        else
            reduce_runs(geo, kind, io, m, k, out, sums.data());
        return sums;
    }

    /// The per-channel sums of `kind` (x: no centre; centred, grad, grad_grad: centre m[c]) of
    /// the inputs io; zeros when there are no elements.
    template <class T, class S>
    std::vector<S> reduce(const geometry& geo, bn_sums kind, const operands<T, S>& io, const S* m = nullptr)
    {
        return reduce_impl<T, S>(geo, kind, io, m, nullptr, nullptr);
    }

    /// The sums of kind grad_out (centre m[c]), writing out = g * k[c] in the same pass.
    template <class T, class S>
    std::vector<S> reduce_writing(const geometry& geo, const operands<T, S>& io, const S* m, const S* k, T* out)
    {
        return reduce_impl<T, S>(geo, bn_sums::grad_out, io, m, k, out);
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

    /// The nouts outputs (1 or 2) from the inputs io (g masked by io's y when given, the fused
    /// ReLU's backward); only the inputs some output uses are read.
    template <class T, class S>
    void apply(const geometry& geo, const operands<T, S>& io, const affine_out<T, S>* outs, int nouts)
    {
        if (geo.numel == 0)
            return;
        bool need_a = false, need_g = false, need_x = false;
        for (int o = 0; o < nouts; ++o)
            need_a |= outs[o].a, need_g |= outs[o].g, need_x |= outs[o].x;
        const operands<T, S> in = operands<T, S>{}
                                      .with_x(need_x ? io.x : nullptr)
                                      .with_g(need_g ? io.g : nullptr, need_g ? io.y : nullptr)
                                      .with_a(need_a ? io.a : nullptr);
        const std::int64_t C = geo.C;
        // Streaming only pays when whole cache lines are written: tiles, rows (the columns of
        // an item) a multiple of 64 bytes long and apart; runs, segments of at least 4 lines
        // (the kernel stores a segment's elements before its first line boundary and after its
        // last one through the cache, and streams the whole lines between: segments of 196
        // floats, whose starts fall at 16-byte steps, stored all through the cache made the
        // channels-first training gradient of 14x14 images 0.8 of the two-pass floor).
        const auto line = [](std::int64_t elems) { return elems * static_cast<std::int64_t>(sizeof(T)) % 64 == 0; };
        const auto long_run = [](std::int64_t elems) { return elems * static_cast<std::int64_t>(sizeof(T)) >= 256; };
        const bool lines = geo.tiles ? line(geo.rstride) && line(geo.cb) && line(geo.cols)
                                     : long_run(geo.inner) && (geo.chunks == 1 || long_run(geo.chunk_len));
        bool streaming = false;
        for (int o = 0; o < nouts; ++o)
            streaming |= outs[o].stream && lines;
        // Non-temporal stores are weakly ordered: fence them before the chunk ends (the
        // thread pool's join then publishes them).
        const auto fence = [streaming] {
            if (streaming)
                _mm_sfence();
        };
        // pin: the inputs advanced to the piece's first element.
        auto call = [&](const affine_out<T, S>& o, std::int64_t offset, std::int64_t rows, std::int64_t n,
                        std::int64_t stride, const operands<T, S>& pin, const S* const* coef, std::int64_t coef_stride,
                        std::int64_t coef_row_stride) {
            simd::bn_affine<S, T> p{};
            p.out = o.out + offset;
            p.a = o.a ? pin.a : nullptr;
            p.g = o.g ? pin.g : nullptr;
            p.y = o.g ? pin.y : nullptr;
            p.x = o.x ? pin.x : nullptr;
            for (int q = 0; q < 7; ++q)
                p.coef[q] = coef[q];
            p.coef_stride = coef_stride;
            p.coef_row_stride = coef_row_stride;
            p.nrows = rows;
            p.n = n;
            p.stride = stride;
            p.relu = o.relu;
            p.stream = streaming && o.stream;
            bn_call<simd::bn_affine_fn>(static_cast<const simd::bn_affine<S, T>*>(&p));
        };

        if (geo.tiles)
        {
            const std::int64_t rs = geo.rstride;
            parallel_for(
                0, geo.tile_items(), std::max<std::int64_t>(1, grain / geo.tile_elems()),
                [&](std::int64_t begin, std::int64_t end) {
                    const std::int64_t cb = geo.cb;
                    std::vector<S> cexp(static_cast<std::size_t>(nouts * 7 * cb));
                    // The expanded coefficients depend on the item's columns only, and
                    // consecutive items mostly share them (a channels-last tensor is
                    // usually one column block wide): expand when the columns change,
                    // and only the coefficients an output's expression reads. Expanding
                    // all seven per 4096-element tile took a fifth of the training
                    // forward with 16-32 channels.
                    const S* coef[2][7] = {};
                    std::int64_t expanded_j0 = -1, expanded_n = -1;
                    for (std::int64_t item = begin; item < end; ++item)
                    {
                        const auto t = geo.tile_at(item);
                        if (t.nvalid == 0)
                            continue;
                        if (t.j0 != expanded_j0 || t.nvalid != expanded_n)
                        {
                            // (An unused coefficient points at cK's expansion: the
                            // kernels may load it, never use it.)
                            for (int o = 0; o < nouts; ++o)
                                for (int q = 6; q >= 0; --q)
                                {
                                    const bool used = q == 6 || (q < 2 ? outs[o].a : q < 4 ? outs[o].g : outs[o].x);
                                    S* e = cexp.data() + (o * 7 + (used ? q : 6)) * cb;
                                    if (used)
                                    {
                                        const S* src = outs[o].coef + q * C;
                                        geo.expand(t.j0, t.nvalid,
                                                   [&](std::int64_t j, std::int64_t c) { e[j] = src[c]; });
                                    }
                                    coef[o][q] = e;
                                }
                            expanded_j0 = t.j0, expanded_n = t.nvalid;
                        }
                        const std::int64_t off = t.r0 * rs + t.j0;
                        const operands<T, S> pin = in.at(off);
                        for (int o = 0; o < nouts; ++o)
                            call(outs[o], off, t.nr, t.nvalid, rs, pin, coef[o], 1, 0);
                    }
                    fence();
                });
            return;
        }
        parallel_for(0, geo.run_items(), std::max<std::int64_t>(1, grain / geo.run_item_elems()),
                     [&](std::int64_t begin, std::int64_t end) {
                         for (std::int64_t item = begin; item < end; ++item)
                         {
                             const auto b = geo.run_block(item);
                             for (std::int64_t ci = 0; ci < b.nc; ++ci)
                             {
                                 // The no segments of one channel (one row per outer index, all
                                 // with the channel's coefficients): one call, not one per segment.
                                 const std::int64_t off = b.o0 * geo.ostride + (b.c0 + ci) * geo.inner + b.i0;
                                 const operands<T, S> pin = in.at(off);
                                 for (int q = 0; q < nouts; ++q)
                                 {
                                     const S* coef[7];
                                     for (int k = 0; k < 7; ++k)
                                         coef[k] = outs[q].coef + k * C + b.c0 + ci;
                                     call(outs[q], off, b.no, b.n, geo.ostride, pin, coef, 0, 0);
                                 }
                             }
                         }
                         fence();
                     });
    }
}
