// Activations (xgrad/ops/activation.hpp), each composed from elementwise ops; softplus alone
// records a backward of its own (see there). The piecewise ones select with where() on a
// condition that carries no gradient, so the derivative at a kink is the branch's that
// PyTorch's backward takes there.
#include "xgrad/ops/activation.hpp"

#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "../detail.hpp"
#include "core/src/profiler/record.hpp"
#include "xgrad/autograd.hpp"
#include "xgrad/errors.hpp"
#include "xgrad/ops/elementwise.hpp"

namespace xgrad
{
    tensor softplus(const tensor& x, double beta)
    {
        XGRAD_PROFILE_OP("softplus");
        detail::check_floating(x, "softplus");
        if (!(beta > 0.0) || !std::isfinite(beta))
            throw xgrad::invalid_argument("softplus: beta must be positive and finite, got " + std::to_string(beta));
        tensor y;
        {
            // The value alone: the composite's derivative is wrong at 0 (see the header).
            no_grad guard;
            const tensor bx = beta == 1.0 ? x : mul(x, scalar_like(x, beta));
            y = add(relu(bx), log1p(exp(neg(abs(bx)))));
            if (beta != 1.0)
                y = div(y, scalar_like(y, beta));
        }
        record("softplus", {x}, {y}, [x, beta](function_node&, const std::vector<tensor>& g) {
            const tensor bx = beta == 1.0 ? x : mul(x, scalar_like(x, beta));
            return std::vector<tensor>{mul(g[0], sigmoid(bx))};
        });
        return y;
    }

    tensor silu(const tensor& x)
    {
        XGRAD_PROFILE_OP("silu");
        detail::check_floating(x, "silu");
        return mul(x, sigmoid(x));
    }

    tensor gelu(const tensor& x, const std::string& approximate)
    {
        XGRAD_PROFILE_OP("gelu");
        detail::check_floating(x, "gelu");
        if (approximate == "none")
            return mul(mul(x, scalar_like(x, 0.5)),
                       add(erf(mul(x, scalar_like(x, 0.70710678118654752440))), scalar_like(x, 1.0)));
        if (approximate == "tanh")
        {
            const tensor inner = mul(add(x, mul(mul(mul(x, x), x), scalar_like(x, 0.044715))),
                                     scalar_like(x, 0.79788456080286535588)); // sqrt(2 / pi)
            return mul(mul(x, scalar_like(x, 0.5)), add(tanh(inner), scalar_like(x, 1.0)));
        }
        throw xgrad::invalid_argument("gelu: approximate must be 'none' or 'tanh', got '" + approximate + "'");
    }

    namespace
    {
        void check_finite(double v, const char* op, const char* name)
        {
            if (!std::isfinite(v))
                throw xgrad::invalid_argument(std::string(op) + ": " + name + " must be finite, got " +
                                              std::to_string(v));
        }
    }

    tensor leaky_relu(const tensor& x, double negative_slope)
    {
        XGRAD_PROFILE_OP("leaky_relu");
        detail::check_floating(x, "leaky_relu");
        check_finite(negative_slope, "leaky_relu", "negative_slope");
        return where(gt(x, scalar_like(x, 0.0)), x, mul(x, scalar_like(x, negative_slope)));
    }

    tensor elu(const tensor& x, double alpha)
    {
        XGRAD_PROFILE_OP("elu");
        detail::check_floating(x, "elu");
        check_finite(alpha, "elu", "alpha");
        // expm1 of min(x, 0), not of x: the branch that where() drops must stay finite, or its
        // zero gradient times e^x = inf would be NaN. clamp passes the gradient at its bound,
        // so the derivative at 0 is alpha, as PyTorch's.
        const tensor negative = expm1(clamp(x, std::nullopt, 0.0));
        return where(gt(x, scalar_like(x, 0.0)), x, mul(negative, scalar_like(x, alpha)));
    }

    tensor relu6(const tensor& x)
    {
        XGRAD_PROFILE_OP("relu6");
        detail::check_floating(x, "relu6");
        // Not clamp(x, 0, 6), whose gradient passes at the bounds: PyTorch's is 0 at 0 and 6.
        return where(ge(x, scalar_like(x, 6.0)), scalar_like(x, 6.0), relu(x));
    }

    tensor hardsigmoid(const tensor& x)
    {
        XGRAD_PROFILE_OP("hardsigmoid");
        detail::check_floating(x, "hardsigmoid");
        // Derivative 1/6 strictly inside (-3, 3), as PyTorch's; NaN fails both tests and stays.
        const tensor middle = add(mul(x, scalar_like(x, 1.0 / 6.0)), scalar_like(x, 0.5));
        return where(le(x, scalar_like(x, -3.0)), scalar_like(x, 0.0),
                     where(ge(x, scalar_like(x, 3.0)), scalar_like(x, 1.0), middle));
    }

    tensor hardswish(const tensor& x)
    {
        XGRAD_PROFILE_OP("hardswish");
        detail::check_floating(x, "hardswish");
        // Its own branches rather than x * hardsigmoid(x): PyTorch's derivative is the middle
        // piece's, (2x + 3) / 6, on [-3, 3] bounds included (-1/2 at -3, 3/2 at 3).
        const tensor middle = mul(x, mul(add(x, scalar_like(x, 3.0)), scalar_like(x, 1.0 / 6.0)));
        return where(lt(x, scalar_like(x, -3.0)), scalar_like(x, 0.0), where(le(x, scalar_like(x, 3.0)), middle, x));
    }
}
