// The fused batch-norm ops, with the semantics of TensorFlow's FusedBatchNormV3 (forward) and
// FusedBatchNormGradV3/V2 (gradient), and the gradient of the gradient, each a fused kernel call
// with its own autograd node (the TensorFlow-shaped classes over them: core/src/compat/):
//
//   fused_batch_norm  --backward-->  fused_batch_norm_grad  --backward-->
//   fused_batch_norm_grad_grad  --backward-->  the composite formula (batch_norm_composite.cpp),
//   differentiated by the engine to any further order.
//
// The ReLU-fused pair joins that chain one step down:
//
//   fused_batch_norm_relu  --backward-->  fused_batch_norm_relu_grad  --backward-->
//   fused_batch_norm_grad_grad at the masked dy (d/ddy masked again)
//
// and the ReLU + max-pool one beside it, whose backward scatters the masked pooled gradient:
//
//   fused_batch_norm_relu_max_pool2d  --backward-->  fused_batch_norm_relu_max_pool2d_grad
//   --backward-->  fused_batch_norm_grad_grad at the scattered masked gradient (d/dg gathered
//   back at the windows' positions and masked)
//
// Formulas and their derivation: docs/batch_norm.md. Argument checks: batch_norm_check.cpp.
// Per-channel arithmetic on [C] vectors uses xgrad's ops (unrecorded); everything of x's size
// goes through the backend's batch-norm kernels.
#include <cmath>
#include <limits>

#include "../detail.hpp"
#include "batch_norm_internal.hpp"
#include "conv_internal.hpp"
#include "core/src/profiler/record.hpp"
#include "xgrad/autograd.hpp"
#include "xgrad/factories.hpp"
#include "xgrad/ops/elementwise.hpp"
#include "xgrad/ops/index.hpp"
#include "xgrad/ops/shape.hpp"
#include "xgrad/ops/storage.hpp"

namespace xgrad
{
    namespace
    {

        /// r = 1/sqrt(var + eps) on a [C] vector (statistics dtype).
        tensor inv_std(const tensor& var, float eps) { return rsqrt(var + static_cast<double>(eps)); }

        const detail::backend_kernels& bn_kernels(const tensor& x) { return detail::backend_for(x.device()); }

    }

    namespace
    {
        /// The forward on validated arguments (both ops of section 1.2 / 1.8 of
        /// docs/batch_norm.md); relu: the kernels apply max(y, 0) as they store y.
        batch_norm_forward_result run_forward(const batch_norm_layout& L, const tensor& x, const tensor& scale,
                                              const tensor& offset, const tensor& mean, const tensor& variance,
                                              const batch_norm_attrs& attrs, bool relu)
        {
            const dtype sdt = batch_norm_stats_dtype(x.dtype());
            const tensor xc = detail::raw_contiguous(x);
            const tensor sc = detail::raw_contiguous(scale), oc = detail::raw_contiguous(offset);
            const std::int64_t R = L.count();
            const double nan = std::numeric_limits<double>::quiet_NaN();
            batch_norm_forward_result out;
            out.y = detail::empty(x.shape(), x.dtype(), x.device());
            no_grad guard; // per-channel bookkeeping below is not part of the graph
            if (attrs.is_training)
            {
                // Empty x: zero reserve spaces (the kernel is not called).
                tensor m = R > 0 ? detail::empty({L.C}, sdt, x.device()) : zeros({L.C}, sdt, x.device());
                tensor v = R > 0 ? detail::empty({L.C}, sdt, x.device()) : zeros({L.C}, sdt, x.device());
                if (R > 0) // moments and normalisation, x read from memory once where it fits
                    bn_kernels(x).bn_forward_training(out.y.data_ptr(), m.data_ptr(), v.data_ptr(), xc.data_ptr(),
                                                      sc.data_ptr(), oc.data_ptr(), attrs.epsilon, relu, x.dtype(),
                                                      L.outer, L.C, L.inner);
                // Running statistics with Bessel's correction k = R / max(R - 1, 1).
                const double k = static_cast<double>(R) / static_cast<double>(std::max<std::int64_t>(R - 1, 1));
                const double f = attrs.exponential_avg_factor;
                if (R == 0)
                {
                    out.running_mean = full({L.C}, nan, sdt, x.device());
                    out.running_var = full({L.C}, nan, sdt, x.device());
                }
                else if (f == 1.0)
                {
                    out.running_mean = detail::copy_of(m);
                    out.running_var = v * k;
                }
                else
                {
                    out.running_mean = mean * (1.0 - f) + m * f;
                    out.running_var = variance * (1.0 - f) + v * (f * k);
                }
                out.saved_mean = m;
                out.saved_var = v;
            }
            else if (R == 0)
            {
                out.running_mean = full({L.C}, nan, sdt, x.device());
                out.running_var = full({L.C}, nan, sdt, x.device());
                out.saved_mean = zeros({L.C}, sdt, x.device());
                out.saved_var = zeros({L.C}, sdt, x.device());
            }
            else
            {
                const tensor mc = detail::raw_contiguous(mean), vc = detail::raw_contiguous(variance);
                bn_kernels(x).bn_normalize(out.y.data_ptr(), xc.data_ptr(), sc.data_ptr(), oc.data_ptr(), mc.data_ptr(),
                                           vc.data_ptr(), attrs.epsilon, relu, x.dtype(), L.outer, L.C, L.inner);
                out.running_mean = detail::copy_of(mc);
                out.running_var = detail::copy_of(vc);
                out.saved_mean = detail::copy_of(mc);
                out.saved_var = detail::copy_of(vc);
            }
            return out;
        }
    }

