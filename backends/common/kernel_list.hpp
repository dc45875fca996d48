#pragma once
// The kernel list: every kernel a backend implements, declared once. Each kernel's signature is
// a function type `xgrad::kernels::<name>_fn` with its contract above it; XGRAD_KERNEL_LIST
// names them all. Everything else follows from the list:
// - a backend declares its kernels with `XGRAD_KERNEL_LIST(XGRAD_DECLARE_KERNEL)` inside its
//   namespace (backends/cpu/cpu_kernels.hpp, backends/cuda/cuda_kernels.hpp);
// - kernel_table, the table of one backend's kernels, has one member per entry, and a backend
//   fills it by name (`t.name = &ns::name;` for every entry; backends/*/kernel_table.cpp);
//   core/src/dispatch.cpp picks the table for a device;
// - kernel_id enumerates the entries and kernel_names names them (messages, tests).
//
// The contract shared by every kernel is in backends/common/kernels.hpp (argument order,
// strides, dtypes, ASSIGN semantics). Pointers are the backend's device pointers unless a
// contract says "host".
#include <cstddef>
#include <cstdint>

#include "backends/common/kernels.hpp"
#include "backends/common/optimizer_math.hpp"
#include "xgrad/dtype.hpp"

namespace xgrad::kernels
{
    // ---- memory ----------------------------------------------------------------------------

    /// nbytes of storage aligned to 64 bytes; throws std::bad_alloc.
    using allocate_fn = void*(std::size_t nbytes);
    /// Frees storage from allocate; deallocate(nullptr) is a no-op.
    using deallocate_fn = void(void* p) noexcept;
    /// Byte copy from this backend's memory (src) to host memory (host_dst); waits for the work
    /// queued before it.
    using copy_to_host_fn = void(void* host_dst, const void* src, std::size_t nbytes);
    /// Byte copy from host memory (host_src) to this backend's memory (dst).
    using copy_from_host_fn = void(void* dst, const void* host_src, std::size_t nbytes);

    // ---- elementwise -----------------------------------------------------------------------

    /// out[i] = value rounded to dt; any dtype.
    using fill_fn = void(void* out, const std::int64_t* out_strides, dtype dt, int ndim, const std::int64_t* shape,
                         double value);
    /// out[i] = x[i] converted from x_dt to out_dt, any pair of dtypes. Float -> int64 truncates
    /// toward zero and saturates (NaN -> 0, beyond the int64 range -> INT64_MIN / INT64_MAX);
    /// float -> float16/bfloat16 rounds to nearest even (backends/common/convert.hpp).
    using copy_fn = void(void* out, const std::int64_t* out_strides, dtype out_dt, const void* x,
                         const std::int64_t* x_strides, dtype x_dt, int ndim, const std::int64_t* shape);
    /// out[i] = op(x[i]); dt float32 or float64.
    using unary_fn = void(void* out, const std::int64_t* out_strides, const void* x, const std::int64_t* x_strides,
                          dtype dt, int ndim, const std::int64_t* shape, unary_op op);
    /// out[i] = op(a[i], b[i]); broadcasting is expressed by zero strides; dt float32 or float64.
    using binary_fn = void(void* out, const std::int64_t* out_strides, const void* a, const std::int64_t* a_strides,
                           const void* b, const std::int64_t* b_strides, dtype dt, int ndim, const std::int64_t* shape,
                           binary_op op);
    /// out[i] = cond[i] != 0 ? a[i] : b[i]; cond has dtype dt too (float32 or float64).
    using where_fn = void(void* out, const std::int64_t* out_strides, const void* cond,
                          const std::int64_t* cond_strides, const void* a, const std::int64_t* a_strides, const void* b,
                          const std::int64_t* b_strides, dtype dt, int ndim, const std::int64_t* shape);

    // ---- reductions and products -----------------------------------------------------------

