// The CUDA backend's fused batch-norm kernels (contract: backends/common/kernel_list.hpp;
// formulas: docs/batch_norm.md and the CPU reference kernels; the second-order
// coefficients: backends/common/batch_norm_coefficients.hpp, shared with the CPU kernels).
//
// Every kernel is made of two kinds of passes over memory:
// - per-channel sums (batch_norm_sums.hpp): P lanes per channel, then a fixed tree, then one
//   index per channel that turns the sums into the per-channel results and coefficients;
// - elementwise passes: one index per element, c = (i / inner) % C, reading per-channel
//   coefficients computed beforehand (in double from the statistics-type inputs, rounded once
//   to S), as the CPU's fast kernels do: every output is one affine expression
//   cA (A - mA) + cG (g - mG) + cX (x - mX) + cK with centred operands, in S.
// 16-bit tensors are converted on load and rounded once on store (element<T>); S is float for
// them and for float32, double for float64.
//
// Memory passes: bn_moments two (the mean, then the sums of d = x - mean and d^2: the corrected
// two-pass variance (sum d^2 - (sum d)^2 / R) / R, which also refines the mean by sum d / R, as
// the CPU does); bn_normalize, bn_grad_reduce, bn_grad_apply one each; bn_grad_inference one
// (its lanes write dx = dy scale r as they add the sums); bn_forward_training three and
// bn_grad_training two (the phases back to back: a channel's results need all of its rows).
// bn_grad_grad_reduce and bn_grad_grad_apply one each.
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "backends/common/batch_norm_coefficients.hpp"
#include "backends/cuda/batch_norm_sums.hpp"
#include "backends/cuda/device_loop.hpp"

namespace xgrad::cuda
{
    namespace bn_detail
    {
        // ---- what the stage-1 lanes add (Term functors of batch_norm_sums.hpp) ------------

        /// dy at k, or 0 where a fused ReLU's output y is not positive (y may be null).
        template <class T, class S>
        XGRAD_HOST_DEVICE inline S masked(const void* dy, const void* y, i64 k)
        {
            if (y && !(element<T>::load(y, k) > 0))
                return S(0);
            return element<T>::load(dy, k);
        }

        /// sum(x)
        template <class T, class S>
        struct sum_x
        {
            const void* x;
            XGRAD_HOST_DEVICE void channel(i64) {}
            XGRAD_HOST_DEVICE void operator()(i64 k, S (&acc)[1]) const { acc[0] += element<T>::load(x, k); }
        };

        /// sum(d), sum(d^2), d = x - m[c]
        template <class T, class S>
        struct sum_centred
        {
            const void* x;
            const S* m;
            S mc = 0;
            XGRAD_HOST_DEVICE void channel(i64 c) { mc = m[c]; }
            XGRAD_HOST_DEVICE void operator()(i64 k, S (&acc)[2]) const
            {
                const S d = element<T>::load(x, k) - mc;
                acc[0] += d;
                acc[1] += d * d;
            }
        };

        /// sum(g), sum(g (x - mean[c])) with g the masked dy; when dx is set, also
        /// dx = g * kf[c] (the inference gradient, written in the same pass).
        template <class T, class S>
        struct sum_grad
        {
            const void* dy;
            const void* x;
            const void* y;
            const S* mean;
            void* dx = nullptr;
            const S* kf = nullptr;
            S mc = 0, kc = 0;
            XGRAD_HOST_DEVICE void channel(i64 c)
            {
                mc = mean[c];
                if (dx)
                    kc = kf[c];
            }
            XGRAD_HOST_DEVICE void operator()(i64 k, S (&acc)[2]) const
            {
                const S g = masked<T, S>(dy, y, k);
                acc[0] += g;
                acc[1] += g * (element<T>::load(x, k) - mc);
                if (dx)
                    element<T>::store(dx, k, g * kc);
            }
        };

