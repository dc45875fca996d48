// The one-pass batch statistics of the fast CPU kernels (bn_moments, bn_forward_training;
// backends/cpu/batch_norm/kernels.cpp, moments_of) on data built to break a one-pass
// formula: a large mean with a tiny spread, R = 1 and 2, R = 2^22, sorted data (the channel's
// first elements, from which the kernel takes its shift, are far from the mean), an outlier
// among those first elements, a start drifted from the rest, a constant channel. Each is
// checked against the mean and variance computed here in long double, two-pass, from the same
// values, at every SIMD level, in both layouts, for float32 and float64.
//
// Tolerance, and why: with u the unit roundoff of the statistics type and D = 1156 +
// ceil(log2 R) the depth of the kernels' summation tree (plan.hpp's error_depth, as in
// test_batch_norm_kernels.cpp, whose header derives these bounds), the kernel guarantees
// sum (x - m)^2 / R <= 2 var around the shift m it sums with, so
//   |mean error| <= (D + 3) u sqrt(2 var) + 2 u |mean|,
//   |var error|  <= (3D + 8) u 2 var + u var.
// A one-pass formula that kept a bad shift (the sorted, outlier and drifted cases) loses
// accuracy by the factor 1 + (mean - m)^2 / var: about 6000 for the drifted start below, beyond
// these bounds (without its second pass, the kernel fails this test there).
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "backends/cpu/batch_norm/plan.hpp"
#include "backends/cpu/cpu_kernels.hpp"
#include "backends/cpu/simd/level.hpp"
#include "tests/support/cpu_kernels_helpers.hpp"
#include "xgrad/thread_pool.hpp"

namespace
{
    namespace cpu = xgrad::cpu;
    using xgrad::dtype;
    using i64 = std::int64_t;

    template <class T>
    constexpr dtype dtype_of_v = sizeof(T) == 4 ? dtype::float32 : dtype::float64;

    /// One channel's values, as a generator of the k-th of R elements.
    struct channel_data
    {
        std::string name;
        i64 R;
        std::vector<double> values; // R values, in (outer, inner) order
    };

    std::vector<channel_data> adversarial(std::mt19937_64& gen)
    {
        std::vector<channel_data> out;
        std::normal_distribution<double> normal(0.0, 1.0);
        auto make = [&](std::string name, i64 R, auto f) {
            channel_data d{std::move(name), R, std::vector<double>(static_cast<std::size_t>(R))};
            for (i64 k = 0; k < R; ++k)
                d.values[static_cast<std::size_t>(k)] = f(k);
            out.push_back(std::move(d));
        };
        make("large mean, small spread", 20000, [&](i64) { return 1e4 + 1e-2 * normal(gen); });
        make("R = 1", 1, [&](i64) { return 3.25 + normal(gen); });
        make("R = 2", 2, [&](i64 k) { return k == 0 ? 1e4 : 1e4 + 1e-3; });
        make("R = 2^22", i64{1} << 22, [&](i64) { return 5.0 + 0.5 * normal(gen); });
        make("sorted", 100000, [&](i64 k) { return 1e3 + 1e-3 * static_cast<double>(k); });
        // The outlier is among the first 64 elements, from which the shift is sampled: the shift
        // is 1e3 / 64 = 15.6 above the mean, the variance about 1e6 / 2^20 = 0.95, so a kept
        // shift would cost the factor 1 + 15.6^2 / 0.95 = 257.
        make("outlier first", 1 << 20, [&](i64 k) { return k == 0 ? 1e4 + 1e3 : 1e4 + 1e-2 * normal(gen); });
        // A drifted start: the 64 sampled elements sit 1 above the rest, whose spread is 1e-2,
        // so the shift is about one unit from the mean and the variance about 64 / 2^20 + 1e-4:
        // a kept shift would cost the factor F = 1 + 1 / 1.6e-4 ~ 6000, beyond the bounds
        // above at every D this test takes (the outlier's 257 is not, at D = 1156).
        make("drifted start", 1 << 20, [&](i64 k) { return (k < 64 ? 1e4 + 1.0 : 1e4) + 1e-2 * normal(gen); });
        make("constant", 5000, [&](i64) { return -7.5; });
        return out;
    }

