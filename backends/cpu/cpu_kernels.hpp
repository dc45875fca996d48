#pragma once
// CPU backend kernels: free functions over plain pointers, sizes and strides (see
// backends/kernels.hpp for the contract every kernel keeps). All of them ASSIGN into outputs.
//
// Each math kernel has a fast implementation (xsimd, dispatched at run time to the best
// instruction set the processor has, multithreaded over the thread pool) in `xgrad::cpu`, and a
// plain single-threaded scalar loop with the identical signature in `xgrad::cpu::reference`.
// The tests of tests/test_cpu_kernels_*.cpp check the fast one against the reference. The
// window kernels unfold2d and fold2d live in unfold.cpp and unfold_reference.cpp.
#include <cstddef>
#include <cstdint>

#include "backends/kernels.hpp"
#include "xgrad/dtype.hpp"

namespace xgrad::cpu
{
    using kernels::binary_op;
    using kernels::reduce_op;
    using kernels::unary_op;

    /// 64-byte aligned storage; throws std::bad_alloc. deallocate(nullptr) is a no-op.
    void* allocate(std::size_t nbytes);
    void deallocate(void* p) noexcept;
    /// Byte copies between this device's memory and host memory (plain memcpy on the CPU).
    void copy_to_host(void* host_dst, const void* src, std::size_t nbytes);
    void copy_from_host(void* dst, const void* host_src, std::size_t nbytes);

    /// out[i] = value (rounded to dt; any dtype).
    void fill(void* out, const std::int64_t* out_strides, dtype dt, int ndim, const std::int64_t* shape,
              double value);
    /// out[i] = convert<out_dt>(x[i]), any pair of dtypes. Float->int64 truncates toward zero;
    /// float->float16/bfloat16 rounds to nearest even. Float->int64 saturates (NaN -> 0,
    /// beyond the int64 range -> INT64_MIN/INT64_MAX); see backends/cpu/convert.hpp.
    void copy(void* out, const std::int64_t* out_strides, dtype out_dt, const void* x,
              const std::int64_t* x_strides, dtype x_dt, int ndim, const std::int64_t* shape);
    /// out[i] = op(x[i]).
    void unary(void* out, const std::int64_t* out_strides, const void* x, const std::int64_t* x_strides,
               dtype dt, int ndim, const std::int64_t* shape, unary_op op);
    /// out[i] = op(a[i], b[i]); broadcasting is expressed by zero strides.
    void binary(void* out, const std::int64_t* out_strides, const void* a, const std::int64_t* a_strides,
                const void* b, const std::int64_t* b_strides, dtype dt, int ndim, const std::int64_t* shape,
                binary_op op);
    /// out[i] = cond[i] != 0 ? a[i] : b[i]; cond has dtype dt too.
    void where(void* out, const std::int64_t* out_strides, const void* cond, const std::int64_t* cond_strides,
               const void* a, const std::int64_t* a_strides, const void* b, const std::int64_t* b_strides,
               dtype dt, int ndim, const std::int64_t* shape);
    /// Reduces the trailing ndim - n_keep dimensions of x: out[i0..i{n_keep-1}] =
    /// op over the rest. `out_strides` has n_keep entries.
    void reduce(void* out, const std::int64_t* out_strides, const void* x, const std::int64_t* x_strides,
                dtype dt, int ndim, int n_keep, const std::int64_t* shape, reduce_op op);
    /// out[p] = a[p] @ b[p] for p < batch; out is contiguous [batch, m, n]. a_strides and
    /// b_strides are {batch, row, column} strides; for each of a and b, the row or the column
    /// stride is 1 (row- or column-major matrices), which the ops layer guarantees. k may be 0.
    /// Throws std::invalid_argument when m, n or k exceeds INT_MAX (the BLAS interface limit).
    void matmul(void* out, const void* a, const std::int64_t* a_strides, const void* b,
                const std::int64_t* b_strides, dtype dt, std::int64_t batch, std::int64_t m, std::int64_t n,
                std::int64_t k);
    /// im2col over the window `d` (backends/kernels.hpp). `cols` is the 6-d array
    /// [n, c, kh, kw, oh, ow] given by six strides in that order (any layout: the ops layer
    /// passes the strides of its NCHW or NHWC matrix); x is [n, c, h, w] with four strides:
    ///   cols[n, c, kh, kw, oh, ow] = x[n, c, oh*sh - ph + kh*dh, ow*sw - pw + kw*dw],
    /// or pad_value (converted to dt) where that position is padding. ASSIGNS every element of
    /// cols. dt: float32, float64, float16 or bfloat16 (elements are copied, not converted).
    void unfold2d(void* cols, const std::int64_t* cols_strides, const void* x, const std::int64_t* x_strides,
                  dtype dt, const kernels::window2d_dims& d, double pad_value);
    /// col2im, the adjoint of unfold2d: x[n, c, h, w] = the sum of the cols entries that
    /// unfold2d reads from (n, c, h, w), 0 where no window reads it; entries read from padding
    /// are dropped. ASSIGNS every element of x (it does not accumulate into x). Strides as in
    /// unfold2d; x's view must not overlap itself. The terms of each sum are added in the order
    /// of (kh, kw), in float64 for float64 and in float32 otherwise, then rounded once to dt,
    /// whatever the thread count or layout, so the fast kernel equals its reference bit for bit.
    void fold2d(void* x, const std::int64_t* x_strides, const void* cols, const std::int64_t* cols_strides,
                dtype dt, const kernels::window2d_dims& d);
    /// Max pooling's selection: idx[n, c, oh, ow] (strides idx_strides, in that order) = the
    /// element offset, n * xs[0] + c * xs[1] + h * xs[2] + w * xs[3], of the largest x in the
    /// window of output (oh, ow) (strides x_strides in (n, c, h, w) order, window from d;
    /// positions in padding are skipped). The first maximum in (kh, kw) order wins; a NaN wins
    /// over numbers (the first NaN). Every window must reach the input (the op checks).
    /// ASSIGNS every idx element.
    void max_pool2d_argmax(std::int64_t* idx, const std::int64_t* idx_strides, const void* x,
                           const std::int64_t* x_strides, dtype dt, const kernels::window2d_dims& d);
    /// out[i] = x[idx[i]] for i < n (out, idx contiguous; x holds x_numel elements). Returns
    /// the first i whose idx is outside [0, x_numel), or -1 (out is then complete; ASSIGNS).
    std::int64_t take(void* out, const void* x, std::int64_t x_numel, const std::int64_t* idx, dtype dt,
                      std::int64_t n);
    /// The adjoint of take: out (contiguous, out_numel elements) = 0, then g[i] added at
    /// idx[i] for i = 0..n-1 in order (16-bit dtypes summed in float32, rounded once). Returns
    /// the first i whose idx is outside [0, out_numel), or -1 (out is then complete; ASSIGNS
    /// out, nothing is accumulated into its previous contents).
    std::int64_t put_add(void* out, std::int64_t out_numel, const void* g, const std::int64_t* idx, dtype dt,
                         std::int64_t n);
    /// out (contiguous [n, classes], dtype dt) = one-hot rows of labels. Returns the index of the
    /// first label outside [0, classes), or -1 when all are valid (out is then complete).
    std::int64_t one_hot(void* out, const std::int64_t* labels, dtype dt, std::int64_t n, std::int64_t classes);

