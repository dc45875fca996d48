// Index kernels of the CUDA backend: one_hot, max pooling (the window maximum and its position,
// and the gradient that puts each window's term back there), and the adjoint pair take /
// put_add, with the contracts of backends/common/kernel_list.hpp.
//
// Why they are built this way:
// - take, put_add and one_hot first find the first bad index on the device, as a min-reduction
//   over the positions of the bad ones (first_bad); the reduction returns its value to the
//   host, which is also the wait the contract promises. Nothing is written when one is bad
//   (as on the CPU), so a valid call's output is complete.
// - One index per output element, consecutive indices writing consecutive addresses (max
//   pooling walks idx in the order of its strides).
// - put_add must add colliding g[i] in increasing i, with no float atomics: a stable sort of
//   the positions 0..n-1 by idx groups each output's terms in increasing i; then one index per
//   output element finds its run by binary search and sums it in order (in float32 for the
//   16-bit dtypes, rounded once), which is the CPU's order, so the bits agree.
// - take and one_hot move bits: elements are copied as unsigned integers of their size.
#include <stdexcept>
#include <type_traits>

#include <thrust/iterator/counting_iterator.h>
#include <thrust/sequence.h>
#include <thrust/sort.h>

#include "backends/cuda/device_loop.hpp"
#include "xgrad/checked.hpp"
#include "xgrad/errors.hpp"

namespace xgrad::cuda
{
    namespace
    {
        using kernels::window2d_dims;

        /// The first i < n whose idx[i] lies outside [0, limit), or -1. Waits for the device.
        /// Two for_each passes rather than a Thrust reduction (whose OpenMP version binds a
        /// null reference, which UBSan reports): `lanes` lanes each find the first bad i of
        /// their strided subset i = l, l + lanes, ... (neighbouring lanes read neighbouring
        /// indices), then one index takes the smallest of those and writes it where the host
        /// reads it back.
        std::int64_t first_bad(const std::int64_t* idx, std::int64_t n, std::int64_t limit)
        {
            if (n <= 0)
                return -1;
            const std::int64_t lanes = std::min<std::int64_t>(n, 4096);
            detail::device_buffer buf(sizeof(std::int64_t) * static_cast<std::size_t>(lanes + 1));
            std::int64_t* firsts = buf.as<std::int64_t>();
            detail::for_each_index(lanes, [=] XGRAD_HOST_DEVICE(std::int64_t l) {
                std::int64_t found = n;
                for (std::int64_t i = l; i < n; i += lanes)
                    if (idx[i] < 0 || idx[i] >= limit)
                    {
                        found = i;
                        break;
                    }
                firsts[l] = found;
            });
            detail::for_each_index(1, [=] XGRAD_HOST_DEVICE(std::int64_t) {
                std::int64_t m = n;
                for (std::int64_t l = 0; l < lanes; ++l)
                    m = firsts[l] < m ? firsts[l] : m;
                firsts[lanes] = m;
            });
            std::int64_t first = n;
            copy_to_host(&first, firsts + lanes, sizeof first);
            return first < n ? first : -1;
        }

        /// An unsigned integer type of the size of dt's elements (to copy them as bits).
        template <class F>
        void visit_bits(dtype dt, F&& f)
        {
            switch (dt)
            {
            case dtype::float16:
            case dtype::bfloat16: return f(std::uint16_t{});
            case dtype::float32: return f(std::uint32_t{});
            case dtype::float64:
            case dtype::int64: return f(std::uint64_t{});
            }
            throw xgrad::invalid_argument("cuda: unknown dtype");
        }

        // ---------------------------------------------------------------------------------
        // one_hot, take

        template <class U>
        void one_hot_bits(U* out, const std::int64_t* labels, std::int64_t n, std::int64_t classes, U zero, U one)
        {
            detail::for_each_index(n * classes, [=] XGRAD_HOST_DEVICE(std::int64_t i) {
                const std::int64_t row = i / classes;
                out[i] = labels[row] == i - row * classes ? one : zero;
            });
        }

        template <class U>
        void take_bits(U* out, const U* x, const std::int64_t* idx, std::int64_t n)
        {
            detail::for_each_index(n, [=] XGRAD_HOST_DEVICE(std::int64_t i) { out[i] = x[idx[i]]; });
        }

        /// The bits of 1 in dt.
        std::uint64_t one_bits(dtype dt)
        {
            switch (dt)
            {
            case dtype::float32: return 0x3f800000u;
            case dtype::float64: return 0x3ff0000000000000u;
            case dtype::float16: return 0x3c00u;
            case dtype::bfloat16: return 0x3f80u;
            case dtype::int64: break;
            }
            return 1;
        }

