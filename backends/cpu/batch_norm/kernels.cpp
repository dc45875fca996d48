// The fast batch-norm kernels (contracts in backends/common/kernel_list.hpp): the nine public kernels, their
// per-channel coefficients, and how the one-read kernels cut a tensor into channel blocks. They
// always run the SIMD code (sse2 or avx2_fma, as simd_call picks); the choice of their
// xgrad::cpu::reference twins (batch_norm/reference.cpp) at simd_level::scalar is made once, where the
// kernel table is built (core/src/dispatch.cpp). This file says what each kernel computes;
// README.md maps the files it builds on (plan, walk, convert, simd).
//
// Design (the layout and summation order: plan.hpp; the measurements behind the
// memory schedule: docs/performance.md):
// - Memory passes over DRAM: bn_grad_inference one (the sums and dx together); bn_grad_apply,
//   bn_grad_reduce and bn_normalize one each; bn_moments one (the sums of d = x - m and d^2
//   around a shift m sampled from the channel's first elements, with the corrected formula
//   var = (sum d^2 - (sum d)^2 / R) / R, which also gives the mean m + sum d / R; a second
//   pass only for channels whose shift was far from the mean: moments_of);
//   bn_grad_training and bn_forward_training one where a block of channels fits the cache
//   budget (for_channel_blocks: the reduction brings the block in, the elementwise pass reads
//   it there), else two.
// - Per-channel coefficients (1/sqrt(var + eps) and the products of the formulas) are computed
//   in double from the S inputs and rounded once to S; every elementwise output is one fused
//   affine expression per element, cA*(A - mA) + cG*(g - mG) + cX*(x - mX) + cK (centred
//   operands keep cancellation out of the per-channel constants).
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <numeric>
#include <string>
#include <type_traits>
#include <vector>

#include <unistd.h>

#include "backends/common/batch_norm_coefficients.hpp"
#include "backends/common/convert.hpp"
#include "backends/cpu/batch_norm/operands.hpp"
#include "backends/cpu/batch_norm/plan.hpp"
#include "backends/cpu/batch_norm/simd.hpp"
#include "backends/cpu/batch_norm/walk.hpp"
#include "backends/cpu/cpu_kernels.hpp"
#include "backends/cpu/dispatch.hpp"
#include "backends/cpu/simd/kernels.hpp"
#include "xgrad/thread_pool.hpp"

namespace xgrad::cpu
{
    namespace
    {
        using simd::bn_sums;
        using bn_detail::affine_out;
        using bn_detail::apply;
        using bn_detail::geometry;
        using bn_detail::operands;
        using bn_detail::reduce_writing;
        using bn_detail::reduce;

        using detail::visit_with_stats;

        /// A per-channel coefficient table for apply(), all zero.
        template <class S>
        std::vector<S> coef_table(std::int64_t C)
        {
            return std::vector<S>(static_cast<std::size_t>(kernels::bn_slot::count * C), S(0));
        }
        // The slots of the coefficient tables (backends/common/batch_norm_coefficients.hpp).
        using namespace kernels::bn_slot;

        template <class S>
        double at(const void* p, std::int64_t i) noexcept
        {
            return static_cast<double>(static_cast<const S*>(p)[i]);
        }

        template <class S>
        double inv_std(const void* var, std::int64_t c, double eps) noexcept
        {
            return kernels::bn_inv_std(at<S>(var, c), eps);
        }
    }

    namespace
    {
        /// The last-level cache this process sees, in bytes: the largest data or unified cache
        /// of cpu0 in sysfs (what a virtual machine is given, where sysconf can report the host's
        /// total), else sysconf's L3, else its L2; 0 when nothing says.
        std::int64_t last_level_cache_bytes()
        {
            std::int64_t best = 0;
            for (int index = 0; index < 8; ++index)
            {
                const std::string dir = "/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(index) + "/";
                std::ifstream type_file(dir + "type"), size_file(dir + "size");
                std::string type, size;
                if (!(type_file >> type) || !(size_file >> size) || type == "Instruction")
                    continue;
                char* end = nullptr;
                const long long v = std::strtoll(size.c_str(), &end, 10);
                if (end == size.c_str() || v <= 0 || v > (1LL << 40))
                    continue;
                const std::int64_t bytes = *end == 'K' ? v << 10 : *end == 'M' ? v << 20 : *end == 'G' ? v << 30 : v;
                best = std::max(best, bytes);
            }
            if (best > 0)
                return best;
            for (int name : {_SC_LEVEL3_CACHE_SIZE, _SC_LEVEL2_CACHE_SIZE})
                if (const long v = sysconf(name); v > 0)
                    return v;
            return 0;
        }

