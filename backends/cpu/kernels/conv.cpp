// The fast convolution kernels: backends/common/conv_blocks.hpp over the CPU's fast kernels,
// with the blocks spread over the thread pool. Each thread unfolds, multiplies (a one-thread
// GEMM: the kernels it calls run inline, since the pool runs nested parallel_for calls on the
// calling thread) and folds its own blocks, so a block's cols matrix stays in that core's
// cache. Splitting one small block's kernels over the threads instead, as the ops would when
// calling unfold2d, matmul and fold2d a block at a time, was measured slower at 2 threads than
// the unblocked composition (each of a block's kernels pays the pool's hand-offs, and a
// block's weight-gradient product is too shallow for matmul's depth split); see
// docs/training_performance.md. A call of one block runs on the caller (parallel_for does not
// split a range of one), where the kernels it calls use every thread themselves.
//
// Channels-last float convolutions run direct instead where the shapes allow (see direct()
// and its neighbours below): a first layer's GEMM (K = c * kh * kw <= simd::conv_taps_max,
// such as one or three input channels) has a depth of 9 and spends its time packing and in
// its bias pass and beta = 1 re-read of y, not multiplying, and for every layer a block's
// cols matrix (1 MiB and more) leaves the core's cache. The direct path copies the input rows
// of a band of about 256 output positions into a zero-padded buffer (a few KiB, in L1) and
// multiplies them in place with simd::conv_taps_forward_fn / conv_taps_weight_grad_fn,
// writing y once with its bias. The forward takes up to forward_taps_max taps where there are
// at least 8 output channels (its register tiles hold positions x whole vectors of channels,
// and its weights are read from L2 a slice of taps at a time). The weight gradient keeps the
// contract's runs of blocks (`chains`), each summing its positions in order, so its bits
// depend on the shape, block and chains only, as the GEMM path's do. The input gradient of a
// stride-1 convolution is the direct forward of dy with the flipped, transposed weights (see
// `transposed`); other input gradients stay on the GEMM path. See
// docs/training_performance.md.
#include <algorithm>
#include <type_traits>
#include <vector>

#include "backends/common/conv_blocks.hpp"
#include "backends/cpu/amx/amx.hpp"
#include "backends/cpu/cpu_kernels.hpp"
#include "backends/cpu/dispatch.hpp"
#include "xgrad/half.hpp"
#include "xgrad/thread_pool.hpp"

namespace xgrad::cpu
{
    namespace
    {
        const auto over_threads = [](std::int64_t count, const auto& fn) {
            parallel_for(0, count, 1, [&](std::int64_t first, std::int64_t last) { fn(first, last); });
        };

        /// The direct path's work: an image's output rows in bands of about 256 positions.
        /// Each band's input rows are first copied into a buffer padded with zeros (channels
        /// contiguous), so that every tap of every position lies inside it at a fixed offset
        /// from the position's first: the products then read the input in place, with no
        /// per-tap bounds check and no cols matrix.
        struct bands
        {
            /// Output positions a band aims at (whole output rows, at least one).
            static constexpr std::int64_t positions = 256;
            /// The most elements of a band's buffer: beyond that (huge strides, dilations or
            /// padding) the GEMM path runs.
            static constexpr double max_elements = 1 << 20;

            /// Output rows per band.
            static std::int64_t rows_of(const kernels::window2d_dims& d)
            {
                return std::clamp<std::int64_t>(positions / std::max<std::int64_t>(d.ow, 1), 1,
                                                std::max<std::int64_t>(d.oh, 1));
            }

            /// Whether a band's buffer (in_rows x row_step below) holds at most max_elements;
            /// in floating point, which cannot overflow, so that it can be asked before the
            /// members are computed.
            static bool fit(const kernels::window2d_dims& d)
            {
                const double in_rows = double(rows_of(d) - 1) * double(d.sh) + double(d.kh - 1) * double(d.dh) + 1;
                const double width = double(std::max<std::int64_t>(d.ow - 1, 0)) * double(d.sw) +
                                     double(d.kw - 1) * double(d.dw) + 1;
                return in_rows * width * double(d.c) <= max_elements;
            }

