// The CUDA backend's fused batch-norm kernels (backends/cuda/batch_norm.cpp) against the CPU:
// - kernel level, through the dispatch table on device buffers, against the reference loops
//   (xgrad::cpu::reference, double accumulation) on the same inputs: all nine kernels, both
//   layouts (channels-last inner = 1, channels-first inner > 1), the four dtypes, odd channel
//   counts, seeded random shapes incl. R = 1, tiny and large inner, shapes whose lanes need one
//   and two tree levels, R = 0 and C = 0, relu on/off, y null or not, either second-order
//   output null, training and inference; outputs pre-filled with NaN (kernels assign);
// - determinism: the same call twice gives the same bits;
// - op level: the public ops on cuda:0 against the same ops on the CPU.
//
// Kernel tolerances (u = unit roundoff of the statistics type S: 2^-24 for float, which also
// serves float16/bfloat16 tensors, 2^-53 for double; magnitudes computed here in double):
// - Sums of R terms t_i: the device adds each lane's <= 32 terms in order (at most 4096 in
//   general; the shapes here keep C * R / 32 <= 2^17, so 32), then tree levels of <= 32 partials
//   each (at most 3 for these shapes) in S, then the last <= 32 partials in double; each term
//   is formed with <= 2 roundings. A chain of n additions errs by <= (n - 1) u times the sum of
//   its magnitudes, so the sum errs by <= D u sum|t_i| with D = 32 + 3 * 32 + 2 < 160, plus one
//   rounding of the result (u |want|; one more for the sums scaled by r). The reference's error
//   (R 2^-53 sum|t_i|) is far below.
// - bn_moments (the corrected two-pass formula, as the CPU's; tests/backends/cpu/test_batch_norm_kernels.cpp
//   derives the bounds): mean within (2D + 6) u sum|x| / R + u |want|; variance within
//   (3D + 8) u (var + delta^2) + u var with delta = (D + 3) u sum|x| / R.
// - Elementwise outputs: f u M, M the sum of the absolute values of the terms of the
//   coefficient form the kernels evaluate (a centred operand v - m counted as |v| + |m|, a
//   coefficient as the sum of its own terms' magnitudes), f the roundings on both sides
//   (coefficients rounded once to S, each centred operand, each multiply-add; the reference's
//   double evaluation counts when S is double): y 8, training dx 16, inference dx 6, training
//   d_g 16 and d_x 20, inference d_g 12 and d_x 6. 16-bit outputs: both sides round a float
//   once to the I/O dtype, so they may differ by one ulp of that dtype on top.
// - The fused kernels (bn_forward_training, bn_grad_training) are checked as their phases: the
//   statistics against the reference's, and the elementwise output against the reference's
//   elementwise kernel fed with the device's own statistics (the bounds above then apply
//   unchanged, without propagating the sums' error through the formula).
#include "tests/backends/cuda/cuda_test_helpers.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "backends/cpu/cpu_kernels.hpp"
#include "core/src/dispatch.hpp"
#include "xgrad/cuda.hpp"
#include "xgrad/ops/batch_norm.hpp"

using namespace cuda_test;

namespace
{
    namespace ref = xgrad::cpu::reference;
    using i64 = std::int64_t;
    const double nan_v = std::numeric_limits<double>::quiet_NaN();
    constexpr double D = 160; // the summation depth bound of the header comment

    struct bn_shape
    {
        i64 outer, C, inner;
    };

    std::string str(const bn_shape& s)
    {
        return "[outer " + std::to_string(s.outer) + ", C " + std::to_string(s.C) + ", inner " +
               std::to_string(s.inner) + "]";
    }

    double unit(dtype dt) { return dt == dtype::float64 ? std::ldexp(1.0, -53) : std::ldexp(1.0, -24); }

    /// One ulp of a 16-bit dtype at |v| (0 for float32/float64, whose rounding f u M counts).
    double io_ulp(dtype dt, double v)
    {
        int digits = 0, min_exp = 0;
        if (dt == dtype::float16)
            digits = 11, min_exp = -14;
        else if (dt == dtype::bfloat16)
            digits = 8, min_exp = -126;
        else
            return 0;
        const double a = std::abs(v);
        const int e = a > 0 && std::isfinite(a) ? std::max(std::ilogb(a), min_exp) : min_exp;
        return std::ldexp(1.0, e - (digits - 1));
    }

    const xgrad::detail::backend_kernels& dev_k() { return xgrad::detail::backend_for(gpu); }

    /// A tensor from doubles, rounded to dt, on the CPU.
    tensor host_tensor(const std::vector<double>& v, dtype dt)
    {
        return from_host(v.data(), {static_cast<i64>(v.size())}, dtype::float64).to(dt);
    }

