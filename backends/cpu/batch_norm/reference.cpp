// Reference batch-norm kernels: the formulas of docs/batch_norm.md written as plain loops over
// [outer, C, inner], single-threaded, accumulating in double. The oracle the fast kernels are
// tested against; not meant to be fast.
#include <type_traits>
#include <vector>

#include "backends/common/batch_norm_coefficients.hpp"
#include "backends/common/convert.hpp"
#include "backends/cpu/cpu_kernels.hpp"

namespace xgrad::cpu::reference
{
    namespace
    {
        using detail::visit_with_stats;

        template <class T>
        double load(const void* p, std::int64_t i)
        {
            return detail::widen<double>(static_cast<const T*>(p)[i]);
        }

        template <class T>
        void store(void* p, std::int64_t i, double v)
        {
            // Round through the statistics type first, as the fast kernels compute in it.
            using S = std::conditional_t<std::is_same_v<T, double>, double, float>;
            static_cast<T*>(p)[i] = detail::convert<T>(static_cast<S>(v));
        }

        /// Calls f(index, c) for every element, in memory order.
        template <class F>
        void for_each(std::int64_t outer, std::int64_t C, std::int64_t inner, F&& f)
        {
            for (std::int64_t o = 0; o < outer; ++o)
                for (std::int64_t c = 0; c < C; ++c)
                    for (std::int64_t i = 0; i < inner; ++i)
                        f((o * C + c) * inner + i, c);
        }

        /// dy[k], or 0 where the fused ReLU's output y[k] is not positive (y may be null).
        template <class T>
        double masked_dy(const void* dy, const void* y, std::int64_t k)
        {
            return y && !(load<T>(y, k) > 0) ? 0.0 : load<T>(dy, k);
        }

        double inv_std(const void* var, std::int64_t c, double eps, bool is_double)
        {
            const double v = is_double ? static_cast<const double*>(var)[c] : static_cast<const float*>(var)[c];
            return kernels::bn_inv_std(v, eps);
        }
    }

    void bn_moments(void* mean, void* var, const void* x, dtype xdt, std::int64_t outer, std::int64_t C,
                    std::int64_t inner)
    {
        visit_with_stats(xdt, [&](auto t, auto s) {
            using T = decltype(t);
            using S = decltype(s);
            const double R = static_cast<double>(outer * inner);
            std::vector<double> sum(static_cast<std::size_t>(C), 0.0), sq(static_cast<std::size_t>(C), 0.0);
            for_each(outer, C, inner, [&](std::int64_t k, std::int64_t c) { sum[c] += load<T>(x, k); });
            for (std::int64_t c = 0; c < C; ++c)
                sum[c] /= R;
            for_each(outer, C, inner, [&](std::int64_t k, std::int64_t c) {
                const double d = load<T>(x, k) - sum[c];
                sq[c] += d * d;
            });
            for (std::int64_t c = 0; c < C; ++c)
            {
                static_cast<S*>(mean)[c] = static_cast<S>(sum[c]);
                static_cast<S*>(var)[c] = static_cast<S>(sq[c] / R);
            }
        });
    }

    void bn_normalize(void* y, const void* x, const void* scale, const void* offset, const void* mean, const void* var,
                      double eps, bool relu, dtype xdt, std::int64_t outer, std::int64_t C, std::int64_t inner)
    {
        visit_with_stats(xdt, [&](auto t, auto s) {
            using T = decltype(t);
            using S = decltype(s);
            const bool d = std::is_same_v<S, double>;
            for_each(outer, C, inner, [&](std::int64_t k, std::int64_t c) {
                const double r = inv_std(var, c, eps, d);
                const double v = (load<T>(x, k) - load<S>(mean, c)) * r * load<S>(scale, c) + load<S>(offset, c);
                store<T>(y, k, relu && v < 0 ? 0.0 : v); // NaN stays NaN
            });
        });
    }

