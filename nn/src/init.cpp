// Weight initialisation (see init.hpp). Variances follow from keeping Var(y) = Var(x) through
// y = W x with fan inputs: Var(W) = gain^2 / fan; a uniform U(-b, b) has variance b^2 / 3.
#include "xgrad/nn/init.hpp"

#include <cmath>
#include <string>

#include "xgrad/errors.hpp"
#include "xgrad/ops/elementwise.hpp"

namespace xgrad::nn::init
{
    double gain(nonlinearity f)
    {
        switch (f)
        {
        case nonlinearity::linear: return 1.0;
        case nonlinearity::relu: return std::sqrt(2.0);
        case nonlinearity::tanh: return 5.0 / 3.0;
        }
        return 1.0;
    }

    std::pair<std::int64_t, std::int64_t> fans(const shape_type& shape)
    {
        if (shape.empty())
            throw xgrad::invalid_argument("init: a weight of rank 0 has no fan_in/fan_out; got shape []");
        for (const auto e : shape)
            if (e < 1)
                throw xgrad::invalid_argument("init: weight shape " + shape_to_string(shape) +
                                              " has an extent below 1");
        if (shape.size() == 1)
            return {shape[0], shape[0]};
        std::int64_t receptive = 1;
        for (std::size_t d = 2; d < shape.size(); ++d)
            receptive *= shape[d];
        return {shape[1] * receptive, shape[0] * receptive};
    }

    namespace
    {
        std::int64_t pick(const shape_type& shape, fan_mode mode)
        {
            const auto [in, out] = fans(shape);
            return mode == fan_mode::fan_in ? in : out;
        }

        tensor uniform(const shape_type& shape, generator& gen, double bound, dtype dt)
        {
            return rand(shape, gen, dt, cpu_device, -bound, bound);
        }

        tensor normal(const shape_type& shape, generator& gen, double stddev, dtype dt)
        {
            // randn draws in float64 and rounds once; scaling before the rounding would need
            // another path, and the extra rounding of a product is below the dtype's epsilon.
            return randn(shape, gen, dtype::float64).to(dt) * stddev;
        }
    }

    tensor kaiming_uniform(const shape_type& shape, generator& gen, nonlinearity f, fan_mode mode, dtype dt)
    {
        return uniform(shape, gen, gain(f) * std::sqrt(3.0 / static_cast<double>(pick(shape, mode))), dt);
    }

    tensor kaiming_normal(const shape_type& shape, generator& gen, nonlinearity f, fan_mode mode, dtype dt)
    {
        return normal(shape, gen, gain(f) / std::sqrt(static_cast<double>(pick(shape, mode))), dt);
    }

    tensor xavier_uniform(const shape_type& shape, generator& gen, double g, dtype dt)
    {
        const auto [in, out] = fans(shape);
        return uniform(shape, gen, g * std::sqrt(6.0 / static_cast<double>(in + out)), dt);
    }

    tensor xavier_normal(const shape_type& shape, generator& gen, double g, dtype dt)
    {
        const auto [in, out] = fans(shape);
        return normal(shape, gen, g * std::sqrt(2.0 / static_cast<double>(in + out)), dt);
    }

    tensor fan_in_uniform(const shape_type& shape, std::int64_t fan_in, generator& gen, dtype dt)
    {
        if (fan_in < 1)
            throw xgrad::invalid_argument("init: fan_in must be at least 1, got " + std::to_string(fan_in));
        return uniform(shape, gen, 1.0 / std::sqrt(static_cast<double>(fan_in)), dt);
    }

    tensor initialize(scheme s, const shape_type& shape, generator& gen, dtype dt)
    {
        switch (s)
        {
        case scheme::fan_in_uniform: return fan_in_uniform(shape, fans(shape).first, gen, dt);
        case scheme::kaiming_uniform: return kaiming_uniform(shape, gen, nonlinearity::relu, fan_mode::fan_in, dt);
        case scheme::kaiming_normal: return kaiming_normal(shape, gen, nonlinearity::relu, fan_mode::fan_in, dt);
        case scheme::xavier_uniform: return xavier_uniform(shape, gen, 1.0, dt);
        case scheme::xavier_normal: return xavier_normal(shape, gen, 1.0, dt);
        }
        throw xgrad::invalid_argument("init: unknown scheme " + std::to_string(static_cast<int>(s)));
    }
}
