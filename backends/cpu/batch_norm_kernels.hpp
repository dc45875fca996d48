#pragma once
// CPU kernels of the fused batch-norm family (core/src/ops/batch_norm.cpp is their only
// caller). The contract: shared/spec/fused_batch_norm.md; the formulas: docs/batch_norm.md.
//
// Layout: every x-like tensor (x, y, dy, dx, A, d_g, d_x) is contiguous and viewed as
// [outer, C, inner]: channels-last formats (NHWC, NDHWC) have inner = 1, channels-first
// (NCHW, NCDHW) have outer = N. R = outer * inner elements per channel. Both layouts are
// walked natively (no transposes).
// dtypes: x-like tensors have dtype `xdt` (float32, float64, float16 or bfloat16); per-channel
// vectors of length C (scale, offset, mean, var, sums, a, b) have the statistics dtype, which
// is float64 when xdt is float64 and float32 otherwise. Arithmetic and reductions run in the
// statistics dtype or wider; 16-bit values are converted on load and rounded once on store.
// Every kernel ASSIGNS its outputs. r = 1/sqrt(var + eps).
// ReLU fusion: the forward kernels take `relu` (y = max(y, 0) applied on store, NaN kept);
// the gradient kernels take the forward output `y` of such a fused forward, or null: when
// given, dy is replaced by (y > 0 ? dy : 0) as it is loaded (ReLU's backward, no extra tensor).
//
// Each kernel has a fast implementation in xgrad::cpu and a plain scalar one with the same
// signature in xgrad::cpu::reference (double accumulation), which tests compare against.
#include <cstdint>

#include "xgrad/dtype.hpp"

#define XGRAD_BN_KERNELS(NS)                                                                                          \
    namespace NS                                                                                                      \
    {                                                                                                                 \
        /* mean[c] = sum(x)/R; var[c] = sum((x - mean)^2)/R (biased); R = 0 gives NaN. */                            \
        void bn_moments(void* mean, void* var, const void* x, dtype xdt, std::int64_t outer, std::int64_t C,           \
                        std::int64_t inner);                                                                          \
        /* y = (x - mean[c]) * r[c] * scale[c] + offset[c] (then ReLU when relu) */                                   \
        void bn_normalize(void* y, const void* x, const void* scale, const void* offset, const void* mean,            \
                          const void* var, double eps, bool relu, dtype xdt, std::int64_t outer, std::int64_t C,      \
                          std::int64_t inner);                                                                        \
        /* training forward: bn_moments, then bn_normalize with them; x read from memory once where a */            \
        /* block of channels fits the cache. */                                                                       \
        void bn_forward_training(void* y, void* mean, void* var, const void* x, const void* scale,                    \
                                 const void* offset, double eps, bool relu, dtype xdt, std::int64_t outer,            \
                                 std::int64_t C, std::int64_t inner);                                                 \
        /* sum_dy[c] = sum(dy); sum_dy_xc[c] = sum(dy * (x - mean[c])) */                                            \
        void bn_grad_reduce(void* sum_dy, void* sum_dy_xc, const void* dy, const void* x, const void* mean,           \
                            dtype xdt, std::int64_t outer, std::int64_t C, std::int64_t inner);                       \
        /* training: dx = scale r (dy - sum_dy/R - (x - mean) r^2 sum_dy_xc/R) */                                     \
        void bn_grad_apply(void* dx, const void* dy, const void* x, const void* scale, const void* mean,              \
                           const void* var, const void* sum_dy, const void* sum_dy_xc, double eps, dtype xdt,         \
                           std::int64_t outer, std::int64_t C, std::int64_t inner);                                   \
        /* training, both phases: the sums of bn_grad_reduce and dx of bn_grad_apply from them; dy and x */         \
        /* read from memory once where a block of channels fits the cache. y: see ReLU fusion above. */               \
        void bn_grad_training(void* dx, void* sum_dy, void* sum_dy_xc, const void* dy, const void* x,                 \
                              const void* y, const void* scale, const void* mean, const void* var, double eps,        \
                              dtype xdt, std::int64_t outer, std::int64_t C, std::int64_t inner);                     \
        /* inference, one pass: dx = dy scale r, and the sums of bn_grad_reduce. y: see ReLU fusion. */              \
        void bn_grad_inference(void* dx, void* sum_dy, void* sum_dy_xc, const void* dy, const void* x,                \
                               const void* y, const void* scale, const void* mean, const void* var, double eps,       \
                               dtype xdt, std::int64_t outer, std::int64_t C, std::int64_t inner);                    \
        /* second order, pass 1: sums[k*C + c], k = 0..4: sum(g), sum(g xh), sum(A), sum(A xh), sum(A g), */         \
        /* with xh = (x - mean) r. */                                                                                 \
        void bn_grad_grad_reduce(void* sums, const void* A, const void* g, const void* x, const void* mean,           \
                                 const void* var, double eps, dtype xdt, std::int64_t outer, std::int64_t C,          \
                                 std::int64_t inner);                                                                 \
        /* second order, pass 2: d_g and d_x (docs/batch_norm.md, section 5) from the sums; either output may be */  \
        /* null when not wanted. a, b: cotangents of scale_backprop and offset_backprop. */                          \
        void bn_grad_grad_apply(void* d_g, void* d_x, const void* A, const void* g, const void* x, const void* scale, \
                                const void* mean, const void* var, const void* a, const void* b, const void* sums,    \
                                double eps, bool training, dtype xdt, std::int64_t outer, std::int64_t C,             \
                                std::int64_t inner);                                                                  \
    }

namespace xgrad::cpu
{
    XGRAD_BN_KERNELS(reference)

    /// The bytes of x-like tensors that bn_forward_training / bn_grad_training keep resident in
    /// the cache at a time (default 4 MiB; batch_norm.cpp explains the choice).
    /// Sets it and returns the previous value. For tests: a small budget exercises the channel
    /// blocks on small tensors. Not thread-safe against running kernels.
    std::int64_t bn_set_resident_budget(std::int64_t bytes) noexcept;
}
XGRAD_BN_KERNELS(xgrad::cpu)
#undef XGRAD_BN_KERNELS