            kernels::window2d_dims d;
            /// Elements between a band's consecutive columns: d.c, or more (zeros after the
            /// channels) where a kernel reads whole tiles of channels.
            std::int64_t cs;
            std::int64_t k, l, rows, count, in_rows, width, row_step;
            /// Per tap (kh, kw, c), its offset from a position's first element.
            std::vector<std::int64_t> taps;

            /// For a window that a direct path takes: fit(), and k at most max_taps.
            explicit bands(const kernels::window2d_dims& dims, std::int64_t channel_step = 0)
                : d(dims), cs(std::max(channel_step, d.c)), k(d.c * d.kh * d.kw), l(d.oh * d.ow), rows(rows_of(d)),
                  count((d.oh + rows - 1) / rows), in_rows((rows - 1) * d.sh + (d.kh - 1) * d.dh + 1),
                  width(d.ow == 0 ? 0 : (d.ow - 1) * d.sw + (d.kw - 1) * d.dw + 1), row_step(width * cs),
                  taps(static_cast<std::size_t>(k))
            {
                for (std::int64_t i = 0, t = 0; i < d.kh; ++i)
                    for (std::int64_t j = 0; j < d.kw; ++j)
                        for (std::int64_t c = 0; c < d.c; ++c)
                            taps[static_cast<std::size_t>(t++)] = i * d.dh * row_step + j * d.dw * cs + c;
            }
            /// The offset of each window position (kh, kw) alone.
            std::int64_t window_offset(std::int64_t t) const
            {
                return t / d.kw * d.dh * row_step + t % d.kw * d.dw * cs;
            }

            /// A band's buffer, in elements.
            std::int64_t elements() const { return in_rows * row_step; }
            std::int64_t out_rows(std::int64_t s) const { return std::min(rows, d.oh - s * rows); }

            /// Copies band s's input rows of one image (x: the image, xs its (n, c, h, w)
            /// strides), 0 where they fall in the padding.
            template <class T>
            void copy(T* band, const T* x, const std::int64_t* xs, std::int64_t s) const
            {
                const std::int64_t h_first = s * rows * d.sh - d.ph;
                for (std::int64_t r = 0; r < in_rows; ++r, band += row_step)
                {
                    const std::int64_t ih = h_first + r;
                    if (ih < 0 || ih >= d.h)
                    {
                        std::fill(band, band + row_step, T{});
                        continue;
                    }
                    for (std::int64_t col = 0; col < width; ++col)
                    {
                        const std::int64_t iw = col - d.pw;
                        T* out = band + col * cs;
                        if (iw < 0 || iw >= d.w)
                            std::fill(out, out + cs, T{});
                        else
                        {
                            const T* in = x + ih * xs[2] + iw * xs[3];
                            if (xs[1] == 1) // channels contiguous: one block copy
                                std::copy(in, in + d.c, out);
                            else
                                for (std::int64_t c = 0; c < d.c; ++c)
                                    out[c] = in[c * xs[1]];
                            std::fill(out + d.c, out + cs, T{});
                        }
                    }
                }
            }
        };

        /// Whether a channels-last float convolution of dims d with o output channels and at
        /// most max_taps taps runs direct (see the top of this file).
        bool direct(const kernels::window2d_dims& d, std::int64_t o, bool channels_last, dtype dt,
                    std::int64_t max_taps)
        {
            const std::int64_t k = d.c * d.kh * d.kw;
            return channels_last && (dt == dtype::float32 || dt == dtype::float64) && k >= 1 && k <= max_taps &&
                   o >= 1 && bands::fit(d);
        }
        /// The most taps the direct forward takes: its weights (k rows of o, padded) are read
        /// from the core's L2 once per row of positions, a 24 KiB slice at a time.
        constexpr std::int64_t forward_taps_max = 4096;
        /// Beyond conv_taps_max taps, the fewest output channels the direct forward takes: its
        /// tiles hold whole vectors of channels, and with fewer than 8 most lanes would
        /// multiply padding, where the GEMM path blocks the other way.
        constexpr std::int64_t forward_channels_min = 8;

