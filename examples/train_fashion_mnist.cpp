// Trains a small CNN on Fashion-MNIST with xgrad and shows it learning.
//
//   train_fashion_mnist [--epochs N] [--batch-size B] [--lr LR] [--optimizer sgd|adam|adamw|rmsprop|adagrad]
//                       [--schedule SPEC] [--threads T] [--device cpu|cuda]
//                       [--data-dir DIR] [--seed S] [--out DIR] [--resume CHECKPOINT]
//                       [--init-from WEIGHTS]
//                       [--format NCHW|NHWC] [--precision f32|bf16] [--limit N] [--test-limit N]
//                       [--no-prefetch] [--workers W]
//                       [--distributed] [--sync-bn] [--summary] [--profile]
//
// Data-parallel: `mpirun -np K train_fashion_mnist ...` (or --distributed) trains one model
// on K processes, each on its share of every step's K * batch-size images (--batch-size is per
// process), with the gradients averaged over the processes (distributed_data_parallel); it
// computes what one process computes with --batch-size K * B, except that each process's batch
// norm sees its own B images (--sync-bn makes them share the statistics of all K * B). Rank 0
// alone prints and writes the files; an error on any rank stops the whole job with its message.
//
// Prints a progress bar per epoch (plain lines when the output is not a terminal), the train
// and test loss and accuracy after each epoch, and writes into --out: metrics.csv (per epoch,
// with the learning rate), steps.csv (the loss and learning rate of every step), metrics.svg
// (loss and accuracy per epoch, loss and learning rate per step) and
// checkpoint_epoch_<n>.safetensors after every epoch.
// --schedule is NAME or NAME:KEY=VALUE,... (make_schedule, xgrad/optim/lr_scheduler.hpp, lists
// the keys and defaults): constant, step, multistep, exponential, linear, cosine (the default)
// and onecycle set the rate of every step over the whole run, e.g. cosine:warmup=200 or
// onecycle:max_lr=0.01,pct_start=0.25; plateau (xgrad/optim/reduce_lr_on_plateau.hpp) lowers
// it after epochs whose test loss did not improve, e.g. plateau:factor=0.5,patience=1.
// --resume continues a run from one of its checkpoints exactly where it stopped; --init-from
// starts a new run (fresh optimizer, epoch 0) from the weights of a checkpoint or of a
// PyTorch state_dict saved as safetensors (fine-tuning; docs/interop.md). With --summary the
// run ends with machine-readable lines (bench/train_compare and bench/scaling read them).
//
// The program is the model (common/fashion_model.hpp), its command line, and the library's
// training loop (xgrad/train/trainer.hpp) set up from it.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <iomanip>
#include <iostream>
#include <memory>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>

#include "common/cli.hpp"
#include "common/fashion_model.hpp"
#include "xgrad/checked.hpp"
#include "xgrad/cpu_info.hpp"
#include "xgrad/distributed/comm.hpp"
#include "xgrad/distributed/data_parallel.hpp"
#include "xgrad/distributed/sync_batch_norm.hpp"
#include "xgrad/train.hpp"

namespace
{
    struct train_config
    {
        std::int64_t epochs = 2;
        std::int64_t batch_size = 64;
        double lr = 2e-3;
        std::string optimizer = "adamw";
        std::string schedule = "cosine"; // over the whole run, per step (plateau: per epoch)
        int threads = 0;                 // 0: xgrad's default
        std::string device = "cpu";
        std::filesystem::path data_dir = xgrad::data::default_fashion_mnist_dir;
        std::uint64_t seed = 0;
        std::filesystem::path out = "fashion_mnist_run";
        std::filesystem::path resume;    // empty: start from scratch
        std::filesystem::path init_from; // empty: weights from the seed
        std::string strip_prefix;        // removed from the names of init_from's tensors
        std::string on_non_finite = "stop";
        // Channels-last trains faster here (docs/training_performance.md).
        std::string data_format = "NHWC";
        std::string precision = "f32"; // bf16: mixed precision (fashion_model.hpp)
        std::int64_t limit = 0;        // > 0: train on the first `limit` images only
        std::int64_t test_limit = 0;   // > 0: evaluate on the first `test_limit` test images
        bool prefetch = true;
        std::int64_t workers = 1; // loader threads preparing batches
        bool distributed = false; // launched by MPI, or --distributed
        bool sync_bn = false;
        bool summary = false; // the machine-readable last line
        bool profile = false; // the profiler's table after the first epoch
    };

