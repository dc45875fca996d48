// Tests of the fast CPU batch-norm kernels (backends/cpu/batch_norm/kernels.cpp) against their scalar
// reference twins (backends/cpu/batch_norm/reference.cpp): every kernel, random and edge shapes
// in both layouts (channels-last inner = 1, channels-first inner > 1; outer, C, inner including
// 0, 1, 3, 17, 67 and other odd sizes; the tile and run paths and their boundaries), the four
// x dtypes, every SIMD level this machine has (limit_simd_level; bfloat16 at avx512 also with
// AVX512-BF16's conversion where the processor has it, limit_avx512_bf16), outputs pre-filled with NaN
// (kernels assign), and results bitwise independent of the thread count. The references are
// called directly (cpu::reference); which of the two a level runs through the kernel table is
// the dispatch tests' concern.
//
// Tolerances, and why (u = unit roundoff of the statistics type S: 2^-24 for float, which also
// serves float16/bfloat16 tensors, 2^-53 for double; all magnitudes below are computed here in
// double from the same inputs):
// - Sums of R terms t_i (bn_grad_reduce, bn_grad_inference, bn_grad_grad_reduce): the fast
//   kernel forms each term with relative error <= 2u and adds them along a fixed tree of depth
//   <= D = 1156 + ceil(log2 R) (backends/cpu/batch_norm/plan.hpp derives 645 + ceil(log2 R)
//   for float, 1156 for double, from its run_item; the larger is used for both, computed here
//   from the same constants), plus one rounding when a sum is scaled by r; the reference
//   accumulates in double left to right (error <= R 2^-53 sum|t|) and rounds once to S.
//   Allowed: ((D + 3) u + R 2^-53) sum|t_i| + u |want|. For float and R = 10^4 that is
//   1173 u ~ 7e-5 relative to sum|t_i|.
// - bn_moments (and the statistics of bn_forward_training): the kernel sums d = x - m and d^2
//   around a shift m (an exact S value) chosen so that sum d^2 / R = var + delta^2 with
//   delta = |m - mean| <= sqrt(var) (else it sums again around its first mean, where delta is
//   rounding-sized): sum d^2 / R <= 2 var. Mean = m + (sum d) / R: error <= u |mean| +
//   (D + 3) u sum|d| / R, with sum|d| <= R sqrt(sum d^2 / R) <= R sqrt(2 var) (Cauchy-Schwarz):
//   allowed (D + 3) u sqrt(2 var) + 2 u |want| (plus the reference's own error). Variance
//   (corrected formula): |error| * R <= (D + 4) u sum d^2 (the squares) + 2 (D + 1) u sum d^2
//   (the correction (sum d)^2 / R, via Cauchy-Schwarz), so (3D + 8) u 2 var + u var is allowed.
// - Elementwise outputs, f u M with M = the sum of the absolute values of the reference
//   formula's terms (a centred operand v - mean(v) counted as |v| + |mean(v)|), and f the
//   roundings of both sides, each weighing at most u M: the fast side rounds each per-channel
//   coefficient once to S, each centred operand once, each fma once (bn_normalize: 2 + 1;
//   bn_grad_apply: 5; the second-order outputs: up to 8); the reference evaluates the formula
//   in double (those roundings count fully when S is double: bn_normalize 3, bn_grad_apply 8,
//   the second-order d_x ~10) and rounds once to S. Allowed, rounded up: y 8 u M; dx 16 u M;
//   inference dx = dy scale r (2 + 3 roundings) 6 u M; training d_g 16 u M, d_x 20 u M;
//   inference d_g 12 u M, d_x 6 u M. 16-bit outputs: both sides round their float result once
//   to the I/O dtype, so they may differ by one ulp of that dtype plus the float difference:
//   allowed ulp_T(max(|got|, |want|)) + f u M.
// - NaN only where the reference has NaN.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

#include "backends/cpu/batch_norm/plan.hpp"
#include "backends/cpu/cpu_kernels.hpp"
#include "backends/cpu/simd/level.hpp"
#include "tests/support/cpu_kernels_helpers.hpp"
#include "xgrad/half.hpp"
#include "xgrad/interop.hpp"
#include "xgrad/thread_pool.hpp"

