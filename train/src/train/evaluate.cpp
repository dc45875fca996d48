// Classifier metrics (see xgrad/train/evaluate.hpp).
#include "xgrad/train/evaluate.hpp"

#include <cmath>
#include <cstddef>
#include <optional>
#include <string>
#include <utility>

#include "xgrad/autograd.hpp"
#include "xgrad/errors.hpp"
#include "xgrad/factories.hpp"
#include "xgrad/ops/loss.hpp"
#include "xgrad/ops/reduce.hpp"

namespace xgrad::train
{
    namespace
    {
        std::string shape_text(const tensor& t)
        {
            std::string s = "[";
            for (std::int64_t d = 0; d < t.dim(); ++d)
                s += (d ? ", " : "") + std::to_string(t.size(d));
            return s + "]";
        }

        /// Puts a module back into the mode it had, however the scope is left.
        class mode_restore
        {
        public:
            explicit mode_restore(nn::module& m) : m_module(m), m_was_training(m.is_training()) {}
            mode_restore(const mode_restore&) = delete;
            mode_restore& operator=(const mode_restore&) = delete;
            ~mode_restore() { m_module.train(m_was_training); }

        private:
            nn::module& m_module;
            bool m_was_training;
        };
    }

    classifier_tally::classifier_tally(count_type classes) : m_classes(classes)
    {
        if (classes < 1)
            throw xgrad::invalid_argument("classifier_tally: classes must be at least 1, got " +
                                          std::to_string(classes));
        const auto n = static_cast<std::size_t>(classes);
        m_confusion.assign(n, std::vector<count_type>(n, 0));
    }

    void classifier_tally::check_shapes(const tensor& logits, const tensor& labels) const
    {
        if (logits.dim() != 2 || logits.size(1) != m_classes)
            throw xgrad::invalid_argument("classifier_tally: logits must be [batch, " + std::to_string(m_classes) +
                                          "], got " + shape_text(logits));
        if (labels.dim() != 1 || labels.size(0) != logits.size(0))
            throw xgrad::invalid_argument("classifier_tally: labels must be [" + std::to_string(logits.size(0)) +
                                          "] for logits " + shape_text(logits) + ", got " + shape_text(labels));
    }

    void classifier_tally::add(const tensor& logits, const tensor& labels, double loss_sum)
    {
        check_shapes(logits, labels);
        const count_type b = logits.size(0);
        std::vector<std::int64_t> truth(static_cast<std::size_t>(b)), predicted(static_cast<std::size_t>(b));
        to_host(labels, truth.data(), dtype::int64);
        to_host(argmax(logits.detach(), 1), predicted.data(), dtype::int64);
        // Checked in full before anything is counted, so a bad batch leaves the tally as it was.
        for (count_type i = 0; i < b; ++i)
        {
            const std::int64_t y = truth[static_cast<std::size_t>(i)];
            if (y < 0 || y >= m_classes)
                throw xgrad::invalid_argument("classifier_tally: label " + std::to_string(y) + " of row " +
                                              std::to_string(i) + " is outside [0, " + std::to_string(m_classes) + ")");
        }
        for (count_type i = 0; i < b; ++i)
        {
            const auto y = static_cast<std::size_t>(truth[static_cast<std::size_t>(i)]);
            const auto p = static_cast<std::size_t>(predicted[static_cast<std::size_t>(i)]);
            m_correct += y == p;
            ++m_confusion[y][p];
        }
        m_examples += b;
        m_loss_sum += loss_sum;
    }

    void classifier_tally::add(const tensor& logits, const tensor& labels)
    {
        no_grad guard;
        check_shapes(logits, labels); // before cross_entropy, whose message would not name the tally
        add(logits, labels, cross_entropy(logits, labels.to(logits.device()), reduction::sum).item());
    }

    classifier_metrics classifier_tally::result() const
    {
        classifier_metrics r;
        r.examples = m_examples;
        if (m_examples > 0)
        {
            r.loss = m_loss_sum / static_cast<double>(m_examples);
            r.accuracy = static_cast<double>(m_correct) / static_cast<double>(m_examples);
        }
        r.confusion = m_confusion;
        return r;
    }

    double accuracy(const tensor& logits, const tensor& labels)
    {
        if (logits.dim() != 2 || logits.size(1) < 1)
            throw xgrad::invalid_argument("accuracy: logits must be [batch, classes] with classes >= 1, got " +
                                          shape_text(logits));
        classifier_tally tally(logits.size(1));
        tally.add(logits, labels, 0.0);
        return tally.result().accuracy;
    }