    // The ranges of the numeric flags (examples/common/cli.hpp parses them whole).
    constexpr std::int64_t max_epochs = 1000000;
    constexpr std::int64_t max_batch_size = 1000000;
    constexpr int max_threads = 65536;
    constexpr double max_lr = 1000;

    train_config parse(int argc, char** argv)
    {
        train_config c;
        xgrad::examples::arg_parser p("train_fashion_mnist",
                                      "Trains a small CNN on Fashion-MNIST and shows it learning: a progress bar, the "
                                      "loss and accuracy\nafter each epoch, metrics.csv, metrics.svg and a checkpoint "
                                      "per epoch in --out.");
        p.add_int("--epochs", c.epochs, 1, max_epochs, "N", "epochs to train");
        p.add_int("--batch-size", c.batch_size, 1, max_batch_size, "B", "images per batch (per process)");
        p.add_positive("--lr", c.lr, max_lr, "LR", "peak learning rate");
        p.add_choice("--optimizer", c.optimizer, {"sgd", "adam", "adamw", "rmsprop", "adagrad"},
                     "sgd: momentum 0.9, Nesterov; adamw: weight decay 0.01; rmsprop, adagrad: PyTorch's defaults");
        p.add_string("--schedule", c.schedule, "SPEC",
                     "learning rate per step over the run: NAME[:KEY=VALUE,...], NAME one of constant, step, "
                     "multistep, exponential, linear, cosine, onecycle, or plateau (per epoch, on the test loss); "
                     "keys in xgrad/optim/lr_scheduler.hpp (make_schedule)");
        p.add_int("--threads", c.threads, 1, max_threads, "T", "CPU threads (default: XGRAD_NUM_THREADS or all cores)");
        p.add_string("--device", c.device, "D", "cpu | cuda[:i]");
        p.add_path("--data-dir", c.data_dir, "DIR", "MNIST-format folder");
        p.add_uint("--seed", c.seed, 0, UINT64_MAX, "S", "seed of the weights and the batch order");
        p.add_path("--out", c.out, "DIR", "where metrics.csv, metrics.svg and the checkpoints go");
        p.add_path("--resume", c.resume, "FILE",
                   "continue from a checkpoint of a run with the same settings (more --epochs extend it)");
        p.add_path("--init-from", c.init_from, "FILE",
                   "start from the weights of a checkpoint or of a PyTorch state_dict saved as safetensors (cast to "
                   "the model's dtypes); the optimizer starts fresh");
        p.add_string("--strip-prefix", c.strip_prefix, "P",
                     "with --init-from: remove P from the start of the file's names first (e.g. \"module.\" for "
                     "a file saved from a wrapped PyTorch model)");
        p.add_choice("--format", c.data_format, {"NCHW", "NHWC"}, "activation layout (NHWC is the faster one)");
        p.add_choice("--on-non-finite", c.on_non_finite, {"stop", "skip"},
                     "a step whose loss or gradient is NaN or infinite stops the run (exit 1, the last "
                     "checkpoint the last good one) or is skipped");
        p.add_choice("--precision", c.precision, {"f32", "bf16"},
                     "bf16: mixed precision, convolutions with bfloat16 operands summed in float32 (AMX where the "
                     "processor has it), bfloat16 activations through batch norm and pooling, float32 master "
                     "weights");
        p.add_int("--limit", c.limit, 0, INT64_MAX, "N", "train on the first N training images only (0: all)");
        p.add_int("--test-limit", c.test_limit, 0, INT64_MAX, "N", "evaluate on the first N test images only (0: all)");
        bool no_prefetch = false;
        p.add_switch("--no-prefetch", no_prefetch, "prepare batches on the training thread");
        p.add_int("--workers", c.workers, 1, xgrad::data::loader_options::max_workers, "W",
                  "background threads preparing batches (each one batch at a time; the batches do not depend on it)");
        p.add_switch("--distributed", c.distributed,
                     "train data-parallel over the MPI job (implied when started by mpirun; alone, a job of one "
                     "process)");
        p.add_switch("--sync-bn", c.sync_bn,
                     "batch norm over the whole global batch (sync_batch_norm2d); needs a data-parallel run");
        p.add_switch("--summary", c.summary, "end with a machine-readable summary line (for bench/train_compare)");
        p.add_switch("--profile", c.profile,
                     "profile the first epoch: print where its time went, per op and kernel, forward and backward, "
                     "and write a Chrome trace (chrome://tracing, Perfetto) to --out/profile_trace.json");
        p.set_epilog("Data-parallel: mpirun -np K train_fashion_mnist --batch-size B ... trains on K * B images per "
                     "step,\nB per process. Set XGRAD_NUM_THREADS (or --threads) so that K * threads does not exceed "
                     "the cores.\n");
        p.parse(argc, argv);
        c.prefetch = !no_prefetch;
        c.distributed = c.distributed || xgrad::distributed::launched_by_mpi();
        // Converting to sync batch norm in one process would train as plain batch norm: refused
        // rather than silently meaning nothing.
        if (c.sync_bn && !c.distributed)
            p.usage_error("--sync-bn needs a data-parallel run (started by mpirun, or --distributed)");
        // A resumed run takes its weights from its checkpoint; other weights would be overwritten.
        if (!c.strip_prefix.empty() && c.init_from.empty())
            p.usage_error("--strip-prefix applies to the file of --init-from");
        if (!c.resume.empty() && !c.init_from.empty())
            p.usage_error("--init-from starts a new run and --resume continues one; give one of them");
        return c;
    }

