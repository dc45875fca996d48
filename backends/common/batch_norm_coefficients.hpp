#pragma once
// The per-channel coefficients of the second-order batch-norm outputs (bn_grad_grad_apply),
// written once for every backend: the CPU fast kernels (backends/cpu/batch_norm/kernels.cpp) and
// the CUDA kernels (backends/cuda/batch_norm.cpp, compiled for the device by nvcc) take the
// coefficients; the CPU reference kernels (backends/cpu/batch_norm/reference.cpp) take the
// per-channel means they are made of and evaluate the formulas of section 2.3 as written, so
// the oracle does not share the fast kernels' rearrangement. Host and device code (XGRAD_HOST_DEVICE);
// no dependency on a backend.
//
// The formulas are those of docs/batch_norm.md section 2.3, derived in its section 3 and
// written from the five sums of section 3.7. Every output is an affine function of the
// centred operands, with the coefficients computed here in double:
//   d_g = dg_A (A - mean_A) + dg_x (x - mean) + dg_k
//   d_x = dx_A (A - mean_A) + dx_g (g - mean_g) + dx_x (x - mean)
// Training (r = 1/sqrt(var + eps), means over the R elements of the channel):
//   dg_A = gamma r, dg_x = r (a - gamma r mean(A xh)), dg_k = b,
//   dx_A = -gamma r^2 mean(g xh), dx_g = a r - gamma r^2 mean(A xh),
//   dx_x = gamma r^3 (3 mean(A xh) mean(g xh) - mean(A (g - mean g))) - a r^2 mean(g xh),
//   mean_A = mean(A), mean_g = mean(g).
// Inference: dg_A = gamma r, dg_x = a r, dg_k = b, dx_g = a r; the other coefficients and
// mean_A, mean_g are 0 (d_x = a r g depends on g alone).
//
// The backends round each coefficient once to the statistics type: the expressions and their
// order here decide the last bits of every second-order output, on both backends alike.
#include <cmath>
#include <cstdint>

#include "xgrad/half.hpp" // XGRAD_HOST_DEVICE

namespace xgrad::kernels
{
    /// r = 1 / sqrt(var + eps), in double.
    XGRAD_HOST_DEVICE inline double bn_inv_std(double var, double eps) { return 1.0 / std::sqrt(var + eps); }

    /// Whether v is finite (not +-Inf or NaN): v - v == 0 is false exactly for those, and needs
    /// no <cmath> in device code.
    XGRAD_HOST_DEVICE inline bool bn_is_finite(double v) { return v - v == 0; }

    /// The batch mean of the corrected two-pass moments: the first-pass mean m = sum(x) / R
    /// refined by sum(x - m) / R, on every backend. A channel holding +Inf or -Inf (or NaN) has a
    /// first-pass mean that is not finite; then every x - m is NaN and refining would turn the
    /// contract's +-Inf mean into NaN, so a non-finite m is the result as it is.
    XGRAD_HOST_DEVICE inline double bn_refined_mean(double m, double sum_centred, double R)
    {
        return bn_is_finite(m) ? m + sum_centred / R : m;
    }

    /// One channel's five sums of bn_grad_grad_reduce (the statistics-type values, widened):
    /// sum(g), sum(g xh), sum(A), sum(A xh), sum(A g), xh = (x - mean) r.
    struct bn_grad_grad_sums
    {
        double g, g_xh, A, A_xh, A_g;
    };

    /// One channel's r and the means of section 3.7, from its sums (R elements, R > 0):
    /// g = mean(g), g_xh = mean(g xh), A = mean(A), A_xh = mean(A xh), A_gc = mean(A (g - mean g)).
    struct bn_grad_grad_means
    {
        double r, g, g_xh, A, A_xh, A_gc;
    };

    XGRAD_HOST_DEVICE inline bn_grad_grad_means bn_grad_grad_means_of(double var, double eps,
                                                                      const bn_grad_grad_sums& sums, double R)
    {
        bn_grad_grad_means m{};
        m.r = bn_inv_std(var, eps);
        m.g = sums.g / R;
        m.g_xh = sums.g_xh / R;
        m.A = sums.A / R;
        m.A_xh = sums.A_xh / R;
        m.A_gc = sums.A_g / R - m.A * m.g;
        return m;
    }