        bool direct_forward_of(const kernels::window2d_dims& d, std::int64_t o, bool channels_last, dtype dt)
        {
            return direct(d, o, channels_last, dt, forward_taps_max) &&
                   (d.c * d.kh * d.kw <= simd::conv_taps_max || o >= forward_channels_min);
        }

        /// The direct weight gradient takes at most conv_taps_max taps where o has a tail of
        /// channels past whole 64-byte vectors (its functor pads them on the stack), and as many
        /// as the direct forward otherwise.
        bool direct_weight_grad_of(const kernels::window2d_dims& d, std::int64_t o, bool channels_last, dtype dt)
        {
            const std::int64_t align = dt == dtype::float64 ? simd::conv_weight_align<double>
                                                            : simd::conv_weight_align<float>;
            return direct(d, o, channels_last, dt, o % align == 0 ? forward_taps_max : simd::conv_taps_max);
        }

        /// The input gradient of a stride-1 convolution is itself a convolution, of dy, with
        /// the window flipped and its channels swapped: dx[h, w, c] is the sum over i, j, q of
        /// dy[h + ph - i dh, w + pw - j dw, q] w[i, j, c, q], which, with i' = kh - 1 - i, reads
        /// dy at h - (dh (kh - 1) - ph) + i' dh: a forward window of the same kernel and dilation
        /// and padding dh (kh - 1) - ph, whose output is x's size. The dims of that convolution,
        /// and whether it runs direct (the padding must not exceed the window's span, and dx
        /// must be contiguous channels-last, as direct_forward writes it).
        struct transposed
        {
            kernels::window2d_dims t;
            bool ok;

            transposed(const kernels::window2d_dims& d, const std::int64_t* dx_strides, std::int64_t o,
                       bool channels_last, dtype dt)
                : t{d.n,  o,    d.oh, d.ow, d.kh, d.kw, 1, 1, d.dh * (d.kh - 1) - d.ph, d.dw * (d.kw - 1) - d.pw,
                    d.dh, d.dw, d.h,  d.w},
                  ok(channels_last && d.sh == 1 && d.sw == 1 && t.ph >= 0 && t.pw >= 0 && d.h >= 1 && d.w >= 1 &&
                     dx_strides[1] == 1 && dx_strides[3] == d.c && dx_strides[2] == d.w * d.c &&
                     dx_strides[0] == d.h * d.w * d.c && direct_forward_of(t, d.c, true, dt))
            {
            }
        };

        template <class T>
        void direct_forward(T* y, const T* x, const std::int64_t* xs, const T* w, const T* bias,
                            const kernels::window2d_dims& d, std::int64_t o)
        {
            const bands bs(d);
            const std::int64_t x_step = d.sw * d.c;
            // The functor reads whole 64-byte batches of each weight row and of the bias: rows
            // whose length is not a multiple of that are copied into padded ones.
            constexpr std::int64_t align = simd::conv_weight_align<T>;
            const std::int64_t w_step = (o + align - 1) / align * align;
            std::vector<T> padded;
            if (w_step != o)
            {
                padded.assign(static_cast<std::size_t>((bs.k + 1) * w_step), T(0));
                for (std::int64_t t = 0; t < bs.k; ++t)
                    std::copy(w + t * o, w + (t + 1) * o, padded.data() + t * w_step);
                w = padded.data();
                if (bias != nullptr)
                {
                    std::copy(bias, bias + o, padded.data() + bs.k * w_step);
                    bias = padded.data() + bs.k * w_step;
                }
            }
            // Every position is computed alone, so the split over threads changes no bit.
            parallel_for(0, d.n * bs.count, 1, [&](std::int64_t first, std::int64_t last) {
                std::vector<T> band(static_cast<std::size_t>(bs.elements()));
                for (std::int64_t i = first; i < last; ++i)
                {
                    const std::int64_t n = i / bs.count, s = i % bs.count;
                    bs.copy(band.data(), x + n * xs[0], xs, s);
                    for (std::int64_t r = 0; r < bs.out_rows(s); ++r)
                        detail::simd_call<simd::conv_taps_forward_fn>(y + (n * bs.l + (s * bs.rows + r) * d.ow) * o,
                                                                      band.data() + r * d.sh * bs.row_step, x_step,
                                                                      bs.taps.data(), w, w_step, bias, d.ow, bs.k, o);
                }
            });
        }