    tensor nan_host(i64 n, dtype dt) { return full({n}, nan_v, dt); }
    /// Device tensors are made on the CPU and copied over (kernel tests use no other device kernel).
    tensor nan_dev(i64 n, dtype dt) { return full({n}, nan_v, dt).to(gpu); }
    tensor full_dev(i64 n, double v, dtype dt) { return full({n}, v, dt).to(gpu); }
    std::vector<double> host(const tensor& t) { return to_vector(t.to(cpu_device)); }

    /// Checks got (any device) against want (CPU) element by element within tol(k, want);
    /// NaN must meet NaN. Reports the first mismatch.
    template <class Tol>
    void check_within(const tensor& want, const tensor& got, Tol tol, const std::string& what)
    {
        const std::vector<double> w = host(want), g = host(got);
        REQUIRE(w.size() == g.size());
        i64 bad = 0;
        std::string first;
        for (std::size_t k = 0; k < w.size(); ++k)
        {
            const double t = tol(static_cast<i64>(k), w[k]);
            const bool ok = std::isnan(w[k]) ? std::isnan(g[k]) : !std::isnan(g[k]) && std::abs(g[k] - w[k]) <= t;
            if (!ok && bad++ == 0)
                first = "[" + std::to_string(k) + "]: device " + std::to_string(g[k]) + ", reference " +
                        std::to_string(w[k]) + ", tol " + std::to_string(t);
        }
        CHECK_MESSAGE(bad == 0, what << ": " << bad << " of " << w.size() << " differ; first " << first);
    }

    /// The inputs of one problem, on both devices, and their values as doubles.
    struct problem
    {
        dtype dt, sdt;
        bn_shape s;
        i64 n, R;
        double u, eps = 1e-3;
        tensor x, dy, A, y, scale, offset, mean, var, a, b;             // CPU
        tensor dx_, ddy, dA, dy_, dscale, doffset, dmean, dvar, da, db; // device (d prefix)
        std::vector<double> hx, hdy, hA, hy, hscale, hoffset, hmean, hvar, ha, hb;

        problem(dtype dt_, const bn_shape& sh, std::uint64_t seed)
            : dt(dt_), sdt(stats_of(dt_)), s(sh), n(sh.outer * sh.C * sh.inner), R(sh.outer * sh.inner), u(unit(dt_))
        {
            std::mt19937_64 gen(seed);
            std::uniform_real_distribution<double> U(-1, 1);
            auto vec = [&](i64 m, double lo, double hi) {
                std::vector<double> v(static_cast<std::size_t>(m));
                for (auto& e : v)
                    e = lo + (hi - lo) * (U(gen) + 1) / 2;
                return v;
            };
            x = host_tensor(vec(n, -1, 3), dt); // off-centre, so that centring matters
            dy = host_tensor(vec(n, -1, 1), dt);
            A = host_tensor(vec(n, -1, 1), dt);
            std::vector<double> yv = vec(n, -1, 1); // a fused ReLU's output: exact zeros, some negatives
            for (auto& e : yv)
                e = e < -0.7 ? e : std::max(e, 0.0);
            y = host_tensor(yv, dt);
            scale = host_tensor(vec(s.C, -2, 2), sdt);
            offset = host_tensor(vec(s.C, -1, 1), sdt);
            mean = host_tensor(vec(s.C, 0, 2), sdt);
            var = host_tensor(vec(s.C, 0.05, 2), sdt);
            a = host_tensor(vec(s.C, -1, 1), sdt);
            b = host_tensor(vec(s.C, -1, 1), sdt);
            dx_ = x.to(gpu), ddy = dy.to(gpu), dA = A.to(gpu), dy_ = y.to(gpu);
            dscale = scale.to(gpu), doffset = offset.to(gpu), dmean = mean.to(gpu), dvar = var.to(gpu);
            da = a.to(gpu), db = b.to(gpu);
            hx = host(x), hdy = host(dy), hA = host(A), hy = host(y), hscale = host(scale), hoffset = host(offset);
            hmean = host(mean), hvar = host(var), ha = host(a), hb = host(b);
        }

        i64 ch(i64 k) const { return (k / s.inner) % s.C; }
        double r(i64 c, const std::vector<double>& v) const { return 1 / std::sqrt(v[c] + eps); }
        double g_of(i64 k, bool masked) const { return masked && !(hy[k] > 0) ? 0.0 : hdy[k]; }

        /// Per channel: sum of f(k, c) over its elements.
        template <class F>
        std::vector<double> per_channel(F f) const
        {
            std::vector<double> out(static_cast<std::size_t>(s.C), 0.0);
            for (i64 k = 0; k < n; ++k)
                out[ch(k)] += f(k, ch(k));
            return out;
        }
    };

