// Smooth activations (xgrad/ops/activation.hpp), each composed from elementwise ops; softplus
// alone records a backward of its own (see there).
#include "xgrad/ops/activation.hpp"

#include <cmath>
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
}