        /// The default resident budget: a quarter of the last-level cache, 4..16 MiB. The
        /// development machines are shared, so other tenants hold much of their L3: on a 2-core
        /// slice of an AMD EPYC (32 MiB L3, sysconf reporting 384) the channels-first forward ran
        /// 25% faster at 8 MiB than at 4, and at 64 MiB the channels-last kernels lost a third
        /// (blocks that no longer stay cached are read twice from DRAM); on an Intel Xeon whose
        /// L3 reads as 480 MiB, data read twice came back at DRAM speed from about 16 MiB.
        std::int64_t default_resident_budget()
        {
            static const std::int64_t bytes = std::clamp<std::int64_t>(last_level_cache_bytes() / 4,
                                                                       std::int64_t{4} << 20, std::int64_t{16} << 20);
            return bytes;
        }

        /// Bytes of x-like tensors that the one-read kernels keep resident in the cache at a time
        /// (-1: not yet set, default_resident_budget()). The summation order does not depend on
        /// it (plan.hpp), so it follows the machine; tests and benchmarks set it.
        std::atomic<std::int64_t> resident_budget_bytes{-1};

        std::int64_t resident_budget() noexcept
        {
            const std::int64_t b = resident_budget_bytes.load(std::memory_order_relaxed);
            return b >= 0 ? b : default_resident_budget();
        }

        /// Channel blocks of an [outer, C, inner] tensor for a kernel that reads `tensors`
        /// x-like tensors of `elem` bytes per element twice (a reduction, then an elementwise
        /// pass): f(c0, geometry of the block) once per block. The reduction brings a block into
        /// the cache and the elementwise pass finds it there, so DRAM is read once. Chosen by
        /// the shape alone (the blocks decide the summation order, which must not depend on the
        /// thread count):
        /// - private blocks of about budget / 8 bytes (at most budget / 4), when there are at
        ///   least 4 of them: whole blocks are shared out among the threads, so each thread
        ///   keeps its own block in the cache and the threads never wait for each other inside
        ///   a block (f's own parallel_for calls run inline). A block is at least 2 KiB of
        ///   contiguous data per outer index (`unit` channels), in channels-last rows a whole
        ///   number of 64-byte cache lines, so that no line is read by two blocks.
        /// - else the whole tensor as one block, walked by all threads: read once when it fits
        ///   the budget, else twice (channels-last tensors whose rows are narrower than 8 KiB, or
        ///   whose narrowest block is larger than the cache, cannot do better: a channel's sums
        ///   need all of its rows before its first output).
        template <class F>
        void for_channel_blocks(std::int64_t outer, std::int64_t C, std::int64_t inner, std::int64_t elem,
                                std::int64_t tensors, F&& f)
        {
            if (outer * C * inner == 0) // nothing to read (the kernels then only fill statistics)
                return f(std::int64_t{0}, geometry(outer, C, inner));
            const std::int64_t per_channel = outer * inner * elem * tensors;
            const std::int64_t budget = resident_budget();
            // Contiguous runs of at least 2 KiB per outer index, in both layouts: shorter runs
            // scattered over many pages starve the hardware prefetchers. In channels-last rows
            // the run is also a whole number of 64-byte lines. (Measured on an AMD EPYC: 64- and
            // 128-byte slices of channels-last rows ran 35-40% slower than the whole tensor
            // read twice, even from the L3.)
            const std::int64_t run_unit = (2048 + inner * elem - 1) / (inner * elem);
            const std::int64_t line_unit = 64 / std::gcd(inner * elem, std::int64_t{64});
            const std::int64_t unit = inner < bn_detail::run_min_inner
                                          ? (run_unit + line_unit - 1) / line_unit * line_unit
                                          : run_unit;
            const std::int64_t pc = std::min(C, std::max(unit, budget / 8 / per_channel / unit * unit));
            const std::int64_t blocks = (C + pc - 1) / pc;
            const geometry whole(outer, C, inner);
            // A tensor whose rows merge outer indices is never blocked (blocks do not merge), so
            // that the summation order stays a function of the shape (plan.hpp).
            if (blocks < 4 || pc * per_channel > budget / 4 || whole.merge > 1)
                return f(std::int64_t{0}, whole);
            parallel_for(0, blocks, 1, [&](std::int64_t b0, std::int64_t b1) {
                for (std::int64_t b = b0; b < b1; ++b)
                    f(b * pc, geometry(outer, std::min(pc, C - b * pc), inner, C * inner));
            });
        }

