#pragma once
// Shared by the tests of conv2d, unfold2d/fold2d and the pools (tests/core/ops/test_conv_convolution.cpp
// and tests/core/ops/test_conv_pool.cpp, one ctest executable test_conv): image indexing in either
// layout, the rounding bounds, the elementwise comparison with a bound, random inputs, the
// output size of a window, and first- and second-order gradient checks.
//
// Tolerances, and why. A result that sums K products is compared with a bound proportional to
// the sum of the absolute values of its terms, S: any summation order (GEMM blocking, FMA,
// pairwise trees) of K terms in a format with unit roundoff u errs by at most about K u S
// (the classical bound gamma_K = K u / (1 - K u)). Inputs are rounded to the tested dtype
// before the oracle reads them, so only the arithmetic is measured. Each check adds the terms
// its pipeline has beyond the sum: one rounding per bias add or division. 16-bit results are
// stored by every op of the composition (relative 2^-11 for float16, 2^-8 for bfloat16, plus
// 2^-25 absolute per store for float16 subnormals): the GEMM or window sum, bounded by S, and
// the bias add or division, bounded by the result; so their bound is that rounding times
// S + |result|.
#include <doctest/doctest.h>

#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "xgrad/xgrad.hpp"

namespace conv_test
{
    using xgrad::dtype;
    using xgrad::generator;
    using xgrad::gradcheck;
    using xgrad::gradcheck_function;
    using xgrad::gradcheck_result;
    using xgrad::gradgradcheck;
    using xgrad::randn;
    using xgrad::shape_type;
    using xgrad::tensor;
    using xgrad::to_vector;

    using pair = std::array<std::int64_t, 2>;

    /// Element access to an image stored row-major in either layout.
    struct image
    {
        std::int64_t n, c, h, w;
        bool cl;
        std::int64_t at(std::int64_t in, std::int64_t ic, std::int64_t ih, std::int64_t iw) const
        {
            return cl ? ((in * h + ih) * w + iw) * c + ic : ((in * c + ic) * h + ih) * w + iw;
        }
        shape_type shape() const { return cl ? shape_type{n, h, w, c} : shape_type{n, c, h, w}; }
    };

    inline std::string fmt(bool cl) { return cl ? "NHWC" : "NCHW"; }

    inline double unit_roundoff(dtype dt)
    {
        return dt == dtype::float64 ? 0x1p-53 : 0x1p-24; // 16-bit dtypes compute in float32
    }

    /// Relative rounding of a final store to dt (0 when the result is not narrowed).
    inline double store_rounding(dtype dt)
    {
        return dt == dtype::float16 ? 0x1p-11 : dt == dtype::bfloat16 ? 0x1p-8 : 0.0;
    }

    /// Checks |got - want| <= bound elementwise and reports the worst element.
    inline void check_within(const tensor& got, const std::vector<double>& want, const std::vector<double>& bound)
    {
        const std::vector<double> g = to_vector(got);
        REQUIRE(g.size() == want.size());
        double worst = 0;
        std::size_t at = 0;
        for (std::size_t i = 0; i < g.size(); ++i)
        {
            const double excess = std::abs(g[i] - want[i]) / bound[i];
            if (!(excess <= worst)) // also catches NaN
            {
                worst = std::isnan(excess) ? std::numeric_limits<double>::infinity() : excess;
                at = i;
            }
        }
        INFO("worst element ", at, ": got ", g[at], ", want ", want[at], ", bound ", bound[at]);
        CHECK(worst <= 1.0);
    }

    inline tensor random_tensor(const shape_type& shape, std::uint64_t seed, dtype dt = dtype::float64)
    {
        generator gen(seed);
        return randn(shape, gen, dtype::float64).to(dt);
    }

    inline std::int64_t out_size(std::int64_t in, std::int64_t k, std::int64_t s, std::int64_t p, std::int64_t d)
    {
        return (in + 2 * p - d * (k - 1) - 1) / s + 1;
    }

    /// gradcheck and gradgradcheck of f at inputs (finite differences in float64, gradcheck.hpp).
    inline void check_grads(const gradcheck_function& f, const std::vector<tensor>& inputs)
    {
        const gradcheck_result first = gradcheck(f, inputs);
        CHECK_MESSAGE(first.ok, first.message);
        const gradcheck_result second = gradgradcheck(f, inputs);
        CHECK_MESSAGE(second.ok, second.message);
    }

    /// Random float64 leaves that require grad, one per shape, drawn from seed, seed + 1, ...
    inline std::vector<tensor> leaves(const std::vector<shape_type>& shapes, std::uint64_t seed)
    {
        std::vector<tensor> out;
        for (const auto& s : shapes)
            out.push_back(random_tensor(s, seed++).requires_grad_());
        return out;
    }
}