        // ---------------------------------------------------------------------------------
        // max_pool2d

        struct strides4
        {
            std::int64_t s[4];
        };

        /// The taps k of one axis whose position o * stride - pad + k * dilation lies in
        /// [0, extent): [first, last), as the CPU kernel's inside_taps.
        XGRAD_HOST_DEVICE inline void inside_taps(std::int64_t o, std::int64_t stride, std::int64_t pad,
                                                  std::int64_t dilation, std::int64_t kernel, std::int64_t extent,
                                                  std::int64_t& first, std::int64_t& last)
        {
            const std::int64_t start = o * stride - pad;
            first = start >= 0 ? 0 : (-start + dilation - 1) / dilation;
            last = start >= extent ? 0 : (extent - start + dilation - 1) / dilation;
            if (last > kernel)
                last = kernel;
            if (first > last)
                first = last;
        }

        /// An [n, c, a, b] array's dimensions in decreasing stride order, with their extents:
        /// one index per element, consecutive indices at neighbouring addresses (NCHW: b
        /// innermost; NHWC: c innermost).
        struct walk4
        {
            strides4 ext, dim;
        };

        walk4 walk_order(const strides4& s, const std::int64_t (&extents)[4])
        {
            int order[4] = {0, 1, 2, 3};
            for (int k = 1; k < 4; ++k)
                for (int j = k; j > 0 && s.s[order[j - 1]] < s.s[order[j]]; --j)
                {
                    const int t = order[j];
                    order[j] = order[j - 1];
                    order[j - 1] = t;
                }
            walk4 w{};
            for (int k = 0; k < 4; ++k)
            {
                w.ext.s[k] = extents[order[k]];
                w.dim.s[k] = order[k];
            }
            return w;
        }

        /// The (n, c, a, b) coordinates of index i of the walk.
        XGRAD_HOST_DEVICE inline void coordinates(std::int64_t i, const walk4& w, std::int64_t (&ix)[4])
        {
            for (int k = 3; k > 0; --k)
            {
                const std::int64_t q = i / w.ext.s[k];
                ix[w.dim.s[k]] = i - q * w.ext.s[k];
                i = q;
            }
            ix[w.dim.s[0]] = i;
        }

        template <class T>
        void max_pool_typed(void* values, const strides4 os, std::int64_t* idx, const strides4 is, const void* x,
                            const strides4 xs, const window2d_dims d)
        {
            using E = detail::element<T>;
            using S = typename E::compute_type; // compared in float, or double for float64
            // Walk idx in the order of its strides.
            const std::int64_t extents[4] = {d.n, d.c, d.oh, d.ow};
            const walk4 walk = walk_order(is, extents);
            const std::int64_t numel = d.n * d.c * d.oh * d.ow;
            detail::for_each_index(numel, [=] XGRAD_HOST_DEVICE(std::int64_t i) {
                std::int64_t ix[4]; // n, c, oh, ow
                coordinates(i, walk, ix);
                std::int64_t i0, i1, j0, j1;
                inside_taps(ix[2], d.sh, d.ph, d.dh, d.kh, d.h, i0, i1);
                inside_taps(ix[3], d.sw, d.pw, d.dw, d.kw, d.w, j0, j1);
                const std::int64_t plane = ix[0] * xs.s[0] + ix[1] * xs.s[1];
                const std::int64_t origin = plane + (ix[2] * d.sh - d.ph) * xs.s[2] + (ix[3] * d.sw - d.pw) * xs.s[3];
                const std::int64_t step_i = d.dh * xs.s[2], step_j = d.dw * xs.s[3];
                const std::int64_t out = ix[0] * is.s[0] + ix[1] * is.s[1] + ix[2] * is.s[2] + ix[3] * is.s[3];
                const std::int64_t value_at = ix[0] * os.s[0] + ix[1] * os.s[1] + ix[2] * os.s[2] + ix[3] * os.s[3];
                if (i0 == i1 || j0 == j1)
                {
                    idx[out] = -1; // a window entirely in padding (the op rules it out)
                    return;
                }
                std::int64_t best = origin + i0 * step_i + j0 * step_j;
                S best_v = E::load(x, best);
                // The first maximum in (kh, kw) order wins: `!(v <= best_v)` holds for a larger
                // v and for a NaN v, and the first NaN ends the search.
                for (std::int64_t a = i0; a < i1 && best_v == best_v; ++a)
                    for (std::int64_t b = j0; b < j1; ++b)
                    {
                        const std::int64_t p = origin + a * step_i + b * step_j;
                        const S v = E::load(x, p);
                        if (!(v <= best_v))
                        {
                            best = p;
                            best_v = v;
                            if (v != v)
                                break;
                        }
                    }
                idx[out] = best;
                // The element's bits, copied, not converted (16-bit elements as their bit patterns).
                using B = std::conditional_t<sizeof(T) == 2, std::uint16_t, T>;
                static_cast<B*>(values)[value_at] = static_cast<const B*>(x)[best];
            });
        }