    /// Tolerance of the per-channel sums: D u sum|t| + rounds u |want|.
    auto sum_tol(const problem& p, const std::vector<double>& mag, double rounds = 1)
    {
        return [&p, mag, rounds](i64 i, double w) { return D * p.u * mag[i % p.s.C] + rounds * p.u * std::abs(w); };
    }

    /// Elementwise tolerance f u M(k) plus one ulp of a 16-bit output.
    template <class M>
    auto elem_tol(const problem& p, double f, M mag)
    {
        return [&p, f, mag](i64 k, double w) { return f * p.u * mag(k) + io_ulp(p.dt, w); };
    }

    void check_moments(const problem& p, const tensor& dmean, const tensor& dvar, const std::string& what)
    {
        tensor rm = nan_host(p.s.C, p.sdt), rv = nan_host(p.s.C, p.sdt);
        ref::bn_moments(rm.data_ptr(), rv.data_ptr(), p.x.data_ptr(), p.dt, p.s.outer, p.s.C, p.s.inner);
        const auto ax = p.per_channel([&](i64 k, i64) { return std::abs(p.hx[k]); });
        const double R = static_cast<double>(p.R), u = p.u;
        check_within(
            rm, dmean, [&](i64 c, double w) { return (2 * D + 6) * u * ax[c] / R + u * std::abs(w); }, what + " mean");
        check_within(
            rv, dvar,
            [&](i64 c, double w) {
                const double delta = (D + 3) * u * ax[c] / R;
                return (3 * D + 8) * u * (std::abs(w) + delta * delta) + u * std::abs(w);
            },
            what + " var");
    }

    /// Magnitude of y = scale r (x - mean) + offset at k, for the given statistics.
    auto normalize_mag(const problem& p, std::vector<double> m, std::vector<double> v)
    {
        return [&p, m, v](i64 k) {
            const i64 c = p.ch(k);
            return std::abs(p.hscale[c] * p.r(c, v)) * (std::abs(p.hx[k]) + std::abs(m[c])) + std::abs(p.hoffset[c]);
        };
    }

    /// Magnitude of the training dx at k from the sums s1, s2 (g masked when `masked`).
    auto grad_apply_mag(const problem& p, std::vector<double> s1, std::vector<double> s2, bool masked)
    {
        return [&p, s1, s2, masked](i64 k) {
            const i64 c = p.ch(k);
            const double r = p.r(c, p.hvar), k1 = std::abs(p.hscale[c] * r), R = static_cast<double>(p.R);
            return k1 * (std::abs(p.g_of(k, masked)) + std::abs(s1[c]) / R) +
                   k1 * r * r * std::abs(s2[c]) / R * (std::abs(p.hx[k]) + std::abs(p.hmean[c]));
        };
    }

    /// The per-channel magnitudes of the gradient sums: sum|g|, sum|g (x - mean)|.
    std::vector<double> grad_mag(const problem& p, int which, bool masked)
    {
        return p.per_channel([&](i64 k, i64 c) {
            const double g = std::abs(p.g_of(k, masked));
            return which == 0 ? g : g * std::abs(p.hx[k] - p.hmean[c]);
        });
    }

    /// bn_moments, and with relu off and on bn_normalize and bn_forward_training.
    void check_forward_kernels(const problem& p)
    {
        const auto& K = dev_k();
        const bn_shape s = p.s;
        const i64 C = s.C;
        // bn_moments
        {
            tensor m = nan_dev(C, p.sdt), v = nan_dev(C, p.sdt);
            K.bn_moments(m.data_ptr(), v.data_ptr(), p.dx_.data_ptr(), p.dt, s.outer, C, s.inner);
            check_moments(p, m, v, "bn_moments");
        }
        for (const bool relu : {false, true})
        {
            // bn_normalize with the given statistics
            tensor y = nan_dev(p.n, p.dt), ry = nan_host(p.n, p.dt);
            K.bn_normalize(y.data_ptr(), p.dx_.data_ptr(), p.dscale.data_ptr(), p.doffset.data_ptr(),
                           p.dmean.data_ptr(), p.dvar.data_ptr(), p.eps, relu, p.dt, s.outer, C, s.inner);
            ref::bn_normalize(ry.data_ptr(), p.x.data_ptr(), p.scale.data_ptr(), p.offset.data_ptr(), p.mean.data_ptr(),
                              p.var.data_ptr(), p.eps, relu, p.dt, s.outer, C, s.inner);
            check_within(ry, y, elem_tol(p, 8, normalize_mag(p, p.hmean, p.hvar)), "bn_normalize");

            // bn_forward_training: its statistics, and y from them
            tensor fy = nan_dev(p.n, p.dt), fm = nan_dev(C, p.sdt), fv = nan_dev(C, p.sdt);
            K.bn_forward_training(fy.data_ptr(), fm.data_ptr(), fv.data_ptr(), p.dx_.data_ptr(), p.dscale.data_ptr(),
                                  p.doffset.data_ptr(), p.eps, relu, p.dt, s.outer, C, s.inner);
            if (p.R == 0)
                continue;
            check_moments(p, fm, fv, "bn_forward_training");
            const tensor hm = fm.to(cpu_device), hv = fv.to(cpu_device);
            tensor fry = nan_host(p.n, p.dt);
            ref::bn_normalize(fry.data_ptr(), p.x.data_ptr(), p.scale.data_ptr(), p.offset.data_ptr(), hm.data_ptr(),
                              hv.data_ptr(), p.eps, relu, p.dt, s.outer, C, s.inner);
            check_within(fry, fy, elem_tol(p, 8, normalize_mag(p, host(hm), host(hv))), "bn_forward_training y");
        }
    }

