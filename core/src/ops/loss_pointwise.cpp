// The elementwise losses (xgrad/ops/loss.hpp) and the checks the whole loss family shares
// (loss_internal.hpp). Every loss is a composition of elementwise ops and a reduction, so its
// gradients of every order are the parts'; binary_cross_entropy records PyTorch's backward
// instead (see there). Piecewise losses select with where() on a condition that carries no
// gradient, so the derivative at a seam is the branch's that PyTorch's backward takes there.
#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "../detail.hpp"
#include "core/src/profiler/record.hpp"
#include "loss_internal.hpp"
#include "xgrad/autograd.hpp"
#include "xgrad/errors.hpp"
#include "xgrad/factories.hpp"
#include "xgrad/ops/activation.hpp"
#include "xgrad/ops/elementwise.hpp"
#include "xgrad/ops/reduce.hpp"
#include "xgrad/ops/shape.hpp"

namespace xgrad
{
    namespace detail
    {
        void check_reduction(reduction red, const char* op, bool allow_batchmean)
        {
            switch (red)
            {
            case reduction::mean:
            case reduction::sum:
            case reduction::none: return;
            case reduction::batchmean:
                if (allow_batchmean)
                    return;
                throw xgrad::invalid_argument(
                    std::string(op) + ": reduction batchmean is defined for kl_div only (use mean, sum or none)");
            }
            throw xgrad::invalid_argument(std::string(op) + ": unknown reduction " +
                                          std::to_string(static_cast<int>(red)));
        }

        tensor reduce_loss(const tensor& per_element, reduction red)
        {
            if (red == reduction::mean)
                return mean(per_element);
            if (red == reduction::sum)
                return sum(per_element);
            return per_element;
        }

        void check_input_target(const tensor& input, const tensor& target, const char* op)
        {
            check_floating(input, op);
            check_defined(target, op);
            if (target.dtype() != input.dtype())
                throw xgrad::invalid_argument(std::string(op) + ": target of dtype " +
                                              std::string(name(target.dtype())) + " does not match input of dtype " +
                                              std::string(name(input.dtype())));
            if (target.device() != input.device())
                throw xgrad::invalid_argument(std::string(op) + ": target on " + to_string(target.device()) +
                                              " but input on " + to_string(input.device()));
            if (target.shape() != input.shape())
                throw xgrad::invalid_argument(std::string(op) + ": input of shape " + shape_to_string(input.shape()) +
                                              " and target of shape " + shape_to_string(target.shape()) +
                                              " must have the same shape");
        }

        std::string position_string(std::int64_t flat, const shape_type& shape)
        {
            if (shape.size() == 1)
                return std::to_string(flat);
            std::vector<std::int64_t> index(shape.size());
            for (std::size_t d = shape.size(); d-- > 0;)
            {
                index[d] = flat % shape[d];
                flat /= shape[d];
            }
            return shape_to_string(index);
        }

        void check_weight_values(const tensor& weight, const tensor& input, const char* what, const char* op)
        {
            if (weight.dtype() != input.dtype())
                throw xgrad::invalid_argument(std::string(op) + ": " + what + " of dtype " +
                                              std::string(name(weight.dtype())) + " does not match input of dtype " +
                                              std::string(name(input.dtype())));
            if (weight.device() != input.device())
                throw xgrad::invalid_argument(std::string(op) + ": " + what + " on " + to_string(weight.device()) +
                                              " but input on " + to_string(input.device()));
            // Weights are small ([C], or at most input's size) and read once per call: a host
            // copy names the first bad element without a kernel of its own.
            const std::vector<double> w = to_vector(weight);
            for (std::size_t i = 0; i < w.size(); ++i)
                if (!(std::isfinite(w[i]) && w[i] >= 0.0))
                    throw xgrad::invalid_argument(std::string(op) + ": " + what + " must be finite and >= 0, got " +
                                                  std::to_string(w[i]) + " at position " +
                                                  position_string(static_cast<std::int64_t>(i), weight.shape()));
        }