    /// Reduces the trailing ndim - n_keep dimensions of x: out[i0..i{n_keep-1}] = op over the
    /// rest. out_strides has n_keep entries; dt float32 or float64. Sums add in an order fixed
    /// by the shape (never by the thread count).
    using reduce_fn = void(void* out, const std::int64_t* out_strides, const void* x, const std::int64_t* x_strides,
                           dtype dt, int ndim, int n_keep, const std::int64_t* shape, reduce_op op);
    /// out[i0..i{ndim-2}] = the index k along the last dimension of x where x[i0.., k] is
    /// largest: the first maximum wins, and a NaN counts as larger than every number (the first
    /// NaN wins). out (int64) has ndim - 1 dimensions with out_strides; ndim >= 1 and
    /// shape[ndim - 1] >= 1 (the ops layer rejects an empty reduced extent). dt: float32,
    /// float64 or int64.
    using argmax_fn = void(std::int64_t* out, const std::int64_t* out_strides, const void* x,
                           const std::int64_t* x_strides, dtype dt, int ndim, const std::int64_t* shape);
    /// out[p] = a[p] @ b[p] for p < batch; out is contiguous [batch, m, n]. ASSIGNS out when
    /// accumulate is false (out's old values are never read, so NaN there does not matter)
    /// and ADDS a[p] @ b[p] to out when it is true (GEMM's beta = 1: an addend such as a bias
    /// costs no pass of its own). a_strides and b_strides are {batch, row, column} strides; for
    /// each of a and b the row or the column stride is 1 (the ops layer guarantees it). k may be
    /// 0 (out = 0, or out unchanged when accumulating). dt float32 or float64. Throws
    /// std::invalid_argument when m, n or k exceeds the backend's BLAS limit (INT_MAX).
    using matmul_fn = void(void* out, const void* a, const std::int64_t* a_strides, const void* b,
                           const std::int64_t* b_strides, dtype dt, std::int64_t batch, std::int64_t m, std::int64_t n,
                           std::int64_t k, bool accumulate);

    // ---- indexing --------------------------------------------------------------------------

    /// out (contiguous [n, classes], dtype dt) = one-hot rows of labels. Returns the index of
    /// the first label outside [0, classes), or -1 when all are valid (out is then complete).
    using one_hot_fn = std::int64_t(void* out, const std::int64_t* labels, dtype dt, std::int64_t n,
                                    std::int64_t classes);
    /// Max pooling: out[n, c, oh, ow] (strides out_strides, in that order) = the largest x in
    /// the window of output (oh, ow), and idx[n, c, oh, ow] (idx_strides) = its element offset
    /// n * xs[0] + c * xs[1] + h * xs[2] + w * xs[3] (x_strides in (n, c, h, w) order, window
    /// from d; padding is skipped), so that out equals take(x, idx) for a contiguous x. The
    /// first maximum in (kh, kw) order wins; a NaN wins over numbers (the first NaN). Every
    /// window reaches the input (the op checks). out is x's element copied, not converted.
    /// ASSIGNS every out and idx element.
    using max_pool2d_fn = void(void* out, const std::int64_t* out_strides, std::int64_t* idx,
                               const std::int64_t* idx_strides, const void* x, const std::int64_t* x_strides, dtype dt,
                               const window2d_dims& d);
    /// The gradient of max pooling whose windows do not overlap (windows_disjoint(d), which
    /// the op guarantees): dx[n, c, h, w] (dx_strides, in (n, c, h, w) order;
    /// dx must not overlap itself) = 0 + g[n, c, oh, ow] (g_strides) where (h, w) is a tap of
    /// window (oh, ow) and idx[n, c, oh, ow] (idx_strides) equals its offset n * dx_strides[0] +
    /// c * dx_strides[1] + h * dx_strides[2] + w * dx_strides[3], and +0 everywhere else. With
    /// idx as max_pool2d wrote it for an x of dx's strides, that is put_add(g, idx) (its bits,
    /// -0 terms included), written in one pass over dx with no zero fill before it. y: null,
    /// or the pooled output of a ReLU-fused forward (dtype dt, laid out as idx, idx_strides),
    /// whose window contributes its term only where y > 0 (+0 otherwise, NaN included): ReLU's
    /// mask at the chosen element, applied as g is read. ASSIGNS every element of dx.
    using max_pool2d_grad_fn = void(void* dx, const std::int64_t* dx_strides, const void* g,
                                    const std::int64_t* g_strides, const std::int64_t* idx,
                                    const std::int64_t* idx_strides, const void* y, dtype dt, const window2d_dims& d);
    /// out[i] = x[idx[i]] for i < n (out, idx contiguous; x holds x_numel elements). Returns the
    /// first i whose idx is outside [0, x_numel), or -1 (out is then complete).
    using take_fn = std::int64_t(void* out, const void* x, std::int64_t x_numel, const std::int64_t* idx, dtype dt,
                                 std::int64_t n);
    /// The adjoint of take: out (contiguous, out_numel elements) = 0, then g[i] added at idx[i]
    /// for i = 0..n-1 in that order (16-bit dtypes summed in float32, rounded once). Returns the
    /// first i whose idx is outside [0, out_numel), or -1 (out is then complete). ASSIGNS out:
    /// nothing is added to its previous contents. (Max pooling over windows that do not
    /// overlap, whose positions never repeat, has max_pool2d_grad instead.)
    using put_add_fn = std::int64_t(void* out, std::int64_t out_numel, const void* g, const std::int64_t* idx, dtype dt,
                                    std::int64_t n);