        /// sum(g), sum(g d), sum(A), sum(A d), sum(A g), d = x - mean[c] (the second and fourth
        /// become sums of g xh and A xh once multiplied by r in the finish).
        template <class T, class S>
        struct sum_grad_grad
        {
            const void* A;
            const void* g;
            const void* x;
            const S* mean;
            S mc = 0;
            XGRAD_HOST_DEVICE void channel(i64 c) { mc = mean[c]; }
            XGRAD_HOST_DEVICE void operator()(i64 k, S (&acc)[5]) const
            {
                const S d = element<T>::load(x, k) - mc;
                const S gv = element<T>::load(g, k), av = element<T>::load(A, k);
                acc[0] += gv;
                acc[1] += gv * d;
                acc[2] += av;
                acc[3] += av * d;
                acc[4] += av * gv;
            }
        };

        // ---- per-channel coefficients (double, rounded once to S) -------------------------

        using kernels::bn_inv_std;

        /// y = a (x - m) + b: coef[c] = scale r, coef[C + c] = mean, coef[2C + c] = offset.
        template <class S>
        XGRAD_HOST_DEVICE inline void normalize_coef(S* coef, i64 C, i64 c, const S* scale, const S* offset,
                                                     const S* mean, const S* var, double eps)
        {
            coef[c] = static_cast<S>(static_cast<double>(scale[c]) * bn_inv_std(static_cast<double>(var[c]), eps));
            coef[C + c] = mean[c];
            coef[2 * C + c] = offset[c];
        }

        /// Training dx = k1 (g - sum_dy/R) - k1 r^2 sum_dy_xc/R (x - mean), k1 = scale r:
        /// coef = [cG, mG, cX, mX] by C.
        template <class S>
        XGRAD_HOST_DEVICE inline void grad_apply_coef(S* coef, i64 C, i64 c, const S* scale, const S* mean,
                                                      const S* var, const S* sum_dy, const S* sum_dy_xc, double eps,
                                                      double R)
        {
            const double r = bn_inv_std(static_cast<double>(var[c]), eps), k1 = static_cast<double>(scale[c]) * r;
            coef[c] = static_cast<S>(k1);
            coef[C + c] = static_cast<S>(static_cast<double>(sum_dy[c]) / R);
            coef[2 * C + c] = static_cast<S>(-k1 * r * r * static_cast<double>(sum_dy_xc[c]) / R);
            coef[3 * C + c] = mean[c];
        }

        // ---- what the per-channel finish does with the sums (Finish functors) -------------

        /// Moments, pass 1: m[c] = sum(x) / R.
        template <class S>
        struct finish_mean
        {
            S* m;
            double R;
            XGRAD_HOST_DEVICE void operator()(i64 c, const double (&s)[1]) const { m[c] = static_cast<S>(s[0] / R); }
        };