        void check_broadcast_weight(const tensor& weight, const tensor& input, const char* what, const char* op)
        {
            if (!weight.defined())
                return;
            const shape_type &ws = weight.shape(), &xs = input.shape();
            bool fits = ws.size() <= xs.size();
            for (std::size_t i = 1; fits && i <= ws.size(); ++i)
                fits = ws[ws.size() - i] == 1 || ws[ws.size() - i] == xs[xs.size() - i];
            if (!fits)
                throw xgrad::invalid_argument(std::string(op) + ": " + what + " of shape " + shape_to_string(ws) +
                                              " does not broadcast to input of shape " + shape_to_string(xs));
            check_weight_values(weight, input, what, op);
        }
    }

    namespace
    {
        /// The checks every loss of one shape makes, then its per-element values reduced.
        template <class F>
        tensor pointwise_loss(const tensor& input, const tensor& target, reduction red, const char* op, F per_element)
        {
            detail::check_reduction(red, op);
            detail::check_input_target(input, target, op);
            return detail::reduce_loss(per_element(sub(input, target)), red);
        }

        /// Huber's function of d: 0.5 d^2 where |d| < k, k (|d| - 0.5 k) elsewhere (PyTorch's
        /// choice at |d| == k, the linear branch; both give the same value and slope there).
        tensor huber(const tensor& d, double k)
        {
            const tensor a = abs(d);
            return where(lt(a, scalar_like(a, k)), mul(square(d), scalar_like(d, 0.5)),
                         mul(sub(a, scalar_like(a, 0.5 * k)), scalar_like(a, k)));
        }

        void check_finite_option(double v, const char* op, const char* what, bool positive)
        {
            if (!std::isfinite(v) || v < 0.0 || (positive && v == 0.0))
                throw xgrad::invalid_argument(std::string(op) + ": " + what + " must be " +
                                              (positive ? "positive" : "non-negative") + " and finite, got " +
                                              std::to_string(v));
        }
    }

    tensor mse_loss(const tensor& input, const tensor& target, reduction red)
    {
        XGRAD_PROFILE_OP("mse_loss");
        return pointwise_loss(input, target, red, "mse_loss", [](const tensor& d) { return square(d); });
    }

    tensor l1_loss(const tensor& input, const tensor& target, reduction red)
    {
        XGRAD_PROFILE_OP("l1_loss");
        return pointwise_loss(input, target, red, "l1_loss", [](const tensor& d) { return abs(d); });
    }

    tensor smooth_l1_loss(const tensor& input, const tensor& target, reduction red, double beta)
    {
        XGRAD_PROFILE_OP("smooth_l1_loss");
        check_finite_option(beta, "smooth_l1_loss", "beta", false);
        return pointwise_loss(input, target, red, "smooth_l1_loss", [beta](const tensor& d) {
            // beta = 0 is the L1 loss (PyTorch's branch too): the quadratic piece would divide
            // by 0, and its NaN would reach the gradient through where's masked branch.
            return beta == 0.0 ? abs(d) : div(huber(d, beta), scalar_like(d, beta));
        });
    }

    tensor huber_loss(const tensor& input, const tensor& target, reduction red, double delta)
    {
        XGRAD_PROFILE_OP("huber_loss");
        check_finite_option(delta, "huber_loss", "delta", true);
        return pointwise_loss(input, target, red, "huber_loss", [delta](const tensor& d) { return huber(d, delta); });
    }

    tensor kl_div(const tensor& input, const tensor& target, reduction red, bool log_target)
    {
        XGRAD_PROFILE_OP("kl_div");
        detail::check_reduction(red, "kl_div", true);
        detail::check_input_target(input, target, "kl_div");
        tensor per_element;
        if (log_target)
            per_element = mul(exp(target), sub(target, input));
        else
        {
            // xlogy(t, t) = t log t with 0 at t = 0: the log reads 1 there, so neither the value
            // nor the gradient meets log(0) (0 * -inf would be NaN in both); a negative t still
            // gives NaN, as PyTorch's.
            const tensor zero = eq(target.detach(), scalar_like(target, 0.0));
            const tensor safe = where(zero, scalar_like(target, 1.0), target);
            per_element = sub(mul(target, log(safe)), mul(target, input));
        }
        if (red != reduction::batchmean)
            return detail::reduce_loss(per_element, red);
        const tensor total = sum(per_element);
        if (input.dim() == 0)
            return total;
        return div(total, scalar_like(total, static_cast<double>(input.shape()[0])));
    }