    batch_norm_forward_result detail::fused_batch_norm(const tensor& x, const tensor& scale, const tensor& offset,
                                                       const tensor& mean, const tensor& variance,
                                                       const batch_norm_attrs& attrs, const char* op)
    {
        XGRAD_PROFILE_OP("fused_batch_norm");
        const batch_norm_layout L = detail::check_bn_forward(x, scale, offset, mean, variance, attrs, op);
        batch_norm_forward_result out = run_forward(L, x, scale, offset, mean, variance, attrs, false);
        record(
            "fused_batch_norm", {x, scale, offset}, {out.y},
            [x, scale, sm = out.saved_mean, sv = out.saved_var, attrs](function_node&, const std::vector<tensor>& g) {
                const batch_norm_grad_result r = xgrad::fused_batch_norm_grad(g[0], x, scale, sm, sv, attrs);
                return std::vector<tensor>{r.dx, r.dscale, r.doffset};
            });
        return out;
    }

    batch_norm_forward_result fused_batch_norm(const tensor& x, const tensor& scale, const tensor& offset,
                                               const tensor& mean, const tensor& variance,
                                               const batch_norm_attrs& attrs)
    {
        return detail::fused_batch_norm(x, scale, offset, mean, variance, attrs, "fused_batch_norm");
    }

    batch_norm_moments_result batch_norm_moments(const tensor& x, const batch_norm_attrs& attrs)
    {
        XGRAD_PROFILE_OP("batch_norm_moments");
        const batch_norm_layout L = detail::check_bn_input(x, attrs, "batch_norm_moments");
        const dtype sdt = batch_norm_stats_dtype(x.dtype());
        batch_norm_moments_result out{detail::empty({L.C}, sdt, x.device()), detail::empty({L.C}, sdt, x.device())};
        const tensor xc = detail::raw_contiguous(x);
        bn_kernels(x).bn_moments(out.mean.data_ptr(), out.variance.data_ptr(), xc.data_ptr(), x.dtype(), L.outer, L.C,
                                 L.inner);
        return out;
    }