    /// bn_grad_reduce, and bn_grad_apply from the reference's sums.
    void check_grad_reduce_apply(const problem& p)
    {
        const auto& K = dev_k();
        const bn_shape s = p.s;
        const i64 C = s.C;
        tensor rs1 = nan_host(C, p.sdt), rs2 = nan_host(C, p.sdt);
        ref::bn_grad_reduce(rs1.data_ptr(), rs2.data_ptr(), p.dy.data_ptr(), p.x.data_ptr(), p.mean.data_ptr(), p.dt,
                            s.outer, C, s.inner);
        {
            tensor s1 = nan_dev(C, p.sdt), s2 = nan_dev(C, p.sdt);
            K.bn_grad_reduce(s1.data_ptr(), s2.data_ptr(), p.ddy.data_ptr(), p.dx_.data_ptr(), p.dmean.data_ptr(), p.dt,
                             s.outer, C, s.inner);
            check_within(rs1, s1, sum_tol(p, grad_mag(p, 0, false)), "bn_grad_reduce sum_dy");
            check_within(rs2, s2, sum_tol(p, grad_mag(p, 1, false)), "bn_grad_reduce sum_dy_xc");

            tensor dx = nan_dev(p.n, p.dt), rdx = nan_host(p.n, p.dt);
            const tensor d1 = rs1.to(gpu), d2 = rs2.to(gpu);
            K.bn_grad_apply(dx.data_ptr(), p.ddy.data_ptr(), p.dx_.data_ptr(), p.dscale.data_ptr(), p.dmean.data_ptr(),
                            p.dvar.data_ptr(), d1.data_ptr(), d2.data_ptr(), p.eps, p.dt, s.outer, C, s.inner);
            ref::bn_grad_apply(rdx.data_ptr(), p.dy.data_ptr(), p.x.data_ptr(), p.scale.data_ptr(), p.mean.data_ptr(),
                               p.var.data_ptr(), rs1.data_ptr(), rs2.data_ptr(), p.eps, p.dt, s.outer, C, s.inner);
            check_within(rdx, dx, elem_tol(p, 16, grad_apply_mag(p, host(rs1), host(rs2), false)), "bn_grad_apply");
        }
    }