    namespace reference
    {
        void fill(void* out, const std::int64_t* out_strides, dtype dt, int ndim, const std::int64_t* shape,
                  double value);
        void copy(void* out, const std::int64_t* out_strides, dtype out_dt, const void* x,
                  const std::int64_t* x_strides, dtype x_dt, int ndim, const std::int64_t* shape);
        void unary(void* out, const std::int64_t* out_strides, const void* x, const std::int64_t* x_strides,
                   dtype dt, int ndim, const std::int64_t* shape, unary_op op);
        void binary(void* out, const std::int64_t* out_strides, const void* a, const std::int64_t* a_strides,
                    const void* b, const std::int64_t* b_strides, dtype dt, int ndim, const std::int64_t* shape,
                    binary_op op);
        void where(void* out, const std::int64_t* out_strides, const void* cond,
                   const std::int64_t* cond_strides, const void* a, const std::int64_t* a_strides, const void* b,
                   const std::int64_t* b_strides, dtype dt, int ndim, const std::int64_t* shape);
        void reduce(void* out, const std::int64_t* out_strides, const void* x, const std::int64_t* x_strides,
                    dtype dt, int ndim, int n_keep, const std::int64_t* shape, reduce_op op);
        void matmul(void* out, const void* a, const std::int64_t* a_strides, const void* b,
                    const std::int64_t* b_strides, dtype dt, std::int64_t batch, std::int64_t m, std::int64_t n,
                    std::int64_t k);
        void unfold2d(void* cols, const std::int64_t* cols_strides, const void* x, const std::int64_t* x_strides,
                      dtype dt, const kernels::window2d_dims& d, double pad_value);
        void fold2d(void* x, const std::int64_t* x_strides, const void* cols, const std::int64_t* cols_strides,
                    dtype dt, const kernels::window2d_dims& d);
    }
}