        /// Moments, pass 2 (corrected two-pass): mean = m + sum d / R,
        /// var = (sum d^2 - (sum d)^2 / R) / R clamped at 0 (NaN kept); and, for the training
        /// forward, the normalize coefficients from the stored (rounded) mean and var.
        /// Float lanes overflow for finite data near the float range (x ~ 3e38: the sum is inf
        /// though the mean is finite; x ~ 1.5e19: the sum of d^2 is inf though the variance
        /// fits): a float channel whose statistics come out infinite or NaN is summed again,
        /// by this one index, element by element in double (the reference's arithmetic; data
        /// holding +-Inf or NaN gives the same non-finite result), as the CPU kernels do. It
        /// costs nothing for finite statistics.
        template <class T, class S>
        struct finish_moments
        {
            const S* m;
            S* mean;
            S* var;
            double R;
            const void* x = nullptr;
            i64 outer = 0, inner = 0;
            S* coef = nullptr; // normalize_coef table, or null
            const S* scale = nullptr;
            const S* offset = nullptr;
            double eps = 0;
            i64 C = 0;
            XGRAD_HOST_DEVICE void in_double(i64 c) const
            {
                double sum = 0, sq = 0;
                for (i64 o = 0; o < outer; ++o)
                    for (i64 i = 0; i < inner; ++i)
                        sum += static_cast<double>(element<T>::load(x, (o * C + c) * inner + i));
                const double mc = sum / R;
                for (i64 o = 0; o < outer; ++o)
                    for (i64 i = 0; i < inner; ++i)
                    {
                        const double d = static_cast<double>(element<T>::load(x, (o * C + c) * inner + i)) - mc;
                        sq += d * d;
                    }
                mean[c] = static_cast<S>(mc);
                var[c] = static_cast<S>(sq / R);
            }
            XGRAD_HOST_DEVICE void operator()(i64 c, const double (&s)[2]) const
            {
                const double sd = s[0], sq = s[1];
                const double v = (sq - sd * sd / R) / R;
                mean[c] = static_cast<S>(kernels::bn_refined_mean(static_cast<double>(m[c]), sd, R));
                var[c] = static_cast<S>(v < 0 ? 0.0 : v);
                if constexpr (std::is_same_v<S, float>)
                    if (!kernels::bn_is_finite(mean[c]) || !kernels::bn_is_finite(var[c]))
                        in_double(c);
                if (coef)
                    normalize_coef<S>(coef, C, c, scale, offset, mean, var, eps);
            }
        };

        /// The gradient sums; for the training gradient also the grad_apply coefficients from
        /// the stored (rounded) sums.
        template <class S>
        struct finish_grad
        {
            S* sum_dy;
            S* sum_dy_xc;
            S* coef = nullptr; // grad_apply_coef table, or null
            const S* scale = nullptr;
            const S* mean = nullptr;
            const S* var = nullptr;
            double eps = 0, R = 0;
            i64 C = 0;
            XGRAD_HOST_DEVICE void operator()(i64 c, const double (&s)[2]) const
            {
                sum_dy[c] = static_cast<S>(s[0]);
                sum_dy_xc[c] = static_cast<S>(s[1]);
                if (coef)
                    grad_apply_coef<S>(coef, C, c, scale, mean, var, sum_dy, sum_dy_xc, eps, R);
            }
        };

        /// sums[k * C + c]: sum(g), sum(g xh), sum(A), sum(A xh), sum(A g) (xh = (x - mean) r).
        template <class S>
        struct finish_grad_grad
        {
            S* sums;
            const S* var;
            double eps;
            i64 C;
            XGRAD_HOST_DEVICE void operator()(i64 c, const double (&s)[5]) const
            {
                const double r = bn_inv_std(static_cast<double>(var[c]), eps);
                sums[c] = static_cast<S>(s[0]);
                sums[C + c] = static_cast<S>(s[1] * r);
                sums[2 * C + c] = static_cast<S>(s[2]);
                sums[3 * C + c] = static_cast<S>(s[3] * r);
                sums[4 * C + c] = static_cast<S>(s[4]);
            }
        };

        // ---- the kernels, by storage type T and statistics type S ------------------------

        template <class T, class S>
        void moments(void* mean, void* var, const void* x, i64 outer, i64 C, i64 inner, S* coef = nullptr,
                     const void* scale = nullptr, const void* offset = nullptr, double eps = 0)
        {
            S* mo = static_cast<S*>(mean);
            S* vo = static_cast<S*>(var);
            const i64 R = outer * inner;
            if (R == 0)
            {
                const S nan = std::numeric_limits<S>::quiet_NaN();
                for_each_index(C, [=] XGRAD_HOST_DEVICE(i64 c) {
                    mo[c] = nan;
                    vo[c] = nan;
                });
                return;
            }
            const double dR = static_cast<double>(R);
            device_buffer mbuf(sizeof(S) * static_cast<std::size_t>(C));
            S* m = mbuf.as<S>();
            channel_sums<S, 1>(outer, C, inner, sum_x<T, S>{x}, finish_mean<S>{m, dR});
            finish_moments<T, S> fin{m, mo, vo, dR};
            fin.x = x;
            fin.outer = outer;
            fin.inner = inner;
            fin.coef = coef;
            fin.scale = static_cast<const S*>(scale);
            fin.offset = static_cast<const S*>(offset);
            fin.eps = eps;
            fin.C = C;
            channel_sums<S, 2>(outer, C, inner, sum_centred<T, S>{x, m}, fin);
        }