    /// bn_grad_training / bn_grad_inference, y null (not `masked`) or a fused ReLU's output.
    void check_grad_fused(const problem& p, bool masked)
    {
        const auto& K = dev_k();
        const bn_shape s = p.s;
        const i64 C = s.C;
        CAPTURE(masked);
        const void* dyp = masked ? p.dy_.data_ptr() : nullptr;
        const void* hyp = masked ? p.y.data_ptr() : nullptr;
        tensor ms1 = nan_host(C, p.sdt), ms2 = nan_host(C, p.sdt), rdx = nan_host(p.n, p.dt);
        ref::bn_grad_inference(rdx.data_ptr(), ms1.data_ptr(), ms2.data_ptr(), p.dy.data_ptr(), p.x.data_ptr(), hyp,
                               p.scale.data_ptr(), p.mean.data_ptr(), p.var.data_ptr(), p.eps, p.dt, s.outer, C,
                               s.inner);
        const auto t1 = sum_tol(p, grad_mag(p, 0, masked)), t2 = sum_tol(p, grad_mag(p, 1, masked));
        {
            tensor dx = nan_dev(p.n, p.dt), s1 = nan_dev(C, p.sdt), s2 = nan_dev(C, p.sdt);
            K.bn_grad_inference(dx.data_ptr(), s1.data_ptr(), s2.data_ptr(), p.ddy.data_ptr(), p.dx_.data_ptr(), dyp,
                                p.dscale.data_ptr(), p.dmean.data_ptr(), p.dvar.data_ptr(), p.eps, p.dt, s.outer, C,
                                s.inner);
            check_within(ms1, s1, t1, "bn_grad_inference sum_dy");
            check_within(ms2, s2, t2, "bn_grad_inference sum_dy_xc");
            check_within(rdx, dx,
                         elem_tol(p, 6,
                                  [&p, masked](i64 k) {
                                      const i64 c = p.ch(k);
                                      return std::abs(p.g_of(k, masked) * p.hscale[c] * p.r(c, p.hvar));
                                  }),
                         "bn_grad_inference dx");
        }
        {
            tensor dx = nan_dev(p.n, p.dt), s1 = nan_dev(C, p.sdt), s2 = nan_dev(C, p.sdt);
            K.bn_grad_training(dx.data_ptr(), s1.data_ptr(), s2.data_ptr(), p.ddy.data_ptr(), p.dx_.data_ptr(), dyp,
                               p.dscale.data_ptr(), p.dmean.data_ptr(), p.dvar.data_ptr(), p.eps, p.dt, s.outer, C,
                               s.inner);
            check_within(ms1, s1, t1, "bn_grad_training sum_dy");
            check_within(ms2, s2, t2, "bn_grad_training sum_dy_xc");
            // dx against the reference's apply on the masked dy and the device's own sums
            std::vector<double> gm(static_cast<std::size_t>(p.n));
            for (i64 k = 0; k < p.n; ++k)
                gm[k] = p.g_of(k, masked);
            const tensor g = host_tensor(gm, p.dt), h1 = s1.to(cpu_device), h2 = s2.to(cpu_device);
            tensor wdx = nan_host(p.n, p.dt);
            ref::bn_grad_apply(wdx.data_ptr(), g.data_ptr(), p.x.data_ptr(), p.scale.data_ptr(), p.mean.data_ptr(),
                               p.var.data_ptr(), h1.data_ptr(), h2.data_ptr(), p.eps, p.dt, s.outer, C, s.inner);
            check_within(wdx, dx, elem_tol(p, 16, grad_apply_mag(p, host(h1), host(h2), masked)),
                         "bn_grad_training dx");
        }
    }

    /// bn_grad_grad_reduce (g = dy) against the reference's sums `rsums`.
    void check_grad_grad_reduce(const problem& p, const tensor& rsums)
    {
        const auto& K = dev_k();
        const bn_shape s = p.s;
        const i64 C = s.C;
        tensor sums = nan_dev(5 * C, p.sdt);
        K.bn_grad_grad_reduce(sums.data_ptr(), p.dA.data_ptr(), p.ddy.data_ptr(), p.dx_.data_ptr(), p.dmean.data_ptr(),
                              p.dvar.data_ptr(), p.eps, p.dt, s.outer, C, s.inner);
        // sum|t| of each of the five sums (xh = (x - mean) r)
        std::vector<double> mag(static_cast<std::size_t>(5 * C), 0.0);
        for (i64 k = 0; k < p.n; ++k)
        {
            const i64 c = p.ch(k);
            const double xh = std::abs((p.hx[k] - p.hmean[c]) * p.r(c, p.hvar)), g = std::abs(p.hdy[k]),
                         A = std::abs(p.hA[k]);
            const double t[5] = {g, g * xh, A, A * xh, A * g};
            for (int j = 0; j < 5; ++j)
                mag[j * C + c] += t[j];
        }
        check_within(
            rsums, sums, [&](i64 i, double w) { return D * p.u * mag[i] + 2 * p.u * std::abs(w); },
            "bn_grad_grad_reduce");
    }

