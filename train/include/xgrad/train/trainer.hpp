#pragma once
// A classifier's training loop: epochs over a data loader, a learning-rate schedule, a test
// evaluation, the metrics log and chart, and a checkpoint after every epoch, resumable.
//
//   xgrad::train::trainer_options o;
//   o.epochs = 10;
//   o.out = "run";                              // metrics.csv, steps.csv, metrics.svg, checkpoints
//   o.schedule = schedule.get();                // indexed by global step (or by epoch)
//   o.test_data = test_set;
//   o.run_metadata = {{"seed", "0"}, ...};      // what a resumed run must agree on
//   o.log = &std::cout;
//   xgrad::train::trainer t(*model, *optimizer, loader, o);
//   if (!resume_from.empty())
//       t.resume(resume_from);
//   const auto result = t.fit();
//
// Reproducibility: a step computes only from the model, the optimizer state, the batch and
// the learning rate. The loader's batch order is a function of (its seed, epoch), the
// learning rate of the global step (a schedule) or of the plateau scheduler's state, and the
// checkpoint of epoch k holds the whole model (parameters and buffers), the optimizer state and
// that plateau state. So a run resumed from the checkpoint of epoch k computes bit for bit what
// the uninterrupted run computes after epoch k, given the same thread count (xgrad's parallel
// reductions combine per-thread partial results).
//
// Data-parallel training (options.data_parallel set; K = its group's size): the job's K
// processes each run a trainer on the same model construction, with the loader sharded for
// this rank (loader_options::num_replicas = K, rank = the group's rank, same seed), and call
// resume() and fit() alike. A step: the logits through data_parallel->forward(), the batch's
// loss scaled to (sum of this rank's example losses) * K / N, N = loader.global_batch_size(step)
// (so the ranks' mean gradient, which synchronize() forms, is the gradient of the global
// batch's mean loss; an empty batch contributes a zero loss still connected to the model),
// backward, synchronize(), the optimizer step, the same on every rank. That is the step of one
// process on the global batch of K * batch_size examples, up to the order of summation. After
// an epoch's training the model's buffers are broadcast from rank 0 (the evaluated and saved
// model is rank 0's, the same everywhere); the train metrics are the global ones (one
// all-reduce of the ranks' loss sum, correct count and example count per epoch), the test set
// is evaluated in K contiguous shards, one per rank, and the tallies all-reduced (the same
// metrics as one process evaluating it all, up to the summation order of the loss); epoch
// seconds are the slowest rank's. Every rank returns the same metrics and calls on_epoch_end
// with them. Only rank 0 logs (the progress bar counts the global images) and writes
// metrics.csv, the chart and the checkpoints; a barrier follows, so when fit() returns or an
// epoch ends, every rank may read them. resume() starts with a barrier, then every rank loads
// the same checkpoint file. A rank that throws leaves the others waiting in a collective: the
// caller must end the job (distributed::environment does, distributed::abort).
#include <cstdint>
#include <filesystem>
#include <functional>
#include <iosfwd>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "xgrad/data/loader.hpp"
#include "xgrad/dtype.hpp"
#include "xgrad/io/safetensors.hpp"
#include "xgrad/nn/module.hpp"
#include "xgrad/optim/lr_scheduler.hpp"
#include "xgrad/optim/optimizer.hpp"
#include "xgrad/optim/reduce_lr_on_plateau.hpp"
#include "xgrad/train/metrics.hpp"

namespace xgrad::distributed
{
    class distributed_data_parallel;
}

namespace xgrad::train
{
    /// What the schedule's lr_at argument counts.
    enum class schedule_unit
    {
        step, // global optimizer step: epoch * batches_per_epoch + batch index
        epoch // epochs completed
    };

    /// The epoch metric a plateau scheduler follows (its mode says whether lower or higher is
    /// better: "min" for the losses, "max" for the accuracies).
    enum class plateau_metric
    {
        test_loss,
        test_accuracy,
        train_loss,
        train_accuracy
    };

    /// What a step whose loss or gradients are not finite does (NaN or infinity: a learning
    /// rate too high, an overflow in 16 bits, a bad example).
    enum class non_finite_policy
    {
        /// fit() throws non_finite_error before the optimizer steps: the model keeps its last
        /// finite values and the files of finished epochs stay the last good ones.
        stop,
        /// The step is skipped (gradients cleared, no update), as PyTorch's GradScaler does in
        /// mixed precision; epoch_metrics::skipped_steps counts them.
        skip_step
    };

