// The CUDA backend's reductions: sum and max over the trailing ndim - n_keep dimensions of a
// strided x, and argmax over the last dimension, with the contracts of reduce_fn and argmax_fn
// (backends/common/kernel_list.hpp). argmax gives each output row one thread that scans the
// row in order (so the first maximum or NaN wins, as on the CPU); the rows are many wherever
// argmax is used (a class per sample), and a lane split would need an index-carrying combine.
//
// How it is built, and why:
// - Layout: the kept dimensions (with out's strides alongside) and the reduced ones are each
//   normalised as the CPU kernel normalises them (nd_index: size-1 dimensions dropped, ordered
//   by x's strides, contiguous ones merged). K outputs, R reduced elements each, the reduced
//   elements of an output numbered r = 0..R-1 in x's memory order.
// - Deterministic: each output's R elements are split into L lanes; lane j combines the
//   elements r = j, j + L, j + 2L, ... in increasing r. L depends only on K and R (lanes_for),
//   never on the device, its occupancy or scheduling. With L = 1 (short reductions, or enough
//   outputs to fill the device), one thread per output writes the result. Otherwise phase 1
//   writes the K * L lane results into a device_buffer, and phase 2 (one thread per output)
//   combines an output's L lane results by a fixed pairwise tree. No atomics: every run gives
//   the same bits.
// - Memory access: lane j of an output and lane j + 1 read neighbouring elements, so when the
//   reduced elements are contiguous in x, consecutive threads are consecutive lanes of one
//   output (coalesced loads). When they are not (sum over axis 0 of a row-major matrix), the
//   thread order is lane-major, so consecutive threads are consecutive outputs, which are the
//   neighbours in memory then. The thread order does not change any result.
// - Accuracy: sums accumulate in double for float32 and float64 alike, and round once to the
//   dtype at the end. For float32 that makes each result the float nearest the exact sum up
//   to a relative 2^-53 * (R / L + log2 L) of sum |x| (under 2^-24 for R < 2^28): the device's
//   result is at least as accurate as the CPU's float32 block sums, so the two agree within
//   the CPU backend's own error bound (its reduce.cpp). Double adds cost nothing here: a sum
//   reads 4 bytes per add and is bound by memory bandwidth, not by arithmetic (H100/H200 run
//   float64 adds at half the float32 rate). One consequence: a float32 sum whose partial sums
//   overflow float but whose total does not (1e38 + 1e38 - 1e38) is finite here and may be inf
//   on the CPU. max works in the dtype itself (it is exact) and propagates NaN: a NaN lane
//   result stays NaN through the tree, as on the CPU.
// - Empty reductions (R = 0) assign 0 for sum (and -inf for max, which the ops layer rejects).
#include <algorithm>
#include <cstdint>
#include <limits>
#include <optional>

#include "backends/cuda/device_loop.hpp"
#include "xgrad/checked.hpp"

namespace xgrad::cuda
{
    namespace reduce_detail
    {
        using detail::nd_index;

        /// A lane sums at least this many elements (fewer would spend more on writing and
        /// combining lane results than they save).
        constexpr std::int64_t min_lane = 128;
        /// At most this many lanes per output (phase 2 combines them in one thread).
        constexpr std::int64_t max_lanes = 1024;
        /// Enough threads to fill a large GPU (an H200 holds 132 * 2048 resident threads).
        constexpr std::int64_t target_threads = std::int64_t{1} << 18;

        /// L for K outputs of R elements: 1 for short reductions; otherwise enough lanes for
        /// K * L to reach target_threads, at most max_lanes, each of at least min_lane elements.
        inline std::int64_t lanes_for(std::int64_t k_total, std::int64_t r_total)
        {
            if (r_total < 2 * min_lane)
                return 1;
            const std::int64_t by_length = r_total / min_lane;
            const std::int64_t by_threads = (target_threads + k_total - 1) / k_total;
            return std::max<std::int64_t>(1, std::min({by_length, by_threads, max_lanes}));
        }