    /// bn_grad_grad_apply from the reference's sums (rsums on the CPU, dsums on the device, hs
    /// as doubles), in training or inference, with both outputs (which 0), d_g only (1) or d_x only (2).
    void check_grad_grad_apply(const problem& p, const tensor& rsums, const tensor& dsums,
                               const std::vector<double>& hs, bool training, int which)
    {
        const auto& K = dev_k();
        const bn_shape s = p.s;
        const i64 C = s.C;
        const double R = static_cast<double>(p.R);
        CAPTURE(training);
        CAPTURE(which);
        tensor dg = nan_dev(p.n, p.dt), dxo = nan_dev(p.n, p.dt);
        tensor rg = nan_host(p.n, p.dt), rx = nan_host(p.n, p.dt);
        K.bn_grad_grad_apply(which != 2 ? dg.data_ptr() : nullptr, which != 1 ? dxo.data_ptr() : nullptr,
                             p.dA.data_ptr(), p.ddy.data_ptr(), p.dx_.data_ptr(), p.dscale.data_ptr(),
                             p.dmean.data_ptr(), p.dvar.data_ptr(), p.da.data_ptr(), p.db.data_ptr(), dsums.data_ptr(),
                             p.eps, training, p.dt, s.outer, C, s.inner);
        ref::bn_grad_grad_apply(rg.data_ptr(), rx.data_ptr(), p.A.data_ptr(), p.dy.data_ptr(), p.x.data_ptr(),
                                p.scale.data_ptr(), p.mean.data_ptr(), p.var.data_ptr(), p.a.data_ptr(), p.b.data_ptr(),
                                rsums.data_ptr(), p.eps, training, p.dt, s.outer, C, s.inner);
        // the coefficient form's magnitudes (see the header comment)
        const auto mags = [&p, &hs, R, C, training](i64 k, bool want_dg) {
            const i64 c = p.ch(k);
            const double r = p.r(c, p.hvar), gam = std::abs(p.hscale[c]), ac = std::abs(p.ha[c]);
            const double A = std::abs(p.hA[k]), g = std::abs(p.hdy[k]);
            const double X = std::abs(p.hx[k]) + std::abs(p.hmean[c]);
            if (!training)
                return want_dg ? gam * r * A + ac * r * X + std::abs(p.hb[c]) : ac * r * g;
            const double gm = std::abs(hs[c]) / R, gxh = std::abs(hs[C + c]) / R;
            const double Am = std::abs(hs[2 * C + c]) / R, Axh = std::abs(hs[3 * C + c]) / R;
            const double Agm = std::abs(hs[4 * C + c]) / R;
            if (want_dg)
                return gam * r * (A + Am) + r * (ac + gam * r * Axh) * X + std::abs(p.hb[c]);
            return gam * r * r * gxh * (A + Am) + (ac * r + gam * r * r * Axh) * (g + gm) +
                   (gam * r * r * r * (3 * Axh * gxh + Agm + Am * gm) + ac * r * r * gxh) * X;
        };
        if (which != 2)
            check_within(rg, dg, elem_tol(p, training ? 16 : 12, [mags](i64 k) { return mags(k, true); }),
                         "bn_grad_grad_apply d_g");
        else
            CHECK(std::isnan(host(dg)[0])); // not written
        if (which != 1)
            check_within(rx, dxo, elem_tol(p, training ? 20 : 6, [mags](i64 k) { return mags(k, false); }),
                         "bn_grad_grad_apply d_x");
        else
            CHECK(std::isnan(host(dxo)[0]));
    }

    /// All nine kernels on one problem.
    void check_kernels(const problem& p)
    {
        const bn_shape s = p.s;
        const i64 C = s.C;
        const std::string at = std::string(xgrad::name(p.dt)) + " " + str(s);
        CAPTURE(at);

        check_forward_kernels(p);
        check_grad_reduce_apply(p);

        // bn_grad_training / bn_grad_inference, y null or a fused ReLU's output
        for (const bool masked : {false, true})
            check_grad_fused(p, masked);

        // bn_grad_grad_reduce (g = dy), and bn_grad_grad_apply from the reference's sums
        tensor rsums = nan_host(5 * C, p.sdt);
        ref::bn_grad_grad_reduce(rsums.data_ptr(), p.A.data_ptr(), p.dy.data_ptr(), p.x.data_ptr(), p.mean.data_ptr(),
                                 p.var.data_ptr(), p.eps, p.dt, s.outer, C, s.inner);
        check_grad_grad_reduce(p, rsums);
        const std::vector<double> hs = host(rsums);
        const tensor dsums = rsums.to(gpu);
        for (const bool training : {true, false})
            for (const int which : {0, 1, 2}) // both outputs, d_g only, d_x only
                check_grad_grad_apply(p, rsums, dsums, hs, training, which);
    }

}

TEST_CASE("cuda batch norm kernels: fixed shapes, both layouts, every dtype, against the reference")
{
    // Channels-last (inner 1) and channels-first; R = 1; odd C; long runs; shapes whose lanes
    // need one tree level ([3000, 3, 1]: 94 lanes a channel) and two ([1, 3, 40000]: 1250).
    const bn_shape shapes[] = {{1, 1, 1}, {1, 3, 1},   {5, 7, 1},  {2, 33, 1},   {64, 3, 1},   {2, 3, 17},
                               {3, 7, 5}, {1, 1, 300}, {4, 33, 2}, {2, 2, 1000}, {3000, 3, 1}, {1, 3, 40000}};
    std::uint64_t seed = 100;
    for (const dtype dt : float_dtypes)
        for (const bn_shape& s : shapes)
            check_kernels(problem(dt, s, ++seed));
}

