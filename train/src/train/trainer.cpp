// The classifier training loop (see xgrad/train/trainer.hpp).
//
// Data-parallel steps. Each rank's loss is its batch's mean loss times n_r * K / N: the sum of
// its example losses over the global batch's N, times K because synchronize() averages the
// ranks' gradients (a mean over K) where the global batch's mean loss needs their sum. N comes
// from the sampler, so the scaling costs no communication. A rank with an empty batch still
// runs forward (the model may hold collectives, sync batch norm) and backward, with the zero
// loss sum(logits) * 0: every parameter then gets a zero gradient through the same graph, and
// no 0 / 0 of an empty mean appears.
//
// Data-parallel metrics. The per-step figures stay local (the progress bar shows rank 0's
// running loss, but the global image count, which every rank knows from the sampler); the
// epoch's tallies are summed once, after the epoch, in float64 (counts below 2^53 are exact).
// The test set is split into K contiguous shards made once at construction, so each rank
// evaluates about 1/K of it with the model in eval mode, which communicates nothing, however
// many batches its shard has.
#include "xgrad/train/trainer.hpp"

#include <cmath>
#include <iomanip>
#include <limits>
#include <ostream>
#include <sstream>
#include <utility>

#include "xgrad/autograd.hpp"
#include "xgrad/checked.hpp"
#include "xgrad/distributed/data_parallel.hpp"
#include "xgrad/errors.hpp"
#include "xgrad/factories.hpp"
#include "xgrad/ops/elementwise.hpp"
#include "xgrad/ops/loss.hpp"
#include "xgrad/ops/reduce.hpp"
#include "xgrad/ops/shape.hpp"
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

        /// The prefix of the plateau scheduler's state in checkpoint metadata.
        const std::string plateau_prefix = "lr_scheduler.";

        void check_plateau_options(const trainer_options& o)
        {
            if (o.schedule)
                throw xgrad::invalid_argument(
                    "trainer: both schedule and plateau are set; the learning rate follows one "
                    "of them");
            const bool on_test = o.plateau_on == plateau_metric::test_loss ||
                                 o.plateau_on == plateau_metric::test_accuracy;
            if (on_test && !o.test_data && !o.test_dataset)
                throw xgrad::invalid_argument("trainer: plateau_on is a test metric, but there is no test set "
                                              "(test_data or test_dataset)");
            for (const auto& entry : o.run_metadata)
                if (entry.first.rfind(plateau_prefix, 0) == 0)
                    throw xgrad::invalid_argument("trainer: run_metadata key '" + entry.first + "' starts with '" +
                                                  plateau_prefix + "', which holds the plateau's state");
        }

        double plateau_value(const epoch_metrics& m, plateau_metric which)
        {
            switch (which)
            {
            case plateau_metric::test_loss: return m.test_loss;
            case plateau_metric::test_accuracy: return m.test_accuracy;
            case plateau_metric::train_loss: return m.train_loss;
            case plateau_metric::train_accuracy: return m.train_accuracy;
            }
            return m.test_loss;
        }

        /// The plateau's state in a checkpoint's metadata, prefix removed.
        optim::reduce_lr_on_plateau::state_dict_type plateau_state(const io::metadata_map& metadata)
        {
            optim::reduce_lr_on_plateau::state_dict_type state;
            for (const auto& entry : metadata)
                if (entry.first.rfind(plateau_prefix, 0) == 0)
                    state[entry.first.substr(plateau_prefix.size())] = entry.second;
            return state;
        }

        /// Examples [first, first + count) of another dataset: a rank's shard of a test set.
        class dataset_range final : public data::dataset
        {
        public:
            dataset_range(std::shared_ptr<const data::dataset> all, std::int64_t first, std::int64_t count)
                : m_all(std::move(all)), m_first(first), m_count(count)
            {
            }
            std::int64_t size() const override { return m_count; }
            data::example get(std::int64_t index) const override { return m_all->get(m_first + index); }

        private:
            std::shared_ptr<const data::dataset> m_all;
            std::int64_t m_first, m_count;
        };

        /// This rank's contiguous share of n examples: (first, count), the first n % ranks ranks
        /// one more.
        std::pair<std::int64_t, std::int64_t> shard_of(std::int64_t n, int rank, int ranks)
        {
            const std::int64_t k = ranks, base = n / k, extra = n % k;
            const auto first_of = [&](std::int64_t r) { return r * base + std::min(r, extra); };
            return {first_of(rank), first_of(rank + 1) - first_of(rank)};
        }

        /// Rank r's contiguous share of `data`: examples [r * n / K, (r + 1) * n / K), formed
        /// as r * (n / K) + min(r, n % K) so that nothing overflows.
        std::shared_ptr<const data::image_dataset> test_shard(const data::image_dataset& data, int rank, int ranks)
        {
            const auto [first, count] = shard_of(data.size, rank, ranks);
            const std::int64_t pixels = data.channels * data.rows * data.cols; // checked by the data's own loader
            auto shard = std::make_shared<data::image_dataset>();
            shard->size = count;
            shard->rows = data.rows;
            shard->cols = data.cols;
            shard->channels = data.channels;
            shard->classes = data.classes;
            shard->images.assign(data.images.begin() + first * pixels, data.images.begin() + (first + count) * pixels);
            shard->labels.assign(data.labels.begin() + first, data.labels.begin() + first + count);
            return shard;
        }

        /// values summed (op sum) or maximised over the group, in place; float64.
        void reduce_values(std::vector<double>& values, distributed::reduce_op op,
                           const distributed::process_group& group)
        {
            const tensor t = from_host(values.data(), {static_cast<std::int64_t>(values.size())}, dtype::float64);
            distributed::all_reduce(t, op, group);
            to_host(t, values.data(), dtype::float64);
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
        if (m_options.test_data && m_options.test_dataset)
            throw xgrad::invalid_argument("trainer: test_data and test_dataset are both set (one test set: set one)");
        if (m_options.test_dataset && m_options.test_dataset->size() <= 0)
            throw xgrad::invalid_argument("trainer: the test set holds no examples (test_dataset is set but empty)");
        if (m_options.test_data)
        {
            const data::image_dataset& test = *m_options.test_data;
            if (test.size == 0)
                throw xgrad::invalid_argument("trainer: the test set holds no examples (test_data is set but empty)");
            // Against a training set of images; a data::dataset's shape shows only in its batches.
            if (const data::image_dataset* train = m_loader.images();
                train && (test.rows != train->rows || test.cols != train->cols || test.channels != train->channels))
                throw xgrad::invalid_argument("trainer: the test set's images are " + std::to_string(test.channels) +
                                              "x" + std::to_string(test.rows) + "x" + std::to_string(test.cols) +
                                              ", the training set's " + std::to_string(train->channels) + "x" +
                                              std::to_string(train->rows) + "x" + std::to_string(train->cols) +
                                              " (channels x rows x cols): the model takes one size");
        }
        if (m_options.plateau)
            check_plateau_options(m_options);
        const data::loader_options& lo = m_loader.options();
        if (distributed::distributed_data_parallel* ddp = m_options.data_parallel)
        {
            if (&ddp->module() != &m_model)
                throw xgrad::invalid_argument("trainer: data_parallel must wrap the trainer's model (data_parallel's "
                                              "module is another object)");
            const distributed::process_group& group = ddp->group();
            if (lo.num_replicas != group.size() || lo.rank != group.rank())
                throw xgrad::invalid_argument("trainer: the training loader is sharded as rank " +
                                              std::to_string(lo.rank) + " of " + std::to_string(lo.num_replicas) +
                                              ", the data-parallel group is rank " + std::to_string(group.rank()) +
                                              " of " + std::to_string(group.size()) +
                                              ": set loader_options::rank and num_replicas to the group's");
            m_writer = group.rank() == 0;
            if (m_options.test_data)
                m_test = test_shard(*m_options.test_data, group.rank(), group.size());
            if (m_options.test_dataset)
            {
                const auto [first, count] = shard_of(m_options.test_dataset->size(), group.rank(), group.size());
                m_test_examples = std::make_shared<dataset_range>(m_options.test_dataset, first, count);
            }
        }
        else if (lo.num_replicas != 1)
            throw xgrad::invalid_argument("trainer: the training loader is sharded over " +
                                          std::to_string(lo.num_replicas) +
                                          " replicas, but data_parallel is not set (one process trains on all "
                                          "the data: num_replicas must be 1)");
        if (!m_test)
            m_test = m_options.test_data;
        if (!m_test_examples)
            m_test_examples = m_options.test_dataset;
    }

    io::checkpoint_info trainer::resume(const std::filesystem::path& checkpoint)
    {
        // The metadata is checked before the state is loaded (load_checkpoint changes nothing
        // when it throws, but a compatible-looking file of another run must not be loaded).
        // Only the header is read here: the tensors are read once, by load_checkpoint.
        // Data-parallel: every rank reads the same file, once rank 0 (which writes the files)
        // has arrived here, so none reads a file it is still writing.
        if (m_options.data_parallel)
            distributed::barrier(m_options.data_parallel->group());
        const io::metadata_map metadata = io::read_safetensors_metadata(checkpoint);
        check_resume_compatible(checkpoint, metadata, m_options.run_metadata, m_options.extendable_metadata);
        // The plateau's state is checked on a copy before anything changes.
        const optim::reduce_lr_on_plateau::state_dict_type plateau = plateau_state(metadata);
        if (m_options.plateau)
        {
            if (plateau.empty())
                throw xgrad::invalid_argument(checkpoint.string() + ": the checkpoint holds no plateau state ('" +
                                              plateau_prefix +
                                              "*' metadata): it was written by a run without "
                                              "reduce_lr_on_plateau");
            optim::reduce_lr_on_plateau probe = *m_options.plateau;
            try
            {
                probe.load_state_dict(plateau);
            }
            catch (const xgrad::invalid_argument& e)
            {
                throw xgrad::invalid_argument(checkpoint.string() + ": " + e.what());
            }
        }
        std::vector<epoch_metrics> earlier;
        std::vector<step_metrics> earlier_steps;
        if (!m_options.out.empty() && std::filesystem::exists(m_options.out / "metrics.csv"))
            earlier = read_metrics_csv(m_options.out / "metrics.csv");
        if (!m_options.out.empty() && std::filesystem::exists(m_options.out / "steps.csv"))
            earlier_steps = read_steps_csv(m_options.out / "steps.csv");
        // The file is checked whole (its own errors first), then a run it has completed is
        // refused with the model and optimizer put back as they were: their values are
        // immutable tensors, so the handles taken here are the old state.
        const nn::module::state_dict_type model_before = m_model.state_dict();
        const optim::optimizer::state_dict_type optimizer_before = m_optimizer.state_dict();
        const io::checkpoint_info info = io::load_checkpoint(checkpoint, m_model, &m_optimizer);
        if (info.epoch >= m_options.epochs)
        {
            m_model.load_state_dict(model_before);
            m_optimizer.load_state_dict(optimizer_before);
            throw xgrad::invalid_argument(checkpoint.string() + ": the checkpoint has already completed " +
                                          std::to_string(info.epoch) + " of " + std::to_string(m_options.epochs) +
                                          " epochs: the run is complete (more epochs extend it where the run "
                                          "allows that: trainer_options::extendable_metadata)");
        }
        if (m_options.plateau)
            m_options.plateau->load_state_dict(plateau);
        m_epochs_done = info.epoch;
        m_history.clear();
        for (const auto& m : earlier)
            if (m.epoch <= info.epoch)
                m_history.push_back(m);
        m_steps.clear();
        for (const auto& st : earlier_steps)
            if (st.epoch <= info.epoch)
                m_steps.push_back(st);
        return info;
    }

    namespace
    {
        /// Whether every element of the tensors is finite: sum(t * 0) is 0 for finite values and
        /// NaN as soon as one is NaN or infinite (0 * inf is NaN), with no overflow of its own
        /// (a norm of large finite values could overflow). One reduction per tensor, one read.
        bool all_finite(const std::vector<tensor>& ts)
        {
            no_grad guard;
            tensor total;
            for (const tensor& t : ts)
                if (t.defined() && is_floating(t.dtype()))
                {
                    const tensor part = sum(cast(t, dtype::float64) * 0.0);
                    total = total.defined() ? total + part : part;
                }
            return !total.defined() || std::isfinite(total.item());
        }
    }

    bool trainer::finite_step(double loss, size_type epoch, size_type step,
                              const nn::module::named_tensors_type& buffers)
    {
        std::vector<tensor> grads;
        for (const tensor& p : m_model.parameters())
            grads.push_back(p.grad());
        std::vector<tensor> now;
        for (const auto& [name, b] : m_model.named_buffers())
            now.push_back(b);
        // With data_parallel a rank's buffers are its own until the epoch's broadcast: checking
        // them could stop one rank and leave the others waiting, so only the gradients (the
        // same everywhere after synchronize()) decide there.
        const bool loss_ok = std::isfinite(loss), grads_ok = loss_ok && all_finite(grads),
                   buffers_ok = grads_ok && (m_options.data_parallel || all_finite(now));
        if (buffers_ok)
            return true;
        // The forward may have replaced buffers (a batch norm's running statistics) with
        // non-finite ones: the step is undone by putting back the tensors of before it (buffers
        // are replaced, never written, so those handles hold the old values).
        for (const auto& [name, b] : buffers)
            m_model.set_buffer(name, b);
        m_optimizer.zero_grad();
        if (m_options.on_non_finite == non_finite_policy::skip_step)
            return false;
        const std::string what = !loss_ok    ? "the loss is " + std::to_string(loss)
                                 : !grads_ok ? std::string("a gradient is not finite")
                                             : std::string("a buffer (a running statistic) became non-finite");
        throw non_finite_error("training stopped at epoch " + std::to_string(epoch + 1) + ", step " +
                               std::to_string(step + 1) + " (learning rate " + std::to_string(m_optimizer.lr()) +
                               "): " + what +
                               "; the model keeps its values from before this step, and the last "
                               "checkpoint written is the last good one (a lower learning rate may help, or "
                               "skipping such steps: trainer_options::on_non_finite)");
    }

    epoch_metrics trainer::train_epoch(size_type epoch, size_type& images)
    {
        distributed::distributed_data_parallel* const ddp = m_options.data_parallel;
        const size_type steps = m_loader.batches_per_epoch();
        const double replicas = ddp ? static_cast<double>(ddp->group().size()) : 1.0;
        m_model.train();
        m_loader.start_epoch(epoch);
        if (m_options.plateau)
            m_optimizer.set_lr(m_options.plateau->lr());
        std::ostream discard(nullptr); // without a log the bar draws into nothing
        std::ostream& out = log() ? *log() : discard;
        progress_bar bar("epoch " + std::to_string(epoch + 1) + "/" + std::to_string(m_options.epochs),
                         static_cast<std::size_t>(steps), out, m_options.log_is_terminal);
        // The whole run's ETA: the epochs after this one, each of `steps` batches (their product
        // was checked against overflow when the schedule was made).
        bar.set_run(static_cast<std::size_t>((m_options.epochs - epoch - 1) * steps));
        double loss_sum = 0;
        // The class count is the logits' width, known from the first batch (a tally of 1 class
        // stands in until then; add() names logits that are not [batch, classes]).
        classifier_tally tally(1);
        bool tally_sized = false;
        size_type seen = 0, seen_global = 0, done = 0, skipped = 0;
        while (auto b = m_loader.next())
        {
            if (m_options.schedule)
                m_optimizer.set_lr(m_options.schedule->lr_at(
                    m_options.schedule_by == schedule_unit::step ? epoch * steps + b->index : epoch));
            const size_type n = b->labels.size(0);
            const tensor labels = b->labels.to(m_options.device);
            const auto buffers = m_model.named_buffers(); // to undo a step that is not finite
            double batch_loss = 0;
            tensor logits;
            if (!ddp)
            {
                logits = m_model.forward(b->images.to(m_options.device));
                const tensor loss = m_options.loss ? m_options.loss(logits, labels) : cross_entropy(logits, labels);
                m_optimizer.zero_grad();
                loss.backward();
                batch_loss = loss.item() * static_cast<double>(n);
                if (!finite_step(loss.item(), epoch, b->index, buffers))
                {
                    ++skipped;
                    continue;
                }
                m_optimizer.step();
                seen_global += n;
            }
            else
            {
                const size_type global = m_loader.global_batch_size(b->index);
                logits = ddp->forward(b->images.to(m_options.device));
                tensor loss;
                if (n > 0)
                {
                    const tensor mean = m_options.loss ? m_options.loss(logits, labels) : cross_entropy(logits, labels);
                    loss = mean * (static_cast<double>(n) * replicas / static_cast<double>(global));
                    batch_loss = mean.item() * static_cast<double>(n);
                }
                else
                    loss = sum(logits) * 0.0;
                m_optimizer.zero_grad();
                loss.backward();
                ddp->synchronize();
                // The synchronised gradients are the same on every rank, so every rank takes the
                // same decision (a rank's own loss is not: it is checked through them).
                if (!finite_step(0.0, epoch, b->index, buffers))
                {
                    ++skipped;
                    continue;
                }
                m_optimizer.step();
                seen_global += global;
            }
            if (!tally_sized && logits.dim() == 2 && logits.size(1) >= 1)
                tally = classifier_tally(logits.size(1));
            tally_sized = true;
            tally.add(logits.detach(), b->labels, batch_loss);
            loss_sum += batch_loss;
            seen += n;
            bar.update(static_cast<std::size_t>(++done), static_cast<std::size_t>(seen_global),
                       seen > 0 ? loss_sum / static_cast<double>(seen) : 0.0, m_optimizer.lr());
            // This rank's batch mean (an empty shard of a data-parallel step has none).
            m_steps.push_back({static_cast<int>(epoch + 1), b->index,
                               n > 0 ? batch_loss / static_cast<double>(n) : std::numeric_limits<double>::quiet_NaN(),
                               m_optimizer.lr()});
        }
        images = seen_global;
        epoch_metrics m;
        m.seconds = bar.finish();
        m.epoch = static_cast<int>(epoch + 1);
        m.skipped_steps = skipped;
        m.lr = m_optimizer.lr();
        const classifier_metrics train_metrics = tally.result();
        m.train_loss = train_metrics.loss;
        m.train_accuracy = train_metrics.accuracy;
        if (ddp)
        {
            // The global tallies, and the slowest rank's time (every rank returns the same row).
            std::vector<double> sums{loss_sum, static_cast<double>(tally.correct()), static_cast<double>(seen)};
            reduce_values(sums, distributed::reduce_op::sum, ddp->group());
            std::vector<double> seconds{m.seconds};
            reduce_values(seconds, distributed::reduce_op::max, ddp->group());
            m.train_loss = sums[2] > 0 ? sums[0] / sums[2] : 0.0;
            m.train_accuracy = sums[2] > 0 ? sums[1] / sums[2] : 0.0;
            m.seconds = seconds[0];
            // Rank 0's running statistics everywhere: the model evaluated and saved is one.
            ddp->broadcast_buffers();
        }
        evaluate_test(m);
        if (std::ostream* o = log())
            *o << "epoch " << epoch + 1 << "/" << m_options.epochs << ": train loss " << fixed(m.train_loss, 4)
               << ", train accuracy " << fixed(100 * m.train_accuracy, 2) << "%, test loss " << fixed(m.test_loss, 4)
               << ", test accuracy " << fixed(100 * m.test_accuracy, 2) << "%, " << fixed(m.seconds, 1) << " s ("
               << fixed(static_cast<double>(seen_global) / m.seconds, 0) << " images/s)"
               << (skipped > 0 ? ", " + std::to_string(skipped) + " steps skipped (loss or gradient not finite)" : "")
               << "\n";
        return m;
    }

    void trainer::evaluate_test(epoch_metrics& m)
    {
        m.test_loss = m.test_accuracy = std::numeric_limits<double>::quiet_NaN();
        if (!m_test && !m_test_examples)
            return;
        evaluate_options eo;
        eo.device = m_options.device;
        eo.data_format = m_loader.options().data_format;
        eo.dtype = m_loader.options().dtype;
        // The test images are normalised as the training images are.
        eo.mean = m_loader.options().mean;
        eo.std = m_loader.options().std;
        eo.channel_mean = m_loader.options().channel_mean;
        eo.channel_std = m_loader.options().channel_std;
        eo.batch_size = m_options.test_batch_size;
        const classifier_metrics r = m_test ? evaluate_classifier(m_model, m_test, eo)
                                            : evaluate_classifier(m_model, m_test_examples, eo);
        if (!m_options.data_parallel)
        {
            m.test_loss = r.loss;
            m.test_accuracy = r.accuracy;
            return;
        }
        double correct = 0;
        for (std::size_t c = 0; c < r.confusion.size(); ++c)
            correct += static_cast<double>(r.confusion[c][c]);
        const auto examples = static_cast<double>(r.examples);
        std::vector<double> sums{r.loss * examples, correct, examples};
        reduce_values(sums, distributed::reduce_op::sum, m_options.data_parallel->group());
        m.test_loss = sums[0] / sums[2]; // the whole test set is not empty (checked at construction)
        m.test_accuracy = sums[1] / sums[2];
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
            if (m_writer)
                std::filesystem::create_directories(m_options.out);
            result.csv = m_options.out / "metrics.csv";
            result.steps_csv = m_options.out / "steps.csv";
            result.plot = m_options.out / "metrics.svg";
        }
        double train_seconds = 0;
        size_type train_images = 0;
        while (m_epochs_done < m_options.epochs)
        {
            const size_type epoch = m_epochs_done;
            size_type images = 0;
            const epoch_metrics m = train_epoch(epoch, images);
            if (m_options.plateau)
                m_options.plateau->step(plateau_value(m, m_options.plateau_on));
            train_seconds += m.seconds;
            train_images += images;
            m_history.push_back(m);
            m_epochs_done = epoch + 1;
            if (!m_options.out.empty())
            {
                result.checkpoint = checkpoint_path(m_options.out, m_epochs_done);
                if (m_writer)
                {
                    write_metrics_csv(result.csv, m_history);
                    write_steps_csv(result.steps_csv, m_steps);
                    write_metrics_svg(result.plot, m_history, m_options.plot_title, m_steps);
                    io::metadata_map metadata = m_options.run_metadata;
                    if (m_options.plateau)
                        for (const auto& entry : m_options.plateau->state_dict())
                            metadata[plateau_prefix + entry.first] = entry.second;
                    io::save_checkpoint(result.checkpoint, m_model, &m_optimizer, m_epochs_done, metadata);
                }
                // The files are complete for every rank from here on.
                if (m_options.data_parallel)
                    distributed::barrier(m_options.data_parallel->group());
            }
            if (m_options.on_epoch_end)
                m_options.on_epoch_end(m);
        }
        result.metrics = m_history;
        result.steps = m_steps;
        result.images_per_s = train_seconds > 0 ? static_cast<double>(train_images) / train_seconds : 0.0;
        return result;
    }
}