    // ---- sliding windows (conv2d, pooling) -------------------------------------------------

    /// im2col over the window d. cols is the 6-d array [n, c, kh, kw, oh, ow] given by six
    /// strides in that order (any layout); x is [n, c, h, w] with four strides:
    ///   cols[n, c, kh, kw, oh, ow] = x[n, c, oh*sh - ph + kh*dh, ow*sw - pw + kw*dw],
    /// or pad_value (converted to dt) where that position is padding. ASSIGNS every element of
    /// cols. dt: float32, float64, float16 or bfloat16 (elements are copied, not converted).
    using unfold2d_fn = void(void* cols, const std::int64_t* cols_strides, const void* x, const std::int64_t* x_strides,
                             dtype dt, const window2d_dims& d, double pad_value);
    /// col2im, the adjoint of unfold2d: x[n, c, h, w] = the sum of the cols entries unfold2d
    /// reads from (n, c, h, w), 0 where no window reads it; entries read from padding are
    /// dropped. ASSIGNS every element of x; x's view must not overlap itself. The terms of each
    /// sum are added in (kh, kw) order, in float64 for float64 and float32 otherwise, and
    /// rounded once to dt, whatever the thread count or layout (the backends agree bit for bit).
    using fold2d_fn = void(void* x, const std::int64_t* x_strides, const void* cols, const std::int64_t* cols_strides,
                           dtype dt, const window2d_dims& d);

    // ---- convolution (conv2d's three products, a block of images at a time) ---------------
    //
    // One group of a 2-D convolution as GEMMs over unfolded windows, with o output channels,
    // L = d.oh * d.ow output positions and K = d.c * d.kh * d.kw taps:
    //   channels_last (NHWC): y [N*L, O] = unfold(x) [N*L, K] w [K, O], w's rows ordered
    //     (kh, kw, c); y is [N, OH, OW, O];
    //   channels first (NCHW): y_n [O, L] = w [O, K] unfold(x_n) [K, L] for each image n, w's
    //     columns ordered (c, kh, kw); y is [N, O, OH, OW].
    // x and dx are images [n, c, h, w] given by four strides in that order (any layout); y, dy,
    // w, dw and bias are contiguous. dt: float32, float64 or bfloat16. In bfloat16 every operand
    // and output (bias too) is bfloat16, the products are summed in float32 and each result is
    // rounded once; a backend may use bfloat16 dot-product hardware there, in its own order of
    // summation (the CPU's AMX tiles, which also read subnormal inputs as zero), else it runs its
    // float32 kernel on widened copies (conv_blocks.hpp). The images are taken `block` at a
    // time (block >= 1): each block's windows are unfolded into scratch of block * L * K
    // elements, multiplied and, for the input gradient, folded while they are in the cache.
    // Results depend on block only through the order of the weight gradient's sum over blocks;
    // the ops layer chooses block (and chains) from the shape alone, so results do not depend
    // on the thread count. Throws std::invalid_argument where matmul does (a GEMM extent above
    // INT_MAX). All three ASSIGN their outputs.