        /// The accumulator: double for sums, the dtype itself for max.
        template <class A>
        XGRAD_HOST_DEVICE A combine(reduce_op op, A acc, A v)
        {
            if (op == reduce_op::sum)
                return acc + v;
            return (v > acc || v != v) ? v : acc; // max; a NaN acc stays, a NaN v wins
        }

        /// Phase 1: thread t computes lane j of output k.
        template <class T, class A, bool FlatRed>
        struct lane_kernel
        {
            A* partial; // K * L lane results, or nullptr when L = 1 (then out is written)
            T* out;
            const T* x;
            nd_index<2> kept; // operand 0: x, operand 1: out
            nd_index<1> red;
            std::int64_t k_total, r_total, lanes;
            bool output_major; // t = k * L + j (else t = j * K + k)
            reduce_op op;

            XGRAD_HOST_DEVICE std::int64_t offset(std::int64_t r) const
            {
                if constexpr (FlatRed)
                    return red.contiguous[0] ? r : 0;
                else
                {
                    std::int64_t off[1];
                    red.offsets(r, off);
                    return off[0];
                }
            }

            XGRAD_HOST_DEVICE void operator()(std::int64_t t) const
            {
                std::int64_t k, j;
                if (output_major)
                {
                    k = t / lanes;
                    j = t - k * lanes;
                }
                else
                {
                    j = t / k_total;
                    k = t - j * k_total;
                }
                std::int64_t ko[2];
                kept.offsets(k, ko);
                const T* xk = x + ko[0];
                A acc = static_cast<A>(xk[offset(j)]);
                for (std::int64_t r = j + lanes; r < r_total; r += lanes)
                    acc = combine(op, acc, static_cast<A>(xk[offset(r)]));
                if (partial)
                    partial[k * lanes + j] = acc;
                else
                    out[ko[1]] = static_cast<T>(acc);
            }
        };

        /// Phase 2: thread k combines output k's L lane results by a pairwise tree (in place)
        /// and writes the output.
        template <class T, class A>
        struct combine_kernel
        {
            A* partial;
            T* out;
            nd_index<2> kept;
            std::int64_t lanes;
            reduce_op op;

            XGRAD_HOST_DEVICE void operator()(std::int64_t k) const
            {
                A* v = partial + k * lanes;
                for (std::int64_t step = 1; step < lanes; step *= 2)
                    for (std::int64_t i = 0; i + step < lanes; i += 2 * step)
                        v[i] = combine(op, v[i], v[i + step]);
                std::int64_t ko[2];
                kept.offsets(k, ko);
                out[ko[1]] = static_cast<T>(v[0]);
            }
        };

        /// out = value for every output (empty reductions). Indexes the output only: x is
        /// empty and never read, and its offsets need not fit int64.
        template <class T>
        struct identity_kernel
        {
            T* out;
            nd_index<1> kept;
            T value;

            XGRAD_HOST_DEVICE void operator()(std::int64_t k) const
            {
                std::int64_t ko[1];
                kept.offsets(k, ko);
                out[ko[0]] = value;
            }
        };

