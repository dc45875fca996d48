// The CPU kernels of an XGRAD_SIMD=scalar build: every kernel is its single-threaded reference
// twin (reference.cpp, unfold_reference.cpp). For debugging (it takes SIMD, threading and
// OpenBLAS out of the picture) and for targets other than x86-64, where the dispatching
// kernels are not built.
#include "backends/cpu/cpu_kernels.hpp"
#include "backends/cpu/simd_level.hpp"

namespace xgrad::cpu
{
    simd_level simd_supported() noexcept { return simd_level::scalar; }
    simd_level simd_level_in_use() noexcept { return simd_level::scalar; }
    void limit_simd_level(simd_level) noexcept {}

    void fill(void* out, const std::int64_t* out_strides, dtype dt, int ndim, const std::int64_t* shape, double value)
    {
        reference::fill(out, out_strides, dt, ndim, shape, value);
    }

    void copy(void* out, const std::int64_t* out_strides, dtype out_dt, const void* x, const std::int64_t* x_strides,
              dtype x_dt, int ndim, const std::int64_t* shape)
    {
        reference::copy(out, out_strides, out_dt, x, x_strides, x_dt, ndim, shape);
    }

    void unary(void* out, const std::int64_t* out_strides, const void* x, const std::int64_t* x_strides, dtype dt,
               int ndim, const std::int64_t* shape, unary_op op)
    {
        reference::unary(out, out_strides, x, x_strides, dt, ndim, shape, op);
    }

    void binary(void* out, const std::int64_t* out_strides, const void* a, const std::int64_t* a_strides, const void* b,
                const std::int64_t* b_strides, dtype dt, int ndim, const std::int64_t* shape, binary_op op)
    {
        reference::binary(out, out_strides, a, a_strides, b, b_strides, dt, ndim, shape, op);
    }

    void where(void* out, const std::int64_t* out_strides, const void* cond, const std::int64_t* cond_strides,
               const void* a, const std::int64_t* a_strides, const void* b, const std::int64_t* b_strides, dtype dt,
               int ndim, const std::int64_t* shape)
    {
        reference::where(out, out_strides, cond, cond_strides, a, a_strides, b, b_strides, dt, ndim, shape);
    }

    void reduce(void* out, const std::int64_t* out_strides, const void* x, const std::int64_t* x_strides, dtype dt,
                int ndim, int n_keep, const std::int64_t* shape, reduce_op op)
    {
        reference::reduce(out, out_strides, x, x_strides, dt, ndim, n_keep, shape, op);
    }

    void matmul(void* out, const void* a, const std::int64_t* a_strides, const void* b, const std::int64_t* b_strides,
                dtype dt, std::int64_t batch, std::int64_t m, std::int64_t n, std::int64_t k)
    {
        reference::matmul(out, a, a_strides, b, b_strides, dt, batch, m, n, k);
    }

    void unfold2d(void* cols, const std::int64_t* cols_strides, const void* x, const std::int64_t* x_strides,
                  dtype dt, const kernels::window2d_dims& d, double pad_value)
    {
        reference::unfold2d(cols, cols_strides, x, x_strides, dt, d, pad_value);
    }

    void fold2d(void* x, const std::int64_t* x_strides, const void* cols, const std::int64_t* cols_strides,
                dtype dt, const kernels::window2d_dims& d)
    {
        reference::fold2d(x, x_strides, cols, cols_strides, dt, d);
    }
}