        // ---------------------------------------------------------------------------------
        // put_add

        template <class T>
        struct sum_type
        {
            using type = typename detail::element<T>::compute_type;
        };
        template <>
        struct sum_type<std::int64_t>
        {
            using type = std::int64_t;
        };

        /// out[o] = the sum, in increasing i, of g[i] over the i with idx[i] == o: the run of o
        /// in `keys` (idx sorted stably) lists those i in `pos` in increasing order.
        template <class T>
        void sum_runs(void* out, std::int64_t out_numel, const void* g, const std::int64_t* keys,
                      const std::int64_t* pos, std::int64_t n)
        {
            using E = detail::element<T>;
            using A = typename sum_type<T>::type;
            detail::for_each_index(out_numel, [=] XGRAD_HOST_DEVICE(std::int64_t o) {
                // lower bound of o in keys[0, n)
                std::int64_t lo = 0, hi = n;
                while (lo < hi)
                {
                    const std::int64_t mid = lo + (hi - lo) / 2;
                    if (keys[mid] < o)
                        lo = mid + 1;
                    else
                        hi = mid;
                }
                A acc = A(0);
                for (std::int64_t j = lo; j < n && keys[j] == o; ++j)
                    acc += E::load(g, pos[j]);
                E::store(out, o, acc);
            });
        }
    }

    namespace
    {
        /// max_pool2d_grad: one index per dx element, in dx's memory order; each element finds
        /// the one window that may read it and takes that window's term when the window chose
        /// it (0 + g, in put_add's sum type, so the bits are put_add's).
        template <class T>
        void max_pool_grad_typed(void* dx, const strides4 xs, const void* g, const strides4 gs, const std::int64_t* idx,
                                 const strides4 is, const void* y, const window2d_dims d)
        {
            using E = detail::element<T>;
            using A = typename sum_type<T>::type;
            const std::int64_t extents[4] = {d.n, d.c, d.h, d.w};
            const walk4 walk = walk_order(xs, extents);
            detail::for_each_index(d.n * d.c * d.h * d.w, [=] XGRAD_HOST_DEVICE(std::int64_t i) {
                std::int64_t ix[4]; // n, c, h, w
                coordinates(i, walk, ix);
                const std::int64_t at = ix[0] * xs.s[0] + ix[1] * xs.s[1] + ix[2] * xs.s[2] + ix[3] * xs.s[3];
                const std::int64_t oh = kernels::disjoint_window_of(ix[2], d.sh, d.ph, d.dh, d.kh, d.oh);
                const std::int64_t ow = kernels::disjoint_window_of(ix[3], d.sw, d.pw, d.dw, d.kw, d.ow);
                A v = A(0);
                const std::int64_t win = ix[0] * is.s[0] + ix[1] * is.s[1] + oh * is.s[2] + ow * is.s[3];
                if (oh >= 0 && ow >= 0 && idx[win] == at && (y == nullptr || E::load(y, win) > A(0)))
                    v = A(0) + E::load(g, ix[0] * gs.s[0] + ix[1] * gs.s[1] + oh * gs.s[2] + ow * gs.s[3]);
                E::store(dx, at, v);
            });
        }
    }

    std::int64_t one_hot(void* out, const std::int64_t* labels, dtype dt, std::int64_t n, std::int64_t classes)
    {
        const std::int64_t bad = first_bad(labels, n, classes);
        if (bad >= 0)
            return bad;
        const std::uint64_t one = one_bits(dt);
        visit_bits(dt, [&](auto tag) {
            using U = decltype(tag);
            one_hot_bits<U>(static_cast<U*>(out), labels, n, classes, U(0), static_cast<U>(one));
        });
        return -1;
    }

