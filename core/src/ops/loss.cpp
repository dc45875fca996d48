// Softmax family, one_hot and the class-index losses (nll_loss, cross_entropy), as
// compositions of primitive ops: their gradients of every order are the primitives'. The max
// subtracted for stability is detached: log_softmax does not depend on it mathematically, so
// cutting it from the graph changes no derivative.
//
// The class losses read their int64 labels through one-hot rows (the one_hot kernel, on the
// labels' device) rather than through a gather: the rows select the labelled log-probability
// with where() (so -inf elsewhere is harmless), give weight[y] as a product with the weights,
// and are the smoothed target's base, all with differentiable ops. Ignored labels are found
// without a pass of their own in the common case: an ignore_index outside [0, C) (PyTorch's
// -100) makes the kernel report a bad label, and only then are the labels read on the host to
// tell ignored ones from errors; an ignore_index inside [0, C) is the rows' column of that class.
#include "xgrad/ops/loss.hpp"

#include <stdexcept>
#include <utility>
#include <vector>

#include "../detail.hpp"
#include "core/src/profiler/record.hpp"
#include "loss_internal.hpp"
#include "xgrad/checked.hpp"
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

    namespace
    {
        /// One-hot rows [n, classes] of dtype dt of the contiguous int64 labels [n], and the
        /// position of the first label outside [0, classes) (-1 when none: the rows are then
        /// complete).
        std::pair<tensor, std::int64_t> one_hot_rows(const tensor& labels, std::int64_t classes, dtype dt)
        {
            const dtype cdt = compute_dtype(dt);
            tensor out = detail::empty({labels.numel(), classes}, cdt, labels.device());
            const std::int64_t bad = detail::backend_for(labels.device())
                                         .one_hot(out.data_ptr(), labels.data<std::int64_t>(), cdt, labels.numel(),
                                                  classes);
            return {detail::raw_cast(out, dt), bad};
        }
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
        auto [rows, bad] = one_hot_rows(l, classes, dt);
        if (bad >= 0)
        {
            // Read as int64, not through item()'s double: a label near INT64_MAX is printed as
            // itself rather than rounded (or wrapped to INT64_MIN).
            std::int64_t label = 0;
            to_host(l.slice(0, bad, bad + 1), &label, dtype::int64);
            throw xgrad::invalid_argument("one_hot: label " + std::to_string(label) + " at position " +
                                          std::to_string(bad) + " is outside [0, " + std::to_string(classes) + ")");
        }
        return rows;
    }

    namespace
    {
        /// The arguments of a class loss, from either options struct.
        struct class_args
        {
            reduction red;
            tensor weight;
            std::int64_t ignore_index;
            double label_smoothing;
        };

        /// The input's shape without its class dimension (dimension 1; [] for a [C] input).
        shape_type without_class_dim(const shape_type& s)
        {
            shape_type r = s;
            r.erase(r.begin() + (s.size() == 1 ? 0 : 1));
            return r;
        }

        /// The checks of nll_loss and cross_entropy that do not depend on the target's kind.
        void check_class_args(const tensor& input, const class_args& a, const char* op)
        {
            detail::check_reduction(a.red, op);
            detail::check_floating(input, op);
            if (input.dim() < 1)
                throw xgrad::invalid_argument(std::string(op) +
                                              ": input must be [N, C], [C] or [N, C, d1, ...], got a 0-d tensor");
            const std::int64_t classes = input.shape()[input.dim() == 1 ? 0 : 1];
            if (classes < 1)
                throw xgrad::invalid_argument(std::string(op) + ": input of shape " + shape_to_string(input.shape()) +
                                              " has no classes");
            if (a.weight.defined())
            {
                if (a.weight.dim() != 1 || a.weight.shape()[0] != classes)
                    throw xgrad::invalid_argument(std::string(op) + ": weight of shape " +
                                                  shape_to_string(a.weight.shape()) + " must be [" +
                                                  std::to_string(classes) + "], one per class of input of shape " +
                                                  shape_to_string(input.shape()));
                detail::check_weight_values(a.weight, input, "weight", op);
            }
            if (!(a.label_smoothing >= 0.0 && a.label_smoothing <= 1.0))
                throw xgrad::invalid_argument(std::string(op) + ": label_smoothing must be in [0, 1], got " +
                                              std::to_string(a.label_smoothing));
        }

        void check_label_target(const tensor& input, const tensor& target, const char* op)
        {
            detail::check_defined(target, op);
            const shape_type want = without_class_dim(input.shape());
            if (target.dtype() != dtype::int64)
                throw xgrad::invalid_argument(
                    std::string(op) + ": class-index target must be int64, got " + std::string(name(target.dtype())) +
                    (std::string(op) == "cross_entropy" ? " (a floating target holds probabilities, of input's shape)"
                                                        : ""));
            if (target.shape() != want)
                throw xgrad::invalid_argument(std::string(op) + ": target of shape " + shape_to_string(target.shape()) +
                                              " does not match input of shape " + shape_to_string(input.shape()) +
                                              " (expected " + shape_to_string(want) + ")");
            if (target.device() != input.device())
                throw xgrad::invalid_argument(std::string(op) + ": target on " + to_string(target.device()) +
                                              " but input on " + to_string(input.device()));
        }

        /// Class-index targets as the losses read them: one-hot rows [M, C] of dtype dt (M the
        /// target's numel; an ignored label's row is that of class 0) and keep, [M] holding 0
        /// for the ignored labels and 1 elsewhere (undefined when no label can be ignored).
        struct encoded_labels
        {
            tensor rows;
            tensor keep;
        };

        encoded_labels encode_labels(const tensor& target, std::int64_t classes, dtype dt, std::int64_t ignore_index,
                                     const char* op)
        {
            const tensor c = detail::raw_contiguous(target);
            const std::int64_t m = c.numel();
            const tensor flat = detail::alias(c, {m}, {1}, c.offset());
            auto [rows, bad] = one_hot_rows(flat, classes, dt);
            if (bad < 0)
            {
                if (ignore_index < 0 || ignore_index >= classes)
                    return {rows, {}};
                const tensor ignored = reshape(slice(rows, 1, ignore_index, ignore_index + 1), {m});
                return {rows, sub(scalar_like(ignored, 1.0), ignored)};
            }
            // Some label is outside [0, C): read them all to tell ignored labels (given class 0
            // and keep 0) from the first bad one, in row-major order whatever the kernel found.
            std::vector<std::int64_t> labels(static_cast<std::size_t>(m));
            to_host(flat, labels.data(), dtype::int64);
            std::vector<double> keep(labels.size(), 1.0);
            for (std::size_t i = 0; i < labels.size(); ++i)
            {
                if (labels[i] == ignore_index)
                {
                    labels[i] = 0;
                    keep[i] = 0.0;
                }
                else if (labels[i] < 0 || labels[i] >= classes)
                    throw xgrad::invalid_argument(
                        std::string(op) + ": label " + std::to_string(labels[i]) + " at position " +
                        detail::position_string(static_cast<std::int64_t>(i), target.shape()) + " is outside [0, " +
                        std::to_string(classes) + ") and is not ignore_index (" + std::to_string(ignore_index) + ")");
            }
            const device dev = target.device();
            rows = one_hot_rows(from_host(labels.data(), {m}, dtype::int64, dev), classes, dt).first;
            return {rows, detail::raw_cast(from_host(keep.data(), {m}, dtype::float64, dev), dt)};
        }

        /// How the class losses lay out an input: [N, C] stays (so the common case reduces its
        /// last axis), [C] is [1, C], [N, C, d1, ...] is [N, C, S] with S = d1 * ... * dk.
        struct class_layout
        {
            std::int64_t n, classes, s;
            bool spatial;
            /// x (of the input's shape) in the layout.
            tensor view(const tensor& x) const
            {
                return spatial ? reshape(x, {n, classes, s}) : reshape(x, {n, classes});
            }
            /// A tensor holding one value per sample ([N] or [N, S]) as it broadcasts against
            /// the layout's class axis.
            tensor per_class_axis(const tensor& x) const
            {
                return spatial ? reshape(x, {n, 1, s}) : reshape(x, {n, 1});
            }
            /// The weights [C] as they broadcast against the layout.
            tensor weights(const tensor& w) const { return spatial ? reshape(w, {classes, 1}) : w; }
            shape_type per_sample() const { return spatial ? shape_type{n, s} : shape_type{n}; }
        };

        class_layout layout_of(const tensor& input, const char* op)
        {
            const shape_type& sh = input.shape();
            if (sh.size() == 1)
                return {1, sh[0], 1, false};
            // Checked: with a 0 extent elsewhere, numel is 0 whatever this product is.
            std::int64_t s = 1;
            for (std::size_t d = 2; d < sh.size(); ++d)
                s = checked_mul(s, sh[d], op);
            return {sh[0], sh[1], s, sh.size() > 2};
        }

        /// The loss of log-probabilities logp (in layout l) against class-index targets; the
        /// formulas are the header's, eps = label_smoothing.
        tensor class_index_loss(const tensor& logp, const tensor& target, const class_layout& l, const class_args& a,
                                const char* op)
        {
            const encoded_labels e = encode_labels(target, l.classes, logp.dtype(), a.ignore_index, op);
            tensor selected = l.spatial ? permute(reshape(e.rows, {l.n, l.s, l.classes}), {0, 2, 1})
                                        : reshape(e.rows, {l.n, l.classes});
            tensor keep; // per sample, undefined when nothing is ignored
            if (e.keep.defined())
            {
                keep = reshape(e.keep, l.per_sample());
                selected = mul(selected, l.per_class_axis(keep)); // ignored rows select nothing
            }
            const tensor zero = scalar_like(logp, 0.0);
            const tensor w = a.weight.defined() ? l.weights(a.weight) : tensor{};
            const tensor picked = sum(where(selected, logp, zero), {1});
            // weight[y] per sample, 0 where ignored: the terms' factor and mean's denominator.
            const tensor label_weight = w.defined() ? sum(mul(selected, w), {1}) : tensor{};
            tensor per_sample = neg(w.defined() ? mul(picked, label_weight) : picked);
            if (a.label_smoothing > 0.0)
            {
                tensor smooth = neg(sum(w.defined() ? mul(logp, w) : logp, {1}));
                if (keep.defined())
                    smooth = where(keep, smooth, zero); // masked, not multiplied: -inf * 0 is NaN
                per_sample = add(mul(per_sample, scalar_like(logp, 1.0 - a.label_smoothing)),
                                 mul(smooth, scalar_like(logp, a.label_smoothing / static_cast<double>(l.classes))));
            }
            switch (a.red)
            {
            case reduction::none: return reshape(per_sample, target.shape());
            case reduction::sum: return sum(per_sample);
            default: break;
            }
            if (label_weight.defined())
                return div(sum(per_sample), sum(label_weight));
            if (keep.defined())
                return div(sum(per_sample), sum(keep));
            return mean(per_sample);
        }

        /// cross_entropy against probabilities: -sum_c weight[c] t[c] logp[c] per sample.
        tensor probability_loss(const tensor& logp, const tensor& input, const tensor& target, const class_layout& l,
                                const class_args& a)
        {
            tensor t = l.view(target);
            if (a.label_smoothing > 0.0)
                t = add(mul(t, scalar_like(t, 1.0 - a.label_smoothing)),
                        scalar_like(t, a.label_smoothing / static_cast<double>(l.classes)));
            tensor product = mul(logp, t);
            if (a.weight.defined())
                product = mul(product, l.weights(a.weight));
            const tensor per_sample = neg(sum(product, {1}));
            if (a.red == reduction::none)
                return reshape(per_sample, without_class_dim(input.shape()));
            return detail::reduce_loss(per_sample, a.red);
        }
    }

    tensor nll_loss(const tensor& input, const tensor& target, const nll_loss_options& options)
    {
        XGRAD_PROFILE_OP("nll_loss");
        const class_args a{options.red, options.weight, options.ignore_index, 0.0};
        check_class_args(input, a, "nll_loss");
        check_label_target(input, target, "nll_loss");
        const class_layout l = layout_of(input, "nll_loss");
        return class_index_loss(l.view(input), target, l, a, "nll_loss");
    }

    tensor nll_loss(const tensor& input, const tensor& target, reduction red)
    {
        nll_loss_options options;
        options.red = red;
        return nll_loss(input, target, options);
    }

    tensor cross_entropy(const tensor& input, const tensor& target, const cross_entropy_options& options)
    {
        XGRAD_PROFILE_OP("cross_entropy");
        const char* op = "cross_entropy";
        const class_args a{options.red, options.weight, options.ignore_index, options.label_smoothing};
        check_class_args(input, a, op);
        detail::check_defined(target, op);
        const bool probabilities = is_floating(target.dtype()) && target.shape() == input.shape();
        if (probabilities)
            detail::check_input_target(input, target, op);
        else
            check_label_target(input, target, op);
        const class_layout l = layout_of(input, op);
        const tensor logp = log_softmax(l.view(input), 1);
        return probabilities ? probability_loss(logp, input, target, l, a) : class_index_loss(logp, target, l, a, op);
    }

    tensor cross_entropy(const tensor& input, const tensor& target, reduction red, double label_smoothing)
    {
        cross_entropy_options options;
        options.red = red;
        options.label_smoothing = label_smoothing;
        return cross_entropy(input, target, options);
    }
}