    std::string fixed(double v, int digits)
    {
        std::ostringstream s;
        s << std::fixed << std::setprecision(digits) << v;
        return s.str();
    }

    /// --threads, or for a rank of a data-parallel job its share of the machine's cores: the
    /// processes of a job on one machine share its cores, so each takes its share unless told
    /// otherwise, and a setting that oversubscribes the cores is said.
    void set_threads(const train_config& c, std::ostream& log)
    {
        const int local = xgrad::distributed::local_process_count();
        const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
        const bool threads_set = c.threads > 0 || xgrad::num_threads_from_environment() > 0;
        if (c.threads > 0)
            xgrad::set_num_threads(c.threads);
        else if (!threads_set && local > 1)
        {
            xgrad::set_num_threads(std::max(1, cores / local));
            log << "threads: " << xgrad::get_num_threads() << " per process (" << local
                << " processes of this job share this machine's " << cores << " cores; --threads sets it)\n";
        }
        if (local > 1 && xgrad::get_num_threads() * local > cores)
            log << "warning: " << local << " processes x " << xgrad::get_num_threads() << " threads on " << cores
                << " cores: the cores are oversubscribed, which slows every rank (set --threads "
                << std::max(1, cores / local) << ")\n";
    }

    /// A longer run re-plans a decaying schedule: says where the learning rate jumps to when a
    /// run resumes with more --epochs than its checkpoint's run planned.
    void note_extended_schedule(const train_config& c, const xgrad::io::checkpoint_info& info,
                                const xgrad::train::trainer& t, const xgrad::optim::lr_schedule& schedule,
                                std::int64_t batches_per_epoch, std::ostream& log)
    {
        const auto planned = info.metadata.find("epochs");
        if (planned != info.metadata.end() && planned->second != std::to_string(c.epochs) && c.schedule != "constant")
        {
            const double next = schedule.lr_at(info.epoch * batches_per_epoch);
            log << "note: the checkpoint's run planned " << planned->second
                << (planned->second == "1" ? " epoch" : " epochs") << " and this one " << c.epochs << ": the "
                << c.schedule << " schedule now spans " << c.epochs << " epochs, so the learning rate goes ";
            if (!t.history().empty() && std::isfinite(t.history().back().lr))
                log << "from " << t.history().back().lr << " (epoch " << info.epoch << ") ";
            log << "to " << next << " (epoch " << info.epoch + 1 << "); a run started with --epochs " << c.epochs
                << " would differ\n";
        }
    }

