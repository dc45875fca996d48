// The classifier training loop (see xgrad/train/trainer.hpp).
#include "xgrad/train/trainer.hpp"

#include <cmath>
#include <iomanip>
#include <limits>
#include <ostream>
#include <sstream>
#include <utility>

#include "xgrad/checked.hpp"
#include "xgrad/errors.hpp"
#include "xgrad/ops/loss.hpp"
#include "xgrad/train/checkpoints.hpp"
#include "xgrad/train/evaluate.hpp"
#include "xgrad/train/progress.hpp"

namespace xgrad::train
{
    namespace
    {
        std::string fixed(double v, int digits)
        {
            std::ostringstream s;
            s << std::fixed << std::setprecision(digits) << v;
            return s.str();
        }
    }

    trainer::trainer(nn::module& model, optim::optimizer& optimizer, data::data_loader& train_loader,
                     trainer_options options)
        : m_model(model), m_optimizer(optimizer), m_loader(train_loader), m_options(std::move(options))
    {
        if (m_options.epochs < 1)
            throw xgrad::invalid_argument("trainer: epochs must be at least 1, got " +
                                          std::to_string(m_options.epochs));
        if (m_options.test_batch_size < 1)
            throw xgrad::invalid_argument("trainer: test_batch_size must be at least 1, got " +
                                          std::to_string(m_options.test_batch_size));
        // epoch_metrics numbers epochs as int.
        if (m_options.epochs > std::numeric_limits<int>::max())
            throw xgrad::invalid_argument("trainer: epochs must be at most " +
                                          std::to_string(std::numeric_limits<int>::max()) + ", got " +
                                          std::to_string(m_options.epochs));
        if (m_loader.size() == 0)
            throw xgrad::invalid_argument("trainer: the training set holds no examples");
        if (m_loader.batches_per_epoch() < 1)
            throw xgrad::invalid_argument("trainer: the training loader has no batch per epoch (" +
                                          std::to_string(m_loader.size()) + " examples, batch size " +
                                          std::to_string(m_loader.options().batch_size) + ")");
        // The schedule's global step, epoch * batches_per_epoch + batch, must not overflow.
        checked_mul(m_options.epochs, m_loader.batches_per_epoch(), "trainer: epochs * batches per epoch");
        if (m_options.test_data)
        {
            const data::image_dataset& train = m_loader.dataset();
            const data::image_dataset& test = *m_options.test_data;
            if (test.size == 0)
                throw xgrad::invalid_argument("trainer: the test set holds no examples (test_data is set but empty)");
            if (test.rows != train.rows || test.cols != train.cols)
                throw xgrad::invalid_argument("trainer: the test set's images are " + std::to_string(test.rows) + "x" +
                                              std::to_string(test.cols) + ", the training set's " +
                                              std::to_string(train.rows) + "x" + std::to_string(train.cols) +
                                              " (rows x cols): the model takes one size");
        }
    }

    io::checkpoint_info trainer::resume(const std::filesystem::path& checkpoint)
    {
        // The metadata is checked before the state is loaded (load_checkpoint changes nothing
        // when it throws, but a compatible-looking file of another run must not be loaded).
        // Only the header is read here: the tensors are read once, by load_checkpoint.
        check_resume_compatible(checkpoint, io::read_safetensors_metadata(checkpoint), m_options.run_metadata);
        std::vector<epoch_metrics> earlier;
        if (!m_options.out.empty() && std::filesystem::exists(m_options.out / "metrics.csv"))
            earlier = read_metrics_csv(m_options.out / "metrics.csv");
        const io::checkpoint_info info = io::load_checkpoint(checkpoint, m_model, &m_optimizer);
        if (info.epoch >= m_options.epochs)
            throw xgrad::invalid_argument(checkpoint.string() + ": the checkpoint has already completed " +
                                          std::to_string(info.epoch) + " of " + std::to_string(m_options.epochs) +
                                          " epochs: the run is complete (a different epoch count is another run, "
                                          "since the learning-rate schedule spans the whole run)");
        m_epochs_done = info.epoch;
        m_history.clear();
        for (const auto& m : earlier)
            if (m.epoch <= info.epoch)
                m_history.push_back(m);
        return info;
    }

