#pragma once
// The checks of the fast CPU batch-norm kernels, shared by test_batch_norm_kernels.cpp (float32
// and float64 tensors) and test_batch_norm_kernels_16bit.cpp (float16 and bfloat16 tensors):
// the comparison of their outputs with the reference kernels', with the tolerances derived in
// test_batch_norm_kernels.cpp's file comment (a problem at every way the fast kernels run; a
// dtype over edge and random shapes), and the bitwise comparison of their outputs at other
// thread counts and resident budgets. The problems and the runs are batch_norm_kernels_helpers.hpp's.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <iterator>
#include <limits>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "tests/backends/cpu/batch_norm_kernels_helpers.hpp"
#include "xgrad/thread_pool.hpp"

namespace bn_kernels_test
{
    /// A value of an output of dtype T, in double.
    template <class T>
    double el(const std::vector<T>& v, i64 i)
    {
        return cpu_kernels_test::as_double(v[static_cast<std::size_t>(i)]);
    }

    /// A per-channel value (of the statistics type), in double.
    template <class V>
    double sv(const V& v, i64 i)
    {
        return static_cast<double>(v[static_cast<std::size_t>(i)]);
    }

    /// Per-channel magnitudes of a problem, in double, and the statistics' tolerances.
    struct channel_mags
    {
        std::vector<double> sx, sdx2, mu, sdy, sdyxc, sg, sgxh, sA, sAxh, sAg;
        std::vector<double> smdy, smdyxc, mtol, vtol; // masked dy; the statistics' tolerances
    };

