#pragma once
// Internal to the CUDA batch-norm kernels (batch_norm.cpp): deterministic per-channel sums over
// an [outer, C, inner] tensor, and the channel of a flat index for the elementwise passes.
//
// A channel's R = outer * inner elements are numbered j = 0 .. R-1 in memory order
// (j = o * inner + i sits at address (o * C + c) * inner + i). They are summed in two stages,
// both fixed by the shape alone, so every run gives the same bits and no atomics are needed:
//
// Stage 1 (lane_sums): P lanes per channel. Lane l of channel c adds, in the statistics type
//   S, the terms of elements j = l, l + P, l + 2P, ... and writes its K sums to
//   partials[(k * C + c) * P + l]. The flat thread index t is mapped so that neighbouring
//   threads read neighbouring addresses:
//   - channels-last (inner == 1): t = l * C + c; a warp reads neighbouring channels of one row;
//   - channels-first (inner > 1): t = c * P + l; a warp reads neighbouring elements of a run.
//   P is chosen so that C * P is about 2^17 lanes (enough to fill an H200 several times over)
//   with at least 32 elements a lane (so that the partials stay small next to the data), and
//   at most 4096 (so that no lane's sequential float sum grows long on huge tensors).
// Stage 2 (fold_level, then finish_channels): while a channel has more than 32 partials, each
//   group q of a level adds partials q, q + Q, q + 2Q, ... (Q = ceil(P / 32) groups, so
//   neighbouring groups read neighbouring partials); then one index per channel adds its last
//   <= 32 partials in order, in double, and hands the K sums to a `Finish` functor, which
//   derives the per-channel results (mean, variance, the coefficients of an elementwise pass).
//
// A `Term` functor says what a lane adds: `channel(c)` caches the lane's per-channel values,
// `operator()(addr, acc)` adds the terms of the element at `addr` into acc[0..K-1] (and may
// write an output there: each element is visited by exactly one lane).
#include <algorithm>
#include <cstdint>

#include "backends/cuda/device_loop.hpp"

namespace xgrad::cuda::bn_detail
{
    using i64 = std::int64_t;
    using detail::device_buffer;
    using detail::element;
    using detail::for_each_index;

    inline constexpr i64 target_lanes = i64{1} << 17; // C * P, about
    inline constexpr i64 min_lane_len = 32;           // elements a lane adds, at least ...
    inline constexpr i64 max_lane_len = 4096;         // ... and at most (when R allows)
    inline constexpr i64 fan_in = 32;                 // partials one stage-2 index adds

    inline i64 ceil_div(i64 a, i64 b) { return (a + b - 1) / b; }

    /// Lanes per channel (>= 1), from the shape alone.
    inline i64 lanes_per_channel(i64 C, i64 R)
    {
        i64 P = std::min(ceil_div(target_lanes, C), ceil_div(R, min_lane_len));
        P = std::max(P, ceil_div(R, max_lane_len));
        return std::max<i64>(P, 1);
    }

    /// Where stage 1's lanes walk: lane l starts at j = l and steps by P.
    struct lane_plan
    {
        i64 C = 0, inner = 1, R = 0, P = 1;
        i64 row = 0;    // C * inner: the distance between consecutive outer indices
        i64 step = 0;   // address change of j += P before a run wraps: (P / inner) * row + P % inner
        i64 step_r = 0; // P % inner: change of the position within a run
        bool channels_last = false;
    };

    inline lane_plan make_plan(i64 outer, i64 C, i64 inner)
    {
        lane_plan p;
        p.C = C;
        p.inner = std::max<i64>(inner, 1); // inner = 0 (R = 0): nothing is walked, but no division by 0
        p.R = outer * inner;
        p.P = lanes_per_channel(C, p.R);
        p.row = C * p.inner;
        p.step_r = p.P % p.inner;
        p.step = (p.P / p.inner) * p.row + p.step_r;
        p.channels_last = p.inner == 1;
        return p;
    }