namespace
{
    namespace cpu = xgrad::cpu;
    using xgrad::dtype_of;
    using xgrad::bfloat16_t;
    using xgrad::dtype;
    using xgrad::float16_t;
    using i64 = std::int64_t;

    /// The fast batch-norm kernels, through the CPU's fast table (in an XGRAD_SIMD=scalar build,
    /// where they are not compiled, that table is the reference one).
    const xgrad::kernels::kernel_table& fast_table = cpu::fast_kernels();

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

    std::string str(const shape& s)
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
        /// The depth bound of the fast kernels' summation trees (see the file comment).
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

    /// Checks the fast outputs `got` against the reference outputs `want` with the tolerances of
    /// the file comment; returns the first mismatch or "".
    template <class T>
    std::string compare(const problem<T>& p, const outputs<T>& got, const outputs<T>& want,
                        const std::vector<stat_t<T>>& gs, const std::vector<stat_t<T>>& ggs)
    {
        const i64 C = p.sh.C, R = p.R, n = p.n;
        const double dR = static_cast<double>(R);
        report rep;
        auto el = [](const std::vector<T>& v, i64 i) {
            return cpu_kernels_test::as_double(v[static_cast<std::size_t>(i)]);
        };
        auto sv = [](const auto& v, i64 i) { return static_cast<double>(v[static_cast<std::size_t>(i)]); };

        // Per-channel magnitudes, in double.
        std::vector<double> sx(C), sdx2(C), mu(C), sdy(C), sdyxc(C), sg(C), sgxh(C), sA(C), sAxh(C), sAg(C);
        std::vector<double> smdy(C), smdyxc(C), mtol(C), vtol(C); // masked dy; the statistics' tolerances
        for (i64 i = 0; i < n; ++i)
        {
            const i64 c = p.ch(i);
            mu[c] += p.X(i);
        }
        for (i64 c = 0; c < C; ++c)
            mu[c] /= dR;
        for (i64 i = 0; i < n; ++i)
        {
            const i64 c = p.ch(i);
            const double xc = p.X(i) - p.P(p.mean, c), xh = xc * p.r(c);
            sx[c] += std::abs(p.X(i));
            sdx2[c] += (p.X(i) - mu[c]) * (p.X(i) - mu[c]);
            sdy[c] += std::abs(p.DY(i));
            sdyxc[c] += std::abs(p.DY(i) * xc);
            sg[c] += std::abs(p.DY(i));
            sgxh[c] += std::abs(p.DY(i) * xh);
            sA[c] += std::abs(p.AA(i));
            sAxh[c] += std::abs(p.AA(i) * xh);
            sAg[c] += std::abs(p.AA(i) * p.DY(i));
            smdy[c] += p.passes(i) ? std::abs(p.DY(i)) : 0.0;
            smdyxc[c] += p.passes(i) ? std::abs(p.DY(i) * xc) : 0.0;
        }

        const double u = p.u, D = p.depth();
        for (i64 c = 0; c < C; ++c)
        {
            if (R == 0)
            {
                for (const auto* v : {&got.mean, &got.var, &got.f_mean, &got.f_var, &got.fr_mean, &got.fr_var})
                    rep.close("statistics (R = 0)", c, sv(*v, c), std::numeric_limits<double>::quiet_NaN(), 0);
            }
            else
            {
                const double ref_err = dR * 0x1p-53;
                const double v = sdx2[c] / dR;
                const double mean_tol = (D + 3) * u * std::sqrt(2 * v) + ref_err * sx[c] / dR +
                                        2 * u * std::abs(sv(want.mean, c)) +
                                        std::numeric_limits<stat_t<T>>::denorm_min();
                rep.close("mean", c, sv(got.mean, c), sv(want.mean, c), mean_tol);
                const double var_tol = ((3 * D + 8) * u + ref_err) * 2 * v + u * v +
                                       std::numeric_limits<stat_t<T>>::denorm_min();
                rep.close("var", c, sv(got.var, c), sv(want.var, c), var_tol);
                // The fused forward's statistics are bn_moments' (its own summation order).
                rep.close("forward mean", c, sv(got.f_mean, c), sv(want.f_mean, c), mean_tol);
                rep.close("forward var", c, sv(got.f_var, c), sv(want.f_var, c), var_tol);
                rep.close("forward+relu mean", c, sv(got.fr_mean, c), sv(want.fr_mean, c), mean_tol);
                rep.close("forward+relu var", c, sv(got.fr_var, c), sv(want.fr_var, c), var_tol);
                mtol[c] = mean_tol;
                vtol[c] = var_tol;
            }
            rep.close("training sum_dy", c, sv(got.t_sums, c), sv(want.t_sums, c),
                      p.sum_tol(sdy[c], sv(want.t_sums, c)));
            rep.close("training sum_dy_xc", c, sv(got.t_sums, C + c), sv(want.t_sums, C + c),
                      p.sum_tol(sdyxc[c], sv(want.t_sums, C + c)));
            rep.close("training+relu sum_dy", c, sv(got.tr_sums, c), sv(want.tr_sums, c),
                      p.sum_tol(smdy[c], sv(want.tr_sums, c)));
            rep.close("training+relu sum_dy_xc", c, sv(got.tr_sums, C + c), sv(want.tr_sums, C + c),
                      p.sum_tol(smdyxc[c], sv(want.tr_sums, C + c)));
            rep.close("inference+relu sum_dy", c, sv(got.ir_sums, c), sv(want.ir_sums, c),
                      p.sum_tol(smdy[c], sv(want.ir_sums, c)));
            rep.close("inference+relu sum_dy_xc", c, sv(got.ir_sums, C + c), sv(want.ir_sums, C + c),
                      p.sum_tol(smdyxc[c], sv(want.ir_sums, C + c)));
            rep.close("sum_dy", c, sv(got.sum_dy, c), sv(want.sum_dy, c), p.sum_tol(sdy[c], sv(want.sum_dy, c)));
            rep.close("sum_dy_xc", c, sv(got.sum_dy_xc, c), sv(want.sum_dy_xc, c),
                      p.sum_tol(sdyxc[c], sv(want.sum_dy_xc, c)));
            rep.close("inference sum_dy", c, sv(got.inf_sum_dy, c), sv(want.inf_sum_dy, c),
                      p.sum_tol(sdy[c], sv(want.inf_sum_dy, c)));
            rep.close("inference sum_dy_xc", c, sv(got.inf_sum_dy_xc, c), sv(want.inf_sum_dy_xc, c),
                      p.sum_tol(sdyxc[c], sv(want.inf_sum_dy_xc, c)));
            const double mags[5] = {sg[c], sgxh[c], sA[c], sAxh[c], sAg[c]};
            for (int s = 0; s < 5; ++s)
                rep.close("grad_grad sums", s * C + c, sv(got.gg_sums, s * C + c), sv(want.gg_sums, s * C + c),
                          p.sum_tol(mags[s], sv(want.gg_sums, s * C + c)));
        }

        for (i64 i = 0; i < n; ++i)
        {
            const i64 c = p.ch(i);
            const double r = p.r(c), gamma = p.P(p.scale, c), m = p.P(p.mean, c);
            const double x = p.X(i), dy = p.DY(i), A = p.AA(i), xc = x - m, xh = xc * r;
            const double ac = p.P(p.a, c), bc = p.P(p.b, c);
            auto check = [&](const char* what, const std::vector<T>& g, const std::vector<T>& w, double factor,
                             double M) {
                const double gv = el(g, i), wv = el(w, i);
                rep.close(what, i, gv, wv, p.elem_tol(factor, M, gv, wv));
            };
            check("y", got.y, want.y, 8, std::abs(xc * r * gamma) + std::abs(p.P(p.offset, c)));
            const double mdy = sv(gs, c) / dR, mdyxc = sv(gs, C + c) / dR;
            check("dx", got.dx, want.dx, 16,
                  std::abs(gamma * r) * (std::abs(dy) + std::abs(mdy) + std::abs(xc * r * r * mdyxc)));
            check("dx (inference)", got.dx_inf, want.dx_inf, 6, std::abs(dy * gamma * r));
            const double gm = sv(ggs, c) / dR, gxhm = sv(ggs, C + c) / dR, Am = sv(ggs, 2 * C + c) / dR,
                         Axhm = sv(ggs, 3 * C + c) / dR, Agcm = sv(ggs, 4 * C + c) / dR - Am * gm;
            check("d_g (training)", got.dg_train, want.dg_train, 16,
                  std::abs(gamma * r) * (std::abs(A) + std::abs(Am) + std::abs(xh * Axhm)) + std::abs(ac * xh) +
                      std::abs(bc));
            check("d_x (training)", got.dxx_train, want.dxx_train, 20,
                  std::abs(gamma) * r * r *
                          (3 * std::abs(xh * Axhm * gxhm) + std::abs(xh * Agcm) +
                           (std::abs(A) + std::abs(Am)) * std::abs(gxhm) +
                           (std::abs(dy) + std::abs(gm)) * std::abs(Axhm)) +
                      std::abs(ac) * r * (std::abs(dy) + std::abs(gm) + std::abs(xh * gxhm)));
            check("d_g (inference)", got.dg_inf, want.dg_inf, 12,
                  std::abs(gamma * r * A) + std::abs(ac * xh) + std::abs(bc));
            check("d_x (inference)", got.dxx_inf, want.dxx_inf, 6, std::abs(ac * r * dy));

            // The fused kernels. ReLU is exact and 1-Lipschitz: it keeps each tolerance.
            check("y (relu)", got.y_relu, want.y_relu, 8, std::abs(xc * r * gamma) + std::abs(p.P(p.offset, c)));
            if (R > 0)
            {
                // Normalised with its own statistics: their errors (mtol, vtol) move y by
                // |gamma| r per unit of mean and |x - mean| |gamma| r^3 / 2 per unit of variance.
                const double fm = sv(want.f_mean, c), fr = 1.0 / std::sqrt(sv(want.f_var, c) + p.eps);
                const double stat_err = std::abs(gamma) * fr * (mtol[c] + std::abs(x - fm) * fr * fr / 2 * vtol[c]);
                for (const auto& [what, g, w] : {std::tuple{"forward y", &got.f_y, &want.f_y},
                                                 std::tuple{"forward+relu y", &got.fr_y, &want.fr_y}})
                {
                    const double gv = el(*g, i), wv = el(*w, i);
                    rep.close(what, i, gv, wv,
                              p.elem_tol(8, std::abs((x - fm) * fr * gamma) + std::abs(p.P(p.offset, c)), gv, wv) +
                                  stat_err);
                }
            }
            // Training dx from the kernel's own sums: their errors add |gamma r| (e1 + |xc| r^2 e2) / R.
            auto train_dx = [&](const char* what, const std::vector<T>& g, const std::vector<T>& w,
                                const std::vector<stat_t<T>>& sums, double g_in, double m1, double m2) {
                const double s1 = sv(sums, c) / dR, s2 = sv(sums, C + c) / dR;
                const double e1 = p.sum_tol(m1, s1 * dR) / dR, e2 = p.sum_tol(m2, s2 * dR) / dR;
                const double gv = el(g, i), wv = el(w, i);
                rep.close(what, i, gv, wv,
                          p.elem_tol(16,
                                     std::abs(gamma * r) * (std::abs(g_in) + std::abs(s1) + std::abs(xc * r * r * s2)),
                                     gv, wv) +
                              std::abs(gamma * r) * (e1 + std::abs(xc) * r * r * e2));
            };
            const double dy_m = p.passes(i) ? dy : 0.0;
            train_dx("dx (training)", got.t_dx, want.t_dx, want.t_sums, dy, sdy[c], sdyxc[c]);
            train_dx("dx (training+relu)", got.tr_dx, want.tr_dx, want.tr_sums, dy_m, smdy[c], smdyxc[c]);
            check("dx (inference+relu)", got.ir_dx, want.ir_dx, 6, std::abs(dy_m * gamma * r));
        }
        if (rep.bad == 0)
            return "";
        return std::to_string(rep.bad) + " mismatches; first: " + rep.first;
    }

