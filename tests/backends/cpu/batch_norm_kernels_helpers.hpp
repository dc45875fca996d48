#pragma once
// Shared by the tests of the fast CPU batch-norm kernels (backends/cpu/batch_norm/kernels.cpp)
// against their scalar reference twins (backends/cpu/batch_norm/reference.cpp), two ctest
// executables that ctest runs side by side: test_batch_norm_kernels.cpp (float32 and float64
// tensors; its file comment derives the tolerances) and test_batch_norm_kernels_16bit.cpp
// (float16 and bfloat16 tensors). This header holds the problems (random inputs of a shape
// [outer, C, inner]), the ways the fast kernels run on this machine (SIMD levels, AVX512-BF16)
// and the run of every kernel on a problem; batch_norm_kernels_compare.hpp holds the checks.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include "backends/cpu/batch_norm/plan.hpp"
#include "backends/cpu/cpu_kernels.hpp"
#include "backends/cpu/simd/level.hpp"
#include "tests/support/cpu_kernels_helpers.hpp"
#include "xgrad/half.hpp"
#include "xgrad/interop.hpp"
#include "xgrad/thread_pool.hpp"

namespace bn_kernels_test
{
    namespace cpu = xgrad::cpu;
    using xgrad::dtype_of;
    using xgrad::bfloat16_t;
    using xgrad::dtype;
    using xgrad::float16_t;
    using i64 = std::int64_t;

    /// The fast batch-norm kernels, through the CPU's fast table (in an XGRAD_SIMD=scalar build,
    /// where they are not compiled, that table is the reference one).
    inline const xgrad::kernels::kernel_table& fast_table = cpu::fast_kernels();

    using cpu_kernels_test::settings_guard; // restores the SIMD limit and the thread count

    /// Every SIMD level this build and processor have (scalar alone in an XGRAD_SIMD=scalar build).
    using cpu_kernels_test::simd_levels;

    using cpu_kernels_test::level_name;

    /// One way the fast kernels run on this machine: a SIMD level and, for bfloat16 tensors at
    /// avx512, whether their outputs are rounded by AVX512-BF16's vcvtneps2bf16 or by integer
    /// operations (both must give the reference's bits).
    struct way
    {
        cpu::simd_level level;
        bool bf16_instructions;
        void use() const
        {
            cpu::limit_simd_level(level);
            cpu::limit_avx512_bf16(bf16_instructions);
        }
        std::string name() const { return level_name(level) + (bf16_instructions ? " with avx512_bf16" : ""); }
    };

    /// Every SIMD level, and for T = bfloat16 the avx512 level a second time with AVX512-BF16's
    /// conversion where the processor has it.
    template <class T>
    std::vector<way> ways()
    {
        std::vector<way> out;
        for (const auto level : simd_levels())
        {
            out.push_back({level, false});
            if (std::is_same_v<T, bfloat16_t> && level == cpu::simd_level::avx512 && cpu::avx512_bf16_supported())
                out.push_back({level, true});
        }
        return out;
    }

    template <class T>
    using stat_t = std::conditional_t<std::is_same_v<T, double>, double, float>;

    template <class T>
    const char* dtype_name()
    {
        return xgrad::name(dtype_of<T>()).data(); // views of string literals
    }

    template <class T>
    T nan_of()
    {
        return cpu_kernels_test::from_double<T>(std::numeric_limits<double>::quiet_NaN());
    }

    /// The spacing of T's values at magnitude |v| (one ulp).
    template <class T>
    double ulp_of(double v)
    {
        int digits = 0, min_exp = 0; // significand bits incl. the implicit one; smallest normal exponent
        if constexpr (std::is_same_v<T, float16_t>)
            digits = 11, min_exp = -14;
        else if constexpr (std::is_same_v<T, bfloat16_t>)
            digits = 8, min_exp = -126;
        else
            digits = std::numeric_limits<T>::digits, min_exp = std::numeric_limits<T>::min_exponent - 1;
        const double a = std::abs(v);
        const int e = a > 0 && std::isfinite(a) ? std::max(std::ilogb(a), min_exp) : min_exp;
        return std::ldexp(1.0, e - (digits - 1));
    }

