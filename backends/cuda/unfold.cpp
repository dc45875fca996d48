// The window kernels of the CUDA backend, unfold2d (im2col) and fold2d (col2im), with the
// contracts of backends/common/kernel_list.hpp.
//
// Why they are built this way:
// - One index per OUTPUT element, and the indices enumerate the output in the order of its
//   strides (largest first, `ordered_walk`), so consecutive threads write consecutive addresses
//   whatever the layout: the window column ow for the NCHW matrix [C*KH*KW, N*OH*OW], the
//   channel c for the NHWC matrix [N*OH*OW, KH*KW*C], w (or c) for x. Reads are strided but
//   close together (neighbouring windows read neighbouring input elements).
// - unfold2d moves bits: elements are copied as unsigned integers of their size, and the pad
//   value is rounded to the dtype once on the host (kernels::detail::convert, the CPU's rounding).
// - fold2d is a gather, not a scatter: each x element visits the taps (kh, kw) that can read
//   it, in that order, and sums their cols entries in a private accumulator (float64 for
//   float64, float32 otherwise), rounded once. That is the order of the CPU reference, so the
//   result is the CPU's bit for bit, and no two threads write one element (no atomics).
#include <cstring>
#include <type_traits>

#include "backends/common/convert.hpp"
#include "backends/cuda/device_loop.hpp"
#include "xgrad/checked.hpp"
#include "xgrad/errors.hpp"

namespace xgrad::cuda
{
    namespace
    {
        using kernels::window2d_dims;

        /// Enumerates the N-d index space of one strided array in the order of its strides
        /// (largest first; equal strides keep their logical order), skipping extents of 1.
        /// Passed to the device by value.
        template <int N>
        struct ordered_walk
        {
            int m = 0;                // dimensions of extent > 1
            int dim[N] = {};          // their logical dimension, outermost first
            std::int64_t ext[N] = {}; // their extents
            std::int64_t numel = 1;

            /// The logical indices of flat position i (0 for dimensions of extent 1).
            XGRAD_HOST_DEVICE void indices(std::int64_t i, std::int64_t (&ix)[N]) const
            {
                for (int k = 0; k < N; ++k)
                    ix[k] = 0;
                for (int k = m - 1; k > 0; --k)
                {
                    const std::int64_t q = i / ext[k];
                    ix[dim[k]] = i - q * ext[k];
                    i = q;
                }
                if (m > 0)
                    ix[dim[0]] = i;
            }
        };

        template <int N>
        ordered_walk<N> make_walk(const std::int64_t (&extents)[N], const std::int64_t* strides)
        {
            ordered_walk<N> w;
            int order[N];
            for (int k = 0; k < N; ++k)
                order[k] = k;
            // Insertion sort by decreasing stride: stable, N <= 6.
            for (int k = 1; k < N; ++k)
                for (int j = k; j > 0 && strides[order[j - 1]] < strides[order[j]]; --j)
                {
                    const int t = order[j];
                    order[j] = order[j - 1];
                    order[j - 1] = t;
                }
            for (int k = 0; k < N; ++k)
            {
                w.numel = checked_mul(w.numel, extents[order[k]], "cuda unfold2d/fold2d: elements of a walk");
                if (extents[order[k]] != 1)
                {
                    w.dim[w.m] = order[k];
                    w.ext[w.m] = extents[order[k]];
                    ++w.m;
                }
            }
            return w;
        }

        /// Small stride arrays, by value.
        struct strides6
        {
            std::int64_t s[6];
        };
        struct strides4
        {
            std::int64_t s[4];
        };

        strides6 copy6(const std::int64_t* p)
        {
            strides6 r{};
            for (int k = 0; k < 6; ++k)
                r.s[k] = p[k];
            return r;
        }
        strides4 copy4(const std::int64_t* p)
        {
            strides4 r{};
            for (int k = 0; k < 4; ++k)
                r.s[k] = p[k];
            return r;
        }

        // ---------------------------------------------------------------------------------
        // unfold2d

        /// U: an unsigned integer of the element's size (the bits are copied, not converted).
        template <class U>
        void unfold_bits(U* cols, const strides6 cs, const U* x, const strides4 xs, const window2d_dims d, const U pad)
        {
            const std::int64_t ext[6] = {d.n, d.c, d.kh, d.kw, d.oh, d.ow};
            const ordered_walk<6> walk = make_walk(ext, cs.s);
            detail::for_each_index(walk.numel, [=] XGRAD_HOST_DEVICE(std::int64_t i) {
                std::int64_t ix[6];
                walk.indices(i, ix); // n, c, kh, kw, oh, ow
                const std::int64_t h = ix[4] * d.sh - d.ph + ix[2] * d.dh;
                const std::int64_t w = ix[5] * d.sw - d.pw + ix[3] * d.dw;
                std::int64_t co = 0;
                for (int k = 0; k < 6; ++k)
                    co += ix[k] * cs.s[k];
                if (h >= 0 && h < d.h && w >= 0 && w < d.w)
                    cols[co] = x[ix[0] * xs.s[0] + ix[1] * xs.s[1] + h * xs.s[2] + w * xs.s[3]];
                else
                    cols[co] = pad;
            });
        }