    /// y = the product above, plus bias[o] (bias may be null: no bias).
    using conv2d_forward_fn = void(void* y, const void* x, const std::int64_t* x_strides, const void* w,
                                   const void* bias, dtype dt, const window2d_dims& d, std::int64_t o,
                                   bool channels_last, std::int64_t block);
    /// dx = fold(dy w^T) (channels_last) or fold(w^T dy_n) per image: conv2d_forward's gradient
    /// with respect to x.
    using conv2d_input_grad_fn = void(void* dx, const std::int64_t* dx_strides, const void* dy, const void* w, dtype dt,
                                      const window2d_dims& d, std::int64_t o, bool channels_last, std::int64_t block);
    /// dw = unfold(x)^T dy (channels_last, [K, O]) or the sum over images of dy_n unfold(x_n)^T
    /// ([O, K]): conv2d_forward's gradient with respect to w. The blocks are summed in
    /// `chains` (1 <= chains <= the number of blocks) consecutive runs, each run's blocks in
    /// order, then the runs in order.
    using conv2d_weight_grad_fn = void(void* dw, const void* x, const std::int64_t* x_strides, const void* dy, dtype dt,
                                       const window2d_dims& d, std::int64_t o, bool channels_last, std::int64_t block,
                                       std::int64_t chains);

    // ---- fused batch norm (formulas: docs/batch_norm.md) -----------------------------------
    //
    // Layout: every tensor shaped like x (x, y, dy, dx, A, d_g, d_x) is contiguous and read as
    // [outer, C, inner]: channels-last formats (NHWC, NDHWC) have inner = 1, channels-first
    // formats (NCHW, NCDHW) have outer = N, and R = outer * inner elements belong to each
    // channel. Both layouts are walked as they are, without transposing.
    // dtypes: x-shaped tensors have dtype xdt (float32, float64, float16 or bfloat16); the
    // per-channel vectors of length C (scale, offset, mean, var, the sums, a, b) have the
    // statistics dtype: float64 for float64 inputs, float32 otherwise. Arithmetic and sums run
    // in the statistics dtype or wider; 16-bit elements are widened on load and rounded once
    // on store. Every kernel ASSIGNS its outputs. Below, r = 1 / sqrt(var + eps).
    // Fused ReLU: the forward kernels take `relu` (y = max(y, 0) on store; NaN stays NaN); the
    // gradient kernels take the output y of such a forward, or null: given y, each dy is read
    // as (y > 0 ? dy : 0), which is ReLU's backward without a tensor of its own.

