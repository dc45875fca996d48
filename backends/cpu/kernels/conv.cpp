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
// Channels-last convolutions with few taps (K = c * kh * kw <= simd::conv_taps_max, such as a
// first layer over one or three input channels) run direct instead, forward and weight
// gradient: a GEMM with a depth of 9 spends its time packing and in its bias pass and beta = 1
// re-read of y, not multiplying, and a block's cols matrix (1 MiB) leaves the core's cache.
// The direct path copies the input rows of a band of about 256 output positions into a
// zero-padded buffer (a few KiB, in L1) and multiplies them in place with
// simd::conv_taps_forward_fn / conv_taps_weight_grad_fn, writing y once with its bias. Its weight gradient keeps the contract's runs of blocks
// (`chains`), each summing its positions in order, so its bits depend on the shape, block and
// chains only, as the GEMM path's do. The input gradient stays on the GEMM path (a first
// layer's input seldom needs one). See docs/training_performance.md.
#include <algorithm>
#include <cmath>
#include <vector>

#include "backends/common/conv_blocks.hpp"
#include "backends/cpu/cpu_kernels.hpp"
#include "backends/cpu/dispatch.hpp"
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
            kernels::window2d_dims d;
            std::int64_t k, l, rows, count, in_rows, width, row_step;
            std::int64_t taps[simd::conv_taps_max] = {};

            explicit bands(const kernels::window2d_dims& dims)
                : d(dims), k(d.c * d.kh * d.kw), l(d.oh * d.ow),
                  rows(std::clamp<std::int64_t>(256 / std::max<std::int64_t>(d.ow, 1), 1,
                                                std::max<std::int64_t>(d.oh, 1))),
                  count((d.oh + rows - 1) / rows), in_rows((rows - 1) * d.sh + (d.kh - 1) * d.dh + 1),
                  width(d.ow == 0 ? 0 : (d.ow - 1) * d.sw + (d.kw - 1) * d.dw + 1), row_step(width * d.c)
            {
                for (std::int64_t i = 0, t = 0; i < d.kh && k <= simd::conv_taps_max; ++i)
                    for (std::int64_t j = 0; j < d.kw; ++j)
                        for (std::int64_t c = 0; c < d.c; ++c)
                            taps[t++] = i * d.dh * row_step + j * d.dw * d.c + c;
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
                        std::fill(band, band + row_step, T(0));
                        continue;
                    }
                    for (std::int64_t col = 0; col < width; ++col)
                    {
                        const std::int64_t iw = col - d.pw;
                        T* out = band + col * d.c;
                        if (iw < 0 || iw >= d.w)
                            std::fill(out, out + d.c, T(0));
                        else
                            for (std::int64_t c = 0; c < d.c; ++c)
                                out[c] = x[ih * xs[2] + iw * xs[3] + c * xs[1]];
                    }
                }
            }
        };

        /// The most elements of a band's buffer: beyond that (huge strides, dilations or
        /// padding) the GEMM path runs.
        constexpr double max_band_elements = 1 << 20;

        /// Whether a convolution runs direct (see the top of this file).
        bool direct(const kernels::window2d_dims& d, std::int64_t o, bool channels_last, dtype dt)
        {
            const std::int64_t k = d.c * d.kh * d.kw;
            if (!channels_last || (dt != dtype::float32 && dt != dtype::float64) || k < 1 || k > simd::conv_taps_max ||
                o < 1)
                return false;
            // The band's size in floating point, which cannot overflow: the rows and columns
            // of input that a band of output rows reads.
            const double rows = std::clamp<double>(256.0 / std::max<double>(double(d.ow), 1), 1,
                                                   std::max<double>(double(d.oh), 1));
            const double in_rows = (std::floor(rows) - 1) * double(d.sh) + double(d.kh - 1) * double(d.dh) + 1;
            const double width = std::max<double>(double(d.ow) - 1, 0) * double(d.sw) +
                                 double(d.kw - 1) * double(d.dw) + 1;
            return in_rows * width * double(d.c) <= max_band_elements;
        }

        template <class T>
        void direct_forward(T* y, const T* x, const std::int64_t* xs, const T* w, const T* bias,
                            const kernels::window2d_dims& d, std::int64_t o)
        {
            const bands bs(d);
            const std::int64_t x_step = d.sw * d.c;
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
                                                                      bs.taps, w, bias, d.ow, bs.k, o);
                }
            });
        }

        template <class T>
        void direct_weight_grad(T* dw, const T* x, const std::int64_t* xs, const T* dy, const kernels::window2d_dims& d,
                                std::int64_t o, std::int64_t block, std::int64_t chains)
        {
            const bands bs(d);
            const std::int64_t ko = bs.k * o, x_step = d.sw * d.c;
            block = std::max<std::int64_t>(block, 1);
            const std::int64_t blocks = (d.n + block - 1) / block;
            if (blocks == 0) // no images: the sum over them is zero
            {
                std::fill(dw, dw + ko, T(0));
                return;
            }
            chains = std::clamp<std::int64_t>(chains, 1, blocks);
            // Run 0 sums into dw itself, the others into partials added after, in run order;
            // within a run, positions are taken in (n, oh, ow) order.
            std::vector<T> partials(static_cast<std::size_t>((chains - 1) * ko));
            parallel_for(0, chains, 1, [&](std::int64_t first, std::int64_t last) {
                std::vector<T> band(static_cast<std::size_t>(bs.elements()));
                for (std::int64_t c = first; c < last; ++c)
                {
                    T* out = c == 0 ? dw : partials.data() + (c - 1) * ko;
                    std::fill(out, out + ko, T(0));
                    const std::int64_t n0 = c * blocks / chains * block;
                    const std::int64_t n1 = std::min(d.n, (c + 1) * blocks / chains * block);
                    for (std::int64_t n = n0; n < n1; ++n)
                        for (std::int64_t s = 0; s < bs.count; ++s)
                        {
                            bs.copy(band.data(), x + n * xs[0], xs, s);
                            for (std::int64_t r = 0; r < bs.out_rows(s); ++r)
                                detail::simd_call<simd::conv_taps_weight_grad_fn>(
                                    out, band.data() + r * d.sh * bs.row_step, x_step, bs.taps,
                                    dy + (n * bs.l + (s * bs.rows + r) * d.ow) * o, d.ow, bs.k, o);
                        }
                }
            });
            for (std::int64_t c = 1; c < chains; ++c)
            {
                const T* part = partials.data() + (c - 1) * ko;
                for (std::int64_t i = 0; i < ko; ++i)
                    dw[i] += part[i];
            }
        }
    }

    void conv2d_forward(void* y, const void* x, const std::int64_t* x_strides, const void* w, const void* bias,
                        dtype dt, const kernels::window2d_dims& d, std::int64_t o, bool channels_last,
                        std::int64_t block)
    {
        if (direct(d, o, channels_last, dt))
        {
            if (dt == dtype::float32)
                direct_forward(static_cast<float*>(y), static_cast<const float*>(x), x_strides,
                               static_cast<const float*>(w), static_cast<const float*>(bias), d, o);
            else
                direct_forward(static_cast<double*>(y), static_cast<const double*>(x), x_strides,
                               static_cast<const double*>(w), static_cast<const double*>(bias), d, o);
            return;
        }
        kernels::conv_blocks::forward(fast_kernels(), over_threads, y, x, x_strides, w, bias, dt, d, o, channels_last,
                                      block);
    }

    void conv2d_input_grad(void* dx, const std::int64_t* dx_strides, const void* dy, const void* w, dtype dt,
                           const kernels::window2d_dims& d, std::int64_t o, bool channels_last, std::int64_t block)
    {
        kernels::conv_blocks::input_grad(fast_kernels(), over_threads, dx, dx_strides, dy, w, dt, d, o, channels_last,
                                         block);
    }

    void conv2d_weight_grad(void* dw, const void* x, const std::int64_t* x_strides, const void* dy, dtype dt,
                            const kernels::window2d_dims& d, std::int64_t o, bool channels_last, std::int64_t block,
                            std::int64_t chains)
    {
        if (direct(d, o, channels_last, dt))
        {
            if (dt == dtype::float32)
                direct_weight_grad(static_cast<float*>(dw), static_cast<const float*>(x), x_strides,
                                   static_cast<const float*>(dy), d, o, block, chains);
            else
                direct_weight_grad(static_cast<double*>(dw), static_cast<const double*>(x), x_strides,
                                   static_cast<const double*>(dy), d, o, block, chains);
            return;
        }
        kernels::conv_blocks::weight_grad(fast_kernels(), over_threads, dw, x, x_strides, dy, dt, d, o, channels_last,
                                          block, chains);
    }
}
