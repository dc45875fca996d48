// The CUDA backend's elementwise kernels: fill, copy (every pair of dtypes), unary, binary and
// where, with the contracts of backends/common/kernel_list.hpp.
//
// How they are built:
// - One device thread per output element. The operands' layout is normalised on the host
//   exactly as the CPU kernels normalise it (nd_index, device_loop.hpp: size-1 dimensions
//   dropped, ordered by the output's strides, contiguous dimensions merged); a thread maps its
//   flat index to each operand's offset. When every operand is flat (contiguous in that order,
//   or one broadcast scalar) the offset is the flat index itself or 0, with no divisions: the
//   `Flat` instantiation of each kernel.
// - Element conversions are backends/common/convert.hpp's, compiled for the device too, so copy
//   and fill give the CPU's bits for every dtype pair: float -> 16-bit rounds once to nearest
//   even, float -> int64 truncates and saturates (NaN -> 0), int64 -> 16-bit rounds through
//   round-to-odd.
// - The math is the formula of the CPU reference kernels (backends/common/op_math.hpp, shared), each
//   operation one IEEE operation where the CPU's is (nvcc's default -prec-div, -prec-sqrt and
//   no flush to zero keep division, sqrt and subnormals IEEE; no expression here has an
//   a * b + c that could contract into an fma). So neg, abs, relu, sqrt, rsqrt (1 / sqrt),
//   add, sub, mul, div, the comparisons and where give the CPU's bits; exp, log, tanh,
//   sigmoid and pow use the device's libm (CUDA's math library: 1-2 ulp for exp, log, tanh,
//   up to 4 ulp for powf), so they may differ from the CPU by a few ulp. (NaN results may
//   carry another payload: a GPU's default NaN is not x86's.)
#include <cmath>
#include <cstdint>

#include "backends/common/convert.hpp"
#include "backends/common/op_math.hpp"
#include "backends/cuda/device_loop.hpp"

namespace xgrad::cuda
{
    namespace elementwise_detail
    {
        using detail::nd_index;

        /// Whether every operand of ix is flat: contiguous in the normalised order (its offset
        /// is the flat index) or a broadcast scalar (every stride 0, offset 0).
        template <std::size_t N>
        bool all_flat(const nd_index<N>& ix)
        {
            for (std::size_t k = 0; k < N; ++k)
            {
                bool scalar = true;
                for (int d = 0; d < ix.ndim; ++d)
                    scalar = scalar && ix.strides[k][d] == 0;
                if (!ix.contiguous[k] && !scalar)
                    return false;
            }
            return true;
        }

        /// The kernel of one launch: body(offsets) for every flat index of ix.
        template <std::size_t N, bool Flat, class Body>
        struct indexed
        {
            nd_index<N> ix;
            Body body;

            XGRAD_HOST_DEVICE void operator()(std::int64_t i) const
            {
                std::int64_t off[N];
                if constexpr (Flat)
                {
                    for (std::size_t k = 0; k < N; ++k)
                        off[k] = ix.contiguous[k] ? i : 0;
                }
                else
                    ix.offsets(i, off);
                body(off);
            }
        };

        template <std::size_t N, class Body>
        void launch(const nd_index<N>& ix, const Body& body)
        {
            if (ix.numel <= 0)
                return;
            if (all_flat(ix))
                detail::for_each_index(ix.numel, indexed<N, true, Body>{ix, body});
            else
                detail::for_each_index(ix.numel, indexed<N, false, Body>{ix, body});
        }

        // The math: the op formulas of backends/common/op_math.hpp, shared with the CPU reference.
        using kernels::apply;
        using kernels::visit_compute;

        // ---------------------------------------------------------------------------------
        // Kernel bodies: operand 0 is the output.

        template <class T>
        struct fill_body
        {
            T* out;
            T value;
            XGRAD_HOST_DEVICE void operator()(const std::int64_t (&off)[1]) const { out[off[0]] = value; }
        };