        /// y = coef[c] (x - coef[C + c]) + coef[2C + c], then ReLU (NaN kept) when relu.
        template <class T, class S>
        void normalize_apply(void* y, const void* x, const S* coef, bool relu, i64 outer, i64 C, i64 inner)
        {
            const channel_map ch(outer, C, inner);
            for_each_index(outer * C * inner, [=] XGRAD_HOST_DEVICE(i64 i) {
                const i64 c = ch(i);
                S v = coef[c] * (element<T>::load(x, i) - coef[C + c]) + coef[2 * C + c];
                if (relu && v < 0)
                    v = S(0);
                element<T>::store(y, i, v);
            });
        }

        template <class T, class S>
        void normalize(void* y, const void* x, const void* scale, const void* offset, const void* mean, const void* var,
                       double eps, bool relu, i64 outer, i64 C, i64 inner)
        {
            if (C <= 0 || outer * inner == 0)
                return;
            device_buffer cbuf(sizeof(S) * static_cast<std::size_t>(3 * C));
            S* coef = cbuf.as<S>();
            const S *sc = static_cast<const S*>(scale), *of = static_cast<const S*>(offset),
                    *mn = static_cast<const S*>(mean), *vr = static_cast<const S*>(var);
            for_each_index(C, [=] XGRAD_HOST_DEVICE(i64 c) { normalize_coef<S>(coef, C, c, sc, of, mn, vr, eps); });
            normalize_apply<T, S>(y, x, coef, relu, outer, C, inner);
        }

        template <class T, class S>
        void forward_training(void* y, void* mean, void* var, const void* x, const void* scale, const void* offset,
                              double eps, bool relu, i64 outer, i64 C, i64 inner)
        {
            if (C <= 0)
                return;
            if (outer * inner == 0)
                return moments<T, S>(mean, var, x, outer, C, inner); // NaN statistics, no elements
            device_buffer cbuf(sizeof(S) * static_cast<std::size_t>(3 * C));
            moments<T, S>(mean, var, x, outer, C, inner, cbuf.as<S>(), scale, offset, eps);
            normalize_apply<T, S>(y, x, cbuf.as<S>(), relu, outer, C, inner);
        }

        /// The gradient sums (masked by y when given); with coef, also the grad_apply table.
        template <class T, class S>
        void grad_sums(void* sum_dy, void* sum_dy_xc, const void* dy, const void* x, const void* y, const void* mean,
                       i64 outer, i64 C, i64 inner, S* coef = nullptr, const void* scale = nullptr,
                       const void* var = nullptr, double eps = 0)
        {
            finish_grad<S> fin{static_cast<S*>(sum_dy), static_cast<S*>(sum_dy_xc)};
            fin.coef = coef;
            fin.scale = static_cast<const S*>(scale);
            fin.mean = static_cast<const S*>(mean);
            fin.var = static_cast<const S*>(var);
            fin.eps = eps;
            fin.R = static_cast<double>(outer * inner);
            fin.C = C;
            channel_sums<S, 2>(outer, C, inner, sum_grad<T, S>{dy, x, y, static_cast<const S*>(mean)}, fin);
        }