        /// Whether an elementwise output bypasses the cache (non-temporal stores): when the
        /// tensors a kernel touches do not fit resident_budget, so the output would only evict
        /// its inputs and cost a read for ownership, and in any case from 8 MiB on. The second
        /// test is measured: on the Intel Xeon whose 16 MiB budget suits the blocked kernels,
        /// training forwards of x and y totalling 12.8 MB (cached stores there) ran 1.25-1.6x
        /// faster with streamed stores (bench/run bn, 2026-12-06): an output that size leaves
        /// the private caches before anything reads it, and its read for ownership comes from
        /// DRAM. The summation order does not depend on this choice, only the store kind.
        bool stream_output(std::int64_t numel, std::int64_t elem, std::int64_t tensors) noexcept
        {
            return numel * elem * tensors > std::min(resident_budget(), std::int64_t{8} << 20);
        }

        /// Channel c's mean and biased variance computed again in double, element by element
        /// (the reference's arithmetic): the fallback for a float channel whose statistics came
        /// out infinite or NaN. Float partial sums overflow for finite data near the float
        /// range (x ~ 3e38: sum(x) is inf though the mean is finite; x ~ 1.5e19: sum(d^2) is inf
        /// though the variance fits); in double they cannot, and data holding +-Inf or NaN gives
        /// the same non-finite result as before. Costs nothing for finite statistics.
        template <class T, class S>
        void moments_in_double(const geometry& geo, const T* x, std::int64_t c, S* mo, S* vo)
        {
            const double R = static_cast<double>(geo.outer * geo.inner);
            const auto at = [&](std::int64_t o, std::int64_t i) {
                return detail::widen<double>(x[o * geo.ostride + c * geo.inner + i]);
            };
            double sum = 0;
            for (std::int64_t o = 0; o < geo.outer; ++o)
                for (std::int64_t i = 0; i < geo.inner; ++i)
                    sum += at(o, i);
            const double m = sum / R;
            double sq = 0;
            for (std::int64_t o = 0; o < geo.outer; ++o)
                for (std::int64_t i = 0; i < geo.inner; ++i)
                {
                    const double d = at(o, i) - m;
                    sq += d * d;
                }
            mo[c] = static_cast<S>(m);
            vo[c] = static_cast<S>(sq / R);
        }

        /// Elements of a channel whose mean is the shift of the one-pass sums (moments_of).
        constexpr std::int64_t shift_sample = 64;

        /// Per channel of geo: the mean, computed in double and rounded once to S, of the
        /// channel's first min(R, shift_sample) elements in (outer, inner) order. A function of
        /// the shape and the data only (not of the blocking or the threads), read from a few
        /// cache lines per channel.
        template <class T, class S>
        std::vector<S> sample_shift(const geometry& geo, const T* x)
        {
            const std::int64_t n = std::min(geo.outer * geo.inner, shift_sample);
            std::vector<S> m(static_cast<std::size_t>(geo.C));
            for (std::int64_t c = 0; c < geo.C; ++c)
            {
                double sum = 0;
                for (std::int64_t k = 0; k < n; ++k)
                    sum += detail::widen<double>(x[k / geo.inner * geo.ostride + c * geo.inner + k % geo.inner]);
                m[static_cast<std::size_t>(c)] = static_cast<S>(sum / static_cast<double>(n));
            }
            return m;
        }