    batch_norm_forward_result fused_batch_norm_relu(const tensor& x, const tensor& scale, const tensor& offset,
                                                    const tensor& mean, const tensor& variance,
                                                    const batch_norm_attrs& attrs)
    {
        XGRAD_PROFILE_OP("fused_batch_norm_relu");
        const batch_norm_layout L = detail::check_bn_forward(x, scale, offset, mean, variance, attrs,
                                                             "fused_batch_norm_relu");
        batch_norm_forward_result out = run_forward(L, x, scale, offset, mean, variance, attrs, true);
        // The backward needs y for ReLU's mask; saved without the output -> node -> output cycle.
        record("fused_batch_norm_relu", {x, scale, offset}, {out.y},
               [x, scale, ys = save_output(out.y), rs1 = out.saved_mean, rs2 = out.saved_var,
                attrs](function_node&, const std::vector<tensor>& g) {
                   const batch_norm_grad_result r = fused_batch_norm_relu_grad(g[0], x, ys.m_data, scale, rs1, rs2,
                                                                               attrs);
                   return std::vector<tensor>{r.dx, r.dscale, r.doffset};
               });
        return out;
    }

    namespace
    {
        // The two phases of the training-mode gradient on validated arguments, for the public
        // two-phase API below (fused_batch_norm_grad runs both in one kernel call instead).
        batch_norm_grad_sums grad_reduce(const batch_norm_layout& L, const tensor& dy, const tensor& x,
                                         const tensor& saved_mean)
        {
            const dtype sdt = batch_norm_stats_dtype(x.dtype());
            batch_norm_grad_sums s{zeros({L.C}, sdt, x.device()), zeros({L.C}, sdt, x.device())};
            if (L.count() > 0)
            {
                const tensor dyc = detail::raw_contiguous(dy), xc = detail::raw_contiguous(x),
                             mc = detail::raw_contiguous(saved_mean);
                bn_kernels(x).bn_grad_reduce(s.sum_dy.data_ptr(), s.sum_dy_xc.data_ptr(), dyc.data_ptr(), xc.data_ptr(),
                                             mc.data_ptr(), x.dtype(), L.outer, L.C, L.inner);
            }
            return s;
        }

        batch_norm_grad_result grad_apply(const batch_norm_layout& L, const tensor& dy, const tensor& x,
                                          const tensor& scale, const tensor& saved_mean, const tensor& saved_var,
                                          const batch_norm_grad_sums& sums, std::int64_t count, float epsilon)
        {
            no_grad guard;
            batch_norm_grad_result r;
            r.dx = detail::empty(x.shape(), x.dtype(), x.device());
            if (L.count() > 0)
            {
                const tensor dyc = detail::raw_contiguous(dy), xc = detail::raw_contiguous(x),
                             sc = detail::raw_contiguous(scale), mc = detail::raw_contiguous(saved_mean),
                             vc = detail::raw_contiguous(saved_var), s1 = detail::raw_contiguous(sums.sum_dy),
                             s2 = detail::raw_contiguous(sums.sum_dy_xc);
                // The kernel divides the sums by its own R; scaling them by R / count makes it
                // divide by the global count instead.
                const double ratio = static_cast<double>(L.count()) / static_cast<double>(count);
                const tensor s1r = ratio == 1.0 ? s1 : s1 * ratio, s2r = ratio == 1.0 ? s2 : s2 * ratio;
                bn_kernels(x).bn_grad_apply(r.dx.data_ptr(), dyc.data_ptr(), xc.data_ptr(), sc.data_ptr(),
                                            mc.data_ptr(), vc.data_ptr(), s1r.data_ptr(), s2r.data_ptr(), epsilon,
                                            x.dtype(), L.outer, L.C, L.inner);
            }
            r.dscale = sums.sum_dy_xc * inv_std(saved_var, epsilon);
            r.doffset = detail::copy_of(sums.sum_dy);
            return r;
        }
    }

    batch_norm_grad_sums batch_norm_grad_reduce(const tensor& dy, const tensor& x, const tensor& saved_mean,
                                                const batch_norm_attrs& attrs)
    {
        XGRAD_PROFILE_OP("batch_norm_grad_reduce");
        const batch_norm_layout L = detail::check_bn_grad_args(dy, x, {{"saved_mean", saved_mean}}, attrs,
                                                               detail::bn_formats::all, "batch_norm_grad_reduce");
        return grad_reduce(L, dy, x, saved_mean);
    }