    /// Fast vs reference for problem p at every level; returns the number of failed levels.
    template <class T>
    void check_problem(const problem<T>& p)
    {
        std::vector<stat_t<T>> gs, ggs;
        reference_sums(p, gs, ggs);
        const outputs<T> want = run_all(p, false, gs, ggs);
        for (const auto& w : ways<T>())
        {
            w.use();
            const outputs<T> got = run_all(p, true, gs, ggs);
            INFO(dtype_name<T>(), " ", str(p.sh), " level ", w.name());
            const std::string err = compare(p, got, want, gs, ggs);
            CHECK_MESSAGE(err.empty(), err);
        }
        cpu::limit_simd_level(cpu::simd_level_max);
        cpu::limit_avx512_bf16(true);
    }

    /// Shapes that hit the paths and their edges: channels-last C below / at / above the SIMD
    /// widths, merged rows with a shorter tail row, several row blocks, small inner (tiles with
    /// inner > 1), inner at the tile/run boundary (31, 32), runs grouping segments (513, 1100),
    /// rows of exactly run_item and runs chunking longer rows (4099, run_item + 1, 40000), and
    /// R = 0.
    std::vector<shape> edge_shapes()
    {
        return {{1, 1, 1},
                {3, 1, 1},
                {1, 3, 1},
                {5, 3, 1},
                {17, 17, 1},
                {67, 67, 1},
                {130, 5, 1},
                {2000, 1, 1},
                {333, 3, 1},
                {100, 7, 1},
                {129, 33, 1},
                {64, 64, 1},
                {65, 130, 1},
                {3, 17, 2},
                {17, 3, 3},
                {67, 5, 17},
                {9, 2, 31},
                {5, 3, 32},
                {7, 3, 33},
                {3, 2, 67},
                {9, 5, 196}, // 14x14 images: segments starting at 16-byte steps (streamed stores)
                {2, 3, 513},
                {1, 1, 1100},
                {3, 2, 1100},
                {1, 1, 4099},
                {3, 2, cpu::bn_detail::run_item},
                {2, 3, cpu::bn_detail::run_item + 1},
                {0, 3, 1},
                {0, 3, 17},
                {3, 3, 0},
                {0, 1, 64},
                {70, 1, 16},
                {1, 300, 5},
                // Several groups of row blocks (tiles) / many items per channel (runs).
                {40000, 1, 1},
                {1200, 67, 1},
                {600, 17, 9},
                {2, 1, 40000},
                {300, 5, 40}};
    }