    epoch_metrics trainer::train_epoch(size_type epoch, size_type& images)
    {
        const size_type steps = m_loader.batches_per_epoch();
        m_model.train();
        m_loader.start_epoch(epoch);
        std::ostream discard(nullptr); // without a log the bar draws into nothing
        std::ostream& log = m_options.log ? *m_options.log : discard;
        progress_bar bar("epoch " + std::to_string(epoch + 1) + "/" + std::to_string(m_options.epochs),
                         static_cast<std::size_t>(steps), log, m_options.log_is_terminal);
        double loss_sum = 0;
        // The class count is the logits' width, known from the first batch (a tally of 1 class
        // stands in until then; add() names logits that are not [batch, classes]).
        classifier_tally tally(1);
        bool tally_sized = false;
        size_type seen = 0, done = 0;
        while (auto b = m_loader.next())
        {
            if (m_options.schedule)
                m_optimizer.set_lr(m_options.schedule->lr_at(
                    m_options.schedule_by == schedule_unit::step ? epoch * steps + b->index : epoch));
            const tensor labels = b->labels.to(m_options.device);
            const tensor logits = m_model.forward(b->images.to(m_options.device));
            const tensor loss = m_options.loss ? m_options.loss(logits, labels) : cross_entropy(logits, labels);
            m_optimizer.zero_grad();
            loss.backward();
            m_optimizer.step();

            const size_type n = b->labels.size(0);
            const double batch_loss = loss.item() * static_cast<double>(n);
            if (!tally_sized && logits.dim() == 2 && logits.size(1) >= 1)
                tally = classifier_tally(logits.size(1));
            tally_sized = true;
            tally.add(logits.detach(), b->labels, batch_loss);
            loss_sum += batch_loss;
            seen += n;
            bar.update(static_cast<std::size_t>(++done), static_cast<std::size_t>(seen),
                       loss_sum / static_cast<double>(seen));
        }
        images = seen;
        epoch_metrics m;
        m.seconds = bar.finish();
        m.epoch = static_cast<int>(epoch + 1);
        const classifier_metrics train_metrics = tally.result();
        m.train_loss = train_metrics.loss;
        m.train_accuracy = train_metrics.accuracy;
        m.test_loss = m.test_accuracy = std::numeric_limits<double>::quiet_NaN();
        if (m_options.test_data)
        {
            evaluate_options eo;
            eo.device = m_options.device;
            eo.data_format = m_loader.options().data_format;
            eo.batch_size = m_options.test_batch_size;
            const classifier_metrics test_metrics = evaluate_classifier(m_model, m_options.test_data, eo);
            m.test_loss = test_metrics.loss;
            m.test_accuracy = test_metrics.accuracy;
        }
        if (m_options.log)
            *m_options.log << "epoch " << epoch + 1 << "/" << m_options.epochs << ": train loss "
                           << fixed(m.train_loss, 4) << ", train accuracy " << fixed(100 * m.train_accuracy, 2)
                           << "%, test loss " << fixed(m.test_loss, 4) << ", test accuracy "
                           << fixed(100 * m.test_accuracy, 2) << "%, " << fixed(m.seconds, 1) << " s ("
                           << fixed(static_cast<double>(seen) / m.seconds, 0) << " images/s)\n";
        return m;
    }

    fit_result trainer::fit()
    {
        if (m_epochs_done >= m_options.epochs)
            throw xgrad::invalid_argument("trainer::fit: all " + std::to_string(m_options.epochs) +
                                          " epochs are done already");
        fit_result result;
        result.first_epoch = m_epochs_done;
        if (!m_options.out.empty())
        {
            std::filesystem::create_directories(m_options.out);
            result.csv = m_options.out / "metrics.csv";
            result.plot = m_options.out / "metrics.svg";
        }
        double train_seconds = 0;
        size_type train_images = 0;
        while (m_epochs_done < m_options.epochs)
        {
            const size_type epoch = m_epochs_done;
            size_type images = 0;
            const epoch_metrics m = train_epoch(epoch, images);
            train_seconds += m.seconds;
            train_images += images;
            m_history.push_back(m);
            m_epochs_done = epoch + 1;
            if (!m_options.out.empty())
            {
                write_metrics_csv(result.csv, m_history);
                write_metrics_svg(result.plot, m_history, m_options.plot_title);
                result.checkpoint = checkpoint_path(m_options.out, m_epochs_done);
                io::save_checkpoint(result.checkpoint, m_model, &m_optimizer, m_epochs_done, m_options.run_metadata);
            }
            if (m_options.on_epoch_end)
                m_options.on_epoch_end(m);
        }
        result.metrics = m_history;
        result.images_per_s = train_seconds > 0 ? static_cast<double>(train_images) / train_seconds : 0.0;
        return result;
    }
}