        /// mean and biased variance of the channels of geo, read through io (bn_moments), in
        /// one pass over x where it can: the sums of d = x - m and d^2 around a shift m (the
        /// mean of a small sample, sample_shift), then the corrected formula
        /// var = (sum d^2 - (sum d)^2 / R) / R and mean = m + sum d / R, exact in exact
        /// arithmetic for any m. In floating point the subtraction loses accuracy by the factor
        /// F = sum d^2 / (R var) = 1 + (mean - m)^2 / var; a channel with F > 2 (its sample mean
        /// more than one standard deviation off, e.g. sorted or drifting data, or an outlier in
        /// the sample) is summed again around its now accurate mean (F ~ 1): the two-pass
        /// result. So the variance's error bound is at most twice the two-pass bound of plan.hpp
        /// ((645 + ceil(log2 R)) u sum d^2 for float, doubled), while typical data is read once.
        template <class T, class S>
        void moments_of(const geometry& geo, const operands<T, S>& io, S* mo, S* vo)
        {
            const auto dR = static_cast<double>(geo.outer * geo.inner);
            std::vector<S> m = sample_shift<T, S>(geo, io.x);
            std::vector<S> d = reduce(geo, bn_sums::centred, io, static_cast<const S*>(m.data()));
            const auto ill_conditioned = [&](std::int64_t c) {
                const double sd = d[c], sq = d[geo.C + c];
                return kernels::bn_is_finite(sd) && kernels::bn_is_finite(sq) && sd * sd / dR > 0.5 * sq;
            };
            bool again = false;
            for (std::int64_t c = 0; c < geo.C && !again; ++c)
                again = ill_conditioned(c);
            if (again)
            {
                // The second pass, around the one-pass means, for the channels that need it.
                std::vector<S> m2(m);
                for (std::int64_t c = 0; c < geo.C; ++c)
                    m2[c] = static_cast<S>(kernels::bn_refined_mean(static_cast<double>(m[c]), d[c], dR));
                const std::vector<S> d2 = reduce(geo, bn_sums::centred, io, static_cast<const S*>(m2.data()));
                for (std::int64_t c = 0; c < geo.C; ++c)
                    if (ill_conditioned(c))
                    {
                        m[c] = m2[c];
                        d[c] = d2[c];
                        d[geo.C + c] = d2[geo.C + c];
                    }
            }
            for (std::int64_t c = 0; c < geo.C; ++c)
            {
                const double sd = d[c], sq = d[geo.C + c];
                const double v = (sq - sd * sd / dR) / dR;
                mo[c] = static_cast<S>(kernels::bn_refined_mean(static_cast<double>(m[c]), sd, dR));
                vo[c] = static_cast<S>(v < 0 ? 0.0 : v); // NaN stays NaN
                if constexpr (std::is_same_v<S, float>)
                    if (!kernels::bn_is_finite(mo[c]) || !kernels::bn_is_finite(vo[c]))
                        moments_in_double(geo, io.x, c, mo, vo);
            }
        }

        /// apply() coefficients of y = (x - mean) r scale + offset.
        template <class S>
        std::vector<S> normalize_coef(const S* scale, const S* offset, const S* mean, const S* var, double eps,
                                      std::int64_t C)
        {
            auto coef = coef_table<S>(C);
            for (std::int64_t c = 0; c < C; ++c)
            {
                coef[cX * C + c] = static_cast<S>(at<S>(scale, c) * inv_std<S>(var, c, eps));
                coef[mX * C + c] = mean[c];
                coef[cK * C + c] = offset[c];
            }
            return coef;
        }

        /// apply() coefficients of the training dx from the sums (R elements per channel):
        /// dx = k1 (dy - sum_dy/R) - k1 r^2 sum_dy_xc/R (x - mean), k1 = scale r.
        template <class S>
        std::vector<S> grad_apply_coef(const S* scale, const S* mean, const S* var, const S* sum_dy, const S* sum_dy_xc,
                                       double eps, double R, std::int64_t C)
        {
            auto coef = coef_table<S>(C);
            for (std::int64_t c = 0; c < C; ++c)
            {
                const double r = inv_std<S>(var, c, eps), k1 = at<S>(scale, c) * r;
                coef[cG * C + c] = static_cast<S>(k1);
                coef[mG * C + c] = static_cast<S>(at<S>(sum_dy, c) / R);
                coef[cX * C + c] = static_cast<S>(-k1 * r * r * at<S>(sum_dy_xc, c) / R);
                coef[mX * C + c] = mean[c];
            }
            return coef;
        }

