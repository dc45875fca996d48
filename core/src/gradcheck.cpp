// Finite-difference gradient checks (see gradcheck.hpp for the method and tolerances).
#include "xgrad/gradcheck.hpp"

#include <cmath>
#include <sstream>
#include <stdexcept>

#include "detail.hpp"
#include "xgrad/autograd.hpp"
#include "xgrad/errors.hpp"
#include "xgrad/factories.hpp"

namespace xgrad
{
    namespace
    {
        /// Overwrites element `index` (row-major) of the contiguous tensor x.
        void set_element(const tensor& x, std::int64_t index, double value)
        {
            const tensor one = detail::alias(x, {}, {}, x.offset() + index);
            const std::int64_t unused = 0; // a 0-d view has no extents or strides
            detail::backend_for(x.device()).fill(one.data_ptr(), &unused, x.dtype(), 0, &unused, value);
        }

        /// Fresh float64 leaves (copies the perturbation can write), requiring grad where the
        /// caller's inputs do.
        std::vector<tensor> make_leaves(const std::vector<tensor>& inputs, const char* caller)
        {
            std::vector<tensor> xs;
            for (std::size_t i = 0; i < inputs.size(); ++i)
            {
                const tensor& in = inputs[i];
                if (!in.defined())
                    throw xgrad::invalid_argument(std::string(caller) + ": input " + std::to_string(i) +
                                                  " is undefined");
                if (in.dtype() != dtype::float64)
                    throw xgrad::invalid_argument(std::string(caller) + ": input " + std::to_string(i) + " has dtype " +
                                                  std::string(name(in.dtype())) +
                                                  "; finite differences need float64 inputs");
                tensor x = detail::empty(in.shape(), in.dtype(), in.device());
                detail::copy_into(x, in.detach());
                if (in.requires_grad())
                    x.requires_grad_();
                xs.push_back(x);
            }
            return xs;
        }

        std::vector<tensor> call_checked(const gradcheck_function& f, const std::vector<tensor>& xs, const char* caller)
        {
            std::vector<tensor> outs = f(xs);
            for (std::size_t j = 0; j < outs.size(); ++j)
                if (!outs[j].defined() || outs[j].dtype() != dtype::float64)
                    throw xgrad::invalid_argument(std::string(caller) + ": output " + std::to_string(j) +
                                                  " must be a defined float64 tensor");
            return outs;
        }

        std::vector<std::vector<double>> evaluate(const gradcheck_function& f, const std::vector<tensor>& xs)
        {
            std::vector<std::vector<double>> values;
            for (const auto& out : call_checked(f, xs, "gradcheck"))
                values.push_back(to_vector(out));
            return values;
        }

        std::string index_string(const shape_type& shape, std::int64_t flat)
        {
            shape_type idx(shape.size());
            for (std::size_t d = shape.size(); d-- > 0;)
            {
                idx[d] = shape[d] ? flat % shape[d] : 0;
                flat = shape[d] ? flat / shape[d] : 0;
            }
            return shape_to_string(idx);
        }
    }

