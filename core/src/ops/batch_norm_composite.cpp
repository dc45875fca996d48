// The batch-norm gradients written with xgrad's primitive ops: sections 4 and 5 of the
// contract, term by term (derivation: docs/batch_norm.md). They are the oracles of the fused
// kernels, and the second-order one is the fused second-order op's own gradient, so every
// order stays differentiable. Computed in float32 for 16-bit inputs (results rounded back).
#include "batch_norm_internal.hpp"
#include "core/src/profiler/record.hpp"
#include "xgrad/ops/elementwise.hpp"
#include "xgrad/ops/reduce.hpp"
#include "xgrad/ops/shape.hpp"

namespace xgrad::detail
{
    namespace
    {
        tensor to_compute(const tensor& t) { return cast(t, compute_dtype(t.dtype())); }
    }

    batch_norm_grad_result batch_norm_grad_composite(const tensor& dy, const tensor& x, const tensor& scale,
                                                     const tensor& saved_mean, const tensor& saved_var,
                                                     const batch_norm_attrs& attrs)
    {
        XGRAD_PROFILE_OP("batch_norm_grad_composite");
        const batch_norm_layout L = check_bn_grad(dy, x, scale, saved_mean, saved_var, attrs,
                                                  "batch_norm_grad_composite");
        const shape_type ch = L.channel_shape();
        const axes_type axes = L.reduce_axes();
        const double R = static_cast<double>(L.count());
        const tensor dyc = to_compute(dy), xv = to_compute(x);
        const tensor gamma = reshape(scale, ch), mu = reshape(saved_mean, ch);
        const tensor r = rsqrt(reshape(saved_var, ch) + static_cast<double>(attrs.epsilon));
        const tensor xc = xv - mu;
        batch_norm_grad_result out;
        const tensor sum_dy = sum(dyc, axes, true), sum_dy_xc = sum(dyc * xc, axes, true);
        if (attrs.is_training)
            // dx = scale r (dyc - Σdy/R - xc r² Σ(dyc xc)/R)
            out.dx = gamma * r * (dyc - sum_dy / R - xc * (r * r) * sum_dy_xc / R);
        else
            out.dx = dyc * gamma * r; // the statistics are constants
        out.dx = cast(out.dx, x.dtype());
        out.dscale = reshape(sum_dy_xc * r, {L.C});
        out.doffset = reshape(sum_dy, {L.C});
        return out;
    }

    batch_norm_grad_grad_result batch_norm_grad_grad_composite(const tensor& A, const tensor& a, const tensor& b,
                                                               const tensor& dy, const tensor& x, const tensor& scale,
                                                               const tensor& saved_mean, const tensor& saved_var,
                                                               const batch_norm_attrs& attrs)
    {
        XGRAD_PROFILE_OP("batch_norm_grad_grad_composite");
        const char* op = "batch_norm_grad_grad_composite";
        const batch_norm_layout L = check_bn_grad(dy, x, scale, saved_mean, saved_var, attrs, op);
        detail::check_bn_same(L, x, {{"A", A}}, {{"a", a}, {"b", b}}, op);
        const shape_type ch = L.channel_shape();
        const axes_type axes = L.reduce_axes();
        const tensor g = to_compute(dy), xv = to_compute(x), Av = to_compute(A);
        const tensor gamma = reshape(scale, ch), ac = reshape(a, ch), bc = reshape(b, ch);
        const double eps = attrs.epsilon;
        auto channel_mean = [&](const tensor& t) { return mean(t, axes, true); };
        batch_norm_grad_grad_result out;
        if (attrs.is_training)
        {
            // The statistics are functions of x (the total derivative).
            const tensor m = channel_mean(xv);
            const tensor r = rsqrt(channel_mean(square(xv - m)) + eps);
            const tensor xh = (xv - m) * r;
            const tensor g_mean = channel_mean(g), A_mean = channel_mean(Av);
            const tensor Axh = channel_mean(Av * xh), gxh = channel_mean(g * xh);
            const tensor gc = g - g_mean, Ac = Av - A_mean;
            const tensor A_gc = channel_mean(Av * gc);
            // d/dg = γ r (A - Ā - xh mean(A xh)) + a xh + b
            out.d_dy = gamma * r * (Ac - xh * Axh) + ac * xh + bc;
            // d/dx = γ r² [3 xh mean(A xh) mean(g xh) - xh mean(A (g - ḡ)) - (A - Ā) mean(g xh)
            //              - (g - ḡ) mean(A xh)] + a r (g - ḡ - xh mean(g xh))
            out.d_x = gamma * (r * r) * (3.0 * xh * Axh * gxh - xh * A_gc - Ac * gxh - gc * Axh) +
                      ac * r * (gc - xh * gxh);
            // d/dγ = r Σ A (g - ḡ - xh mean(g xh))
            out.d_scale = reshape(r * sum(Av * (gc - xh * gxh), axes, true), {L.C});
        }
        else
        {
            const tensor mu = reshape(saved_mean, ch);
            const tensor r = rsqrt(reshape(saved_var, ch) + eps);
            out.d_dy = gamma * r * Av + ac * (xv - mu) * r + bc;
            out.d_x = ac * g * r;
            out.d_scale = reshape(r * sum(Av * g, axes, true), {L.C});
        }
        out.d_dy = cast(out.d_dy, x.dtype());
        out.d_x = cast(out.d_x, x.dtype());
        return out;
    }
}