    /// Per channel: mean[c] = sum(x) / R and the biased var[c] = sum((x - mean[c])^2) / R;
    /// R = 0 gives NaN.
    using bn_moments_fn = void(void* mean, void* var, const void* x, dtype xdt, std::int64_t outer, std::int64_t C,
                               std::int64_t inner);
    /// y = (x - mean[c]) * r[c] * scale[c] + offset[c], then ReLU when relu.
    using bn_normalize_fn = void(void* y, const void* x, const void* scale, const void* offset, const void* mean,
                                 const void* var, double eps, bool relu, dtype xdt, std::int64_t outer, std::int64_t C,
                                 std::int64_t inner);
    /// The training forward: bn_moments, then bn_normalize with those moments (a backend may
    /// read x once per block of channels that fits its cache).
    using bn_forward_training_fn = void(void* y, void* mean, void* var, const void* x, const void* scale,
                                        const void* offset, double eps, bool relu, dtype xdt, std::int64_t outer,
                                        std::int64_t C, std::int64_t inner);
    /// Per channel: sum_dy[c] = sum(dy) and sum_dy_xc[c] = sum(dy * (x - mean[c])).
    using bn_grad_reduce_fn = void(void* sum_dy, void* sum_dy_xc, const void* dy, const void* x, const void* mean,
                                   dtype xdt, std::int64_t outer, std::int64_t C, std::int64_t inner);
    /// The training gradient from those sums:
    /// dx = scale r (dy - sum_dy / R - (x - mean) r^2 sum_dy_xc / R).
    using bn_grad_apply_fn = void(void* dx, const void* dy, const void* x, const void* scale, const void* mean,
                                  const void* var, const void* sum_dy, const void* sum_dy_xc, double eps, dtype xdt,
                                  std::int64_t outer, std::int64_t C, std::int64_t inner);
    /// Both training phases in one call: the sums of bn_grad_reduce, then dx of bn_grad_apply
    /// (a backend may read dy and x once per block of channels that fits its cache). y: the
    /// fused ReLU's forward output, or null.
    using bn_grad_training_fn = void(void* dx, void* sum_dy, void* sum_dy_xc, const void* dy, const void* x,
                                     const void* y, const void* scale, const void* mean, const void* var, double eps,
                                     dtype xdt, std::int64_t outer, std::int64_t C, std::int64_t inner);
    /// The inference gradient in one pass: dx = dy scale r, and the sums of bn_grad_reduce.
    /// y: the fused ReLU's forward output, or null.
    using bn_grad_inference_fn = void(void* dx, void* sum_dy, void* sum_dy_xc, const void* dy, const void* x,
                                      const void* y, const void* scale, const void* mean, const void* var, double eps,
                                      dtype xdt, std::int64_t outer, std::int64_t C, std::int64_t inner);
    /// Second order, first pass: sums[k * C + c] for k = 0..4 holds sum(g), sum(g xh), sum(A),
    /// sum(A xh) and sum(A g) of channel c, with xh = (x - mean) r.
    using bn_grad_grad_reduce_fn = void(void* sums, const void* A, const void* g, const void* x, const void* mean,
                                        const void* var, double eps, dtype xdt, std::int64_t outer, std::int64_t C,
                                        std::int64_t inner);
    /// Second order, second pass: d_g and d_x (docs/batch_norm.md, section 5) from those sums;
    /// either output may be null when it is not wanted. a and b are the cotangents of the
    /// scale and offset gradients.
    using bn_grad_grad_apply_fn = void(void* d_g, void* d_x, const void* A, const void* g, const void* x,
                                       const void* scale, const void* mean, const void* var, const void* a,
                                       const void* b, const void* sums, double eps, bool training, dtype xdt,
                                       std::int64_t outer, std::int64_t C, std::int64_t inner);

    // ---- optimizer updates (formulas: backends/common/optimizer_math.hpp) ------------------
    //
    // One fused pass over a parameter of n contiguous elements: the new parameter and buffers
    // from the old ones and the gradient, every operand of dtype dt (float32, float64,
    // float16 or bfloat16; 16-bit elements are widened to float32 on load and rounded once on
    // store, as the optimizers' 16-bit contract says). Every kernel ASSIGNS its outputs. An
    // output may be its own input (param_out == param, a buffer's output its input: each
    // element is read before it is written); otherwise no operand overlaps another. The result
    // of an element does not depend on n, its position or the thread count.

    /// SGD. momentum_out and momentum are null when c.momentum is 0 (the rule keeps no
    /// buffer); otherwise momentum_out is written and momentum is null on the first step (the
    /// buffer is then d itself).
    using sgd_step_fn = void(void* param_out, void* momentum_out, const void* param, const void* grad,
                             const void* momentum, dtype dt, std::int64_t n, const sgd_step_coefficients& c);
    /// Adam and AdamW. exp_avg and exp_avg_sq are both null on the first step (the buffers
    /// start at zero) or both given.
    using adam_step_fn = void(void* param_out, void* exp_avg_out, void* exp_avg_sq_out, const void* param,
                              const void* grad, const void* exp_avg, const void* exp_avg_sq, dtype dt, std::int64_t n,
                              const adam_step_coefficients& c);
}