    void bn_forward_training(void* y, void* mean, void* var, const void* x, const void* scale, const void* offset,
                             double eps, bool relu, dtype xdt, std::int64_t outer, std::int64_t C, std::int64_t inner)
    {
        bn_moments(mean, var, x, xdt, outer, C, inner);
        bn_normalize(y, x, scale, offset, mean, var, eps, relu, xdt, outer, C, inner);
    }

    namespace
    {
        void grad_reduce(void* sum_dy, void* sum_dy_xc, const void* dy, const void* y, const void* x, const void* mean,
                         dtype xdt, std::int64_t outer, std::int64_t C, std::int64_t inner)
        {
            visit_with_stats(xdt, [&](auto t, auto s) {
                using T = decltype(t);
                using S = decltype(s);
                std::vector<double> a(static_cast<std::size_t>(C), 0.0), b(static_cast<std::size_t>(C), 0.0);
                for_each(outer, C, inner, [&](std::int64_t k, std::int64_t c) {
                    const double g = masked_dy<T>(dy, y, k);
                    a[c] += g;
                    b[c] += g * (load<T>(x, k) - load<S>(mean, c));
                });
                for (std::int64_t c = 0; c < C; ++c)
                {
                    static_cast<S*>(sum_dy)[c] = static_cast<S>(a[c]);
                    static_cast<S*>(sum_dy_xc)[c] = static_cast<S>(b[c]);
                }
            });
        }

        void grad_apply(void* dx, const void* dy, const void* y, const void* x, const void* scale, const void* mean,
                        const void* var, const void* sum_dy, const void* sum_dy_xc, double eps, dtype xdt,
                        std::int64_t outer, std::int64_t C, std::int64_t inner)
        {
            visit_with_stats(xdt, [&](auto t, auto s) {
                using T = decltype(t);
                using S = decltype(s);
                const double R = static_cast<double>(outer * inner);
                for_each(outer, C, inner, [&](std::int64_t k, std::int64_t c) {
                    const double r = inv_std(var, c, eps, std::is_same_v<S, double>);
                    const double xc = load<T>(x, k) - load<S>(mean, c);
                    store<T>(
                        dx, k,
                        load<S>(scale, c) * r *
                            (masked_dy<T>(dy, y, k) - load<S>(sum_dy, c) / R - xc * r * r * load<S>(sum_dy_xc, c) / R));
                });
            });
        }
    }

    void bn_grad_reduce(void* sum_dy, void* sum_dy_xc, const void* dy, const void* x, const void* mean, dtype xdt,
                        std::int64_t outer, std::int64_t C, std::int64_t inner)
    {
        grad_reduce(sum_dy, sum_dy_xc, dy, nullptr, x, mean, xdt, outer, C, inner);
    }

    void bn_grad_apply(void* dx, const void* dy, const void* x, const void* scale, const void* mean, const void* var,
                       const void* sum_dy, const void* sum_dy_xc, double eps, dtype xdt, std::int64_t outer,
                       std::int64_t C, std::int64_t inner)
    {
        grad_apply(dx, dy, nullptr, x, scale, mean, var, sum_dy, sum_dy_xc, eps, xdt, outer, C, inner);
    }

    void bn_grad_training(void* dx, void* sum_dy, void* sum_dy_xc, const void* dy, const void* x, const void* y,
                          const void* scale, const void* mean, const void* var, double eps, dtype xdt,
                          std::int64_t outer, std::int64_t C, std::int64_t inner)
    {
        grad_reduce(sum_dy, sum_dy_xc, dy, y, x, mean, xdt, outer, C, inner);
        grad_apply(dx, dy, y, x, scale, mean, var, sum_dy, sum_dy_xc, eps, xdt, outer, C, inner);
    }

    void bn_grad_inference(void* dx, void* sum_dy, void* sum_dy_xc, const void* dy, const void* x, const void* y,
                           const void* scale, const void* mean, const void* var, double eps, dtype xdt,
                           std::int64_t outer, std::int64_t C, std::int64_t inner)
    {
        grad_reduce(sum_dy, sum_dy_xc, dy, y, x, mean, xdt, outer, C, inner);
        visit_with_stats(xdt, [&](auto t, auto s) {
            using T = decltype(t);
            using S = decltype(s);
            for_each(outer, C, inner, [&](std::int64_t k, std::int64_t c) {
                const double r = inv_std(var, c, eps, std::is_same_v<S, double>);
                store<T>(dx, k, masked_dy<T>(dy, y, k) * load<S>(scale, c) * r);
            });
        });
    }