    /// The run as configured: a pure function of the config (weights from generator(seed),
    /// each epoch's batch order from (seed, epoch), the learning rate from the global step),
    /// so --resume continues it exactly. Throws on bad settings, data or checkpoint.
    xgrad::train::fit_result train(const train_config& c, std::ostream& log, bool log_is_terminal)
    {
        namespace data = xgrad::data;
        namespace distributed = xgrad::distributed;
        if (c.data_format != "NCHW" && c.data_format != "NHWC")
            throw xgrad::invalid_argument("--format must be NCHW or NHWC, got '" + c.data_format + "'");
        set_threads(c, log);
        const xgrad::device dev = xgrad::parse_device(c.device);

        // Both sets are checked when they are read (an empty set, images of another size than
        // the model's input) rather than at the first batch or step.
        const auto train_data =
            std::make_shared<const data::image_dataset>(xgrad::examples::load_fashion_data(c.data_dir, true, c.limit));
        const auto test_data = std::make_shared<const data::image_dataset>(
            xgrad::examples::load_fashion_data(c.data_dir, false, c.test_limit));
        xgrad::generator gen(c.seed);
        std::shared_ptr<xgrad::nn::module> model = xgrad::examples::make_fashion_model(c.data_format, gen, c.precision);
        model->to(dev);
        if (!c.init_from.empty())
        {
            // Every tensor of the model must be in the file (strict): a partial match is more
            // likely another model than a fine-tuning start.
            xgrad::io::load_weights_options wo;
            wo.strip_prefix = c.strip_prefix;
            const auto loaded = xgrad::io::load_weights(c.init_from, *model, wo);
            log << "weights from " << c.init_from.string() << xgrad::examples::load_notes(loaded) << "\n";
        }
        // Data-parallel: the same construction on every rank, then rank 0's values broadcast
        // by the wrapper; the optimizer is made last, over the parameters of the final model.
        const distributed::process_group world = distributed::process_group::world();
        std::unique_ptr<distributed::distributed_data_parallel> ddp;
        if (c.distributed)
        {
            if (c.sync_bn)
                model = xgrad::nn::convert_sync_batch_norm(model, world);
            ddp = std::make_unique<distributed::distributed_data_parallel>(model, world);
        }
        auto opt = xgrad::optim::make_optimizer(c.optimizer, *model, c.lr);
        data::loader_options lo;
        lo.batch_size = c.batch_size;
        lo.shuffle = true;
        lo.seed = c.seed;
        lo.data_format = c.data_format;
        lo.prefetch = c.prefetch;
        lo.num_workers = c.workers;
        lo.num_replicas = world.size();
        lo.rank = world.rank();
        data::data_loader loader(train_data, lo);
        const std::int64_t total_steps = xgrad::checked_mul(c.epochs, loader.batches_per_epoch(),
                                                            "--epochs * batches per epoch");
        // Every rate a pure function of the step, or (plateau) of the test losses so far, whose
        // state each checkpoint holds.
        std::unique_ptr<xgrad::optim::lr_schedule> schedule;
        std::unique_ptr<xgrad::optim::reduce_lr_on_plateau> plateau;
        if (xgrad::optim::schedule_name(c.schedule) == "plateau")
            plateau = xgrad::optim::make_plateau(c.schedule, c.lr);
        else
            schedule = xgrad::optim::make_schedule(c.schedule, c.lr, total_steps);

        xgrad::train::trainer_options o;
        o.epochs = c.epochs;
        o.device = dev;
        o.out = c.out;
        o.schedule = schedule.get();
        o.on_non_finite = c.on_non_finite == "skip" ? xgrad::train::non_finite_policy::skip_step
                                                    : xgrad::train::non_finite_policy::stop;
        o.plateau = plateau.get(); // on the test loss (trainer_options::plateau_on)
        o.test_data = test_data;
        o.log = &log;
        o.log_is_terminal = log_is_terminal;
        o.data_parallel = ddp.get();
        const std::string ranks = std::to_string(world.size());
        o.plot_title = "xgrad: Fashion-MNIST CNN (" + c.data_format + ", " + std::string(opt->type_name()) +
                       ", batch " + std::to_string(c.batch_size) +
                       (c.distributed ? " x " + ranks + " ranks" + (c.sync_bn ? ", sync BN" : "") : "") + ")";
        // What a checkpoint must agree on to continue this run exactly.
        o.run_metadata = {{"data_format", c.data_format},
                          {"precision", c.precision},
                          {"seed", std::to_string(c.seed)},
                          {"batch_size", std::to_string(c.batch_size)},
                          {"lr", fixed(c.lr, 10)},
                          {"schedule", c.schedule},
                          {"epochs", std::to_string(c.epochs)},
                          {"limit", std::to_string(c.limit)},
                          {"ranks", ranks},
                          {"sync_bn", c.sync_bn ? "1" : "0"}};
        // --resume with more --epochs extends a run: the remaining steps follow the schedule of
        // the longer run (a cosine schedule's learning rate picks up where the longer run's
        // would be at that step, so the result differs from a run started with that count).
        o.extendable_metadata = {"epochs"};
        // --profile: recording from the first step to the end of the first epoch (its test pass
        // included), then the table and the trace; later epochs run unprofiled.
        std::optional<xgrad::profiler::scope> profiling;
        if (c.profile)
            o.on_epoch_end = [&](const xgrad::train::epoch_metrics&) {
                if (!profiling)
                    return;
                const xgrad::profiler::report report = profiling->report();
                profiling.reset();
                log << "\nprofile of the first epoch (" << report.rows.size()
                    << " rows; self: the time not spent in the ops and kernels it called):\n"
                    << xgrad::profiler::format_table(report, 30);
                if (world.rank() == 0)
                {
                    const std::filesystem::path trace = c.out / "profile_trace.json";
                    xgrad::train::write_chrome_trace(report, trace);
                    log << "trace (chrome://tracing, Perfetto): " << trace.string() << "\n\n";
                }
            };
        xgrad::train::trainer t(*model, *opt, loader, o);
        if (!c.resume.empty())
        {
            const auto info = t.resume(c.resume);
            log << "resumed from " << c.resume.string() << " after epoch " << info.epoch << "\n";
            if (schedule) // (a plateau schedule resumes its own state: nothing is re-planned)
                note_extended_schedule(c, info, t, *schedule, loader.batches_per_epoch(), log);
        }
        log << "model: " << model->describe() << "\n"
            << "parameters: " << xgrad::nn::count_parameters(*model) << ", training images: " << train_data->size
            << ", test images: " << test_data->size << ", batch size: " << c.batch_size
            << ", optimizer: " << opt->type_name() << " (lr " << c.lr << ", " << c.schedule
            << "), threads: " << xgrad::get_num_threads() << ", format: " << c.data_format
            << ", precision: " << c.precision << ", device: " << to_string(dev) << "\n"
            << "cpu kernels: " << xgrad::cpu_kernels_description() << "\n";
        if (c.precision == "bf16")
            if (const std::string notice = xgrad::bfloat16_notice(); !notice.empty())
                log << "note: " << notice << "\n";
        if (const std::string hint = xgrad::blas_performance_hint(); !hint.empty())
            log << "note: " << hint << "\n";
        if (ddp)
            log << "data-parallel: " << ranks << " processes, " << c.batch_size << " images each per step ("
                << xgrad::checked_mul(c.batch_size, world.size(), "--batch-size * processes") << " per step), "
                << (c.sync_bn ? "synchronised" : "per-process") << " batch norm\n";
        if (c.profile)
            profiling.emplace();
        xgrad::train::fit_result r = t.fit();
        if (ddp && c.summary)
        {
            // What the last step's gradient all-reduce cost (bench/scaling reads this line).
            const auto& s = ddp->last_stats();
            log << "communication ranks=" << ranks << " sync_bn=" << (c.sync_bn ? 1 : 0) << " buckets=" << s.buckets
                << " bytes_per_step=" << s.bytes << " comm_ms_per_step=" << 1e3 * s.communication_s
                << " wait_ms_per_step=" << 1e3 * s.wait_s << " overlapped=" << s.buckets_overlapped << "\n";
        }
        return r;
    }
}