    batch_norm_grad_result batch_norm_grad_apply(const tensor& dy, const tensor& x, const tensor& scale,
                                                 const tensor& saved_mean, const tensor& saved_var,
                                                 const batch_norm_grad_sums& sums, std::int64_t count,
                                                 const batch_norm_attrs& attrs)
    {
        XGRAD_PROFILE_OP("batch_norm_grad_apply");
        const char* op = "batch_norm_grad_apply";
        const batch_norm_layout L = detail::check_bn_grad_args(dy, x,
                                                               {{"scale", scale},
                                                                {"saved_mean", saved_mean},
                                                                {"saved_var", saved_var},
                                                                {"sum_dy", sums.sum_dy},
                                                                {"sum_dy_xc", sums.sum_dy_xc}},
                                                               attrs, detail::bn_formats::all, op);
        if (count < L.count())
            throw xgrad::invalid_argument(std::string(op) + ": count " + std::to_string(count) +
                                          " is smaller than the elements per channel of x (" +
                                          std::to_string(L.count()) + ")");
        return grad_apply(L, dy, x, scale, saved_mean, saved_var, sums, count, attrs.epsilon);
    }

    namespace
    {
        /// The gradient on validated arguments: one kernel call that forms the sums and
        /// dx together (bn_grad_training or bn_grad_inference). y: the output of
        /// fused_batch_norm_relu, whose mask y > 0 the kernel applies to dy as it loads it, or
        /// undefined.
        batch_norm_grad_result fused_grad(const batch_norm_layout& L, const tensor& dy, const tensor& x,
                                          const tensor& y, const tensor& scale, const tensor& saved_mean,
                                          const tensor& saved_var, const batch_norm_attrs& attrs)
        {
            const dtype sdt = batch_norm_stats_dtype(x.dtype());
            no_grad guard;
            batch_norm_grad_result r;
            r.dx = detail::empty(x.shape(), x.dtype(), x.device());
            if (L.count() == 0)
            {
                r.dscale = zeros({L.C}, sdt, x.device());
                r.doffset = zeros({L.C}, sdt, x.device());
                return r;
            }
            const tensor dyc = detail::raw_contiguous(dy), xc = detail::raw_contiguous(x),
                         sc = detail::raw_contiguous(scale), mc = detail::raw_contiguous(saved_mean),
                         vc = detail::raw_contiguous(saved_var);
            const tensor yc = y.defined() ? detail::raw_contiguous(y) : tensor();
            const tensor sum_dy = detail::empty({L.C}, sdt, x.device()),
                         sum_dy_xc = detail::empty({L.C}, sdt, x.device());
            const auto& k = bn_kernels(x);
            (attrs.is_training ? k.bn_grad_training : k.bn_grad_inference)(
                r.dx.data_ptr(), sum_dy.data_ptr(), sum_dy_xc.data_ptr(), dyc.data_ptr(), xc.data_ptr(),
                y.defined() ? yc.data_ptr() : nullptr, sc.data_ptr(), mc.data_ptr(), vc.data_ptr(), attrs.epsilon,
                x.dtype(), L.outer, L.C, L.inner);
            r.dscale = sum_dy_xc * inv_std(vc, attrs.epsilon);
            r.doffset = sum_dy;
            return r;
        }
    }

    batch_norm_grad_result detail::fused_batch_norm_grad(const tensor& dy, const tensor& x, const tensor& scale,
                                                         const tensor& saved_mean, const tensor& saved_var,
                                                         const batch_norm_attrs& attrs, bn_formats formats,
                                                         const bn_grad_names& names, const char* op)
    {
        XGRAD_PROFILE_OP("fused_batch_norm_grad");
        const batch_norm_layout L = detail::check_bn_grad(dy, x, scale, saved_mean, saved_var, attrs, op, formats,
                                                          names);
        batch_norm_grad_result r = fused_grad(L, dy, x, tensor(), scale, saved_mean, saved_var, attrs);
        record("fused_batch_norm_grad", {dy, x, scale}, {r.dx, r.dscale, r.doffset},
               [dy, x, scale, saved_mean, saved_var, attrs](function_node&, const std::vector<tensor>& g) {
                   const batch_norm_grad_grad_result gg = fused_batch_norm_grad_grad(g[0], g[1], g[2], dy, x, scale,
                                                                                     saved_mean, saved_var, attrs);
                   return std::vector<tensor>{gg.d_dy, gg.d_x, gg.d_scale};
               });
        return r;
    }