    std::vector<shape> random_shapes(std::mt19937_64& gen, int count, i64 max_numel)
    {
        static const i64 outers[] = {1, 1, 2, 3, 5, 8, 17, 31, 64, 67, 129, 300};
        static const i64 Cs[] = {1, 1, 2, 3, 4, 5, 7, 8, 9, 16, 17, 33, 67};
        static const i64 inners[] = {1, 1, 1, 1, 2, 3, 4, 5, 9, 16, 17, 31, 32, 33, 49, 67, 128, 200, 513, 700};
        std::vector<shape> out;
        while (static_cast<int>(out.size()) < count)
        {
            const shape s{outers[gen() % std::size(outers)], Cs[gen() % std::size(Cs)],
                          inners[gen() % std::size(inners)]};
            if (s.outer * s.C * s.inner <= max_numel)
                out.push_back(s);
        }
        return out;
    }

    template <class T>
    void check_dtype(std::uint64_t seed)
    {
        settings_guard guard;
        std::mt19937_64 gen(seed);
        auto shapes = edge_shapes();
        for (const auto& s : random_shapes(gen, 40, 60000))
            shapes.push_back(s);
        for (const auto& s : shapes)
            check_problem(problem<T>(s, gen));
    }

    /// The outputs at 1, 2 and 3 threads are identical, at every SIMD level.
    template <class T>
    void check_thread_independence(std::uint64_t seed)
    {
        settings_guard guard;
        std::mt19937_64 gen(seed);
        // All above the 64K elements from which parallel_for splits: channels-last with C = 1, 3
        // and 67, tiles with inner > 1, runs grouping segments and runs chunking long rows.
        const shape shapes[] = {{70000, 1, 1}, {30000, 3, 1}, {1200, 67, 1},
                                {600, 17, 9},  {300, 3, 100}, {20, 3, 2000}};
        for (const auto& s : shapes)
        {
            const problem<T> p(s, gen);
            std::vector<stat_t<T>> gs, ggs;
            reference_sums(p, gs, ggs);
            for (const auto& w : ways<T>())
            {
                if (w.level == cpu::simd_level::scalar)
                    continue;
                w.use();
                xgrad::set_num_threads(1);
                const outputs<T> one = run_all(p, true, gs, ggs);
                INFO(dtype_name<T>(), " ", str(s), " level ", w.name());
                for (int threads : {2, 3})
                {
                    xgrad::set_num_threads(threads);
                    CHECK_MESSAGE(run_all(p, true, gs, ggs) == one, "results differ between 1 and ", threads,
                                  " threads");
                }
            }
        }
    }