        void amx_forward(bfloat16_t* y, const bfloat16_t* x, const std::int64_t* xs, const bfloat16_t* w,
                         const bfloat16_t* bias, const kernels::window2d_dims& d, std::int64_t o);

        /// dx through the transposed convolution (tr, see transposed) of dy with the flipped
        /// weights wt[i', j', q, c] = w[kh - 1 - i', kw - 1 - j', c, q].
        template <class T>
        void direct_input_grad(T* dx, const T* dy, const T* w, const kernels::window2d_dims& d, std::int64_t o,
                               const kernels::window2d_dims& tr)
        {
            std::vector<T> wt(static_cast<std::size_t>(d.kh * d.kw * o * d.c));
            for (std::int64_t i = 0; i < d.kh; ++i)
                for (std::int64_t j = 0; j < d.kw; ++j)
                    for (std::int64_t q = 0; q < o; ++q)
                        for (std::int64_t c = 0; c < d.c; ++c)
                            wt[static_cast<std::size_t>(((i * d.kw + j) * o + q) * d.c + c)] =
                                w[(((d.kh - 1 - i) * d.kw + (d.kw - 1 - j)) * d.c + c) * o + q];
            // dy [n, oh, ow, o] in the (n, c, h, w) order of the kernels' strides.
            const std::int64_t dys[4] = {d.oh * d.ow * o, 1, d.ow * o, o};
            if constexpr (std::is_same_v<T, bfloat16_t>)
                amx_forward(dx, dy, dys, wt.data(), nullptr, tr, d.c);
            else
                direct_forward(dx, dy, dys, wt.data(), static_cast<const T*>(nullptr), tr, d.c);
        }

        template <class T>
        void direct_weight_grad(T* dw, const T* x, const std::int64_t* xs, const T* dy, const kernels::window2d_dims& d,
                                std::int64_t o, std::int64_t block, std::int64_t chains, dtype dt)
        {
            const bands bs(d);
            const kernels::conv_blocks::plan p(d, o, true, block, dt);
            const kernels::conv_blocks::weight_grad_runs runs(fast_kernels(), dw, dt, bs.k * o, p.blocks, chains);
            const std::int64_t x_step = d.sw * d.c;
            // Within a run, positions are summed in (n, oh, ow) order.
            parallel_for(0, runs.count(), 1, [&](std::int64_t first, std::int64_t last) {
                std::vector<T> band(static_cast<std::size_t>(bs.elements()));
                for (std::int64_t c = first; c < last; ++c)
                {
                    T* out = static_cast<T*>(runs.out(c));
                    std::fill(out, out + bs.k * o, T(0));
                    const std::int64_t n0 = runs.first_block(c) * p.block;
                    const std::int64_t n1 = std::min(d.n, runs.last_block(c) * p.block);
                    for (std::int64_t n = n0; n < n1; ++n)
                        for (std::int64_t s = 0; s < bs.count; ++s)
                        {
                            bs.copy(band.data(), x + n * xs[0], xs, s);
                            detail::simd_call<simd::conv_taps_weight_grad_fn>(
                                out, band.data(), x_step, bs.taps.data(), dy + (n * bs.l + s * bs.rows * d.ow) * o,
                                d.ow, bs.out_rows(s), d.sh * bs.row_step, bs.k, o);
                        }
                }
            });
            runs.add_partials();
        }

        // ---- bfloat16 on AMX tiles (amx/amx.hpp) ------------------------------------------
        //
        // The direct path's bands in bfloat16: the forward reads each tap's channels for 16
        // positions of an output row as one A tile straight from the band (channels padded to
        // whole tiles of 32), so, as in float32, there is no cols matrix. The weight gradient
        // gathers a band's positions in pairs (the B tiles' VNNI order) and dy transposed, then
        // sums them tile by tile into a float32 accumulator per run of blocks.

        /// The fewest input channels the AMX path takes: below that most of each 32-channel
        /// tile would multiply padding, and the float32 direct kernels are faster.
        constexpr std::int64_t amx_channels_min = 16;

        std::int64_t round_up(std::int64_t v, std::int64_t m) { return (v + m - 1) / m * m; }