TEST_CASE("cuda batch norm kernels: seeded random shapes")
{
    std::mt19937_64 gen(2024);
    const i64 Cs[] = {1, 2, 3, 5, 7, 8, 16, 33};
    const i64 inners[] = {1, 1, 1, 2, 3, 7, 16, 31, 65};
    for (int t = 0; t < 12; ++t)
    {
        const bn_shape s{1 + static_cast<i64>(gen() % 9), Cs[gen() % 8], inners[gen() % 9]};
        const dtype dt = float_dtypes[gen() % 4];
        check_kernels(problem(dt, s, gen()));
    }
}

TEST_CASE("cuda batch norm kernels: R = 0 and C = 0")
{
    const auto& K = dev_k();
    for (const dtype dt : float_dtypes)
        for (const bn_shape s : {bn_shape{0, 3, 4}, bn_shape{2, 3, 0}})
        {
            CAPTURE(dt);
            const dtype sdt = stats_of(dt);
            const tensor x = full_dev(1, 1.0, dt), v = full_dev(3, 1.0, sdt);
            tensor m = nan_dev(3, sdt), var = full_dev(3, 0.0, sdt);
            K.bn_moments(m.data_ptr(), var.data_ptr(), x.data_ptr(), dt, s.outer, s.C, s.inner);
            for (const double e : host(m))
                CHECK(std::isnan(e));
            for (const double e : host(var))
                CHECK(std::isnan(e));
            m = full_dev(3, 0.0, sdt), var = full_dev(3, 0.0, sdt);
            K.bn_forward_training(nullptr, m.data_ptr(), var.data_ptr(), x.data_ptr(), v.data_ptr(), v.data_ptr(), 1e-3,
                                  true, dt, s.outer, s.C, s.inner);
            CHECK(std::isnan(host(m)[2]));
            CHECK(std::isnan(host(var)[1]));
            // sums over no elements are zero
            tensor s1 = nan_dev(3, sdt), s2 = nan_dev(3, sdt), s5 = nan_dev(15, sdt);
            K.bn_grad_reduce(s1.data_ptr(), s2.data_ptr(), x.data_ptr(), x.data_ptr(), v.data_ptr(), dt, s.outer, s.C,
                             s.inner);
            CHECK(host(s1) == std::vector<double>(3, 0.0));
            CHECK(host(s2) == std::vector<double>(3, 0.0));
            s1 = nan_dev(3, sdt), s2 = nan_dev(3, sdt);
            K.bn_grad_training(nullptr, s1.data_ptr(), s2.data_ptr(), x.data_ptr(), x.data_ptr(), nullptr, v.data_ptr(),
                               v.data_ptr(), v.data_ptr(), 1e-3, dt, s.outer, s.C, s.inner);
            CHECK(host(s1) == std::vector<double>(3, 0.0));
            s1 = nan_dev(3, sdt), s2 = nan_dev(3, sdt);
            K.bn_grad_inference(nullptr, s1.data_ptr(), s2.data_ptr(), x.data_ptr(), x.data_ptr(), x.data_ptr(),
                                v.data_ptr(), v.data_ptr(), v.data_ptr(), 1e-3, dt, s.outer, s.C, s.inner);
            CHECK(host(s2) == std::vector<double>(3, 0.0));
            K.bn_grad_grad_reduce(s5.data_ptr(), x.data_ptr(), x.data_ptr(), x.data_ptr(), v.data_ptr(), v.data_ptr(),
                                  1e-3, dt, s.outer, s.C, s.inner);
            CHECK(host(s5) == std::vector<double>(15, 0.0));
            // the elementwise kernels have nothing to write
            K.bn_normalize(nullptr, nullptr, v.data_ptr(), v.data_ptr(), v.data_ptr(), v.data_ptr(), 1e-3, false, dt,
                           s.outer, s.C, s.inner);
            K.bn_grad_apply(nullptr, nullptr, nullptr, v.data_ptr(), v.data_ptr(), v.data_ptr(), v.data_ptr(),
                            v.data_ptr(), 1e-3, dt, s.outer, s.C, s.inner);
            K.bn_grad_grad_apply(nullptr, nullptr, nullptr, nullptr, nullptr, v.data_ptr(), v.data_ptr(), v.data_ptr(),
                                 v.data_ptr(), v.data_ptr(), s5.data_ptr(), 1e-3, true, dt, s.outer, s.C, s.inner);
        }
    // C = 0: nothing is read or written
    K.bn_moments(nullptr, nullptr, nullptr, dtype::float32, 4, 0, 3);
    K.bn_forward_training(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, 1e-3, false, dtype::float16, 4, 0, 1);
    K.bn_grad_training(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, 1e-3,
                       dtype::float64, 4, 0, 3);
    K.bn_grad_inference(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, 1e-3,
                        dtype::bfloat16, 4, 0, 3);
    K.bn_grad_grad_reduce(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, 1e-3, dtype::float32, 4, 0, 1);
    cuda_synchronize(gpu);
}