int main(int argc, char** argv)
{
    const train_config config = parse(argc, argv);
    // Joins the job for a data-parallel run; if an exception ever unwinds past it, it ends the
    // whole job (the other ranks may be waiting in a collective this one will never join).
    std::optional<xgrad::distributed::environment> env;
    try
    {
        if (config.distributed)
            env.emplace(&argc, &argv);
        // Rank 0 alone prints; the others log into nothing.
        std::ostream discard(nullptr);
        std::ostream& out = xgrad::distributed::rank() == 0 ? std::cout : discard;
        // Under a launcher, a rank's stdout may be a terminal that Open MPI made for it while the
        // job's output goes to a file or a pipe: only a plain run draws the progress bar.
        const bool terminal = isatty(STDOUT_FILENO) != 0 && !xgrad::distributed::launched_by_mpi();
        const auto r = train(config, out, terminal);
        const auto& last = r.metrics.back();
        // The evaluate program built beside this one, by the path this one was started with
        // (neither is on PATH unless installed there).
        const std::filesystem::path self = argv[0];
        const std::filesystem::path evaluate = self.has_parent_path() ? self.parent_path() / "evaluate" : "evaluate";
        // The epoch lines' precision (two decimals), so the last figure reads as the last line's.
        std::ostringstream accuracy;
        accuracy << std::fixed << std::setprecision(2) << 100.0 * last.test_accuracy;
        out << "\ntest accuracy after " << last.epoch << (last.epoch == 1 ? " epoch: " : " epochs: ") << accuracy.str()
            << "%\n"
            << "metrics (CSV):   " << r.csv.string() << "\n"
            << "steps (CSV):     " << r.steps_csv.string() << "\n"
            << "plot (SVG):      " << r.plot.string() << "\n"
            << "checkpoint:      " << r.checkpoint.string() << "\n"
            << "evaluate it:     " << evaluate.string() << " --checkpoint " << r.checkpoint.string() << "\n";
        if (config.summary)
            out << "summary peer=xgrad images_per_s=" << r.images_per_s << " train_loss=" << last.train_loss
                << " test_acc=" << last.test_accuracy << " ranks=" << xgrad::distributed::world_size()
                << " sync_bn=" << (config.sync_bn ? 1 : 0) << "\n";
    }
    catch (const std::exception& e)
    {
        // In a data-parallel run the other ranks cannot go on without this one: the message,
        // with the rank, and the end of the whole job, instead of a hang.
        if (config.distributed && xgrad::distributed::is_initialized())
            xgrad::distributed::abort(std::string("train_fashion_mnist: error: ") + e.what());
        std::cerr << "train_fashion_mnist: error: " << e.what() << "\n";
        return 1;
    }
    return 0;
}