    void bn_grad_grad_reduce(void* sums, const void* A, const void* g, const void* x, const void* mean, const void* var,
                             double eps, dtype xdt, std::int64_t outer, std::int64_t C, std::int64_t inner)
    {
        visit_with_stats(xdt, [&](auto t, auto s) {
            using T = decltype(t);
            using S = decltype(s);
            std::vector<double> acc(static_cast<std::size_t>(5 * C), 0.0);
            for_each(outer, C, inner, [&](std::int64_t k, std::int64_t c) {
                const double r = inv_std(var, c, eps, std::is_same_v<S, double>);
                const double xh = (load<T>(x, k) - load<S>(mean, c)) * r;
                const double gv = load<T>(g, k), av = load<T>(A, k);
                acc[c] += gv;
                acc[C + c] += gv * xh;
                acc[2 * C + c] += av;
                acc[3 * C + c] += av * xh;
                acc[4 * C + c] += av * gv;
            });
            for (std::int64_t i = 0; i < 5 * C; ++i)
                static_cast<S*>(sums)[i] = static_cast<S>(acc[i]);
        });
    }

    void bn_grad_grad_apply(void* d_g, void* d_x, const void* A, const void* g, const void* x, const void* scale,
                            const void* mean, const void* var, const void* a, const void* b, const void* sums,
                            double eps, bool training, dtype xdt, std::int64_t outer, std::int64_t C,
                            std::int64_t inner)
    {
        visit_with_stats(xdt, [&](auto t, auto s) {
            using T = decltype(t);
            using S = decltype(s);
            const double R = static_cast<double>(outer * inner);
            // Per channel: r, and in training the means of the five sums
            // (backends/common/batch_norm_coefficients.hpp).
            std::vector<kernels::bn_grad_grad_means> means(static_cast<std::size_t>(C));
            for (std::int64_t c = 0; c < C; ++c)
            {
                if (!training)
                {
                    means[c].r = inv_std(var, c, eps, std::is_same_v<S, double>);
                    continue;
                }
                const kernels::bn_grad_grad_sums cs{load<S>(sums, c), load<S>(sums, C + c), load<S>(sums, 2 * C + c),
                                                    load<S>(sums, 3 * C + c), load<S>(sums, 4 * C + c)};
                means[c] = kernels::bn_grad_grad_means_of(load<S>(var, c), eps, cs, R);
            }
            for_each(outer, C, inner, [&](std::int64_t k, std::int64_t c) {
                const kernels::bn_grad_grad_means& mc = means[c];
                const double r = mc.r;
                const double gamma = load<S>(scale, c), ac = load<S>(a, c), bc = load<S>(b, c);
                const double xh = (load<T>(x, k) - load<S>(mean, c)) * r;
                const double gv = load<T>(g, k), av = load<T>(A, k);
                if (!training)
                {
                    if (d_g)
                        store<T>(d_g, k, gamma * r * av + ac * xh + bc);
                    if (d_x)
                        store<T>(d_x, k, ac * gv * r);
                    return;
                }
                const double g_mean = mc.g, gxh_mean = mc.g_xh, A_mean = mc.A, Axh_mean = mc.A_xh;
                if (d_g)
                    store<T>(d_g, k, gamma * r * (av - A_mean - xh * Axh_mean) + ac * xh + bc);
                if (d_x)
                {
                    const double term = 3 * xh * Axh_mean * gxh_mean - xh * mc.A_gc - (av - A_mean) * gxh_mean -
                                        (gv - g_mean) * Axh_mean;
                    store<T>(d_x, k, gamma * r * r * term + ac * r * (gv - g_mean - xh * gxh_mean));
                }
            });
        });
    }
}