        template <class T>
        const T* advanced(const void* p, std::int64_t off) noexcept
        {
            return p ? static_cast<const T*>(p) + off : nullptr;
        }
    }

    std::int64_t bn_set_resident_budget(std::int64_t bytes) noexcept
    {
        const std::int64_t old = resident_budget();
        resident_budget_bytes.store(bytes);
        return old;
    }

    void bn_moments(void* mean, void* var, const void* x, dtype xdt, std::int64_t outer, std::int64_t C,
                    std::int64_t inner)
    {
        visit_with_stats(xdt, [&](auto t, auto s) {
            using T = decltype(t);
            using S = decltype(s);
            S* mo = static_cast<S*>(mean);
            S* vo = static_cast<S*>(var);
            if (outer * inner == 0)
            {
                std::fill(mo, mo + C, std::numeric_limits<S>::quiet_NaN());
                std::fill(vo, vo + C, std::numeric_limits<S>::quiet_NaN());
                return;
            }
            moments_of(geometry(outer, C, inner), operands<T, S>{}.with_x(static_cast<const T*>(x)), mo, vo);
        });
    }

    void bn_normalize(void* y, const void* x, const void* scale, const void* offset, const void* mean, const void* var,
                      double eps, bool relu, dtype xdt, std::int64_t outer, std::int64_t C, std::int64_t inner)
    {
        visit_with_stats(xdt, [&](auto t, auto s) {
            using T = decltype(t);
            using S = decltype(s);
            const auto coef = normalize_coef<S>(static_cast<const S*>(scale), static_cast<const S*>(offset),
                                                static_cast<const S*>(mean), static_cast<const S*>(var), eps, C);
            affine_out<T, S> o;
            o.out = static_cast<T*>(y);
            o.x = true;
            o.coef = coef.data();
            o.relu = relu;
            o.stream = stream_output(outer * C * inner, sizeof(T), 2);
            apply<T, S>(geometry(outer, C, inner), operands<T, S>{}.with_x(static_cast<const T*>(x)), &o, 1);
        });
    }

    void bn_forward_training(void* y, void* mean, void* var, const void* x, const void* scale, const void* offset,
                             double eps, bool relu, dtype xdt, std::int64_t outer, std::int64_t C, std::int64_t inner)
    {
        if (outer * inner == 0)
            return bn_moments(mean, var, x, xdt, outer, C, inner); // NaN statistics, no elements
        visit_with_stats(xdt, [&](auto t, auto s) {
            using T = decltype(t);
            using S = decltype(s);
            S* mo = static_cast<S*>(mean);
            S* vo = static_cast<S*>(var);
            const auto* sc = static_cast<const S*>(scale);
            const auto* oc = static_cast<const S*>(offset);
            const bool stream = stream_output(outer * C * inner, sizeof(T), 2);
            // Per block: two reductions and the normalisation, x read from DRAM once.
            for_channel_blocks(outer, C, inner, sizeof(T), 1, [&](std::int64_t c0, const geometry& geo) {
                const std::int64_t off = c0 * inner;
                const T* xb = static_cast<const T*>(x) + off;
                const auto io = operands<T, S>{}.with_x(xb);
                moments_of(geo, io, mo + c0, vo + c0);
                const auto coef = normalize_coef<S>(sc + c0, oc + c0, mo + c0, vo + c0, eps, geo.C);
                affine_out<T, S> o;
                o.out = static_cast<T*>(y) + off;
                o.x = true;
                o.coef = coef.data();
                o.relu = relu;
                o.stream = stream;
                apply<T, S>(geo, io, &o, 1);
            });
        });
    }

    void bn_grad_reduce(void* sum_dy, void* sum_dy_xc, const void* dy, const void* x, const void* mean, dtype xdt,
                        std::int64_t outer, std::int64_t C, std::int64_t inner)
    {
        visit_with_stats(xdt, [&](auto t, auto s) {
            using T = decltype(t);
            using S = decltype(s);
            const auto io = operands<T, S>{}.with_x(static_cast<const T*>(x)).with_g(static_cast<const T*>(dy));
            const auto sums = reduce(geometry(outer, C, inner), bn_sums::grad, io, static_cast<const S*>(mean));
            std::copy(sums.begin(), sums.begin() + C, static_cast<S*>(sum_dy));
            std::copy(sums.begin() + C, sums.begin() + 2 * C, static_cast<S*>(sum_dy_xc));
        });
    }

