#pragma once
// Softmax family and losses: log_softmax, softmax, one_hot, nll_loss and cross_entropy in
// core/src/ops/loss.cpp; the elementwise losses (mse, l1, smooth L1, Huber, KL divergence,
// binary cross-entropy) in core/src/ops/loss_pointwise.cpp. Each is composed from xgrad's
// differentiable ops, so its gradients of every order are the parts' (binary_cross_entropy
// alone records a backward of its own, PyTorch's, said there).
//
// Each loss has the meaning of its namesake in torch.nn.functional (PyTorch 1.13 to 2.x),
// argument for argument, with these conventions:
// - The reduction comes third in every loss, right after (input, target), so that
//   loss(x, y, reduction::sum) reads the same for all; the options PyTorch takes as keywords
//   follow it (nll_loss and cross_entropy, which have several, take an options struct).
// - Floating dtypes only for input and floating targets, and target, weights and input of one
//   dtype and device (no implicit promotion, as the elementwise ops).
// - Where PyTorch broadcasts a target of another shape with a warning (mse_loss, l1_loss,
//   smooth_l1_loss, huber_loss, kl_div), xgrad requires the same shape: the mismatch is nearly
//   always a bug ([n] against [n, 1] silently makes an [n, n] loss).
// - Weights (class weights, binary cross-entropy's weight and pos_weight) must be finite and
//   >= 0; PyTorch takes any values, but a negative weight turns the loss into a quantity to
//   maximise and a NaN poisons every step, so both are rejected naming the first bad element.
// Errors: xgrad::invalid_argument (std::invalid_argument for an undefined tensor) naming the
// function and what was wrong: shapes (both named), dtypes, devices, a label out of range (the
// first in row-major order, its value and its position), a probability outside [0, 1], a bad
// option value, reduction::batchmean outside kl_div.
#include "xgrad/tensor.hpp"

namespace xgrad
{
    /// x - logsumexp(x, dim), computed with the max subtracted first (no overflow).
    tensor log_softmax(const tensor& x, std::int64_t dim);
    tensor softmax(const tensor& x, std::int64_t dim);
    /// labels: int64 of shape [n]; result [n, classes] of dtype dt. Throws std::invalid_argument
    /// naming the first label outside [0, classes) and its position.
    tensor one_hot(const tensor& labels, std::int64_t classes, dtype dt = dtype::float32);

    /// How a loss reduces its per-element values: their mean (the default), their sum, or none
    /// (the per-element tensor itself, whose shape each loss states).
    ///
    /// batchmean is valid for kl_div only (the sum divided by the batch size input.size(0), the
    /// true KL divergence per sample); every other loss rejects it naming itself. It is a value
    /// of this enum rather than a type of kl_div's own because PyTorch has one `reduction`
    /// argument for every loss, so code ported from it (and code that stores a reduction for
    /// whichever loss it is configured with) maps one to one; the cost, a misuse found at the
    /// first call instead of at compile time, is one clear message.
    enum class reduction
    {
        mean,
        sum,
        none,
        batchmean
    };

    // ---- classification over C classes -----------------------------------------------------
    //
    // Layouts, as PyTorch: input [N, C], [C] (one sample), or [N, C, d1, ..., dk] (per-pixel
    // classification, the class dimension second); class-index targets int64 of the input's
    // shape without the class dimension ([N], [], [N, d1, ..., dk]). reduction::none gives the
    // loss of each target element, in the target's shape (0 where the label is ignore_index).

    /// nll_loss's keyword arguments.
    struct nll_loss_options
    {
        reduction red = reduction::mean;
        /// Per-class rescaling: [C], finite, >= 0, of input's dtype and device; undefined: every
        /// class weighs 1. May require grad (PyTorch's does not).
        tensor weight;
        /// Targets equal to it add nothing to the loss nor to mean's denominator. Any value: a
        /// class in [0, C) (that class is then ignored) or any other (PyTorch's default, -100).
        std::int64_t ignore_index = -100;
    };

    /// cross_entropy's keyword arguments: nll_loss's and label smoothing.
    struct cross_entropy_options
    {
        reduction red = reduction::mean;
        /// As nll_loss_options::weight.
        tensor weight;
        /// As nll_loss_options::ignore_index (class-index targets only; unused, as in PyTorch,
        /// with probability targets).
        std::int64_t ignore_index = -100;
        /// In [0, 1]: the target distribution is (1 - label_smoothing) * target +
        /// label_smoothing / C (see cross_entropy for how it meets the weights).
        double label_smoothing = 0.0;
    };

    /// Negative log-likelihood of log-probabilities `input` (PyTorch's F.nll_loss): the loss of
    /// target element j with label y is -weight[y] * input[n, y, ...] (weight[y] = 1 without
    /// weights), 0 when y == ignore_index. mean divides the sum by the sum of weight[y] over the
    /// non-ignored targets (their count without weights), so it is NaN when every target is
    /// ignored, as PyTorch's. Only the labelled entries are read: -inf log-probabilities of
    /// other classes are harmless.
    /// Errors: target not int64, or not of input's shape without the class dimension; a label
    /// outside [0, C) that is not ignore_index (the first one, its value and position); weight
    /// not [C], of another dtype or device, or with a negative or non-finite element; C = 0;
    /// reduction::batchmean.
    tensor nll_loss(const tensor& input, const tensor& target, const nll_loss_options& options);
    tensor nll_loss(const tensor& input, const tensor& target, reduction red = reduction::mean);