        /// Positions past a row's last one that its last tile of 16 rows computes and drops.
        std::int64_t amx_spare_positions(const kernels::window2d_dims& d)
        {
            return round_up(d.ow, amx::tile_rows) - d.ow;
        }

        /// Whether a channels-last bfloat16 convolution of dims d runs on the AMX tiles.
        bool amx_path(const kernels::window2d_dims& d, std::int64_t o, bool channels_last, dtype dt)
        {
            if (!channels_last || dt != dtype::bfloat16 || d.c < amx_channels_min || o < 1 || !amx_in_use())
                return false;
            kernels::window2d_dims padded = d;
            padded.c = round_up(d.c, amx::tile_depth);
            // The forward's band also keeps zeros for the spare rows of a row's last tile
            // (amx_forward's slack), bounded like the band itself: huge strides go the float32 way.
            return bands::fit(padded) &&
                   double(amx_spare_positions(d)) * double(d.sw) * double(padded.c) <= bands::max_elements;
        }

        /// w [(kh, kw, c), o] in the A x B order of amx::conv_forward: per 16 output channels,
        /// per window position, per 32 channels, 16 pairs of channels x 16 outputs x 2.
        std::vector<bfloat16_t> amx_pack_weights(const bfloat16_t* w, std::int64_t taps, std::int64_t c,
                                                 std::int64_t cp, std::int64_t o)
        {
            const std::int64_t o16 = (o + 15) / 16, ncc = cp / amx::tile_depth;
            std::vector<bfloat16_t> p(static_cast<std::size_t>(o16 * taps * ncc * amx::tile_elements));
            for (std::int64_t og = 0; og < o16; ++og)
                for (std::int64_t t = 0; t < taps; ++t)
                    for (std::int64_t ch = 0; ch < c; ++ch)
                        for (std::int64_t j = 0; j < 16 && og * 16 + j < o; ++j)
                        {
                            const std::int64_t tile = (og * taps + t) * ncc + ch / amx::tile_depth;
                            const std::int64_t pair = ch % amx::tile_depth / 2;
                            p[static_cast<std::size_t>(tile * amx::tile_elements + (pair * 16 + j) * 2 + ch % 2)] =
                                w[(t * c + ch) * o + og * 16 + j];
                        }
            return p;
        }

        void amx_forward(bfloat16_t* y, const bfloat16_t* x, const std::int64_t* xs, const bfloat16_t* w,
                         const bfloat16_t* bias, const kernels::window2d_dims& d, std::int64_t o)
        {
            const std::int64_t cp = round_up(d.c, amx::tile_depth);
            const bands bs(d, cp);
            const std::int64_t taps = d.kh * d.kw, pos_step = d.sw * cp;
            std::vector<std::int64_t> offsets(static_cast<std::size_t>(taps));
            for (std::int64_t t = 0; t < taps; ++t)
                offsets[static_cast<std::size_t>(t)] = bs.window_offset(t);
            const std::vector<bfloat16_t> packed = amx_pack_weights(w, taps, d.c, cp, o);
            std::vector<float> bias_f;
            if (bias != nullptr)
                for (std::int64_t q = 0; q < o; ++q)
                    bias_f.push_back(to_float(bias[q]));
            // A row's last tile of 16 positions reads amx_spare_positions(d) position steps past
            // the row's last position: zeros kept after the band.
            const std::int64_t slack = amx_spare_positions(d) * pos_step;
            parallel_for(0, d.n * bs.count, 1, [&](std::int64_t first, std::int64_t last) {
                std::vector<bfloat16_t> band(static_cast<std::size_t>(bs.elements() + slack));
                for (std::int64_t i = first; i < last; ++i)
                {
                    const std::int64_t n = i / bs.count, s = i % bs.count;
                    bs.copy(band.data(), x + n * xs[0], xs, s);
                    amx::conv_forward(y + (n * bs.l + s * bs.rows * d.ow) * o, d.ow * o, band.data(),
                                      d.sh * bs.row_step, pos_step, offsets.data(), taps, cp, packed.data(),
                                      bias != nullptr ? bias_f.data() : nullptr, bs.out_rows(s), d.ow, o);
                }
            });
        }