        /// dx = cG (g - mG) + cX (x - mX), g = dy masked by y when given.
        template <class T, class S>
        void grad_apply_pass(void* dx, const void* dy, const void* x, const void* y, const S* coef, i64 outer, i64 C,
                             i64 inner)
        {
            const channel_map ch(outer, C, inner);
            for_each_index(outer * C * inner, [=] XGRAD_HOST_DEVICE(i64 i) {
                const i64 c = ch(i);
                const S g = masked<T, S>(dy, y, i);
                const S v = coef[c] * (g - coef[C + c]) + coef[2 * C + c] * (element<T>::load(x, i) - coef[3 * C + c]);
                element<T>::store(dx, i, v);
            });
        }

        template <class T, class S>
        void grad_apply(void* dx, const void* dy, const void* x, const void* scale, const void* mean, const void* var,
                        const void* sum_dy, const void* sum_dy_xc, double eps, i64 outer, i64 C, i64 inner)
        {
            if (C <= 0 || outer * inner == 0)
                return;
            device_buffer cbuf(sizeof(S) * static_cast<std::size_t>(4 * C));
            S* coef = cbuf.as<S>();
            const S *sc = static_cast<const S*>(scale), *mn = static_cast<const S*>(mean),
                    *vr = static_cast<const S*>(var), *s1 = static_cast<const S*>(sum_dy),
                    *s2 = static_cast<const S*>(sum_dy_xc);
            const double R = static_cast<double>(outer * inner);
            for_each_index(
                C, [=] XGRAD_HOST_DEVICE(i64 c) { grad_apply_coef<S>(coef, C, c, sc, mn, vr, s1, s2, eps, R); });
            grad_apply_pass<T, S>(dx, dy, x, nullptr, coef, outer, C, inner);
        }

        template <class T, class S>
        void grad_training(void* dx, void* sum_dy, void* sum_dy_xc, const void* dy, const void* x, const void* y,
                           const void* scale, const void* mean, const void* var, double eps, i64 outer, i64 C,
                           i64 inner)
        {
            if (C <= 0)
                return;
            device_buffer cbuf(sizeof(S) * static_cast<std::size_t>(4 * C));
            grad_sums<T, S>(sum_dy, sum_dy_xc, dy, x, y, mean, outer, C, inner, cbuf.as<S>(), scale, var, eps);
            if (outer * inner > 0)
                grad_apply_pass<T, S>(dx, dy, x, y, cbuf.as<S>(), outer, C, inner);
        }

        template <class T, class S>
        void grad_inference(void* dx, void* sum_dy, void* sum_dy_xc, const void* dy, const void* x, const void* y,
                            const void* scale, const void* mean, const void* var, double eps, i64 outer, i64 C,
                            i64 inner)
        {
            if (C <= 0)
                return;
            // kf = scale r per channel; the lanes write dx = g kf as they add the sums.
            device_buffer kbuf(sizeof(S) * static_cast<std::size_t>(C));
            S* kf = kbuf.as<S>();
            const S *sc = static_cast<const S*>(scale), *vr = static_cast<const S*>(var);
            for_each_index(C, [=] XGRAD_HOST_DEVICE(i64 c) {
                kf[c] = static_cast<S>(static_cast<double>(sc[c]) * bn_inv_std(static_cast<double>(vr[c]), eps));
            });
            sum_grad<T, S> term{dy, x, y, static_cast<const S*>(mean)};
            term.dx = dx;
            term.kf = kf;
            channel_sums<S, 2>(outer, C, inner, term,
                               finish_grad<S>{static_cast<S*>(sum_dy), static_cast<S*>(sum_dy_xc)});
        }

        template <class T, class S>
        void grad_grad_reduce(void* sums, const void* A, const void* g, const void* x, const void* mean,
                              const void* var, double eps, i64 outer, i64 C, i64 inner)
        {
            channel_sums<S, 5>(outer, C, inner, sum_grad_grad<T, S>{A, g, x, static_cast<const S*>(mean)},
                               finish_grad_grad<S>{static_cast<S*>(sums), static_cast<const S*>(var), eps, C});
        }