    /// Cross-entropy of logits `input` (PyTorch's F.cross_entropy), log_softmax over the class
    /// dimension then:
    /// - int64 class-index targets: nll_loss with label smoothing eps. The loss of a target
    ///   element with label y is
    ///       (1 - eps) * weight[y] * -logp[y]  +  eps / C * sum_c weight[c] * -logp[c],
    ///   0 when y == ignore_index; mean divides the sum by the sum of weight[y] over the
    ///   non-ignored targets, as nll_loss (PyTorch's formula: the smoothing term is weighted
    ///   per class but normalised by the targets' weights).
    /// - floating targets of input's shape and dtype: probabilities over the classes (each
    ///   target element's row need not sum to 1; PyTorch does not check either). The loss of a
    ///   sample is -sum_c weight[c] * t[c] * logp[c], t = (1 - eps) * target + eps / C; mean
    ///   divides by the number of samples (N * d1 * ... * dk), not by the weights, as PyTorch.
    ///   Gradients flow to the target too.
    /// Errors: nll_loss's, and label_smoothing outside [0, 1]; a floating target of another
    /// shape or dtype.
    tensor cross_entropy(const tensor& input, const tensor& target, const cross_entropy_options& options);
    /// The common case, unchanged since the first release: no weights, ignore_index -100.
    tensor cross_entropy(const tensor& input, const tensor& target, reduction red = reduction::mean,
                         double label_smoothing = 0.0);

    /// Binary cross-entropy of probabilities `input` (each in [0, 1], checked as PyTorch does)
    /// against `target` (same shape, not checked): -weight * (target * log(input) +
    /// (1 - target) * log(1 - input)), each log clamped to >= -100 as PyTorch, so 0 and 1 give
    /// a finite loss. weight (optional, finite, >= 0) broadcasts to input's shape.
    /// Backward (recorded, PyTorch's): d/dinput = (input - target) / max(input (1 - input),
    /// 1e-12) (PyTorch's float 1e-12, 9.99999996e-13, in every dtype), finite at 0 and 1 (the
    /// composite's would be NaN there), and d/dtarget =
    /// log(1 - input) - log(input), unclamped; both times weight. Its own derivatives are those
    /// formulas' (first order: the composites of the backward).
    /// Errors: also an input element outside [0, 1] or NaN (the first, its value, position).
    tensor binary_cross_entropy(const tensor& input, const tensor& target, reduction red = reduction::mean,
                                const tensor& weight = {});

    /// Binary cross-entropy of logits `input` (sigmoid applied inside) against `target` (same
    /// shape): weight * ((1 - target) * input + (1 + (pos_weight - 1) * target) * softplus(-input)),
    /// PyTorch's numerically stable form: no overflow and no lost tail for any |input|.
    /// weight and pos_weight (optional, finite, >= 0) broadcast to input's shape by NumPy's
    /// rules: pos_weight of shape [C] weighs the positives of class c of an [N, C] input; give
    /// an [N, C, H, W] input a pos_weight of shape [C, 1, 1]. Gradients flow to target too.
    tensor binary_cross_entropy_with_logits(const tensor& input, const tensor& target, reduction red = reduction::mean,
                                            const tensor& weight = {}, const tensor& pos_weight = {});

    // ---- regression and divergence: input and target of one shape ------------------------------
    // reduction::none gives the loss per element, in input's shape; mean divides by its numel
    // (NaN for an empty input, as PyTorch). Gradients flow to both input and target.

    /// (input - target)^2.
    tensor mse_loss(const tensor& input, const tensor& target, reduction red = reduction::mean);
    /// |input - target| (derivative 0 where they are equal, as PyTorch).
    tensor l1_loss(const tensor& input, const tensor& target, reduction red = reduction::mean);
    /// With d = |input - target|: 0.5 d^2 / beta where d < beta, d - 0.5 beta elsewhere;
    /// beta = 0 is l1_loss, derivative 0 where input == target included (PyTorch 2.x's
    /// F.smooth_l1_loss calls l1_loss then; 1.13's kernel gave -1 there). Errors: beta negative
    /// or not finite.
    tensor smooth_l1_loss(const tensor& input, const tensor& target, reduction red = reduction::mean,
                          double beta = 1.0);
    /// With d = |input - target|: 0.5 d^2 where d < delta, delta (d - 0.5 delta) elsewhere
    /// (delta * smooth_l1_loss with beta = delta). Errors: delta not positive or not finite.
    tensor huber_loss(const tensor& input, const tensor& target, reduction red = reduction::mean, double delta = 1.0);
    /// Kullback-Leibler divergence of log-probabilities `input` from `target` (PyTorch's
    /// F.kl_div): target * (log(target) - input), the term 0 where target == 0 (NaN where it is
    /// negative), or with log_target exp(target) * (target - input). reduction::batchmean
    /// divides the sum by input.size(0) (the sum for a 0-d input): the KL divergence per sample,
    /// what mean (the average over every element) approximates only for one class. Derivative
    /// w.r.t. a target element equal to 0: -input (PyTorch gives NaN).
    tensor kl_div(const tensor& input, const tensor& target, reduction red = reduction::mean, bool log_target = false);
}