    /// The outputs are identical whatever the resident budget (which decides the channel blocks
    /// of the one-read kernels), at every SIMD level and at 1 and 2 threads: the summation order
    /// is a function of the shape alone, so the budget can follow the machine's cache.
    template <class T>
    void check_budget_independence(std::uint64_t seed)
    {
        settings_guard guard;
        struct budget_guard
        {
            std::int64_t old = cpu::bn_set_resident_budget(std::int64_t{4} << 20);
            ~budget_guard() { cpu::bn_set_resident_budget(old); }
        } budget;
        std::mt19937_64 gen(seed);
        // Channels-last rows wide enough to be cut into channel blocks (2100 channels: blocks of
        // 512 float32 channels, the last of 52, whose tiles group their row blocks differently
        // from the whole tensor's) and narrow ones (C = 67, 64, 32; C * inner = 32 merges outer
        // indices into rows), tiles with inner > 1, channels-first blocks of single channels
        // (16 x 40 x 1024 at 1 MiB), runs grouping segments and runs chunking long rows.
        const shape shapes[] = {{700, 2100, 1}, {1200, 67, 1},  {3000, 64, 1}, {5000, 32, 1}, {600, 17, 9},
                                {300, 48, 7},   {16, 40, 1024}, {300, 3, 100}, {20, 3, 2000}};
        const std::int64_t budgets[] = {std::int64_t{1} << 12, std::int64_t{1} << 16, std::int64_t{1} << 20,
                                        std::int64_t{1} << 24, std::int64_t{1} << 30};
        for (const auto& s : shapes)
        {
            const problem<T> p(s, gen);
            std::vector<stat_t<T>> gs, ggs;
            reference_sums(p, gs, ggs);
            for (const auto& w : ways<T>())
            {
                if (w.level == cpu::simd_level::scalar)
                    continue;
                w.use();
                for (int threads : {1, 2})
                {
                    xgrad::set_num_threads(threads);
                    cpu::bn_set_resident_budget(std::int64_t{4} << 20);
                    const outputs<T> base = run_all(p, true, gs, ggs);
                    for (const std::int64_t b : budgets)
                    {
                        cpu::bn_set_resident_budget(b);
                        INFO(std::string(dtype_name<T>()), " ", str(s), " level ", w.name(), " threads ", threads,
                             " budget ", b);
                        CHECK_MESSAGE(run_all(p, true, gs, ggs) == base, "results differ from the 4 MiB budget's");
                    }
                }
            }
        }
    }
}