        template <class T, class U>
        void unfold_typed(void* cols, const std::int64_t* cs, const void* x, const std::int64_t* xs,
                          const window2d_dims& d, double pad_value)
        {
            static_assert(sizeof(T) == sizeof(U));
            const T pad_t = kernels::detail::convert<T>(pad_value);
            U pad;
            std::memcpy(&pad, &pad_t, sizeof pad);
            unfold_bits<U>(static_cast<U*>(cols), copy6(cs), static_cast<const U*>(x), copy4(xs), d, pad);
        }

        // ---------------------------------------------------------------------------------
        // fold2d

        /// The taps k of one axis whose window can read input position p: those with
        /// t = p + pad - k * dilation in [0, (count - 1) * stride]. Returns [lo, hi); the
        /// divisibility of t by the stride is tested per tap.
        XGRAD_HOST_DEVICE inline void tap_bounds(std::int64_t p, std::int64_t pad, std::int64_t dilation,
                                                 std::int64_t stride, std::int64_t count, std::int64_t taps,
                                                 std::int64_t& lo, std::int64_t& hi)
        {
            const std::int64_t top = p + pad;                       // t for k = 0
            const std::int64_t excess = top - (count - 1) * stride; // t <= (count-1)*stride <=> k*dil >= excess
            lo = excess <= 0 ? 0 : (excess + dilation - 1) / dilation;
            hi = top / dilation + 1; // t >= 0 <=> k <= top / dilation (top >= 0)
            if (hi > taps)
                hi = taps;
            if (lo > hi)
                lo = hi;
        }

        template <class T>
        void fold_typed(void* x, const strides4 xs, const void* cols, const strides6 cs, const window2d_dims d)
        {
            using E = detail::element<T>;
            using A = typename E::compute_type; // float for 16-bit and float32, double for float64
            const std::int64_t ext[4] = {d.n, d.c, d.h, d.w};
            const ordered_walk<4> walk = make_walk(ext, xs.s);
            detail::for_each_index(walk.numel, [=] XGRAD_HOST_DEVICE(std::int64_t i) {
                std::int64_t ix[4];
                walk.indices(i, ix); // n, c, h, w
                std::int64_t kh0, kh1, kw0, kw1;
                tap_bounds(ix[2], d.ph, d.dh, d.sh, d.oh, d.kh, kh0, kh1);
                tap_bounds(ix[3], d.pw, d.dw, d.sw, d.ow, d.kw, kw0, kw1);
                const std::int64_t base = ix[0] * cs.s[0] + ix[1] * cs.s[1];
                A acc = A(0);
                // The order of the CPU reference: (kh, kw) row-major.
                for (std::int64_t kh = kh0; kh < kh1; ++kh)
                {
                    const std::int64_t t = ix[2] + d.ph - kh * d.dh; // oh * sh
                    const std::int64_t oh = t / d.sh;
                    if (oh * d.sh != t)
                        continue;
                    const std::int64_t row = base + kh * cs.s[2] + oh * cs.s[4];
                    for (std::int64_t kw = kw0; kw < kw1; ++kw)
                    {
                        const std::int64_t u = ix[3] + d.pw - kw * d.dw; // ow * sw
                        const std::int64_t ow = u / d.sw;
                        if (ow * d.sw != u)
                            continue;
                        acc += E::load(cols, row + kw * cs.s[3] + ow * cs.s[5]);
                    }
                }
                E::store(x, ix[0] * xs.s[0] + ix[1] * xs.s[1] + ix[2] * xs.s[2] + ix[3] * xs.s[3], acc);
            });
        }
    }

    void unfold2d(void* cols, const std::int64_t* cols_strides, const void* x, const std::int64_t* x_strides, dtype dt,
                  const kernels::window2d_dims& d, double pad_value)
    {
        // An empty cols: nothing to write.
        if (d.n == 0 || d.c == 0 || d.oh == 0 || d.ow == 0)
            return;
        switch (dt)
        {
        case dtype::float32: return unfold_typed<float, std::uint32_t>(cols, cols_strides, x, x_strides, d, pad_value);
        case dtype::float64: return unfold_typed<double, std::uint64_t>(cols, cols_strides, x, x_strides, d, pad_value);
        case dtype::float16:
            return unfold_typed<float16_t, std::uint16_t>(cols, cols_strides, x, x_strides, d, pad_value);
        case dtype::bfloat16:
            return unfold_typed<bfloat16_t, std::uint16_t>(cols, cols_strides, x, x_strides, d, pad_value);
        case dtype::int64: break;
        }
        throw xgrad::invalid_argument("cuda::unfold2d: the dtype must be floating point");
    }

    void fold2d(void* x, const std::int64_t* x_strides, const void* cols, const std::int64_t* cols_strides, dtype dt,
                const kernels::window2d_dims& d)
    {
        // An empty x: nothing to sum into.
        if (d.n == 0 || d.c == 0 || d.h == 0 || d.w == 0)
            return;
        const strides4 xs = copy4(x_strides);
        const strides6 cs = copy6(cols_strides);
        switch (dt)
        {
        case dtype::float32: return fold_typed<float>(x, xs, cols, cs, d);
        case dtype::float64: return fold_typed<double>(x, xs, cols, cs, d);
        case dtype::float16: return fold_typed<float16_t>(x, xs, cols, cs, d);
        case dtype::bfloat16: return fold_typed<bfloat16_t>(x, xs, cols, cs, d);
        case dtype::int64: break;
        }
        throw xgrad::invalid_argument("cuda::fold2d: the dtype must be floating point");
    }
}