        void amx_weight_grad(bfloat16_t* dw, const bfloat16_t* x, const std::int64_t* xs, const bfloat16_t* dy,
                             const kernels::window2d_dims& d, std::int64_t o, std::int64_t block, std::int64_t chains)
        {
            const bands bs(d);
            const std::int64_t taps = d.kh * d.kw, c16 = (d.c + 15) / 16, k16 = taps * c16, o16 = (o + 15) / 16;
            const std::int64_t ld = k16 * 16, acc_elements = o16 * 16 * ld;
            const std::int64_t mp_max = round_up(bs.rows * d.ow, amx::tile_depth);
            // The sums are float32 [16 o16, 16 k16] (dw transposed, padded), per run of blocks as
            // the contract orders them, and rounded to bfloat16 once at the end.
            const kernels::conv_blocks::plan p(d, o, true, block, dtype::float32);
            std::vector<float> total(static_cast<std::size_t>(acc_elements));
            const kernels::conv_blocks::weight_grad_runs runs(fast_kernels(), total.data(), dtype::float32,
                                                              acc_elements, p.blocks, chains);
            // Each position's first element in its band: the same in every band.
            std::vector<std::int64_t> at(static_cast<std::size_t>(bs.rows * d.ow));
            for (std::size_t m = 0; m < at.size(); ++m)
            {
                const auto pos = static_cast<std::int64_t>(m);
                at[m] = pos / d.ow * d.sh * bs.row_step + pos % d.ow * d.sw * d.c;
            }
            parallel_for(0, runs.count(), 1, [&](std::int64_t first, std::int64_t last) {
                std::vector<bfloat16_t> band(static_cast<std::size_t>(bs.elements()));
                std::vector<bfloat16_t> dyt(static_cast<std::size_t>(o16 * 16 * mp_max));
                std::vector<bfloat16_t> xp(static_cast<std::size_t>(k16 * mp_max * 16));
                for (std::int64_t c = first; c < last; ++c)
                {
                    float* acc = static_cast<float*>(runs.out(c));
                    std::fill(acc, acc + acc_elements, 0.0f);
                    const std::int64_t n0 = runs.first_block(c) * p.block;
                    const std::int64_t n1 = std::min(d.n, runs.last_block(c) * p.block);
                    for (std::int64_t n = n0; n < n1; ++n)
                        for (std::int64_t s = 0; s < bs.count; ++s)
                        {
                            bs.copy(band.data(), x + n * xs[0], xs, s);
                            const std::int64_t npos = bs.out_rows(s) * d.ow, mp = round_up(npos, amx::tile_depth);
                            const bfloat16_t* dys = dy + (n * bs.l + s * bs.rows * d.ow) * o;
                            amx::transpose_positions(dyt.data(), dys, npos, o, mp, o16 * 16);
                            // x by pairs of positions: xp[t c16 + ct][m / 2][j][m % 2].
                            for (std::int64_t t = 0; t < taps; ++t)
                                for (std::int64_t ct = 0; ct < c16; ++ct)
                                    amx::pack_position_pairs(xp.data() + (t * c16 + ct) * mp * 16,
                                                             band.data() + bs.window_offset(t) + ct * 16, at.data(),
                                                             npos, mp, std::min<std::int64_t>(16, d.c - ct * 16));
                            amx::conv_weight_grad(acc, ld, dyt.data(), xp.data(), o16, k16, mp);
                        }
                }
            });
            runs.add_partials();
            for (std::int64_t t = 0; t < taps; ++t)
                for (std::int64_t ch = 0; ch < d.c; ++ch)
                    for (std::int64_t q = 0; q < o; ++q)
                        dw[(t * d.c + ch) * o + q] =
                            to_bfloat16(total[static_cast<std::size_t>(q * ld + t * c16 * 16 + ch)]);
        }
    }

