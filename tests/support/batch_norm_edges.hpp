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
    /// channel 3 one of each, channel 4 a NaN; the others are finite.
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
        const tensor x = from_host(xv.data(), shape, dtype::float64).to(dt).to(dev);

        batch_norm_attrs attrs;
        attrs.data_format = format;
        attrs.is_training = true;
        const dtype stats = dt == dtype::float64 ? dtype::float64 : dtype::float32;
        const tensor scale = ones({C}).to(stats).to(dev), offset = zeros({C}).to(stats).to(dev);
        const auto f = fused_batch_norm(x, scale, offset, offset, scale, attrs);
        for (const tensor& mean_out : {f.reserve_space_1, f.batch_mean})
        {
            const std::vector<double> mean = to_vector(mean_out);
            const std::vector<double> var = to_vector(f.reserve_space_2);
            REQUIRE(mean.size() == static_cast<std::size_t>(C));
            CHECK(mean[1] == inf);
            CHECK(mean[2] == -inf);
            CHECK(std::isnan(mean[3]));
            CHECK(std::isnan(mean[4]));
            for (std::int64_t c = 1; c <= 4; ++c)
                CHECK(std::isnan(var[c]));
            for (std::int64_t c : {std::int64_t{0}, std::int64_t{5}, C - 1})
            {
                CHECK(std::isfinite(mean[c]));
                CHECK(std::isfinite(var[c]));
            }
        }
    }
}