    /// Thrown by fit() under non_finite_policy::stop; the message names the epoch, the step, the
    /// learning rate and whether the loss or a gradient is not finite.
    class non_finite_error : public std::runtime_error
    {
    public:
        using std::runtime_error::runtime_error;
    };

    struct trainer_options
    {
        using loss_fn_type = std::function<tensor(const tensor& logits, const tensor& labels)>;
        using epoch_callback_type = std::function<void(const epoch_metrics&)>;

        /// Epochs of the whole run, in [1, INT_MAX], counting those done before a resume.
        std::int64_t epochs = 1;
        /// Where the model is; every batch is moved there.
        xgrad::device device = cpu_device;
        /// Folder for metrics.csv, steps.csv, metrics.svg and checkpoint_epoch_<n>.safetensors (created;
        /// written after every epoch). Empty: nothing is written, and nothing can be resumed.
        std::filesystem::path out;
        /// Stored in every checkpoint; resume() refuses a checkpoint whose metadata differs on
        /// any of these keys. Keys reserved by io::save_checkpoint are refused by it.
        io::metadata_map run_metadata;
        /// Keys of run_metadata whose integer value may be larger on resume than in the
        /// checkpoint: the training example names "epochs", so that a finished run can be
        /// extended (see check_resume_compatible).
        std::vector<std::string> extendable_metadata;
        /// Not owned; must outlive fit(). Null: the optimizer's learning rate is left as it is.
        const optim::lr_schedule* schedule = nullptr;
        schedule_unit schedule_by = schedule_unit::step;
        /// A learning rate driven by a metric, in place of a schedule (set one of them, not
        /// both). Not owned; must outlive fit(). Every epoch trains at plateau->lr(); after its
        /// metrics, plateau->step(the epoch's plateau_on) sets the next epoch's rate. Its state
        /// goes into every checkpoint as metadata "lr_scheduler.<name>"
        /// (reduce_lr_on_plateau::state_dict; run_metadata may not use such keys), and resume()
        /// restores it. Null: none.
        optim::reduce_lr_on_plateau* plateau = nullptr;
        plateau_metric plateau_on = plateau_metric::test_loss;
        /// Evaluated after every epoch in the training loader's data format and dtype. Null: the test
        /// metrics are NaN (the CSV keeps them, the chart skips them).
        std::shared_ptr<const data::image_dataset> test_data;
        /// A test set of any other kind, in place of test_data (set one of them, not both): the
        /// examples of a data::dataset (a reader of one's own), batched as the training loader's
        /// options say (the images' normalisation options do not apply to it), its classes
        /// counted from the model's logits.
        std::shared_ptr<const data::dataset> test_dataset;
        std::int64_t test_batch_size = 500;
        /// The mean loss of a batch, differentiable. Empty: cross_entropy (mean).
        loss_fn_type loss;
        /// A step whose loss, gradients or the buffers its forward wrote (a batch norm's running
        /// statistics) are not finite stops the run (default) or is skipped; either way the
        /// model keeps its values from before that step. With data_parallel the gradients are
        /// checked after synchronize(), where every rank holds the same values, and the
        /// buffers (each rank's own until the epoch's broadcast) are not, so all ranks decide
        /// alike.
        non_finite_policy on_non_finite = non_finite_policy::stop;
        /// Called after each epoch's metrics, CSV, chart and checkpoint are written.
        epoch_callback_type on_epoch_end;
        /// Progress bar and one summary line per epoch. Null: silent.
        std::ostream* log = nullptr;
        /// Redraw the progress bar in place (a terminal) or print plain lines.
        bool log_is_terminal = false;
        std::string plot_title = "xgrad training";
        /// Data-parallel training over data_parallel->group() (see above). Not owned; must
        /// outlive the trainer, and wrap the trainer's model. Null: one process.
        distributed::distributed_data_parallel* data_parallel = nullptr;
    };

    struct fit_result
    {
        std::vector<epoch_metrics> metrics;          // every epoch so far, those before a resume included
        std::vector<step_metrics> steps;             // every step so far (this rank's batch losses)
        double images_per_s = 0.0;                   // training images per second over this fit's epochs (all ranks')
        std::filesystem::path csv, plot, checkpoint; // checkpoint: the last one written (empty if none)
        std::filesystem::path steps_csv;             // the per-step log
        std::int64_t first_epoch = 0;                // epochs already done when fit() started
    };