    template <class T>
    void check_moments(const channel_data& d, bool channels_last, cpu::simd_level level)
    {
        // Two channels: the data, and the data negated and shifted (so channels differ).
        const i64 C = 2, R = d.R;
        const i64 outer = channels_last ? R : 1, inner = channels_last ? 1 : R;
        std::vector<T> x(static_cast<std::size_t>(C * R));
        for (i64 k = 0; k < R; ++k)
            for (i64 c = 0; c < C; ++c)
            {
                const double v = d.values[static_cast<std::size_t>(k)];
                const i64 o = k / inner, i = k % inner;
                x[static_cast<std::size_t>((o * C + c) * inner + i)] = static_cast<T>(c == 0 ? v : 1.5 - v);
            }
        std::vector<T> mean(C, T(NAN)), var(C, T(NAN)), f_mean(C, T(NAN)), f_var(C, T(NAN)), y(x.size());
        const std::vector<T> scale(C, T(1)), offset(C, T(0));
        const auto& k = cpu::fast_kernels();
        k.bn_moments(mean.data(), var.data(), x.data(), dtype_of_v<T>, outer, C, inner);
        k.bn_forward_training(y.data(), f_mean.data(), f_var.data(), x.data(), scale.data(), offset.data(), 1e-3, false,
                              dtype_of_v<T>, outer, C, inner);
        const double u = sizeof(T) == 4 ? 0x1p-24 : 0x1p-53;
        const double D = static_cast<double>(cpu::bn_detail::error_depth) +
                         std::ceil(std::log2(static_cast<double>(R)));
        for (i64 c = 0; c < C; ++c)
        {
            long double sum = 0;
            for (i64 kk = 0; kk < R; ++kk)
                sum += static_cast<long double>(x[static_cast<std::size_t>((kk / inner * C + c) * inner + kk % inner)]);
            const long double m = sum / static_cast<long double>(R);
            long double sq = 0;
            for (i64 kk = 0; kk < R; ++kk)
            {
                const long double e =
                    static_cast<long double>(x[static_cast<std::size_t>((kk / inner * C + c) * inner + kk % inner)]) -
                    m;
                sq += e * e;
            }
            const double want_mean = static_cast<double>(m), want_var = static_cast<double>(sq / R);
            const double mean_tol = (D + 3) * u * std::sqrt(2 * want_var) + 2 * u * std::abs(want_mean);
            const double var_tol = (3 * D + 8) * u * 2 * want_var + u * want_var;
            INFO(d.name, std::string(channels_last ? " channels-last" : " channels-first"), " channel ", c, " level ",
                 std::string(cpu::simd_level_name(level)), std::string(sizeof(T) == 4 ? " float32" : " float64"),
                 " mean ", want_mean, " var ", want_var);
            for (const auto& entry :
                 {std::tuple{"bn_moments", mean[c], var[c]}, std::tuple{"bn_forward_training", f_mean[c], f_var[c]}})
            {
                const auto& what = std::get<0>(entry);
                const auto& got_m = std::get<1>(entry);
                const auto& got_v = std::get<2>(entry);
                INFO(std::string(what), ": got mean ", static_cast<double>(got_m), " var ", static_cast<double>(got_v));
                CHECK(std::abs(static_cast<double>(got_m) - want_mean) <= mean_tol);
                CHECK(std::abs(static_cast<double>(got_v) - want_var) <= var_tol);
            }
        }
    }
}

TEST_CASE("batch-norm kernels: one-pass statistics are as accurate as two-pass on adversarial data")
{
    cpu_kernels_test::settings_guard guard;
    xgrad::set_num_threads(2);
    std::mt19937_64 gen(31);
    for (const auto& d : adversarial(gen))
        for (const auto level : cpu_kernels_test::simd_levels())
        {
            cpu::limit_simd_level(level);
            for (const bool channels_last : {true, false})
            {
                check_moments<float>(d, channels_last, level);
                check_moments<double>(d, channels_last, level);
            }
        }
}