        /// Second-order coefficients (backends/common/batch_norm_coefficients.hpp), by C:
        /// d_g = cg[cA] (A - cg[mA]) + cg[cX] (x - cg[mX]) + cg[cK];
        /// d_x = cx[cA] (A - cx[mA]) + cx[cG] (g - cx[mG]) + cx[cX] (x - cx[mX]) (training),
        ///       cx[cG] g (inference).
        // The slots of the coefficient tables (backends/common/batch_norm_coefficients.hpp).
        using namespace kernels::bn_slot;
        constexpr int n_gg = kernels::bn_slot::count;

        template <class T, class S>
        void grad_grad_apply(void* d_g, void* d_x, const void* A, const void* g, const void* x, const void* scale,
                             const void* mean, const void* var, const void* a, const void* b, const void* sums,
                             double eps, bool training, i64 outer, i64 C, i64 inner)
        {
            if (C <= 0 || outer * inner == 0 || (!d_g && !d_x))
                return;
            device_buffer cbuf(sizeof(S) * static_cast<std::size_t>(2 * n_gg * C));
            S* cg = cbuf.as<S>();
            S* cx = cg + n_gg * C;
            const S *sc = static_cast<const S*>(scale), *mn = static_cast<const S*>(mean),
                    *vr = static_cast<const S*>(var), *ap = static_cast<const S*>(a), *bp = static_cast<const S*>(b),
                    *sp = static_cast<const S*>(sums);
            const double R = static_cast<double>(outer * inner);
            for_each_index(C, [=] XGRAD_HOST_DEVICE(i64 c) {
                kernels::bn_grad_grad_sums cs{}; // read in training only
                if (training)
                    cs = {sp[c], sp[C + c], sp[2 * C + c], sp[3 * C + c], sp[4 * C + c]};
                const auto k = kernels::bn_grad_grad_coefficients_of(sc[c], mn[c], vr[c], eps, cs, ap[c], bp[c], R,
                                                                     training);
                kernels::bn_store_grad_grad_coefficients(cg, cx, C, c, k);
            });
            const channel_map ch(outer, C, inner);
            for_each_index(outer * C * inner, [=] XGRAD_HOST_DEVICE(i64 i) {
                const i64 c = ch(i);
                // Read only what the wanted outputs use: A and x feed d_g and the training d_x.
                const bool ax = d_g || training;
                const S av = ax ? element<T>::load(A, i) : S(0), xv = ax ? element<T>::load(x, i) : S(0);
                const S gv = d_x ? element<T>::load(g, i) : S(0);
                if (d_g)
                    element<T>::store(d_g, i,
                                      cg[cA * C + c] * (av - cg[mA * C + c]) + cg[cX * C + c] * (xv - cg[mX * C + c]) +
                                          cg[cK * C + c]);
                if (d_x)
                {
                    // Inference d_x depends on g alone (A and x, possibly non-finite, are not read).
                    S v = cx[cG * C + c] * (gv - cx[mG * C + c]);
                    if (training)
                        v = cx[cA * C + c] * (av - cx[mA * C + c]) + v + cx[cX * C + c] * (xv - cx[mX * C + c]);
                    element<T>::store(d_x, i, v);
                }
            });
        }
    }

// Calls bn_detail::FN<T, S>(args...) for the element type of xdt (float64 statistics in double,
// the others in float).
#define XGRAD_BN_CALL(xdt, FN, ...)                                                                                    \
    switch (xdt)                                                                                                       \
    {                                                                                                                  \
    case dtype::float32: return bn_detail::FN<float, float>(__VA_ARGS__);                                              \
    case dtype::float64: return bn_detail::FN<double, double>(__VA_ARGS__);                                            \
    case dtype::float16: return bn_detail::FN<float16_t, float>(__VA_ARGS__);                                          \
    case dtype::bfloat16: return bn_detail::FN<bfloat16_t, float>(__VA_ARGS__);                                        \
    default: return;                                                                                                   \
    }