    gradcheck_result gradcheck(const gradcheck_function& f, const std::vector<tensor>& inputs,
                               const gradcheck_options& options)
    {
        std::vector<tensor> xs = make_leaves(inputs, "gradcheck");
        std::vector<std::size_t> checked;
        for (std::size_t i = 0; i < xs.size(); ++i)
            if (xs[i].requires_grad())
                checked.push_back(i);
        if (checked.empty())
            throw xgrad::invalid_argument("gradcheck: no input requires grad, so nothing would be checked");

        const std::vector<tensor> outs = call_checked(f, xs, "gradcheck");
        std::vector<tensor> checked_inputs;
        for (auto i : checked)
            checked_inputs.push_back(xs[i]);

        // analytic[c][j] is the [numel(input), numel(output j)] Jacobian, row-major.
        std::vector<std::vector<std::vector<double>>> analytic(checked.size(),
                                                               std::vector<std::vector<double>>(outs.size()));
        for (std::size_t j = 0; j < outs.size(); ++j)
        {
            const std::int64_t m = outs[j].numel();
            for (std::size_t c = 0; c < checked.size(); ++c)
                analytic[c][j].assign(static_cast<std::size_t>(xs[checked[c]].numel() * m), 0.0);
            if (!outs[j].requires_grad())
                continue; // does not depend on any checked input: its Jacobian is zero
            for (std::int64_t r = 0; r < m; ++r)
            {
                tensor unit = zeros(outs[j].shape(), dtype::float64, outs[j].device());
                set_element(unit, r, 1.0);
                const std::vector<tensor> g = grad({outs[j]}, checked_inputs, {unit}, true, false, true);
                for (std::size_t c = 0; c < checked.size(); ++c)
                {
                    if (!g[c].defined())
                        continue;
                    const std::vector<double> col = to_vector(g[c]);
                    for (std::size_t e = 0; e < col.size(); ++e)
                        analytic[c][j][e * static_cast<std::size_t>(m) + static_cast<std::size_t>(r)] = col[e];
                }
            }
        }

        gradcheck_result result;
        double worst_excess = -HUGE_VAL;
        for (std::size_t c = 0; c < checked.size(); ++c)
        {
            const tensor& x = xs[checked[c]];
            const std::vector<double> x0 = to_vector(x);
            for (std::int64_t e = 0; e < x.numel(); ++e)
            {
                const double v = x0[static_cast<std::size_t>(e)];
                // Outputs are read right after each call: they may alias the input (a view,
                // or a gradient that is the cotangent itself) that the next perturbation writes.
                set_element(x, e, v + options.eps);
                const std::vector<std::vector<double>> plus = evaluate(f, xs);
                set_element(x, e, v - options.eps);
                const std::vector<std::vector<double>> minus = evaluate(f, xs);
                set_element(x, e, v);
                for (std::size_t j = 0; j < outs.size(); ++j)
                {
                    const std::vector<double>&p = plus.at(j), &q = minus.at(j);
                    const std::size_t m = p.size();
                    for (std::size_t r = 0; r < m; ++r)
                    {
                        const double numeric = (p[r] - q[r]) / (2 * options.eps);
                        const double a = analytic[c][j][static_cast<std::size_t>(e) * m + r];
                        const double excess = std::fabs(a - numeric) -
                                              (options.atol + options.rtol * std::fabs(numeric));
                        const bool bad = !(excess <= 0) || std::isnan(a) != std::isnan(numeric);
                        if (excess > worst_excess || (bad && result.ok))
                        {
                            worst_excess = std::isnan(excess) ? HUGE_VAL : excess;
                            result.input = checked[c];
                            result.output = j;
                            result.input_element = e;
                            result.output_element = static_cast<std::int64_t>(r);
                            result.analytic = a;
                            result.numeric = numeric;
                            if (bad)
                                result.ok = false;
                        }
                    }
                }
            }
        }
        if (!result.ok)
        {
            std::ostringstream os;
            os << "gradcheck failed: d output " << result.output
               << index_string(outs[result.output].shape(), result.output_element) << " / d input " << result.input
               << index_string(inputs[result.input].shape(), result.input_element) << ": analytic " << result.analytic
               << ", numeric " << result.numeric << " (atol " << options.atol << ", rtol " << options.rtol << ", eps "
               << options.eps << ")";
            result.message = os.str();
            if (options.throw_on_failure)
                throw std::runtime_error(result.message);
        }
        return result;
    }

    gradcheck_result gradgradcheck(const gradcheck_function& f, const std::vector<tensor>& inputs,
                                   const gradcheck_options& options)
    {
        // Random cotangents v, one per output, themselves inputs of the checked function: the
        // backward pass is linear in v, and checking that costs nothing extra.
        const std::vector<tensor> probe = call_checked(f, make_leaves(inputs, "gradgradcheck"), "gradgradcheck");
        generator gen(options.seed);
        std::vector<tensor> all = inputs;
        for (const auto& out : probe)
            all.push_back(randn(out.shape(), gen, dtype::float64, out.device()).requires_grad_());
        const std::size_t n_in = inputs.size();

        auto first_order = [&f, n_in](const std::vector<tensor>& args) {
            const std::vector<tensor> xs(args.begin(), args.begin() + static_cast<std::ptrdiff_t>(n_in));
            const std::vector<tensor> vs(args.begin() + static_cast<std::ptrdiff_t>(n_in), args.end());
            const std::vector<tensor> outs = f(xs);
            std::vector<tensor> wrt, roots, cotangents;
            for (const auto& x : xs)
                if (x.requires_grad())
                    wrt.push_back(x);
            for (std::size_t j = 0; j < outs.size(); ++j)
                if (outs[j].requires_grad())
                {
                    roots.push_back(outs[j]);
                    cotangents.push_back(vs[j]);
                }
            std::vector<tensor> grads(wrt.size());
            if (!roots.empty())
                grads = grad(roots, wrt, cotangents, true, true, true);
            for (std::size_t i = 0; i < grads.size(); ++i)
                if (!grads[i].defined())
                    grads[i] = zeros_like(wrt[i]);
            return grads;
        };
        gradcheck_result r = gradcheck(first_order, all, options);
        if (!r.ok)
            r.message = "gradgradcheck (second order): " + r.message;
        return r;
    }
}