    void bn_grad_apply(void* dx, const void* dy, const void* x, const void* scale, const void* mean, const void* var,
                       const void* sum_dy, const void* sum_dy_xc, double eps, dtype xdt, std::int64_t outer,
                       std::int64_t C, std::int64_t inner)
    {
        visit_with_stats(xdt, [&](auto t, auto s) {
            using T = decltype(t);
            using S = decltype(s);
            const auto coef = grad_apply_coef<S>(static_cast<const S*>(scale), static_cast<const S*>(mean),
                                                 static_cast<const S*>(var), static_cast<const S*>(sum_dy),
                                                 static_cast<const S*>(sum_dy_xc), eps,
                                                 static_cast<double>(outer * inner), C);
            affine_out<T, S> o;
            o.out = static_cast<T*>(dx);
            o.g = o.x = true;
            o.coef = coef.data();
            o.stream = stream_output(outer * C * inner, sizeof(T), 3);
            const auto io = operands<T, S>{}.with_x(static_cast<const T*>(x)).with_g(static_cast<const T*>(dy));
            apply<T, S>(geometry(outer, C, inner), io, &o, 1);
        });
    }

    void bn_grad_training(void* dx, void* sum_dy, void* sum_dy_xc, const void* dy, const void* x, const void* y,
                          const void* scale, const void* mean, const void* var, double eps, dtype xdt,
                          std::int64_t outer, std::int64_t C, std::int64_t inner)
    {
        visit_with_stats(xdt, [&](auto t, auto s) {
            using T = decltype(t);
            using S = decltype(s);
            S* s1 = static_cast<S*>(sum_dy);
            S* s2 = static_cast<S*>(sum_dy_xc);
            const auto* sc = static_cast<const S*>(scale);
            const auto* mp = static_cast<const S*>(mean);
            const auto* vp = static_cast<const S*>(var);
            const bool stream = stream_output(outer * C * inner, sizeof(T), 3);
            const auto R = static_cast<double>(outer * inner);
            // Per block: the sums, then dx from them, dy and x read from DRAM once.
            for_channel_blocks(outer, C, inner, sizeof(T), 2, [&](std::int64_t c0, const geometry& geo) {
                const std::int64_t off = c0 * inner, nc = geo.C;
                const T *xb = advanced<T>(x, off), *gb = advanced<T>(dy, off), *yb = advanced<T>(y, off);
                const auto io = operands<T, S>{}.with_x(xb).with_g(gb, yb);
                const auto sums = reduce(geo, bn_sums::grad, io, mp + c0);
                std::copy(sums.begin(), sums.begin() + nc, s1 + c0);
                std::copy(sums.begin() + nc, sums.begin() + 2 * nc, s2 + c0);
                const auto coef = grad_apply_coef<S>(sc + c0, mp + c0, vp + c0, s1 + c0, s2 + c0, eps, R, nc);
                affine_out<T, S> o;
                o.out = static_cast<T*>(dx) + off;
                o.g = o.x = true;
                o.coef = coef.data();
                o.stream = stream;
                apply<T, S>(geo, io, &o, 1);
            });
        });
    }

    void bn_grad_inference(void* dx, void* sum_dy, void* sum_dy_xc, const void* dy, const void* x, const void* y,
                           const void* scale, const void* mean, const void* var, double eps, dtype xdt,
                           std::int64_t outer, std::int64_t C, std::int64_t inner)
    {
        visit_with_stats(xdt, [&](auto t, auto s) {
            using T = decltype(t);
            using S = decltype(s);
            std::vector<S> k(static_cast<std::size_t>(C));
            for (std::int64_t c = 0; c < C; ++c)
                k[c] = static_cast<S>(at<S>(scale, c) * inv_std<S>(var, c, eps));
            const auto io = operands<T, S>{}
                                .with_x(static_cast<const T*>(x))
                                .with_g(static_cast<const T*>(dy), static_cast<const T*>(y));
            const auto sums = reduce_writing(geometry(outer, C, inner), io, static_cast<const S*>(mean),
                                             static_cast<const S*>(k.data()), static_cast<T*>(dx));
            std::copy(sums.begin(), sums.begin() + C, static_cast<S*>(sum_dy));
            std::copy(sums.begin() + C, sums.begin() + 2 * C, static_cast<S*>(sum_dy_xc));
        });
    }