/// The kernel list: X(name, twin) for every kernel, in table order. `twin` says whether the CPU
/// backend has a reference twin of the kernel (a plain single-threaded loop in
/// xgrad::cpu::reference, which its fast kernel is tested against and which an XGRAD_SIMD=scalar
/// build or simd_level::scalar runs): `reference` when it has one, `shared` when the one
/// function serves both CPU tables (memory, copies to and from the host, the index kernels).
#define XGRAD_KERNEL_LIST(X)                                                                                           \
    X(allocate, shared)                                                                                                \
    X(deallocate, shared)                                                                                              \
    X(copy_to_host, shared)                                                                                            \
    X(copy_from_host, shared)                                                                                          \
    X(fill, reference)                                                                                                 \
    X(copy, reference)                                                                                                 \
    X(unary, reference)                                                                                                \
    X(binary, reference)                                                                                               \
    X(where, reference)                                                                                                \
    X(reduce, reference)                                                                                               \
    X(argmax, reference)                                                                                               \
    X(matmul, reference)                                                                                               \
    X(one_hot, shared)                                                                                                 \
    X(max_pool2d, shared)                                                                                              \
    X(max_pool2d_grad, shared)                                                                                         \
    X(take, shared)                                                                                                    \
    X(put_add, shared)                                                                                                 \
    X(unfold2d, reference)                                                                                             \
    X(fold2d, reference)                                                                                               \
    X(conv2d_forward, reference)                                                                                       \
    X(conv2d_input_grad, reference)                                                                                    \
    X(conv2d_weight_grad, reference)                                                                                   \
    X(bn_moments, reference)                                                                                           \
    X(bn_normalize, reference)                                                                                         \
    X(bn_forward_training, reference)                                                                                  \
    X(bn_grad_reduce, reference)                                                                                       \
    X(bn_grad_apply, reference)                                                                                        \
    X(bn_grad_training, reference)                                                                                     \
    X(bn_grad_inference, reference)                                                                                    \
    X(bn_grad_grad_reduce, reference)                                                                                  \
    X(bn_grad_grad_apply, reference)                                                                                   \
    X(sgd_step, reference)                                                                                             \
    X(adam_step, reference)

/// Declares one kernel of the list in the enclosing namespace, with the list's signature.
#define XGRAD_DECLARE_KERNEL(name, twin) ::xgrad::kernels::name##_fn name;

namespace xgrad::kernels
{
    /// One enumerator per kernel, in list order; kernel_count is their number.
    enum class kernel_id : int
    {
#define XGRAD_KERNEL_ID(name, twin) name,
        XGRAD_KERNEL_LIST(XGRAD_KERNEL_ID)
#undef XGRAD_KERNEL_ID
    };
#define XGRAD_KERNEL_ONE(name, twin) +1
    constexpr int kernel_count = 0 XGRAD_KERNEL_LIST(XGRAD_KERNEL_ONE);
#undef XGRAD_KERNEL_ONE

    /// The kernels' names, indexed by kernel_id.
    constexpr const char* kernel_names[] = {
#define XGRAD_KERNEL_NAME(name, twin) #name,
        XGRAD_KERNEL_LIST(XGRAD_KERNEL_NAME)
#undef XGRAD_KERNEL_NAME
    };
    static_assert(sizeof(kernel_names) / sizeof(kernel_names[0]) == static_cast<std::size_t>(kernel_count),
                  "one name per kernel of the list");

    /// One backend's kernels: a pointer per list entry, null until the backend fills it.
    struct kernel_table
    {
#define XGRAD_KERNEL_MEMBER(name, twin) name##_fn* name = nullptr;
        XGRAD_KERNEL_LIST(XGRAD_KERNEL_MEMBER)
#undef XGRAD_KERNEL_MEMBER
    };
    static_assert(sizeof(kernel_table) == static_cast<std::size_t>(kernel_count) * sizeof(allocate_fn*),
                  "kernel_table holds exactly the entries of XGRAD_KERNEL_LIST");

    /// Whether entry `id` of t is filled.
    constexpr bool is_set(const kernel_table& t, kernel_id id) noexcept
    {
        switch (id)
        {
#define XGRAD_KERNEL_CASE(name, twin)                                                                                  \
    case kernel_id::name: return t.name != nullptr;
            XGRAD_KERNEL_LIST(XGRAD_KERNEL_CASE)
#undef XGRAD_KERNEL_CASE
        }
        return false;
    }

    /// Whether every entry of t is filled. The tables are complete by construction (each is filled
    /// by one walk over XGRAD_KERNEL_LIST); the registry tests check it at run time, since a
    /// function address compared with null is not a constant expression under the sanitizers.
    constexpr bool is_complete(const kernel_table& t) noexcept
    {
        for (int i = 0; i < kernel_count; ++i)
            if (!is_set(t, static_cast<kernel_id>(i)))
                return false;
        return true;
    }
}