    void bn_moments(void* mean, void* var, const void* x, dtype xdt, std::int64_t outer, std::int64_t C,
                    std::int64_t inner)
    {
        XGRAD_BN_CALL(xdt, moments, mean, var, x, outer, C, inner)
    }

    void bn_normalize(void* y, const void* x, const void* scale, const void* offset, const void* mean, const void* var,
                      double eps, bool relu, dtype xdt, std::int64_t outer, std::int64_t C, std::int64_t inner)
    {
        XGRAD_BN_CALL(xdt, normalize, y, x, scale, offset, mean, var, eps, relu, outer, C, inner)
    }

    void bn_forward_training(void* y, void* mean, void* var, const void* x, const void* scale, const void* offset,
                             double eps, bool relu, dtype xdt, std::int64_t outer, std::int64_t C, std::int64_t inner)
    {
        XGRAD_BN_CALL(xdt, forward_training, y, mean, var, x, scale, offset, eps, relu, outer, C, inner)
    }

    void bn_grad_reduce(void* sum_dy, void* sum_dy_xc, const void* dy, const void* x, const void* mean, dtype xdt,
                        std::int64_t outer, std::int64_t C, std::int64_t inner)
    {
        XGRAD_BN_CALL(xdt, grad_sums, sum_dy, sum_dy_xc, dy, x, nullptr, mean, outer, C, inner)
    }

    void bn_grad_apply(void* dx, const void* dy, const void* x, const void* scale, const void* mean, const void* var,
                       const void* sum_dy, const void* sum_dy_xc, double eps, dtype xdt, std::int64_t outer,
                       std::int64_t C, std::int64_t inner)
    {
        XGRAD_BN_CALL(xdt, grad_apply, dx, dy, x, scale, mean, var, sum_dy, sum_dy_xc, eps, outer, C, inner)
    }

    void bn_grad_training(void* dx, void* sum_dy, void* sum_dy_xc, const void* dy, const void* x, const void* y,
                          const void* scale, const void* mean, const void* var, double eps, dtype xdt,
                          std::int64_t outer, std::int64_t C, std::int64_t inner)
    {
        XGRAD_BN_CALL(xdt, grad_training, dx, sum_dy, sum_dy_xc, dy, x, y, scale, mean, var, eps, outer, C, inner)
    }

    void bn_grad_inference(void* dx, void* sum_dy, void* sum_dy_xc, const void* dy, const void* x, const void* y,
                           const void* scale, const void* mean, const void* var, double eps, dtype xdt,
                           std::int64_t outer, std::int64_t C, std::int64_t inner)
    {
        XGRAD_BN_CALL(xdt, grad_inference, dx, sum_dy, sum_dy_xc, dy, x, y, scale, mean, var, eps, outer, C, inner)
    }

    void bn_grad_grad_reduce(void* sums, const void* A, const void* g, const void* x, const void* mean, const void* var,
                             double eps, dtype xdt, std::int64_t outer, std::int64_t C, std::int64_t inner)
    {
        XGRAD_BN_CALL(xdt, grad_grad_reduce, sums, A, g, x, mean, var, eps, outer, C, inner)
    }

    void bn_grad_grad_apply(void* d_g, void* d_x, const void* A, const void* g, const void* x, const void* scale,
                            const void* mean, const void* var, const void* a, const void* b, const void* sums,
                            double eps, bool training, dtype xdt, std::int64_t outer, std::int64_t C,
                            std::int64_t inner)
    {
        XGRAD_BN_CALL(xdt, grad_grad_apply, d_g, d_x, A, g, x, scale, mean, var, a, b, sums, eps, training, outer, C,
                      inner)
    }
#undef XGRAD_BN_CALL
}