    /// Stage 1: out[(k * C + c) * P + l] = lane l's sums of channel c (see the file comment).
    template <class S, int K, class Term>
    void lane_sums(const lane_plan& plan, const Term& term, S* out)
    {
        const lane_plan p = plan;
        const i64 C = p.C, P = p.P;
        for_each_index(C * P, [=] XGRAD_HOST_DEVICE(i64 t) {
            i64 c = 0, l = 0;
            if (p.channels_last)
            {
                l = t / C;
                c = t - l * C;
            }
            else
            {
                c = t / P;
                l = t - c * P;
            }
            Term f = term;
            f.channel(c);
            S acc[K];
            for (int k = 0; k < K; ++k)
                acc[k] = S(0);
            // j = o * inner + r lives at o * row + c * inner + r; stepping j by P moves the
            // address by `step`, plus (row - inner) more when r passes the end of its run.
            i64 r = l % p.inner;
            i64 addr = (l / p.inner) * p.row + c * p.inner + r;
            for (i64 j = l; j < p.R; j += P)
            {
                f(addr, acc);
                addr += p.step;
                r += p.step_r;
                if (r >= p.inner)
                {
                    r -= p.inner;
                    addr += p.row - p.inner;
                }
            }
            for (int k = 0; k < K; ++k)
                out[(k * C + c) * P + l] = acc[k];
        });
    }

    /// One stage-2 level: each of the K * C rows of P partials in `in` becomes Q partials in
    /// `out`, out[row * Q + q] = sum over m of in[row * P + q + m * Q] (m ascending).
    template <class S>
    void fold_level(const S* in, i64 rows, i64 P, S* out, i64 Q)
    {
        for_each_index(rows * Q, [=] XGRAD_HOST_DEVICE(i64 t) {
            const i64 row = t / Q, q = t - row * Q;
            const S* src = in + row * P;
            S s = S(0);
            for (i64 j = q; j < P; j += Q)
                s += src[j];
            out[t] = s;
        });
    }

    /// The last step: one index per channel adds its P (<= fan_in) partials in order, in
    /// double, and calls fin(c, sums).
    template <class S, int K, class Finish>
    void finish_channels(const S* in, i64 C, i64 P, const Finish& finish)
    {
        const Finish fin = finish;
        for_each_index(C, [=] XGRAD_HOST_DEVICE(i64 c) {
            double s[K];
            for (int k = 0; k < K; ++k)
            {
                const S* src = in + (k * C + c) * P;
                double a = 0;
                for (i64 l = 0; l < P; ++l)
                    a += static_cast<double>(src[l]);
                s[k] = a;
            }
            fin(c, s);
        });
    }

    /// The K per-channel sums of `term` over an [outer, C, inner] tensor, handed to `fin` (the
    /// two stages of the file comment). R = 0 hands zeros.
    template <class S, int K, class Term, class Finish>
    void channel_sums(i64 outer, i64 C, i64 inner, const Term& term, const Finish& fin)
    {
        if (C <= 0)
            return;
        const lane_plan p = make_plan(outer, C, inner);
        const i64 rows = K * C;
        device_buffer first(sizeof(S) * static_cast<std::size_t>(rows * p.P));
        device_buffer second(sizeof(S) * static_cast<std::size_t>(rows * ceil_div(p.P, fan_in)));
        lane_sums<S, K>(p, term, first.as<S>());
        // Tree levels ping-pong between the buffers (each level is smaller than the last).
        S* bufs[2] = {first.as<S>(), second.as<S>()};
        int cur = 0;
        i64 P = p.P;
        while (P > fan_in)
        {
            const i64 Q = ceil_div(P, fan_in);
            fold_level<S>(bufs[cur], rows, P, bufs[1 - cur], Q);
            cur = 1 - cur;
            P = Q;
        }
        finish_channels<S, K>(bufs[cur], C, P, fin);
        // The buffers go back to the caching allocator here; the stream orders their reuse
        // after the kernels above.
    }

    /// The channel of flat element i of an [outer, C, inner] tensor, (i / inner) % C, in
    /// 32-bit arithmetic when the tensor is small enough (64-bit division is slow on a GPU).
    struct channel_map
    {
        i64 inner = 1, C = 1;
        bool narrow = false;

        channel_map(i64 outer, i64 C_, i64 inner_)
            : inner(inner_), C(C_), narrow(outer * C_ * inner_ <= static_cast<i64>(UINT32_MAX))
        {
        }

        XGRAD_HOST_DEVICE i64 operator()(i64 i) const
        {
            if (narrow)
            {
                const auto q = static_cast<std::uint32_t>(i) / static_cast<std::uint32_t>(inner);
                return static_cast<i64>(q % static_cast<std::uint32_t>(C));
            }
            return (i / inner) % C;
        }
    };
}
