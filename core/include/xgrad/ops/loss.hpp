#pragma once
// Softmax family and classification loss (core/src/ops/loss.cpp), composed from primitive ops
// so their gradients of every order come from the primitives'.
#include "xgrad/tensor.hpp"

namespace xgrad
{
    /// x - logsumexp(x, dim), computed with the max subtracted first (no overflow).
    tensor log_softmax(const tensor& x, std::int64_t dim);
    tensor softmax(const tensor& x, std::int64_t dim);
    /// labels: int64 of shape [n]; result [n, classes] of dtype dt. Throws std::invalid_argument
    /// naming the first label outside [0, classes) and its position.
    tensor one_hot(const tensor& labels, std::int64_t classes, dtype dt = dtype::float32);

    enum class reduction
    {
        mean,
        sum,
        none
    };
    /// Cross-entropy of logits [n, c] against int64 labels [n]: -log_softmax(logits)[i, label_i],
    /// averaged (default), summed, or per sample. label_smoothing in [0, 1) mixes the target
    /// with the uniform distribution (as PyTorch's label_smoothing).
    tensor cross_entropy(const tensor& logits, const tensor& labels, reduction red = reduction::mean,
                         double label_smoothing = 0.0);
    /// Mean squared error: (prediction - target)^2 elementwise, averaged over every element
    /// (default), summed, or per element. prediction and target must have the same shape,
    /// dtype and device (throws std::invalid_argument naming both shapes otherwise); both may
    /// require grad.
    tensor mse_loss(const tensor& prediction, const tensor& target, reduction red = reduction::mean);
}