    void max_pool2d(void* out, const std::int64_t* out_strides, std::int64_t* idx, const std::int64_t* idx_strides,
                    const void* x, const std::int64_t* x_strides, dtype dt, const kernels::window2d_dims& d)
    {
        // No window, nothing to write (and n * c * oh * ow is then a product that may overflow).
        if (d.n == 0 || d.c == 0 || d.oh == 0 || d.ow == 0)
            return;
        const strides4 os{{out_strides[0], out_strides[1], out_strides[2], out_strides[3]}};
        const strides4 is{{idx_strides[0], idx_strides[1], idx_strides[2], idx_strides[3]}};
        const strides4 xs{{x_strides[0], x_strides[1], x_strides[2], x_strides[3]}};
        switch (dt)
        {
        case dtype::float32: return max_pool_typed<float>(out, os, idx, is, x, xs, d);
        case dtype::float64: return max_pool_typed<double>(out, os, idx, is, x, xs, d);
        case dtype::float16: return max_pool_typed<float16_t>(out, os, idx, is, x, xs, d);
        case dtype::bfloat16: return max_pool_typed<bfloat16_t>(out, os, idx, is, x, xs, d);
        case dtype::int64: break;
        }
        throw xgrad::invalid_argument("cuda::max_pool2d: the dtype must be floating point");
    }

    void max_pool2d_grad(void* dx, const std::int64_t* dx_strides, const void* g, const std::int64_t* g_strides,
                         const std::int64_t* idx, const std::int64_t* idx_strides, const void* y, dtype dt,
                         const kernels::window2d_dims& d)
    {
        // No element, nothing to write (and n * c * h * w is then a product that may overflow).
        if (d.n == 0 || d.c == 0 || d.h == 0 || d.w == 0)
            return;
        const strides4 xs{{dx_strides[0], dx_strides[1], dx_strides[2], dx_strides[3]}};
        const strides4 gs{{g_strides[0], g_strides[1], g_strides[2], g_strides[3]}};
        const strides4 is{{idx_strides[0], idx_strides[1], idx_strides[2], idx_strides[3]}};
        switch (dt)
        {
        case dtype::float32: return max_pool_grad_typed<float>(dx, xs, g, gs, idx, is, y, d);
        case dtype::float64: return max_pool_grad_typed<double>(dx, xs, g, gs, idx, is, y, d);
        case dtype::float16: return max_pool_grad_typed<float16_t>(dx, xs, g, gs, idx, is, y, d);
        case dtype::bfloat16: return max_pool_grad_typed<bfloat16_t>(dx, xs, g, gs, idx, is, y, d);
        case dtype::int64: break;
        }
        throw xgrad::invalid_argument("cuda::max_pool2d_grad: the dtype must be floating point");
    }

    std::int64_t take(void* out, const void* x, std::int64_t x_numel, const std::int64_t* idx, dtype dt, std::int64_t n)
    {
        const std::int64_t bad = first_bad(idx, n, x_numel);
        if (bad >= 0)
            return bad;
        visit_bits(dt, [&](auto tag) {
            using U = decltype(tag);
            take_bits<U>(static_cast<U*>(out), static_cast<const U*>(x), idx, n);
        });
        return -1;
    }

    std::int64_t put_add(void* out, std::int64_t out_numel, const void* g, const std::int64_t* idx, dtype dt,
                         std::int64_t n)
    {
        const std::int64_t bad = first_bad(idx, n, out_numel);
        if (bad >= 0)
            return bad;
        if (out_numel <= 0)
            return -1;
        const std::size_t bytes = checked_bytes(n > 0 ? n : 1, sizeof(std::int64_t), "cuda put_add: sort keys");
        detail::device_buffer keys_buf(bytes), pos_buf(bytes);
        std::int64_t* keys = keys_buf.as<std::int64_t>();
        std::int64_t* pos = pos_buf.as<std::int64_t>();
        if (n > 0)
        {
            detail::for_each_index(n, [=] XGRAD_HOST_DEVICE(std::int64_t i) {
                keys[i] = idx[i];
                pos[i] = i;
            });
            // Stable: equal positions keep increasing i, the CPU's order of addition.
            detail::scratch_allocator scratch;
            thrust::stable_sort_by_key(detail::policy(scratch), keys, keys + n, pos);
        }
        switch (dt)
        {
        case dtype::float32: sum_runs<float>(out, out_numel, g, keys, pos, n); break;
        case dtype::float64: sum_runs<double>(out, out_numel, g, keys, pos, n); break;
        case dtype::float16: sum_runs<float16_t>(out, out_numel, g, keys, pos, n); break;
        case dtype::bfloat16: sum_runs<bfloat16_t>(out, out_numel, g, keys, pos, n); break;
        case dtype::int64: sum_runs<std::int64_t>(out, out_numel, g, keys, pos, n); break;
        }
        return -1;
    }
}