    namespace
    {
        /// Throws naming the first element of p outside [0, 1] (NaN included) when there is one:
        /// one reduction and one read on the happy path, the host copy only to name the culprit.
        void check_probabilities(const tensor& p, const char* op)
        {
            if (p.numel() == 0)
                return;
            {
                no_grad guard;
                const tensor x = p.detach();
                // max(p) - 1 > 0 exactly when max(p) > 1 (the subtraction is exact near 1), and
                // max propagates NaN.
                const tensor worst =
                    max(concat({reshape(sub(max(x), scalar_like(x, 1.0)), {1}), reshape(max(neg(x)), {1})}, 0));
                if (worst.item() <= 0.0)
                    return;
            }
            const std::vector<double> v = to_vector(p);
            for (std::size_t i = 0; i < v.size(); ++i)
                if (!(v[i] >= 0.0 && v[i] <= 1.0))
                    throw xgrad::invalid_argument(std::string(op) + ": input " + std::to_string(v[i]) +
                                                  " at position " +
                                                  detail::position_string(static_cast<std::int64_t>(i), p.shape()) +
                                                  " is outside [0, 1] (input holds probabilities; "
                                                  "binary_cross_entropy_with_logits takes logits)");
        }
    }

    tensor binary_cross_entropy(const tensor& input, const tensor& target, reduction red, const tensor& weight)
    {
        XGRAD_PROFILE_OP("binary_cross_entropy");
        const char* op = "binary_cross_entropy";
        detail::check_reduction(red, op);
        detail::check_input_target(input, target, op);
        detail::check_broadcast_weight(weight, input, "weight", op);
        check_probabilities(input, op);
        tensor y;
        {
            // PyTorch's forward: (t - 1) max(log1p(-p), -100) - t max(log(p), -100).
            no_grad guard;
            const tensor log_p = clamp(log(input), -100.0, std::nullopt);
            const tensor log_q = clamp(log1p(neg(input)), -100.0, std::nullopt);
            y = sub(mul(sub(target, scalar_like(target, 1.0)), log_q), mul(target, log_p));
        }
        // PyTorch's backward rather than the composite's: where a log is clamped the
        // composite's derivative is 0 * inf = NaN, and a probability that underflowed to 0 (a
        // float32 sigmoid of -90) would poison the step.
        record("binary_cross_entropy", {input, target}, {y},
               [p = input, t = target](function_node&, const std::vector<tensor>& g) {
                   std::vector<tensor> grads(2);
                   if (p.requires_grad())
                   {
                       // PyTorch's floor is the float 1e-12 (9.99999996e-13) in every dtype.
                       const double floor = static_cast<double>(1e-12f);
                       const tensor spread = clamp(mul(p, sub(scalar_like(p, 1.0), p)), floor, std::nullopt);
                       grads[0] = div(mul(g[0], sub(p, t)), spread);
                   }
                   if (t.requires_grad())
                       grads[1] = mul(g[0], sub(log1p(neg(p)), log(p)));
                   return grads;
               });
        return detail::reduce_loss(weight.defined() ? mul(y, weight) : y, red);
    }

    tensor binary_cross_entropy_with_logits(const tensor& input, const tensor& target, reduction red,
                                            const tensor& weight, const tensor& pos_weight)
    {
        XGRAD_PROFILE_OP("binary_cross_entropy_with_logits");
        const char* op = "binary_cross_entropy_with_logits";
        detail::check_reduction(red, op);
        detail::check_input_target(input, target, op);
        detail::check_broadcast_weight(weight, input, "weight", op);
        detail::check_broadcast_weight(pos_weight, input, "pos_weight", op);
        // -t log sigmoid(x) - (1 - t) log sigmoid(-x) = (1 - t) x + softplus(-x), softplus
        // computed without overflow for any |x| (xgrad/ops/activation.hpp); pos_weight scales
        // the positive term: (1 - t) x + (1 + (pos_weight - 1) t) softplus(-x).
        const tensor negative_log_sigmoid = softplus(neg(input));
        const tensor positive =
            pos_weight.defined()
                ? mul(add(mul(sub(pos_weight, scalar_like(pos_weight, 1.0)), target), scalar_like(target, 1.0)),
                      negative_log_sigmoid)
                : negative_log_sigmoid;
        const tensor per_element = add(mul(sub(scalar_like(target, 1.0), target), input), positive);
        return detail::reduce_loss(weight.defined() ? mul(per_element, weight) : per_element, red);
    }
}