    template <class T>
    channel_mags magnitudes(const problem<T>& p)
    {
        const i64 C = p.sh.C, R = p.R, n = p.n;
        const double dR = static_cast<double>(R);
        channel_mags m;
        for (auto* v : {&m.sx, &m.sdx2, &m.mu, &m.sdy, &m.sdyxc, &m.sg, &m.sgxh, &m.sA, &m.sAxh, &m.sAg, &m.smdy,
                        &m.smdyxc, &m.mtol, &m.vtol})
            v->assign(static_cast<std::size_t>(C), 0.0);
        std::vector<double>& mu = m.mu;
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
            m.sx[c] += std::abs(p.X(i));
            m.sdx2[c] += (p.X(i) - mu[c]) * (p.X(i) - mu[c]);
            m.sdy[c] += std::abs(p.DY(i));
            m.sdyxc[c] += std::abs(p.DY(i) * xc);
            m.sg[c] += std::abs(p.DY(i));
            m.sgxh[c] += std::abs(p.DY(i) * xh);
            m.sA[c] += std::abs(p.AA(i));
            m.sAxh[c] += std::abs(p.AA(i) * xh);
            m.sAg[c] += std::abs(p.AA(i) * p.DY(i));
            m.smdy[c] += p.passes(i) ? std::abs(p.DY(i)) : 0.0;
            m.smdyxc[c] += p.passes(i) ? std::abs(p.DY(i) * xc) : 0.0;
        }
        return m;
    }

    /// Channel c's statistics (bn_moments and the fused forwards'); records their tolerances in
    /// m.mtol and m.vtol.
    template <class T>
    void compare_statistics(const problem<T>& p, const outputs<T>& got, const outputs<T>& want, channel_mags& m, i64 c,
                            report& rep)
    {
        const i64 R = p.R;
        const double dR = static_cast<double>(R);
        const double u = p.u, D = p.depth();
        if (R == 0)
        {
            for (const auto* v : {&got.mean, &got.var, &got.f_mean, &got.f_var, &got.fr_mean, &got.fr_var})
                rep.close("statistics (R = 0)", c, sv(*v, c), std::numeric_limits<double>::quiet_NaN(), 0);
        }
        else
        {
            const double ref_err = dR * 0x1p-53;
            const double v = m.sdx2[c] / dR;
            const double mean_tol = (D + 3) * u * std::sqrt(2 * v) + ref_err * m.sx[c] / dR +
                                    2 * u * std::abs(sv(want.mean, c)) + std::numeric_limits<stat_t<T>>::denorm_min();
            rep.close("mean", c, sv(got.mean, c), sv(want.mean, c), mean_tol);
            const double var_tol = ((3 * D + 8) * u + ref_err) * 2 * v + u * v +
                                   std::numeric_limits<stat_t<T>>::denorm_min();
            rep.close("var", c, sv(got.var, c), sv(want.var, c), var_tol);
            // The fused forward's statistics are bn_moments' (its own summation order).
            rep.close("forward mean", c, sv(got.f_mean, c), sv(want.f_mean, c), mean_tol);
            rep.close("forward var", c, sv(got.f_var, c), sv(want.f_var, c), var_tol);
            rep.close("forward+relu mean", c, sv(got.fr_mean, c), sv(want.fr_mean, c), mean_tol);
            rep.close("forward+relu var", c, sv(got.fr_var, c), sv(want.fr_var, c), var_tol);
            m.mtol[c] = mean_tol;
            m.vtol[c] = var_tol;
        }
    }

    /// Channel c's gradient sums (of every kernel that makes them).
    template <class T>
    void compare_sums(const problem<T>& p, const outputs<T>& got, const outputs<T>& want, const channel_mags& m, i64 c,
                      report& rep)
    {
        const i64 C = p.sh.C;
        const std::vector<double>&sdy = m.sdy, &sdyxc = m.sdyxc, &smdy = m.smdy, &smdyxc = m.smdyxc;
        rep.close("training sum_dy", c, sv(got.t_sums, c), sv(want.t_sums, c), p.sum_tol(sdy[c], sv(want.t_sums, c)));
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
        const double mags[5] = {m.sg[c], m.sgxh[c], m.sA[c], m.sAxh[c], m.sAg[c]};
        for (int s = 0; s < 5; ++s)
            rep.close("grad_grad sums", s * C + c, sv(got.gg_sums, s * C + c), sv(want.gg_sums, s * C + c),
                      p.sum_tol(mags[s], sv(want.gg_sums, s * C + c)));
    }

    /// Element i of an elementwise output within factor u M (see elem_tol).
    template <class T>
    void check_element(const problem<T>& p, report& rep, const char* what, i64 i, const std::vector<T>& g,
                       const std::vector<T>& w, double factor, double M)
    {
        const double gv = el(g, i), wv = el(w, i);
        rep.close(what, i, gv, wv, p.elem_tol(factor, M, gv, wv));
    }

    /// Element i of the outputs of the unfused kernels (bn_normalize, bn_grad_apply,
    /// bn_grad_inference, bn_grad_grad_apply).
    template <class T>
    void compare_element(const problem<T>& p, const outputs<T>& got, const outputs<T>& want,
                         const std::vector<stat_t<T>>& gs, const std::vector<stat_t<T>>& ggs, i64 i, report& rep)
    {
        const i64 C = p.sh.C;
        const double dR = static_cast<double>(p.R);
        const i64 c = p.ch(i);
        const double r = p.r(c), gamma = p.P(p.scale, c), m = p.P(p.mean, c);
        const double x = p.X(i), dy = p.DY(i), A = p.AA(i), xc = x - m, xh = xc * r;
        const double ac = p.P(p.a, c), bc = p.P(p.b, c);
        auto check = [&](const char* what, const std::vector<T>& g, const std::vector<T>& w, double factor, double M) {
            check_element(p, rep, what, i, g, w, factor, M);
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
                       (std::abs(A) + std::abs(Am)) * std::abs(gxhm) + (std::abs(dy) + std::abs(gm)) * std::abs(Axhm)) +
                  std::abs(ac) * r * (std::abs(dy) + std::abs(gm) + std::abs(xh * gxhm)));
        check("d_g (inference)", got.dg_inf, want.dg_inf, 12,
              std::abs(gamma * r * A) + std::abs(ac * xh) + std::abs(bc));
        check("d_x (inference)", got.dxx_inf, want.dxx_inf, 6, std::abs(ac * r * dy));
    }

    /// Element i of the outputs of the fused kernels (bn_forward_training, bn_normalize with
    /// ReLU, bn_grad_training, bn_grad_inference with the ReLU mask).
    template <class T>
    void compare_element_fused(const problem<T>& p, const outputs<T>& got, const outputs<T>& want,
                               const channel_mags& mags, i64 i, report& rep)
    {
        const i64 C = p.sh.C, R = p.R;
        const double dR = static_cast<double>(R);
        const i64 c = p.ch(i);
        const double r = p.r(c), gamma = p.P(p.scale, c), m = p.P(p.mean, c);
        const double x = p.X(i), dy = p.DY(i), xc = x - m;
        auto check = [&](const char* what, const std::vector<T>& g, const std::vector<T>& w, double factor, double M) {
            check_element(p, rep, what, i, g, w, factor, M);
        };
        // The fused kernels. ReLU is exact and 1-Lipschitz: it keeps each tolerance.
        check("y (relu)", got.y_relu, want.y_relu, 8, std::abs(xc * r * gamma) + std::abs(p.P(p.offset, c)));
        if (R > 0)
        {
            // Normalised with its own statistics: their errors (mtol, vtol) move y by
            // |gamma| r per unit of mean and |x - mean| |gamma| r^3 / 2 per unit of variance.
            const double fm = sv(want.f_mean, c), fr = 1.0 / std::sqrt(sv(want.f_var, c) + p.eps);
            const double stat_err = std::abs(gamma) * fr *
                                    (mags.mtol[c] + std::abs(x - fm) * fr * fr / 2 * mags.vtol[c]);
            for (const auto& [what, g, w] :
                 {std::tuple{"forward y", &got.f_y, &want.f_y}, std::tuple{"forward+relu y", &got.fr_y, &want.fr_y}})
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
                      p.elem_tol(16, std::abs(gamma * r) * (std::abs(g_in) + std::abs(s1) + std::abs(xc * r * r * s2)),
                                 gv, wv) +
                          std::abs(gamma * r) * (e1 + std::abs(xc) * r * r * e2));
        };
        const double dy_m = p.passes(i) ? dy : 0.0;
        train_dx("dx (training)", got.t_dx, want.t_dx, want.t_sums, dy, mags.sdy[c], mags.sdyxc[c]);
        train_dx("dx (training+relu)", got.tr_dx, want.tr_dx, want.tr_sums, dy_m, mags.smdy[c], mags.smdyxc[c]);
        check("dx (inference+relu)", got.ir_dx, want.ir_dx, 6, std::abs(dy_m * gamma * r));
    }

    /// Checks the fast outputs `got` against the reference outputs `want` with the tolerances of
    /// test_batch_norm_kernels.cpp's file comment; returns the first mismatch or "".
    template <class T>
    std::string compare(const problem<T>& p, const outputs<T>& got, const outputs<T>& want,
                        const std::vector<stat_t<T>>& gs, const std::vector<stat_t<T>>& ggs)
    {
        const i64 C = p.sh.C, n = p.n;
        report rep;
        channel_mags mags = magnitudes(p);
        for (i64 c = 0; c < C; ++c)
        {
            compare_statistics(p, got, want, mags, c, rep);
            compare_sums(p, got, want, mags, c, rep);
        }
        for (i64 i = 0; i < n; ++i)
        {
            compare_element(p, got, want, gs, ggs, i, rep);
            compare_element_fused(p, got, want, mags, i, rep);
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
    inline std::vector<shape> edge_shapes()
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

    inline std::vector<shape> random_shapes(std::mt19937_64& gen, int count, i64 max_numel)
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