TEST_CASE("batch-norm kernels: fast vs reference, float32") { check_dtype<float>(1); }

TEST_CASE("batch-norm kernels: fast vs reference, float64") { check_dtype<double>(2); }

TEST_CASE("batch-norm kernels: fast vs reference, float16") { check_dtype<float16_t>(3); }

TEST_CASE("batch-norm kernels: fast vs reference, bfloat16") { check_dtype<bfloat16_t>(4); }

TEST_CASE("batch-norm kernels: results do not depend on the thread count")
{
    check_thread_independence<float>(5);
    check_thread_independence<double>(6);
    check_thread_independence<float16_t>(7);
    check_thread_independence<bfloat16_t>(8);
}

TEST_CASE("batch-norm kernels: results do not depend on the resident budget")
{
    check_budget_independence<float>(17);
    check_budget_independence<double>(18);
    check_budget_independence<bfloat16_t>(19);
    check_budget_independence<float16_t>(20);
}

TEST_CASE("batch-norm kernels: one-read kernels in channel blocks, with streamed outputs")
{
    // With a resident budget of 4 KiB, bn_forward_training and bn_grad_training cut every tensor
    // above it into channel blocks (one channel each once a channel alone exceeds it; whole
    // cache lines of channels-last rows), and the elementwise outputs of float32/float64
    // tensors take the non-temporal stores. The same comparisons with the reference and the
    // same thread independence must hold.
    struct budget_guard
    {
        std::int64_t old = cpu::bn_set_resident_budget(4096);
        ~budget_guard() { cpu::bn_set_resident_budget(old); }
    } budget;
    check_dtype<float>(11);
    check_dtype<double>(12);
    check_dtype<bfloat16_t>(13);
    check_dtype<float16_t>(14);
    check_thread_independence<float>(15);
    check_thread_independence<bfloat16_t>(16);
}

