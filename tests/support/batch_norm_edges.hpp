#pragma once
// The training forward's batch statistics at the edges of the contract's formula
// mean = sum(x) / R, var = sum((x - mean)^2) / R, shared by the CPU and CUDA tests: a channel
// holding +Inf has mean +Inf, one holding -Inf has mean -Inf, one holding both (or a NaN) has
// mean NaN, and in each of those the variance is NaN (x - mean is NaN for the infinite
// element); the other channels are not affected.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "xgrad/xgrad.hpp"

namespace batch_norm_edges
{
    using namespace xgrad;

    inline constexpr double inf = std::numeric_limits<double>::infinity();

    /// Channel c of R = 2 * 3 * 4 elements: channel 1 gets one +Inf, channel 2 one -Inf,
    /// channel 3 one of each, channel 4 a NaN; the others are finite. Where the dtype reaches
    /// that far (not float16), channel 5 holds 3e38 in every element (its sum overflows float;
    /// the mean is that value, the variance 0) and channel 6 holds +-1.5e19 alternately (the
    /// sum of squared deviations overflows float; the mean is 0, the variance 1.5e19^2 =
    /// 2.25e38, which fits): statistics are finite wherever the formula's are. C >= 7.
    inline void check_edges(const std::string& format, dtype dt, std::int64_t C, device dev)
    {
        const bool nhwc = format == "NHWC";
        const shape_type shape = nhwc ? shape_type{2, 3, 4, C} : shape_type{2, C, 3, 4};
        const std::int64_t R = 2 * 3 * 4;
        std::vector<double> xv(static_cast<std::size_t>(R * C));
        auto index = [&](std::int64_t r, std::int64_t c) {
            // r = n * 12 + spatial
            const std::int64_t n = r / 12, s = r % 12;
            return nhwc ? (n * 12 + s) * C + c : (n * C + c) * 12 + s;
        };
        for (std::int64_t r = 0; r < R; ++r)
            for (std::int64_t c = 0; c < C; ++c)
                xv[index(r, c)] = 0.25 * static_cast<double>((r * 7 + c * 3) % 11) - 1.0;
        xv[index(5, 1)] = inf;
        xv[index(17, 2)] = -inf;
        xv[index(0, 3)] = inf;
        xv[index(23, 3)] = -inf;
        xv[index(9, 4)] = std::nan("");
        const bool wide = dt != dtype::float16;
        if (wide)
            for (std::int64_t r = 0; r < R; ++r)
            {
                xv[index(r, 5)] = 3e38;
                xv[index(r, 6)] = r % 2 ? -1.5e19 : 1.5e19;
            }
        const tensor x = from_host(xv.data(), shape, dtype::float64).to(dt).to(dev);
        // The values as the dtype holds them (bfloat16 rounds 3e38 and 1.5e19).
        const std::vector<double> held = to_vector(x.to(dtype::float64));

        batch_norm_attrs attrs;
        attrs.data_format = format;
        attrs.is_training = true;
        const dtype stats = dt == dtype::float64 ? dtype::float64 : dtype::float32;
        const tensor scale = ones({C}).to(stats).to(dev), offset = zeros({C}).to(stats).to(dev);
        const auto f = fused_batch_norm(x, scale, offset, offset, scale, attrs);
        for (const tensor& mean_out : {f.saved_mean, f.running_mean})
        {
            const std::vector<double> mean = to_vector(mean_out);
            const std::vector<double> var = to_vector(f.saved_var);
            REQUIRE(mean.size() == static_cast<std::size_t>(C));
            CHECK(mean[1] == inf);
            CHECK(mean[2] == -inf);
            CHECK(std::isnan(mean[3]));
            CHECK(std::isnan(mean[4]));
            for (std::int64_t c = 1; c <= 4; ++c)
                CHECK(std::isnan(var[c]));
            for (std::int64_t c : {std::int64_t{0}, std::int64_t{5}, std::int64_t{6}, C - 1})
            {
                CHECK(std::isfinite(mean[c]));
                CHECK(std::isfinite(var[c]));
            }
            if (wide)
            {
                const double big = held[index(0, 5)], b = held[index(0, 6)];
                // A sum of R equal values errs by at most R u of it (u: the unit roundoff of
                // the arithmetic, 2^-53 in double, float's 2^-24 bounds both), so the mean is
                // within R u big and each deviation from it too: var <= (R u big)^2.
                const double u = 0x1p-24, dev_max = static_cast<double>(R) * u * big;
                CHECK(std::abs(mean[5] - big) <= dev_max);
                CHECK(var[5] <= dev_max * dev_max);
                // +-b cancel exactly in pairs; b^2 is rounded once to float: one rounding.
                CHECK(std::abs(mean[6]) <= static_cast<double>(R) * u * b);
                CHECK(std::abs(var[6] - b * b) <= 2 * u * b * b);
            }
        }
    }
}