    batch_norm_grad_result fused_batch_norm_grad(const tensor& dy, const tensor& x, const tensor& scale,
                                                 const tensor& saved_mean, const tensor& saved_var,
                                                 const batch_norm_attrs& attrs)
    {
        return detail::fused_batch_norm_grad(dy, x, scale, saved_mean, saved_var, attrs, detail::bn_formats::all,
                                             detail::native_grad_names, "fused_batch_norm_grad");
    }

    batch_norm_grad_result fused_batch_norm_relu_grad(const tensor& dy, const tensor& x, const tensor& y,
                                                      const tensor& scale, const tensor& saved_mean,
                                                      const tensor& saved_var, const batch_norm_attrs& attrs)
    {
        XGRAD_PROFILE_OP("fused_batch_norm_relu_grad");
        const char* op = "fused_batch_norm_relu_grad";
        const batch_norm_layout L = detail::check_bn_grad(dy, x, scale, saved_mean, saved_var, attrs, op);
        detail::check_bn_same(L, x, {{"y", y}}, {}, op);
        batch_norm_grad_result r = fused_grad(L, dy, x, y, scale, saved_mean, saved_var, attrs);
        // This op is fused_batch_norm_grad at g = where(y > 0, dy, 0). The mask is piecewise
        // constant in x (zero derivative almost everywhere), so the vector-Jacobian product is
        // fused_batch_norm_grad_grad at that g, with its d/dg masked by the chain rule through
        // the where. Both are recorded ops, so this backward differentiates again.
        record("fused_batch_norm_relu_grad", {dy, x, scale}, {r.dx, r.dscale, r.doffset},
               [dy, x, yd = y.detach(), scale, saved_mean, saved_var, attrs](function_node&,
                                                                             const std::vector<tensor>& g) {
                   const tensor zero = scalar_like(yd, 0.0), mask = gt(yd, zero);
                   const tensor g_masked = where(mask, dy, zero);
                   const batch_norm_grad_grad_result gg =
                       fused_batch_norm_grad_grad(g[0], g[1], g[2], g_masked, x, scale, saved_mean, saved_var, attrs);
                   return std::vector<tensor>{where(mask, gg.d_dy, zero), gg.d_x, gg.d_scale};
               });
        return r;
    }

    namespace
    {
        /// The backward of fused_batch_norm_relu_max_pool2d, recorded as its own node. g is
        /// the pooled output's gradient; ReLU's mask at each window's chosen element is
        /// (pooled > 0), the other elements get no gradient from the pool anyway, so
        /// dy = scatter(where(pooled > 0, g, 0)) is bit for bit the masked cotangent that
        /// fused_batch_norm_relu_grad would form from the pool's scatter and the full-size y,
        /// and one batch-norm gradient call on it finishes the job, reading dy and x only.
        /// The scatter is linear (its adjoint is take at the same positions) and the mask
        /// piecewise constant, so the vector-Jacobian product is fused_batch_norm_grad_grad at
        /// that dy, with d/dg = where(pooled > 0, take(d/ddy, positions), 0): recorded ops
        /// only, so this differentiates again to any order.
        batch_norm_grad_result relu_max_pool_grad(const tensor& g, const tensor& x, const tensor& pooled,
                                                  const detail::max_pool_picks& picks, const tensor& scale,
                                                  const tensor& saved_mean, const tensor& saved_var,
                                                  const batch_norm_attrs& attrs)
        {
            XGRAD_PROFILE_OP("fused_batch_norm_relu_max_pool2d_grad");
            const char* op = "fused_batch_norm_relu_max_pool2d_grad";
            tensor dy;
            {
                no_grad guard;
                dy = detail::max_pool_scatter(g, picks, pooled);
            }
            const batch_norm_layout L = detail::check_bn_grad(dy, x, scale, saved_mean, saved_var, attrs, op);
            batch_norm_grad_result r = fused_grad(L, dy, x, tensor(), scale, saved_mean, saved_var, attrs);
            record(op, {g, x, scale}, {r.dx, r.dscale, r.doffset},
                   [g, x, pd = pooled.detach(), picks, scale, saved_mean, saved_var,
                    attrs](function_node&, const std::vector<tensor>& gg) {
                       const tensor zero = scalar_like(pd, 0.0), mask = gt(pd, zero);
                       const tensor dy_masked = detail::max_pool_scatter(g, picks, pd);
                       const batch_norm_grad_grad_result q = fused_batch_norm_grad_grad(
                           gg[0], gg[1], gg[2], dy_masked, x, scale, saved_mean, saved_var, attrs);
                       return std::vector<tensor>{where(mask, take(q.d_dy, picks.idx), zero), q.d_x, q.d_scale};
                   });
            return r;
        }
    }

