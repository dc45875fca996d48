// Softmax family and cross-entropy, as compositions of primitive ops: their gradients of every
// order are the primitives'. The max subtracted for stability is detached: log_softmax does not
// depend on it mathematically, so cutting it from the graph changes no derivative.
#include "xgrad/ops/loss.hpp"

#include <stdexcept>

#include "../detail.hpp"
#include "core/src/profiler/record.hpp"
#include "xgrad/errors.hpp"
#include "xgrad/factories.hpp"
#include "xgrad/ops/elementwise.hpp"
#include "xgrad/ops/reduce.hpp"
#include "xgrad/ops/shape.hpp"

namespace xgrad
{
    tensor log_softmax(const tensor& x, std::int64_t dim)
    {
        XGRAD_PROFILE_OP("log_softmax");
        detail::check_floating(x, "log_softmax");
        const std::int64_t d = detail::normalize_dim(dim, x.dim(), "log_softmax", x.shape());
        const tensor shifted = sub(x, max(x.detach(), {d}, true));
        return sub(shifted, log(sum(exp(shifted), {d}, true)));
    }

    tensor softmax(const tensor& x, std::int64_t dim)
    {
        XGRAD_PROFILE_OP("softmax");
        detail::check_floating(x, "softmax");
        const std::int64_t d = detail::normalize_dim(dim, x.dim(), "softmax", x.shape());
        const tensor e = exp(sub(x, max(x.detach(), {d}, true)));
        return div(e, sum(e, {d}, true));
    }

    tensor one_hot(const tensor& labels, std::int64_t classes, dtype dt)
    {
        XGRAD_PROFILE_OP("one_hot");
        detail::check_defined(labels, "one_hot");
        if (labels.dtype() != dtype::int64)
            throw xgrad::invalid_argument("one_hot: labels must be int64, got " + std::string(name(labels.dtype())));
        if (labels.dim() != 1)
            throw xgrad::invalid_argument("one_hot: labels must be 1-D, got shape " + shape_to_string(labels.shape()));
        if (classes < 1)
            throw xgrad::invalid_argument("one_hot: classes must be >= 1, got " + std::to_string(classes));
        if (!is_floating(dt))
            throw xgrad::invalid_argument("one_hot: result dtype must be floating point, got " + std::string(name(dt)));
        const tensor l = detail::raw_contiguous(labels);
        const dtype cdt = compute_dtype(dt);
        tensor out = detail::empty({labels.shape()[0], classes}, cdt, labels.device());
        const std::int64_t bad = detail::backend_for(labels.device())
                                     .one_hot(out.data_ptr(), l.data<std::int64_t>(), cdt, l.numel(), classes);
        if (bad >= 0)
        {
            // Read as int64, not through item()'s double: a label near INT64_MAX is printed as
            // itself rather than rounded (or wrapped to INT64_MIN).
            std::int64_t label = 0;
            to_host(l.slice(0, bad, bad + 1), &label, dtype::int64);
            throw xgrad::invalid_argument("one_hot: label " + std::to_string(label) + " at position " +
                                          std::to_string(bad) + " is outside [0, " + std::to_string(classes) + ")");
        }
        return detail::raw_cast(out, dt);
    }

    tensor cross_entropy(const tensor& logits, const tensor& labels, reduction red, double label_smoothing)
    {
        XGRAD_PROFILE_OP("cross_entropy");
        detail::check_floating(logits, "cross_entropy");
        detail::check_defined(labels, "cross_entropy");
        if (logits.dim() != 2)
            throw xgrad::invalid_argument("cross_entropy: logits must be [n, classes], got shape " +
                                          shape_to_string(logits.shape()));
        if (labels.dim() != 1 || labels.shape()[0] != logits.shape()[0])
            throw xgrad::invalid_argument("cross_entropy: labels of shape " + shape_to_string(labels.shape()) +
                                          " do not match logits of shape " + shape_to_string(logits.shape()) +
                                          " (expected [" + std::to_string(logits.shape()[0]) + "])");
        if (!(label_smoothing >= 0.0 && label_smoothing < 1.0))
            throw xgrad::invalid_argument("cross_entropy: label_smoothing must be in [0, 1), got " +
                                          std::to_string(label_smoothing));
        if (labels.device() != logits.device())
            throw xgrad::invalid_argument("cross_entropy: labels on " + to_string(labels.device()) + " but logits on " +
                                          to_string(logits.device()));
        const std::int64_t classes = logits.shape()[1];
        tensor target = one_hot(labels, classes, logits.dtype());
        if (label_smoothing > 0.0)
            target = add(mul(target, scalar_like(target, 1.0 - label_smoothing)),
                         scalar_like(target, label_smoothing / static_cast<double>(classes)));
        const tensor per_sample = neg(sum(mul(target, log_softmax(logits, 1)), {1}));
        switch (red)
        {
        case reduction::mean: return mean(per_sample);
        case reduction::sum: return sum(per_sample);
        case reduction::none: return per_sample;
        }
        return per_sample;
    }

    tensor mse_loss(const tensor& prediction, const tensor& target, reduction red)
    {
        XGRAD_PROFILE_OP("mse_loss");
        detail::check_defined(prediction, "mse_loss");
        detail::check_defined(target, "mse_loss");
        if (prediction.shape() != target.shape())
            throw xgrad::invalid_argument("mse_loss: prediction of shape " + shape_to_string(prediction.shape()) +
                                          " and target of shape " + shape_to_string(target.shape()) +
                                          " must have the same shape");
        const tensor per_element = square(sub(prediction, target)); // sub checks dtypes and devices
        switch (red)
        {
        case reduction::mean: return mean(per_element);
        case reduction::sum: return sum(per_element);
        case reduction::none: return per_element;
        }
        return per_element;
    }
}
