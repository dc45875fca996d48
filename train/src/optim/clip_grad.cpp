// Gradient clipping (clip_grad_norm, clip_grad_value; see optimizer.hpp).
#include <algorithm>
#include <cmath>
#include <vector>

#include "checks.hpp"
#include "xgrad/autograd.hpp"
#include "xgrad/errors.hpp"
#include "xgrad/ops/elementwise.hpp"
#include "xgrad/ops/reduce.hpp"
#include "xgrad/optim/optimizer.hpp"

namespace xgrad::optim
{
    using namespace detail;

    double clip_grad_norm(nn::module& m, double max_norm, double norm_type)
    {
        check_non_negative("clip_grad_norm", "max_norm", max_norm);
        if (!(norm_type > 0.0))
            throw xgrad::invalid_argument("clip_grad_norm: norm_type must be positive (or infinity), got " +
                                          number(norm_type));
        no_grad guard;
        std::vector<tensor> params;
        for (const tensor& p : m.parameters())
            if (p.grad().defined())
                params.push_back(p);
        // Accumulated in double on the host, one reduction per gradient, whatever its dtype.
        const bool inf_norm = std::isinf(norm_type);
        double total = 0.0;
        for (const tensor& p : params)
        {
            const tensor g = p.grad().to(dtype::float64);
            if (inf_norm)
                total = std::max(total, g.numel() ? max(abs(g)).item() : 0.0);
            else
                total += sum(pow(abs(g), norm_type)).item();
        }
        if (!inf_norm)
            total = std::pow(total, 1.0 / norm_type);
        const double factor = max_norm / (total + 1e-6);
        if (factor < 1.0 || std::isnan(factor))
            for (tensor& p : params)
                p.set_grad(p.grad() * factor);
        return total;
    }

    void clip_grad_value(nn::module& m, double clip_value)
    {
        check_non_negative("clip_grad_value", "clip_value", clip_value);
        no_grad guard;
        for (tensor p : m.parameters())
            if (p.grad().defined())
                p.set_grad(clamp(p.grad(), -clip_value, clip_value));
    }
}