    void bn_grad_grad_reduce(void* sums, const void* A, const void* g, const void* x, const void* mean, const void* var,
                             double eps, dtype xdt, std::int64_t outer, std::int64_t C, std::int64_t inner)
    {
        visit_with_stats(xdt, [&](auto t, auto s) {
            using T = decltype(t);
            using S = decltype(s);
            const auto io = operands<T, S>{}
                                .with_x(static_cast<const T*>(x))
                                .with_g(static_cast<const T*>(g))
                                .with_a(static_cast<const T*>(A));
            auto r = reduce(geometry(outer, C, inner), bn_sums::grad_grad, io, static_cast<const S*>(mean));
            // Sums of g (x - mean) and A (x - mean), times r: sums of g xh and A xh.
            for (std::int64_t c = 0; c < C; ++c)
            {
                const double rc = inv_std<S>(var, c, eps);
                r[C + c] = static_cast<S>(static_cast<double>(r[C + c]) * rc);
                r[3 * C + c] = static_cast<S>(static_cast<double>(r[3 * C + c]) * rc);
            }
            std::copy(r.begin(), r.end(), static_cast<S*>(sums));
        });
    }

    void bn_grad_grad_apply(void* d_g, void* d_x, const void* A, const void* g, const void* x, const void* scale,
                            const void* mean, const void* var, const void* a, const void* b, const void* sums,
                            double eps, bool training, dtype xdt, std::int64_t outer, std::int64_t C,
                            std::int64_t inner)
    {
        if (!d_g && !d_x)
            return;
        visit_with_stats(xdt, [&](auto t, auto s) {
            using T = decltype(t);
            using S = decltype(s);
            const auto R = static_cast<double>(outer * inner);
            auto cg = coef_table<S>(C), cx = coef_table<S>(C);
            for (std::int64_t c = 0; c < C; ++c)
            {
                kernels::bn_grad_grad_sums cs{}; // read in training only
                if (training)
                    cs = {at<S>(sums, c), at<S>(sums, C + c), at<S>(sums, 2 * C + c), at<S>(sums, 3 * C + c),
                          at<S>(sums, 4 * C + c)};
                const auto k = kernels::bn_grad_grad_coefficients_of(at<S>(scale, c), at<S>(mean, c), at<S>(var, c),
                                                                     eps, cs, at<S>(a, c), at<S>(b, c), R, training);
                // d_g = cA (A - mA) + cX (x - mX) + cK
                // d_x = cA (A - mA) + cG (g - mG) + cX (x - mX); inference: cG g (a and x not read)
                kernels::bn_store_grad_grad_coefficients(cg.data(), cx.data(), C, c, k);
            }
            // Five tensors (A, g, x and the two outputs): outputs of a larger pair bypass the
            // cache like the other kernels' (each would otherwise cost a read for ownership).
            const bool stream = stream_output(outer * C * inner, sizeof(T), 5);
            affine_out<T, S> outs[2];
            int n = 0;
            if (d_g)
            {
                outs[n].stream = stream;
                outs[n].out = static_cast<T*>(d_g);
                outs[n].a = outs[n].x = true;
                outs[n].coef = cg.data();
                ++n;
            }
            if (d_x)
            {
                outs[n].stream = stream;
                outs[n].out = static_cast<T*>(d_x);
                outs[n].g = true;
                outs[n].a = outs[n].x = training;
                outs[n].coef = cx.data();
                ++n;
            }
            const auto io = operands<T, S>{}
                                .with_x(static_cast<const T*>(x))
                                .with_g(static_cast<const T*>(g))
                                .with_a(static_cast<const T*>(A));
            apply<T, S>(geometry(outer, C, inner), io, outs, n);
        });
    }
}