    template <class T>
    bool same_bits(T a, T b)
    {
        return std::memcmp(&a, &b, sizeof a) == 0;
    }

    template <class T>
    bool same_bits(const std::vector<T>& a, const std::vector<T>& b)
    {
        return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0);
    }

    struct shape
    {
        i64 outer, C, inner;
    };

    inline std::string str(const shape& s)
    {
        std::ostringstream os;
        os << "[outer " << s.outer << ", C " << s.C << ", inner " << s.inner << "]";
        return os.str();
    }

    /// Collects mismatches; reports the first one.
    struct report
    {
        std::string first;
        i64 bad = 0;

        /// got vs want within tol (NaN must match NaN, an infinity the same infinity).
        void close(const char* what, i64 i, double got, double want, double tol)
        {
            const bool ok = std::isnan(want)   ? std::isnan(got)
                            : std::isinf(want) ? got == want
                                               : (!std::isnan(got) && std::abs(got - want) <= tol);
            if (ok)
                return;
            if (bad++ == 0)
            {
                std::ostringstream os;
                os.precision(17);
                os << what << "[" << i << "]: got " << got << ", want " << want << ", |diff| " << std::abs(got - want)
                   << " > tol " << tol;
                first = os.str();
            }
        }
    };

    /// One random problem: the x-like tensors and the per-channel vectors.
    template <class T>
    struct problem
    {
        using S = stat_t<T>;
        shape sh;
        i64 n = 0, R = 0;
        std::vector<T> x, dy, A;
        /// A fused ReLU's forward output for the masked-gradient kernels: about half of it <= 0
        /// (some exact zeros, which mask).
        std::vector<T> ym;
        std::vector<S> scale, offset, mean, var, a, b;
        double eps = 1e-3;
        double u = std::numeric_limits<S>::epsilon() / 2;

        problem(const shape& s, std::mt19937_64& gen) : sh(s), n(s.outer * s.C * s.inner), R(s.outer * s.inner)
        {
            std::uniform_real_distribution<double> U(-1, 1);
            const auto C = static_cast<std::size_t>(s.C);
            std::vector<double> centre(C), spread(C);
            for (std::size_t c = 0; c < C; ++c)
            {
                centre[c] = 3 * U(gen);                   // x has a mean well away from 0 ...
                spread[c] = 0.2 + 1.8 * (U(gen) + 1) / 2; // ... and a channel-dependent spread
                scale.push_back(static_cast<S>(1.5 * U(gen)));
                offset.push_back(static_cast<S>(U(gen)));
                mean.push_back(static_cast<S>(centre[c] + 0.3 * U(gen)));
                var.push_back(static_cast<S>(spread[c] * spread[c] * (0.5 + (U(gen) + 1) / 2)));
                a.push_back(static_cast<S>(U(gen)));
                b.push_back(static_cast<S>(U(gen)));
            }
            const double dy_shift = 0.3 * U(gen), A_shift = 0.3 * U(gen);
            for (i64 i = 0; i < n; ++i)
            {
                const auto c = static_cast<std::size_t>(ch(i));
                x.push_back(cpu_kernels_test::from_double<T>(centre[c] + spread[c] * U(gen)));
                dy.push_back(cpu_kernels_test::from_double<T>(dy_shift + U(gen)));
                A.push_back(cpu_kernels_test::from_double<T>(A_shift + U(gen)));
                const double v = U(gen);
                ym.push_back(cpu_kernels_test::from_double<T>(std::abs(v) < 0.1 ? 0.0 : v));
            }
        }

        i64 ch(i64 i) const { return (i / sh.inner) % sh.C; }
        double X(i64 i) const { return cpu_kernels_test::as_double(x[static_cast<std::size_t>(i)]); }
        double DY(i64 i) const { return cpu_kernels_test::as_double(dy[static_cast<std::size_t>(i)]); }
        double AA(i64 i) const { return cpu_kernels_test::as_double(A[static_cast<std::size_t>(i)]); }
        bool passes(i64 i) const { return cpu_kernels_test::as_double(ym[static_cast<std::size_t>(i)]) > 0; }
        double r(i64 c) const { return 1.0 / std::sqrt(static_cast<double>(var[static_cast<std::size_t>(c)]) + eps); }
        double P(const std::vector<S>& v, i64 c) const { return static_cast<double>(v[static_cast<std::size_t>(c)]); }
        /// The depth bound of the fast kernels' summation trees (see test_batch_norm_kernels.cpp's
        /// file comment).
        double depth() const
        {
            return static_cast<double>(cpu::bn_detail::error_depth) + std::ceil(std::log2(static_cast<double>(R) + 1));
        }
        /// Tolerance of a sum with sum|t| = mag and reference value want.
        double sum_tol(double mag, double want) const
        {
            return ((depth() + 3) * u + static_cast<double>(R) * 0x1p-53) * mag + u * std::abs(want) +
                   std::numeric_limits<S>::denorm_min();
        }
        /// Tolerance of an elementwise output with magnitude M, value want/got in T.
        double elem_tol(double factor, double M, double got, double want) const
        {
            double tol = factor * u * M + std::numeric_limits<S>::denorm_min();
            if constexpr (!std::is_same_v<T, S>)
                tol += ulp_of<T>(std::max(std::abs(got), std::abs(want)));
            return tol;
        }
    };

    /// The outputs of every kernel for one problem (to compare levels and thread counts).
    template <class T>
    struct outputs
    {
        using S = stat_t<T>;
        std::vector<S> mean, var, sum_dy, sum_dy_xc, inf_sum_dy, inf_sum_dy_xc, gg_sums;
        std::vector<T> y, dx, dx_inf, dg_train, dxx_train, dg_inf, dxx_inf;
        // The fused kernels: bn_forward_training (plain and ReLU), bn_normalize with ReLU,
        // bn_grad_training (plain and masked by ym), bn_grad_inference masked by ym.
        std::vector<S> f_mean, f_var, fr_mean, fr_var, t_sums, tr_sums, ir_sums;
        std::vector<T> f_y, fr_y, y_relu, t_dx, tr_dx, ir_dx;

        bool operator==(const outputs& o) const
        {
            return same_bits(f_mean, o.f_mean) && same_bits(f_var, o.f_var) && same_bits(fr_mean, o.fr_mean) &&
                   same_bits(fr_var, o.fr_var) && same_bits(t_sums, o.t_sums) && same_bits(tr_sums, o.tr_sums) &&
                   same_bits(ir_sums, o.ir_sums) && same_bits(f_y, o.f_y) && same_bits(fr_y, o.fr_y) &&
                   same_bits(y_relu, o.y_relu) && same_bits(t_dx, o.t_dx) && same_bits(tr_dx, o.tr_dx) &&
                   same_bits(ir_dx, o.ir_dx) && same_bits(mean, o.mean) && same_bits(var, o.var) &&
                   same_bits(sum_dy, o.sum_dy) && same_bits(sum_dy_xc, o.sum_dy_xc) &&
                   same_bits(inf_sum_dy, o.inf_sum_dy) && same_bits(inf_sum_dy_xc, o.inf_sum_dy_xc) &&
                   same_bits(gg_sums, o.gg_sums) && same_bits(y, o.y) && same_bits(dx, o.dx) &&
                   same_bits(dx_inf, o.dx_inf) && same_bits(dg_train, o.dg_train) &&
                   same_bits(dxx_train, o.dxx_train) && same_bits(dg_inf, o.dg_inf) && same_bits(dxx_inf, o.dxx_inf);
        }
    };

    /// Runs every kernel (fast when `fast`, else reference) on p, outputs pre-filled with NaN.
    /// The apply kernels take the reference's sums, so fast and reference apply kernels see the
    /// same inputs.
    template <class T>
    outputs<T> run_all(const problem<T>& p, bool fast, const std::vector<stat_t<T>>& ref_grad_sums,
                       const std::vector<stat_t<T>>& ref_gg_sums)
    {
        using S = stat_t<T>;
        namespace ref = cpu::reference;
        const S nan_s = std::numeric_limits<S>::quiet_NaN();
        const T nan_t = nan_of<T>();
        const auto C = static_cast<std::size_t>(p.sh.C), N = static_cast<std::size_t>(p.n);
        const i64 o = p.sh.outer, c = p.sh.C, in = p.sh.inner;
        constexpr dtype dt = dtype_of<T>();
        outputs<T> r;
        r.mean.assign(C, nan_s);
        r.var.assign(C, nan_s);
        r.sum_dy.assign(C, nan_s);
        r.sum_dy_xc.assign(C, nan_s);
        r.inf_sum_dy.assign(C, nan_s);
        r.inf_sum_dy_xc.assign(C, nan_s);
        r.gg_sums.assign(5 * C, nan_s);
        for (auto* v : {&r.y, &r.dx, &r.dx_inf, &r.dg_train, &r.dxx_train, &r.dg_inf, &r.dxx_inf, &r.f_y, &r.fr_y,
                        &r.y_relu, &r.t_dx, &r.tr_dx, &r.ir_dx})
            v->assign(N, nan_t);
        for (auto* v : {&r.f_mean, &r.f_var, &r.fr_mean, &r.fr_var})
            v->assign(C, nan_s);
        for (auto* v : {&r.t_sums, &r.tr_sums, &r.ir_sums})
            v->assign(2 * C, nan_s);
        const S* sdy = ref_grad_sums.data();
        const S* sdxc = ref_grad_sums.data() + C;
        auto fused = [&](auto forward_training, auto normalize, auto grad_training, auto grad_inference) {
            forward_training(r.f_y.data(), r.f_mean.data(), r.f_var.data(), p.x.data(), p.scale.data(), p.offset.data(),
                             p.eps, false, dt, o, c, in);
            forward_training(r.fr_y.data(), r.fr_mean.data(), r.fr_var.data(), p.x.data(), p.scale.data(),
                             p.offset.data(), p.eps, true, dt, o, c, in);
            normalize(r.y_relu.data(), p.x.data(), p.scale.data(), p.offset.data(), p.mean.data(), p.var.data(), p.eps,
                      true, dt, o, c, in);
            grad_training(r.t_dx.data(), r.t_sums.data(), r.t_sums.data() + c, p.dy.data(), p.x.data(), nullptr,
                          p.scale.data(), p.mean.data(), p.var.data(), p.eps, dt, o, c, in);
            grad_training(r.tr_dx.data(), r.tr_sums.data(), r.tr_sums.data() + c, p.dy.data(), p.x.data(), p.ym.data(),
                          p.scale.data(), p.mean.data(), p.var.data(), p.eps, dt, o, c, in);
            grad_inference(r.ir_dx.data(), r.ir_sums.data(), r.ir_sums.data() + c, p.dy.data(), p.x.data(), p.ym.data(),
                           p.scale.data(), p.mean.data(), p.var.data(), p.eps, dt, o, c, in);
        };
        if (fast)
            fused(fast_table.bn_forward_training, fast_table.bn_normalize, fast_table.bn_grad_training,
                  fast_table.bn_grad_inference);
        else
            fused(ref::bn_forward_training, ref::bn_normalize, ref::bn_grad_training, ref::bn_grad_inference);
        if (fast)
        {
            fast_table.bn_moments(r.mean.data(), r.var.data(), p.x.data(), dt, o, c, in);
            fast_table.bn_normalize(r.y.data(), p.x.data(), p.scale.data(), p.offset.data(), p.mean.data(),
                                    p.var.data(), p.eps, false, dt, o, c, in);
            fast_table.bn_grad_reduce(r.sum_dy.data(), r.sum_dy_xc.data(), p.dy.data(), p.x.data(), p.mean.data(), dt,
                                      o, c, in);
            fast_table.bn_grad_apply(r.dx.data(), p.dy.data(), p.x.data(), p.scale.data(), p.mean.data(), p.var.data(),
                                     sdy, sdxc, p.eps, dt, o, c, in);
            fast_table.bn_grad_inference(r.dx_inf.data(), r.inf_sum_dy.data(), r.inf_sum_dy_xc.data(), p.dy.data(),
                                         p.x.data(), nullptr, p.scale.data(), p.mean.data(), p.var.data(), p.eps, dt, o,
                                         c, in);
            fast_table.bn_grad_grad_reduce(r.gg_sums.data(), p.A.data(), p.dy.data(), p.x.data(), p.mean.data(),
                                           p.var.data(), p.eps, dt, o, c, in);
            fast_table.bn_grad_grad_apply(r.dg_train.data(), r.dxx_train.data(), p.A.data(), p.dy.data(), p.x.data(),
                                          p.scale.data(), p.mean.data(), p.var.data(), p.a.data(), p.b.data(),
                                          ref_gg_sums.data(), p.eps, true, dt, o, c, in);
            fast_table.bn_grad_grad_apply(r.dg_inf.data(), r.dxx_inf.data(), p.A.data(), p.dy.data(), p.x.data(),
                                          p.scale.data(), p.mean.data(), p.var.data(), p.a.data(), p.b.data(),
                                          ref_gg_sums.data(), p.eps, false, dt, o, c, in);
        }
        else
        {
            ref::bn_moments(r.mean.data(), r.var.data(), p.x.data(), dt, o, c, in);
            ref::bn_normalize(r.y.data(), p.x.data(), p.scale.data(), p.offset.data(), p.mean.data(), p.var.data(),
                              p.eps, false, dt, o, c, in);
            ref::bn_grad_reduce(r.sum_dy.data(), r.sum_dy_xc.data(), p.dy.data(), p.x.data(), p.mean.data(), dt, o, c,
                                in);
            ref::bn_grad_apply(r.dx.data(), p.dy.data(), p.x.data(), p.scale.data(), p.mean.data(), p.var.data(), sdy,
                               sdxc, p.eps, dt, o, c, in);
            ref::bn_grad_inference(r.dx_inf.data(), r.inf_sum_dy.data(), r.inf_sum_dy_xc.data(), p.dy.data(),
                                   p.x.data(), nullptr, p.scale.data(), p.mean.data(), p.var.data(), p.eps, dt, o, c,
                                   in);
            ref::bn_grad_grad_reduce(r.gg_sums.data(), p.A.data(), p.dy.data(), p.x.data(), p.mean.data(), p.var.data(),
                                     p.eps, dt, o, c, in);
            ref::bn_grad_grad_apply(r.dg_train.data(), r.dxx_train.data(), p.A.data(), p.dy.data(), p.x.data(),
                                    p.scale.data(), p.mean.data(), p.var.data(), p.a.data(), p.b.data(),
                                    ref_gg_sums.data(), p.eps, true, dt, o, c, in);
            ref::bn_grad_grad_apply(r.dg_inf.data(), r.dxx_inf.data(), p.A.data(), p.dy.data(), p.x.data(),
                                    p.scale.data(), p.mean.data(), p.var.data(), p.a.data(), p.b.data(),
                                    ref_gg_sums.data(), p.eps, false, dt, o, c, in);
        }
        return r;
    }

    /// The reference sums the apply kernels are fed (bn_grad_reduce, bn_grad_grad_reduce).
    template <class T>
    void reference_sums(const problem<T>& p, std::vector<stat_t<T>>& grad, std::vector<stat_t<T>>& gg)
    {
        const auto C = static_cast<std::size_t>(p.sh.C);
        grad.assign(2 * C, 0);
        gg.assign(5 * C, 0);
        constexpr dtype dt = dtype_of<T>();
        cpu::reference::bn_grad_reduce(grad.data(), grad.data() + C, p.dy.data(), p.x.data(), p.mean.data(), dt,
                                       p.sh.outer, p.sh.C, p.sh.inner);
        cpu::reference::bn_grad_grad_reduce(gg.data(), p.A.data(), p.dy.data(), p.x.data(), p.mean.data(), p.var.data(),
                                            p.eps, dt, p.sh.outer, p.sh.C, p.sh.inner);
    }
}