    batch_norm_forward_result fused_batch_norm_relu_max_pool2d(const tensor& x, const tensor& scale,
                                                               const tensor& offset, const tensor& mean,
                                                               const tensor& variance, const batch_norm_attrs& attrs,
                                                               const pool2d_params& pool)
    {
        XGRAD_PROFILE_OP("fused_batch_norm_relu_max_pool2d");
        const char* op = "fused_batch_norm_relu_max_pool2d";
        const batch_norm_layout L = detail::check_bn_forward(x, scale, offset, mean, variance, attrs, op);
        if (x.dim() != 4)
            throw xgrad::invalid_argument(
                std::string(op) + ": x must be rank 4 (data_format \"NHWC\" or \"NCHW\"), got " +
                shape_to_string(x.shape()) + " with data_format \"" + attrs.data_format + "\"");
        detail::max_pool_check(x, pool, attrs.data_format, op); // y has x's shape
        batch_norm_forward_result out = run_forward(L, x, scale, offset, mean, variance, attrs, true);
        detail::max_pool_picked pooled;
        {
            no_grad guard;
            pooled = detail::max_pool_pick(out.y, pool, attrs.data_format, op);
        }
        // The full-size y goes out of scope here: the backward needs the pooled maxima (saved
        // without the output -> node -> output cycle), their positions and x.
        out.y = pooled.out;
        record(op, {x, scale, offset}, {out.y},
               [x, scale, ys = save_output(out.y), picks = std::move(pooled.picks), rs1 = out.saved_mean,
                rs2 = out.saved_var, attrs](function_node&, const std::vector<tensor>& g) {
                   const batch_norm_grad_result r = relu_max_pool_grad(g[0], x, ys.m_data, picks, scale, rs1, rs2,
                                                                       attrs);
                   return std::vector<tensor>{r.dx, r.dscale, r.doffset};
               });
        return out;
    }