    std::int64_t topk_correct(const tensor& logits, const tensor& labels, std::int64_t k)
    {
        if (logits.dim() != 2 || logits.size(1) < 1)
            throw xgrad::invalid_argument("topk_correct: logits must be [batch, classes] with classes >= 1, got " +
                                          shape_text(logits));
        const std::int64_t b = logits.size(0), classes = logits.size(1);
        if (labels.dim() != 1 || labels.size(0) != b)
            throw xgrad::invalid_argument("topk_correct: labels must be [" + std::to_string(b) + "] for logits " +
                                          shape_text(logits) + ", got " + shape_text(labels));
        if (k < 1 || k > classes)
            throw xgrad::invalid_argument("topk_correct: k must be in [1, " + std::to_string(classes) + "], got " +
                                          std::to_string(k));
        // On the host, in double (exact for every floating dtype): a row is a few classes.
        const std::vector<double> values = to_vector(logits.detach());
        std::vector<std::int64_t> truth(static_cast<std::size_t>(b));
        to_host(labels, truth.data(), dtype::int64);
        std::int64_t correct = 0;
        for (std::int64_t i = 0; i < b; ++i)
        {
            const std::int64_t y = truth[static_cast<std::size_t>(i)];
            if (y < 0 || y >= classes)
                throw xgrad::invalid_argument("topk_correct: label " + std::to_string(y) + " of row " +
                                              std::to_string(i) + " is outside [0, " + std::to_string(classes) + ")");
            const double* row = values.data() + i * classes;
            const double mine = row[y];
            if (std::isnan(mine))
                continue;
            std::int64_t above = 0; // entries ranked before the label: larger, or NaN
            for (std::int64_t j = 0; j < classes; ++j)
                above += row[j] > mine || std::isnan(row[j]);
            correct += above < k;
        }
        return correct;
    }

    double topk_accuracy(const tensor& logits, const tensor& labels, std::int64_t k)
    {
        const std::int64_t correct = topk_correct(logits, labels, k);
        return logits.size(0) > 0 ? static_cast<double>(correct) / static_cast<double>(logits.size(0)) : 0.0;
    }

    namespace
    {
        data::loader_options loader_options_of(const evaluate_options& options)
        {
            data::loader_options o;
            o.batch_size = options.batch_size;
            o.shuffle = false;
            o.data_format = options.data_format;
            o.dtype = options.dtype;
            o.mean = options.mean;
            o.std = options.std;
            o.channel_mean = options.channel_mean;
            o.channel_std = options.channel_std;
            o.prefetch = false; // evaluation is one pass; a worker thread would only add a hand-off
            return o;
        }

        /// Every batch of the loader through the model, in eval mode and without a graph; the
        /// tally made at the first batch by make_tally(classes seen in its logits).
        template <class MakeTally>
        classifier_metrics evaluate_batches(nn::module& model, data::data_loader& loader,
                                            const evaluate_options& options, MakeTally make_tally)
        {
            mode_restore restore(model);
            model.eval();
            no_grad guard;
            std::optional<classifier_tally> tally;
            loader.start_epoch(0);
            while (auto b = loader.next())
            {
                const tensor logits = model.forward(b->images.to(options.device));
                if (!tally)
                    tally.emplace(make_tally(logits));
                tally->add(logits, b->labels.to(options.device));
            }
            return tally ? tally->result() : classifier_metrics{};
        }
    }

    classifier_metrics evaluate_classifier(nn::module& model, std::shared_ptr<const data::image_dataset> data,
                                           const evaluate_options& options)
    {
        if (!data)
            throw xgrad::invalid_argument("evaluate_classifier: the dataset is null");
        const std::int64_t classes = data->classes;
        data::data_loader loader(std::move(data), loader_options_of(options));
        classifier_metrics r = evaluate_batches(model, loader, options,
                                                [&](const tensor&) { return classifier_tally(classes); });
        if (r.confusion.empty())
            r = classifier_tally(classes).result(); // no batch: the dataset's classes, no examples
        return r;
    }

    classifier_metrics evaluate_classifier(nn::module& model, std::shared_ptr<const data::dataset> data,
                                           const evaluate_options& options)
    {
        if (!data)
            throw xgrad::invalid_argument("evaluate_classifier: the dataset is null");
        data::data_loader loader(std::move(data), loader_options_of(options));
        return evaluate_batches(model, loader, options, [](const tensor& logits) {
            if (logits.dim() != 2 || logits.size(1) < 1)
                throw xgrad::invalid_argument("evaluate_classifier: the model's logits must be [batch, classes] "
                                              "with classes >= 1, got " +
                                              shape_to_string(logits.shape()));
            return classifier_tally(logits.size(1));
        });
    }
}