        template <class O, class X>
        struct copy_body
        {
            O* out;
            const X* x;
            XGRAD_HOST_DEVICE void operator()(const std::int64_t (&off)[2]) const
            {
                out[off[0]] = kernels::detail::convert<O>(x[off[1]]);
            }
        };

        template <class T>
        struct unary_body
        {
            T* out;
            const T* x;
            unary_op op;
            XGRAD_HOST_DEVICE void operator()(const std::int64_t (&off)[2]) const
            {
                out[off[0]] = apply(op, x[off[1]]);
            }
        };

        template <class T>
        struct binary_body
        {
            T* out;
            const T* a;
            const T* b;
            binary_op op;
            XGRAD_HOST_DEVICE void operator()(const std::int64_t (&off)[3]) const
            {
                out[off[0]] = apply(op, a[off[1]], b[off[2]]);
            }
        };

        template <class T>
        struct where_body
        {
            T* out;
            const T* cond;
            const T* a;
            const T* b;
            XGRAD_HOST_DEVICE void operator()(const std::int64_t (&off)[4]) const
            {
                out[off[0]] = cond[off[1]] != T(0) ? a[off[2]] : b[off[3]];
            }
        };
    }

    using namespace elementwise_detail;

    void fill(void* out, const std::int64_t* out_strides, dtype dt, int ndim, const std::int64_t* shape, double value)
    {
        const auto ix = detail::make_nd_index<1>(ndim, shape, {out_strides});
        kernels::detail::visit_dtype(dt, [&](auto tag) {
            using T = decltype(tag);
            // Converted once on the host, with the device's conversion functions.
            launch(ix, fill_body<T>{static_cast<T*>(out), kernels::detail::convert<T>(value)});
        });
    }

    void copy(void* out, const std::int64_t* out_strides, dtype out_dt, const void* x, const std::int64_t* x_strides,
              dtype x_dt, int ndim, const std::int64_t* shape)
    {
        const auto ix = detail::make_nd_index<2>(ndim, shape, {out_strides, x_strides});
        kernels::detail::visit_dtype(out_dt, [&](auto out_tag) {
            kernels::detail::visit_dtype(x_dt, [&](auto x_tag) {
                using O = decltype(out_tag);
                using X = decltype(x_tag);
                launch(ix, copy_body<O, X>{static_cast<O*>(out), static_cast<const X*>(x)});
            });
        });
    }

    void unary(void* out, const std::int64_t* out_strides, const void* x, const std::int64_t* x_strides, dtype dt,
               int ndim, const std::int64_t* shape, unary_op op)
    {
        const auto ix = detail::make_nd_index<2>(ndim, shape, {out_strides, x_strides});
        visit_compute(dt, [&](auto tag) {
            using T = decltype(tag);
            launch(ix, unary_body<T>{static_cast<T*>(out), static_cast<const T*>(x), op});
        });
    }

    void binary(void* out, const std::int64_t* out_strides, const void* a, const std::int64_t* a_strides, const void* b,
                const std::int64_t* b_strides, dtype dt, int ndim, const std::int64_t* shape, binary_op op)
    {
        const auto ix = detail::make_nd_index<3>(ndim, shape, {out_strides, a_strides, b_strides});
        visit_compute(dt, [&](auto tag) {
            using T = decltype(tag);
            launch(ix, binary_body<T>{static_cast<T*>(out), static_cast<const T*>(a), static_cast<const T*>(b), op});
        });
    }

    void where(void* out, const std::int64_t* out_strides, const void* cond, const std::int64_t* cond_strides,
               const void* a, const std::int64_t* a_strides, const void* b, const std::int64_t* b_strides, dtype dt,
               int ndim, const std::int64_t* shape)
    {
        const auto ix = detail::make_nd_index<4>(ndim, shape, {out_strides, cond_strides, a_strides, b_strides});
        visit_compute(dt, [&](auto tag) {
            using T = decltype(tag);
            launch(ix, where_body<T>{static_cast<T*>(out), static_cast<const T*>(cond), static_cast<const T*>(a),
                                     static_cast<const T*>(b)});
        });
    }
}