    void conv2d_forward(void* y, const void* x, const std::int64_t* x_strides, const void* w, const void* bias,
                        dtype dt, const kernels::window2d_dims& d, std::int64_t o, bool channels_last,
                        std::int64_t block)
    {
        if (amx_path(d, o, channels_last, dt))
            return amx_forward(static_cast<bfloat16_t*>(y), static_cast<const bfloat16_t*>(x), x_strides,
                               static_cast<const bfloat16_t*>(w), static_cast<const bfloat16_t*>(bias), d, o);
        if (dt == dtype::bfloat16) // through this backend's float32 kernels, direct paths included
            return kernels::conv_blocks::forward_through_float32(
                fast_kernels(), y, x, x_strides, w, bias, d, o, channels_last,
                [&](void* yf, const void* xf, const std::int64_t* xfs, const void* wf, const void* bf) {
                    conv2d_forward(yf, xf, xfs, wf, bf, dtype::float32, d, o, channels_last, block);
                });
        if (direct_forward_of(d, o, channels_last, dt))
            return kernels::visit_compute(dt, [&](auto tag) {
                using T = decltype(tag);
                direct_forward(static_cast<T*>(y), static_cast<const T*>(x), x_strides, static_cast<const T*>(w),
                               static_cast<const T*>(bias), d, o);
            });
        kernels::conv_blocks::forward(fast_kernels(), over_threads, y, x, x_strides, w, bias, dt, d, o, channels_last,
                                      block);
    }

    void conv2d_input_grad(void* dx, const std::int64_t* dx_strides, const void* dy, const void* w, dtype dt,
                           const kernels::window2d_dims& d, std::int64_t o, bool channels_last, std::int64_t block)
    {
        if (dt == dtype::bfloat16)
        {
            // The stride-1 input gradient is a forward convolution (transposed), on the tiles
            // where that forward is.
            if (const transposed tr(d, dx_strides, o, channels_last, dtype::float32);
                tr.ok && amx_path(tr.t, d.c, channels_last, dt))
                return direct_input_grad(static_cast<bfloat16_t*>(dx), static_cast<const bfloat16_t*>(dy),
                                         static_cast<const bfloat16_t*>(w), d, o, tr.t);
            return kernels::conv_blocks::input_grad_through_float32(
                fast_kernels(), dx, dx_strides, dy, w, d, o, channels_last,
                [&](void* dxf, const std::int64_t* dxfs, const void* dyf, const void* wf) {
                    conv2d_input_grad(dxf, dxfs, dyf, wf, dtype::float32, d, o, channels_last, block);
                });
        }
        if (const transposed tr(d, dx_strides, o, channels_last, dt); tr.ok)
            return kernels::visit_compute(dt, [&](auto tag) {
                using T = decltype(tag);
                direct_input_grad(static_cast<T*>(dx), static_cast<const T*>(dy), static_cast<const T*>(w), d, o, tr.t);
            });
        kernels::conv_blocks::input_grad(fast_kernels(), over_threads, dx, dx_strides, dy, w, dt, d, o, channels_last,
                                         block);
    }

    void conv2d_weight_grad(void* dw, const void* x, const std::int64_t* x_strides, const void* dy, dtype dt,
                            const kernels::window2d_dims& d, std::int64_t o, bool channels_last, std::int64_t block,
                            std::int64_t chains)
    {
        if (amx_path(d, o, channels_last, dt))
            return amx_weight_grad(static_cast<bfloat16_t*>(dw), static_cast<const bfloat16_t*>(x), x_strides,
                                   static_cast<const bfloat16_t*>(dy), d, o, block, chains);
        if (dt == dtype::bfloat16)
            return kernels::conv_blocks::weight_grad_through_float32(
                fast_kernels(), dw, x, x_strides, dy, d, o, channels_last,
                [&](void* dwf, const void* xf, const std::int64_t* xfs, const void* dyf) {
                    conv2d_weight_grad(dwf, xf, xfs, dyf, dtype::float32, d, o, channels_last, block, chains);
                });
        if (direct_weight_grad_of(d, o, channels_last, dt))
            return kernels::visit_compute(dt, [&](auto tag) {
                using T = decltype(tag);
                direct_weight_grad(static_cast<T*>(dw), static_cast<const T*>(x), x_strides, static_cast<const T*>(dy),
                                   d, o, block, chains, dt);
            });
        kernels::conv_blocks::weight_grad(fast_kernels(), over_threads, dw, x, x_strides, dy, dt, d, o, channels_last,
                                          block, chains);
    }
}