    /// Trains `model` with `optimizer` on `train_loader`'s batches. The model, optimizer and
    /// loader are not owned and must outlive the trainer; the trainer drives the loader
    /// (start_epoch(epoch) for each epoch) and switches the model to train mode for training
    /// and eval mode for the test evaluation.
    class trainer
    {
    public:
        using size_type = std::int64_t;

        /// Throws xgrad::invalid_argument naming the option for epochs outside [1, INT_MAX]
        /// (epoch_metrics numbers epochs as int), test_batch_size < 1, an empty training set, a
        /// loader with no batch per epoch, epochs * batches per epoch overflowing (the
        /// schedule's global step), an empty test set, or test images of another size than the
        /// training images (naming both sizes); with data_parallel, a model other than
        /// data_parallel->module(), or a loader whose num_replicas and rank are not the group's
        /// size and rank (naming both); without it, a loader with num_replicas other than 1;
        /// both a schedule and a plateau, a plateau on a test metric without a test set, or a
        /// plateau with run_metadata keys starting "lr_scheduler.".
        trainer(nn::module& model, optim::optimizer& optimizer, data::data_loader& train_loader,
                trainer_options options);

        trainer(const trainer&) = delete;
        trainer& operator=(const trainer&) = delete;

        /// Loads `checkpoint` into the model and optimizer so that fit() continues after its
        /// epoch, with the metrics of the earlier epochs and steps taken from
        /// options.out/metrics.csv and steps.csv when they exist (rows up to the checkpoint's
        /// epoch). Everything is checked before anything
        /// changes: io::format_error from io::load_checkpoint (naming the file) for a file that
        /// does not fit the model or optimizer; xgrad::invalid_argument naming the file for
        /// run metadata that differs from options.run_metadata (check_resume_compatible) or a
        /// checkpoint that has already completed options.epochs, or, with options.plateau, for
        /// a checkpoint without its state or with state it refuses (its message included);
        /// std::runtime_error naming the CSV for a malformed metrics.csv or steps.csv.
        io::checkpoint_info resume(const std::filesystem::path& checkpoint);

        /// Runs the remaining epochs. Each one: the model in train mode, one optimizer step per
        /// batch (learning rate from the schedule first), the test evaluation, the plateau's
        /// step, then the metrics (CSV and chart) and checkpoint files, then on_epoch_end. Throws
        /// xgrad::invalid_argument when no epoch remains; errors of the loader, the model, the
        /// files (naming them) pass through, leaving the files of finished epochs intact.
        fit_result fit();

        /// Epochs completed (by fit() or by the checkpoint resume() loaded).
        size_type epochs_done() const noexcept { return m_epochs_done; }
        const std::vector<epoch_metrics>& history() const noexcept { return m_history; }
        const trainer_options& options() const noexcept { return m_options; }

    private:
        /// Whether the step's loss, gradients and the model's buffers are finite; if not, puts
        /// back `buffers` (the model's from before the forward), clears the gradients, and
        /// returns false (skip_step) or throws non_finite_error naming the epoch and step (stop).
        bool finite_step(double loss, size_type epoch, size_type step, const nn::module::named_tensors_type& buffers);
        /// One epoch of training and its test evaluation; `images` receives the images trained on.
        epoch_metrics train_epoch(size_type epoch, size_type& images);
        /// The test loss and accuracy into m: of the whole test set, or with data_parallel of
        /// this rank's shard, reduced over the ranks.
        void evaluate_test(epoch_metrics& m);
        /// The log when this process logs (one process, or rank 0), else null.
        std::ostream* log() const noexcept { return m_writer ? m_options.log : nullptr; }

        nn::module& m_model;
        optim::optimizer& m_optimizer;
        data::data_loader& m_loader;
        trainer_options m_options;
        size_type m_epochs_done = 0;
        std::vector<epoch_metrics> m_history;
        std::vector<step_metrics> m_steps;
        bool m_writer = true;                                 // logs and writes the files: rank 0
        std::shared_ptr<const data::image_dataset> m_test;    // the test set, or this rank's shard of it
        std::shared_ptr<const data::dataset> m_test_examples; // the same for options.test_dataset
    };
}