TEST_CASE("batch-norm kernels: NaN propagates as in the reference")
{
    // A NaN in x, dy or A poisons its channel's sums and the outputs that depend on them, and
    // only those: the comparison requires NaN exactly where the reference has NaN.
    settings_guard guard;
    std::mt19937_64 gen(10);
    for (const shape s : {shape{67, 5, 1}, shape{300, 3, 1}, shape{3, 2, 67}, shape{17, 3, 3}, shape{2, 3, 1100}})
    {
        problem<float> p(s, gen);
        problem<bfloat16_t> q(s, gen);
        const auto n = static_cast<std::size_t>(p.n);
        p.x[gen() % n] = NAN;
        p.dy[gen() % n] = NAN;
        p.A[gen() % n] = NAN;
        q.x[gen() % n] = nan_of<bfloat16_t>();
        q.A[gen() % n] = nan_of<bfloat16_t>();
        check_problem(p);
        check_problem(q);
    }
}

TEST_CASE("batch-norm kernels: grad_grad_apply with one output")
{
    // Either output may be null; the other is then the same as when both are wanted: for the
    // fast kernel at every SIMD level and for the reference.
    settings_guard guard;
    std::mt19937_64 gen(9);
    struct variant
    {
        std::string name;
        decltype(&cpu::bn_grad_grad_apply) kernel;
        cpu::simd_level level;
    };
    std::vector<variant> variants{{"reference", &cpu::reference::bn_grad_grad_apply, cpu::simd_level_max}};
    for (const auto level : simd_levels())
        variants.push_back({std::string("level ") + level_name(level), fast_table.bn_grad_grad_apply, level});
    for (const shape s : {shape{67, 5, 1}, shape{3, 2, 67}, shape{17, 3, 3}})
        for (const auto& v : variants)
        {
            cpu::limit_simd_level(v.level);
            const problem<float> p(s, gen);
            std::vector<float> gs, ggs;
            reference_sums(p, gs, ggs);
            for (const bool training : {true, false})
            {
                const auto N = static_cast<std::size_t>(p.n);
                std::vector<float> dg(N), dx(N), dg_only(N, NAN), dx_only(N, NAN);
                auto call = [&](float* d_g, float* d_x) {
                    v.kernel(d_g, d_x, p.A.data(), p.dy.data(), p.x.data(), p.scale.data(), p.mean.data(), p.var.data(),
                             p.a.data(), p.b.data(), ggs.data(), p.eps, training, dtype::float32, s.outer, s.C,
                             s.inner);
                };
                call(dg.data(), dx.data());
                call(dg_only.data(), nullptr);
                call(nullptr, dx_only.data());
                call(nullptr, nullptr);
                INFO(str(s), " ", v.name, (training ? " training" : " inference"));
                CHECK(same_bits(dg, dg_only));
                CHECK(same_bits(dx, dx_only));
            }
        }
}