    batch_norm_grad_grad_result fused_batch_norm_grad_grad(const tensor& A, const tensor& a, const tensor& b,
                                                           const tensor& dy, const tensor& x, const tensor& scale,
                                                           const tensor& saved_mean, const tensor& saved_var,
                                                           const batch_norm_attrs& attrs)
    {
        XGRAD_PROFILE_OP("fused_batch_norm_grad_grad");
        const char* op = "fused_batch_norm_grad_grad";
        const batch_norm_layout L = detail::check_bn_grad(dy, x, scale, saved_mean, saved_var, attrs, op);
        detail::check_bn_same(L, x, {{"A", A}}, {{"a", a}, {"b", b}}, op);
        const dtype sdt = batch_norm_stats_dtype(x.dtype());
        batch_norm_grad_grad_result r;
        r.d_dy = detail::empty(x.shape(), x.dtype(), x.device());
        r.d_x = detail::empty(x.shape(), x.dtype(), x.device());
        {
            no_grad guard;
            if (L.count() == 0)
                r.d_scale = zeros({L.C}, sdt, x.device());
            else
            {
                const tensor Ac = detail::raw_contiguous(A), gc = detail::raw_contiguous(dy),
                             xc = detail::raw_contiguous(x), sc = detail::raw_contiguous(scale),
                             mc = detail::raw_contiguous(saved_mean), vc = detail::raw_contiguous(saved_var),
                             ac = detail::raw_contiguous(a), bc = detail::raw_contiguous(b);
                const tensor sums = detail::empty({5, L.C}, sdt, x.device());
                bn_kernels(x).bn_grad_grad_reduce(sums.data_ptr(), Ac.data_ptr(), gc.data_ptr(), xc.data_ptr(),
                                                  mc.data_ptr(), vc.data_ptr(), attrs.epsilon, x.dtype(), L.outer, L.C,
                                                  L.inner);
                bn_kernels(x).bn_grad_grad_apply(r.d_dy.data_ptr(), r.d_x.data_ptr(), Ac.data_ptr(), gc.data_ptr(),
                                                 xc.data_ptr(), sc.data_ptr(), mc.data_ptr(), vc.data_ptr(),
                                                 ac.data_ptr(), bc.data_ptr(), sums.data_ptr(), attrs.epsilon,
                                                 attrs.is_training, x.dtype(), L.outer, L.C, L.inner);
                // d/dscale from the sums: r Σ A (g - mean g - xh mean(g xh)) in training,
                // r Σ A g in inference.
                const tensor rr = inv_std(vc, attrs.epsilon);
                const tensor sum_g = sums.slice(0, 0, 1).reshape({L.C}), sum_gxh = sums.slice(0, 1, 2).reshape({L.C}),
                             sum_A = sums.slice(0, 2, 3).reshape({L.C}), sum_Axh = sums.slice(0, 3, 4).reshape({L.C}),
                             sum_Ag = sums.slice(0, 4, 5).reshape({L.C});
                const double R = static_cast<double>(L.count());
                r.d_scale = attrs.is_training ? rr * (sum_Ag - sum_g * sum_A / R - sum_gxh * sum_Axh / R) : rr * sum_Ag;
            }
            if (L.count() == 0)
            {
                r.d_dy = detail::empty(x.shape(), x.dtype(), x.device());
                r.d_x = detail::empty(x.shape(), x.dtype(), x.device());
            }
        }
        record(
            "fused_batch_norm_grad_grad", {A, a, b, dy, x, scale}, {r.d_dy, r.d_x, r.d_scale},
            [A, a, b, dy, x, scale, saved_mean, saved_var, attrs](function_node& self, const std::vector<tensor>& g) {
                // Third order and beyond: differentiate the composite formula of the same
                // function, built on identity aliases of the inputs (identity) so that the gradients
                // are taken w.r.t. exactly these uses of them.
                const bool create = is_grad_enabled();
                enable_grad on;
                const std::vector<tensor> ins = {A, a, b, dy, x, scale};
                std::vector<tensor> use(ins.size()), wrt;
                std::vector<std::size_t> wanted;
                for (std::size_t i = 0; i < ins.size(); ++i)
                {
                    if (self.needs_input_grad(i))
                    {
                        use[i] = identity(ins[i]);
                        wrt.push_back(use[i]);
                        wanted.push_back(i);
                    }
                    else
                        use[i] = ins[i].detach();
                }
                const batch_norm_grad_grad_result c = detail::batch_norm_grad_grad_composite(
                    use[0], use[1], use[2], use[3], use[4], use[5], saved_mean, saved_var, attrs);
                std::vector<tensor> roots, cotangents;
                const tensor outs[3] = {c.d_dy, c.d_x, c.d_scale};
                for (int k = 0; k < 3; ++k)
                    if (outs[k].requires_grad())
                    {
                        roots.push_back(outs[k]);
                        cotangents.push_back(g[static_cast<std::size_t>(k)]);
                    }
                std::vector<tensor> result(ins.size());
                if (roots.empty())
                    return result;
                const std::vector<tensor> gr = grad(roots, wrt, cotangents, create, create, true);
                for (std::size_t j = 0; j < wanted.size(); ++j)
                    result[wanted[j]] = gr[j];
                return result;
            });
        return r;
    }
}