TEST_CASE("cuda batch norm kernels: ReLU keeps NaN, and the mask drops NaN gradients")
{
    const auto& K = dev_k();
    for (const dtype dt : float_dtypes)
    {
        CAPTURE(dt);
        const dtype sdt = stats_of(dt);
        // one channel: x = [NaN, -1, 1], y = relu(x - 0) -> [NaN, 0, 1]
        const tensor x = host_tensor({nan_v, -1, 1}, dt).to(gpu);
        const tensor one = full_dev(1, 1.0, sdt), zero = full_dev(1, 0.0, sdt), var = full_dev(1, 1.0 - 1e-3, sdt);
        tensor y = nan_dev(3, dt);
        K.bn_normalize(y.data_ptr(), x.data_ptr(), one.data_ptr(), zero.data_ptr(), zero.data_ptr(), var.data_ptr(),
                       1e-3, true, dt, 1, 1, 3);
        const std::vector<double> hy = host(y);
        CHECK(std::isnan(hy[0]));
        CHECK(hy[1] == 0.0);
        CHECK(hy[2] == doctest::Approx(1.0).epsilon(1e-2));
        // dy = [NaN, NaN, 2] masked by y > 0: only the last element counts
        const tensor dy = host_tensor({nan_v, nan_v, 2}, dt).to(gpu), xs = host_tensor({0, 0, 0}, dt).to(gpu);
        tensor dx = nan_dev(3, dt), s1 = nan_dev(1, sdt), s2 = nan_dev(1, sdt);
        K.bn_grad_inference(dx.data_ptr(), s1.data_ptr(), s2.data_ptr(), dy.data_ptr(), xs.data_ptr(), y.data_ptr(),
                            one.data_ptr(), zero.data_ptr(), var.data_ptr(), 1e-3, dt, 1, 1, 3);
        CHECK(host(s1)[0] == 2.0);
        CHECK(host(dx) == std::vector<double>{0.0, 0.0, 2.0});
    }
}

TEST_CASE("cuda batch norm kernels: the same call gives the same bits")
{
    const auto& K = dev_k();
    // 8x33x17x19 as NCHW (outer 8, inner 323) and as NHWC (outer 8*17*19, inner 1)
    for (const bn_shape s : {bn_shape{8, 33, 17 * 19}, bn_shape{8 * 17 * 19, 33, 1}})
        for (const dtype dt : {dtype::float32, dtype::bfloat16})
        {
            CAPTURE(dt);
            const problem p(dt, s, 7);
            tensor out[2][7];
            for (auto& o : out)
            {
                // forward: y, mean, var; gradient: dx, sum_dy, sum_dy_xc; second order: sums
                o[0] = nan_dev(p.n, dt), o[1] = nan_dev(s.C, p.sdt), o[2] = nan_dev(s.C, p.sdt);
                o[3] = nan_dev(p.n, dt), o[4] = nan_dev(s.C, p.sdt), o[5] = nan_dev(s.C, p.sdt);
                o[6] = nan_dev(5 * s.C, p.sdt);
                K.bn_forward_training(o[0].data_ptr(), o[1].data_ptr(), o[2].data_ptr(), p.dx_.data_ptr(),
                                      p.dscale.data_ptr(), p.doffset.data_ptr(), p.eps, false, dt, s.outer, s.C,
                                      s.inner);
                K.bn_grad_training(o[3].data_ptr(), o[4].data_ptr(), o[5].data_ptr(), p.ddy.data_ptr(),
                                   p.dx_.data_ptr(), p.dy_.data_ptr(), p.dscale.data_ptr(), o[1].data_ptr(),
                                   o[2].data_ptr(), p.eps, dt, s.outer, s.C, s.inner);
                K.bn_grad_grad_reduce(o[6].data_ptr(), p.dA.data_ptr(), p.ddy.data_ptr(), p.dx_.data_ptr(),
                                      o[1].data_ptr(), o[2].data_ptr(), p.eps, dt, s.outer, s.C, s.inner);
            }
            for (int k = 0; k < 7; ++k)
                check_same_bits(out[0][k], out[1][k], "output " + std::to_string(k));
        }
}