TEST_CASE("batch-norm kernels: bfloat16 outputs are rounded to nearest even, exactly as the reference")
{
    // With var = 1 and eps = 0 (r = 1 exactly), mean = 0 and offset = 0, y = x * scale and the
    // inference dx = dy * scale: one product of a bfloat16 and a float, exact in double and
    // correctly rounded in float by both sides, then rounded once to bfloat16. So the fast
    // kernels (which convert bfloat16 in registers) must give the reference's bits exactly,
    // at every SIMD level and through the partial batches of odd row lengths; a rounding other
    // than to nearest even would differ on about half the elements. A tenth of the inputs are
    // special: subnormal and smallest-normal values (products below 2^-126, which AVX512-BF16's
    // vcvtneps2bf16 would read as zero: the kernels must round them as the reference does),
    // NaNs with payloads (quieted, sign and top payload kept), infinities, and values near the
    // largest bfloat16 (products that overflow, or round up to infinity).
    settings_guard guard;
    const std::uint16_t special[] = {0x0001, 0x8001, 0x0035, 0x007f, 0x807f, 0x0080, 0x8080, 0x00ff,
                                     0x0100, 0x7fc1, 0xffa5, 0x7f81, 0x7f80, 0xff80, 0x7f7f, 0xff7e};
    std::mt19937_64 gen(21);
    std::uniform_real_distribution<double> U(-4, 4);
    constexpr dtype dt = dtype::bfloat16;
    for (const shape s : {shape{67, 5, 1}, shape{300, 3, 1}, shape{3, 2, 67}, shape{2, 3, 1100}, shape{17, 3, 3}})
    {
        const auto n = static_cast<std::size_t>(s.outer * s.C * s.inner), C = static_cast<std::size_t>(s.C);
        std::vector<bfloat16_t> x(n), dy(n);
        for (std::size_t i = 0; i < n; ++i)
        {
            x[i] = xgrad::to_bfloat16(static_cast<float>(U(gen)));
            dy[i] = xgrad::to_bfloat16(static_cast<float>(U(gen)));
            if (gen() % 10 == 0)
                x[i].bits = special[gen() % std::size(special)];
            if (gen() % 10 == 0)
                dy[i].bits = special[gen() % std::size(special)];
        }
        std::vector<float> scale(C), zero(C, 0.f), one(C, 1.f), s1(C), s2(C);
        for (auto& v : scale)
            v = static_cast<float>(U(gen)) * 1.0009765625f + 0.0001f; // many significant bits
        std::vector<bfloat16_t> y_want(n), y_got(n), dx_want(n), dx_got(n);
        cpu::reference::bn_normalize(y_want.data(), x.data(), scale.data(), zero.data(), zero.data(), one.data(), 0.0,
                                     false, dt, s.outer, s.C, s.inner);
        cpu::reference::bn_grad_inference(dx_want.data(), s1.data(), s2.data(), dy.data(), x.data(), nullptr,
                                          scale.data(), zero.data(), one.data(), 0.0, dt, s.outer, s.C, s.inner);
        for (const auto& w : ways<bfloat16_t>())
        {
            w.use();
            fast_table.bn_normalize(y_got.data(), x.data(), scale.data(), zero.data(), zero.data(), one.data(), 0.0,
                                    false, dt, s.outer, s.C, s.inner);
            fast_table.bn_grad_inference(dx_got.data(), s1.data(), s2.data(), dy.data(), x.data(), nullptr,
                                         scale.data(), zero.data(), one.data(), 0.0, dt, s.outer, s.C, s.inner);
            INFO(str(s), " level ", w.name());
            CHECK(same_bits(y_got, y_want));
            CHECK(same_bits(dx_got, dx_want));
        }
    }
}