        template <class T, class A>
        void reduce_impl(T* out, const std::int64_t* out_strides, const T* x, const std::int64_t* x_strides, int ndim,
                         int n_keep, const std::int64_t* shape, reduce_op op)
        {
            const auto kept = detail::make_nd_index<2>(n_keep, shape, {x_strides, out_strides});
            const std::int64_t k_total = kept.numel;
            if (k_total == 0)
                return;
            const auto red = detail::make_nd_index<1>(ndim - n_keep, shape + n_keep, {x_strides + n_keep});
            const std::int64_t r_total = red.numel;
            if (r_total == 0)
            {
                const T identity = op == reduce_op::sum ? T(0) : -std::numeric_limits<T>::infinity();
                const auto out_index = detail::make_nd_index<1>(n_keep, shape, {out_strides});
                detail::for_each_index(k_total, identity_kernel<T>{out, out_index, identity});
                return;
            }
            const std::int64_t lanes = lanes_for(k_total, r_total);
            // Reduced elements that are neighbours in memory go to neighbouring threads.
            const bool output_major = red.strides[0][red.ndim - 1] == 1;
            bool flat_red = red.contiguous[0];
            if (!flat_red)
            {
                flat_red = true; // every stride 0: one element repeated (a broadcast input)
                for (int d = 0; d < red.ndim; ++d)
                    flat_red = flat_red && red.strides[0][d] == 0;
            }
            std::optional<detail::device_buffer> partial; // lane results (none when L = 1)
            A* p = nullptr;
            if (lanes > 1)
                p = partial
                        .emplace(checked_bytes(checked_mul(k_total, lanes, "cuda reduce: lane results"), sizeof(A),
                                               "cuda reduce: lane results"))
                        .template as<A>();
            const std::int64_t threads = k_total * lanes;
            if (flat_red)
                detail::for_each_index(
                    threads, lane_kernel<T, A, true>{p, out, x, kept, red, k_total, r_total, lanes, output_major, op});
            else
                detail::for_each_index(
                    threads, lane_kernel<T, A, false>{p, out, x, kept, red, k_total, r_total, lanes, output_major, op});
            if (lanes > 1)
                detail::for_each_index(k_total, combine_kernel<T, A>{p, out, kept, lanes, op});
        }
    }

    void reduce(void* out, const std::int64_t* out_strides, const void* x, const std::int64_t* x_strides, dtype dt,
                int ndim, int n_keep, const std::int64_t* shape, reduce_op op)
    {
        using reduce_detail::reduce_impl;
        if (dt == dtype::float64)
        {
            reduce_impl<double, double>(static_cast<double*>(out), out_strides, static_cast<const double*>(x),
                                        x_strides, ndim, n_keep, shape, op);
            return;
        }
        float* o = static_cast<float*>(out);
        const float* in = static_cast<const float*>(x);
        if (op == reduce_op::sum)
            reduce_impl<float, double>(o, out_strides, in, x_strides, ndim, n_keep, shape, op);
        else
            reduce_impl<float, float>(o, out_strides, in, x_strides, ndim, n_keep, shape, op);
    }

    namespace reduce_detail
    {
        /// Thread k scans output k's row of x for its first maximum (or first NaN).
        template <class T>
        struct argmax_kernel
        {
            std::int64_t* out;
            const T* x;
            nd_index<2> kept; // operand 0: x, operand 1: out
            std::int64_t extent, stride;

            XGRAD_HOST_DEVICE void operator()(std::int64_t k) const
            {
                std::int64_t ko[2];
                kept.offsets(k, ko);
                const T* row = x + ko[0];
                T best = row[0];
                std::int64_t at = 0;
                if (!(best != best))
                    for (std::int64_t r = 1; r < extent; ++r)
                    {
                        const T v = row[r * stride];
                        if (v != v)
                        {
                            at = r;
                            break;
                        }
                        if (v > best) // strict: a tie keeps the first index
                        {
                            best = v;
                            at = r;
                        }
                    }
                out[ko[1]] = at;
            }
        };

        template <class T>
        void argmax_impl(std::int64_t* out, const std::int64_t* out_strides, const T* x, const std::int64_t* x_strides,
                         int ndim, const std::int64_t* shape)
        {
            const int n_keep = ndim - 1;
            const auto kept = detail::make_nd_index<2>(n_keep, shape, {x_strides, out_strides});
            if (kept.numel == 0)
                return;
            detail::for_each_index(kept.numel, argmax_kernel<T>{out, x, kept, shape[n_keep], x_strides[n_keep]});
        }
    }

    void argmax(std::int64_t* out, const std::int64_t* out_strides, const void* x, const std::int64_t* x_strides,
                dtype dt, int ndim, const std::int64_t* shape)
    {
        using reduce_detail::argmax_impl;
        if (dt == dtype::float64)
            argmax_impl(out, out_strides, static_cast<const double*>(x), x_strides, ndim, shape);
        else if (dt == dtype::int64)
            argmax_impl(out, out_strides, static_cast<const std::int64_t*>(x), x_strides, ndim, shape);
        else
            argmax_impl(out, out_strides, static_cast<const float*>(x), x_strides, ndim, shape);
    }
}