    /// One channel's coefficients of d_g and d_x (the expressions in the header comment).
    struct bn_grad_grad_coefficients
    {
        double dg_A, dg_x, dg_k;
        double dx_A, dx_g, dx_x;
        double mean_A, mean_g, mean;
    };

    /// The coefficients of one channel from its scale gamma, mean, var, eps, the sums (read only
    /// in training), the cotangents a (of dscale) and b (of doffset), and R, the
    /// elements per channel (R > 0 in training).
    XGRAD_HOST_DEVICE inline bn_grad_grad_coefficients
    bn_grad_grad_coefficients_of(double gamma, double mean, double var, double eps, const bn_grad_grad_sums& sums,
                                 double a, double b, double R, bool training)
    {
        const double r = bn_inv_std(var, eps);
        bn_grad_grad_coefficients k{};
        k.mean = mean;
        k.dg_k = b;
        k.dg_A = gamma * r;
        if (!training)
        {
            // d_g = gamma r A + a r (x - mean) + b; d_x = a r g.
            k.dg_x = a * r;
            k.dx_g = a * r;
            return k;
        }
        const bn_grad_grad_means m = bn_grad_grad_means_of(var, eps, sums, R);
        const double g_mean = m.g, gxh_mean = m.g_xh, A_mean = m.A, Axh_mean = m.A_xh, A_gc_mean = m.A_gc;
        k.mean_A = A_mean;
        k.mean_g = g_mean;
        k.dg_x = r * (a - gamma * r * Axh_mean);
        k.dx_A = -gamma * r * r * gxh_mean;
        k.dx_g = a * r - gamma * r * r * Axh_mean;
        k.dx_x = gamma * r * r * r * (3 * Axh_mean * gxh_mean - A_gc_mean) - a * r * r * gxh_mean;
        return k;
    }

    /// The slots of a per-channel coefficient table: an elementwise output is
    /// coef[cA] (A - coef[mA]) + coef[cG] (g - coef[mG]) + coef[cX] (x - coef[mX]) + coef[cK],
    /// each slot holding C values (coef[q * C + c]). In a namespace of their own, so that a
    /// kernel file names them unqualified with one `using namespace kernels::bn_slot;`.
    namespace bn_slot
    {
        enum slot : int
        {
            cA,
            mA,
            cG,
            mG,
            cX,
            mX,
            cK,
            count
        };
    }

    /// Stores channel c of the second-order coefficients k into the tables of d_g (cg) and d_x
    /// (cx), bn_slot::count * C values each, rounded once to S; every slot is written, the ones
    /// an output has no term for with 0 (d_g has no g term, d_x no constant).
    template <class S>
    XGRAD_HOST_DEVICE inline void bn_store_grad_grad_coefficients(S* cg, S* cx, std::int64_t C, std::int64_t c,
                                                                  const bn_grad_grad_coefficients& k)
    {
        using namespace bn_slot;
        cg[cA * C + c] = static_cast<S>(k.dg_A);
        cg[mA * C + c] = static_cast<S>(k.mean_A);
        cg[cG * C + c] = S(0);
        cg[mG * C + c] = S(0);
        cg[cX * C + c] = static_cast<S>(k.dg_x);
        cg[mX * C + c] = static_cast<S>(k.mean);
        cg[cK * C + c] = static_cast<S>(k.dg_k);
        cx[cA * C + c] = static_cast<S>(k.dx_A);
        cx[mA * C + c] = static_cast<S>(k.mean_A);
        cx[cG * C + c] = static_cast<S>(k.dx_g);
        cx[mG * C + c] = static_cast<S>(k.mean_g);
        cx[cX * C + c] = static_cast<S>(k.dx_x);
        cx[mX * C + c] = static_cast<S>(k.mean);
        cx[cK * C + c] = S(0);
    }
}
