#pragma once
// Classifier metrics: mean cross-entropy, accuracy and confusion matrix, accumulated batch by
// batch (classifier_tally) or over a whole dataset (evaluate_classifier).
//
// A prediction is the index of the largest logit of a row; ties go to the lowest index. The
// class predicted for a row holding NaN is unspecified.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "xgrad/data/loader.hpp"
#include "xgrad/dtype.hpp"
#include "xgrad/nn/module.hpp"
#include "xgrad/tensor.hpp"

namespace xgrad::train
{
    struct classifier_metrics
    {
        double loss = 0.0;     // mean cross-entropy per example (0 when no example)
        double accuracy = 0.0; // fraction of examples predicted right, in [0, 1] (0 when none)
        std::int64_t examples = 0;
        std::vector<std::vector<std::int64_t>> confusion; // [true class][predicted class], classes x classes
    };

    /// Accumulates classifier metrics over batches. Not thread-safe.
    class classifier_tally
    {
    public:
        using count_type = std::int64_t;

        /// classes >= 1 sizes the confusion matrix; throws xgrad::invalid_argument otherwise.
        explicit classifier_tally(count_type classes);

        /// Adds a batch: logits [b, classes] (float, any device), labels [b] (int64, any device),
        /// and the batch's summed loss (the caller computed it with the graph it trains on, so
        /// no loss is computed twice). Throws xgrad::invalid_argument naming the problem for
        /// logits that are not 2-D with `classes` columns, labels that are not [b], or a label
        /// outside [0, classes).
        void add(const tensor& logits, const tensor& labels, double loss_sum);

        /// As add(), the summed cross-entropy computed here (no graph is recorded).
        void add(const tensor& logits, const tensor& labels);

        count_type classes() const noexcept { return m_classes; }
        count_type examples() const noexcept { return m_examples; }
        count_type correct() const noexcept { return m_correct; }
        /// Mean loss and accuracy so far (0 before the first example), and the confusion matrix.
        classifier_metrics result() const;

    private:
        void check_shapes(const tensor& logits, const tensor& labels) const;

        count_type m_classes;
        count_type m_examples = 0;
        count_type m_correct = 0;
        double m_loss_sum = 0.0;
        std::vector<std::vector<count_type>> m_confusion;
    };

    /// The fraction of rows of logits [b, classes] whose largest entry is at the label
    /// (labels [b], int64); 0 for b == 0. Throws as classifier_tally::add.
    double accuracy(const tensor& logits, const tensor& labels);

    /// Top-k: the number of rows of logits [b, classes] whose label is among the k largest
    /// entries (k in [1, classes]): the label's logit is exceeded by fewer than k entries, ties
    /// counting for the label (PyTorch's topk may break a tie either way), and a NaN label
    /// logit is never among them. topk_correct(logits, labels, 1) counts what accuracy() counts
    /// but for ties. Throws xgrad::invalid_argument naming the problem for shapes as
    /// classifier_tally::add, a label outside [0, classes), or k outside [1, classes].
    std::int64_t topk_correct(const tensor& logits, const tensor& labels, std::int64_t k);
    /// topk_correct / b (0 for b == 0): the top-5 accuracy of ImageNet reports, for instance.
    double topk_accuracy(const tensor& logits, const tensor& labels, std::int64_t k);

    struct evaluate_options
    {
        xgrad::device device{};                     // where the model is; batches are moved there
        std::string data_format = "NCHW";           // layout of the images fed to the model
        xgrad::dtype dtype = xgrad::dtype::float32; // of the images fed to the model (floating)
        std::int64_t batch_size = 500;              // >= 1; only memory, not the result, depends on it
        /// The images' normalisation, as data::loader_options has it (the trainer passes its
        /// training loader's, so test images are normalised as the training images are).
        double mean = 0.2860;
        double std = 0.3530;
        std::vector<double> channel_mean, channel_std;
    };

    /// Metrics of `model` on every example of `data`, in order, in eval mode and without a
    /// graph. The model's train/eval mode is restored on return, also when an exception
    /// leaves. Throws xgrad::invalid_argument for a null dataset or bad options (as
    /// data::data_loader does), and whatever the model's forward throws.
    classifier_metrics evaluate_classifier(nn::module& model, std::shared_ptr<const data::image_dataset> data,
                                           const evaluate_options& options = {});
    /// The same over any dataset: its examples batched as data::data_loader batches them (the
    /// images' normalisation options are not used), the classes counted from the logits' width
    /// (the first batch's; every batch must have it). An empty dataset gives 0 examples.
    classifier_metrics evaluate_classifier(nn::module& model, std::shared_ptr<const data::dataset> data,
                                           const evaluate_options& options = {});
}
