// Trains a small CNN on Fashion-MNIST with xgrad and shows it learning.
//
//   train_fashion_mnist [--epochs N] [--batch-size B] [--lr LR] [--optimizer sgd|adam|adamw]
//                       [--schedule constant|step|cosine] [--threads T] [--device cpu|cuda]
//                       [--data-dir DIR] [--seed S] [--out DIR] [--resume CHECKPOINT]
//                       [--init-from WEIGHTS]
//                       [--format NCHW|NHWC] [--limit N] [--test-limit N] [--no-prefetch]
//                       [--distributed] [--sync-bn]
//
// Data-parallel: `mpirun -np K train_fashion_mnist ...` (or --distributed) trains one model
// on K processes, each on its share of every step's K * batch-size images (--batch-size is per
// process), with the gradients averaged over the processes (distributed_data_parallel); it
// computes what one process computes with --batch-size K * B, except that each process's batch
// norm sees its own B images (--sync-bn makes them share the statistics of all K * B). Rank 0
// alone prints and writes the files; an error on any rank stops the whole job with its message.
//
// Prints a progress bar per epoch (plain lines when the output is not a terminal), the train
// and test loss and accuracy after each epoch, and writes into --out: metrics.csv, metrics.svg
// (loss and accuracy per epoch) and checkpoint_epoch_<n>.safetensors after every epoch.
// --resume continues a run from one of its checkpoints exactly where it stopped; --init-from
// starts a new run (fresh optimizer, epoch 0) from the weights of a checkpoint or of a
// PyTorch state_dict saved as safetensors (fine-tuning; docs/interop.md). The last
// line is a machine-readable summary (bench/train_compare reads it).
//
// The program is the model (common/fashion_model.hpp), its command line, and the library's
// training loop (xgrad/train/trainer.hpp) set up from it.
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <iomanip>
#include <iostream>
#include <memory>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>

#include "common/cli.hpp"
#include "common/fashion_model.hpp"
#include "xgrad/checked.hpp"
#include "xgrad/distributed/comm.hpp"
#include "xgrad/distributed/data_parallel.hpp"
#include "xgrad/layers/sync_batch_norm.hpp"
#include "xgrad/train.hpp"

namespace
{
    using xgrad::examples::parse_int_flag;
    using xgrad::examples::parse_positive_flag;
    using xgrad::examples::parse_uint_flag;

    struct train_config
    {
        std::int64_t epochs = 2;
        std::int64_t batch_size = 64;
        double lr = 2e-3;
        std::string optimizer = "adamw";
        std::string schedule = "cosine"; // over the whole run, per step
        int threads = 0;                 // 0: xgrad's default
        std::string device = "cpu";
        std::filesystem::path data_dir = xgrad::data::default_fashion_mnist_dir;
        std::uint64_t seed = 0;
        std::filesystem::path out = "fashion_mnist_run";
        std::filesystem::path resume;    // empty: start from scratch
        std::filesystem::path init_from; // empty: weights from the seed
        std::string data_format = "NCHW";
        std::int64_t limit = 0;      // > 0: train on the first `limit` images only
        std::int64_t test_limit = 0; // > 0: evaluate on the first `test_limit` test images
        bool prefetch = true;
        bool distributed = false; // launched by MPI, or --distributed
        bool sync_bn = false;
    };

    const char* usage_text =
        "usage: train_fashion_mnist [options]\n"
        "  --epochs N          epochs to train, 1 to 1000000 (default 2)\n"
        "  --batch-size B      images per batch, 1 to 1000000 (default 64)\n"
        "  --lr LR             peak learning rate, in (0, 1000] (default 0.002)\n"
        "  --optimizer NAME    sgd (momentum 0.9, Nesterov) | adam | adamw (default adamw)\n"
        "  --schedule NAME     constant | step | cosine (default cosine, per step over the run)\n"
        "  --threads T         CPU threads, 1 to 65536 (default: XGRAD_NUM_THREADS or all cores)\n"
        "  --device D          cpu | cuda[:i] (default cpu)\n"
        "  --data-dir DIR      MNIST-format folder (default /usr/share/datasets/fashion-mnist)\n"
        "  --seed S            seed of the weights and the batch order, 0 to 2^64 - 1 (default 0)\n"
        "  --out DIR           where metrics.csv, metrics.svg and checkpoints go (default fashion_mnist_run)\n"
        "  --resume FILE       continue from a checkpoint of a run with the same settings\n"
        "  --init-from FILE    start from the weights of a checkpoint or of a PyTorch state_dict saved\n"
        "                      as safetensors (cast to the model's dtypes); the optimizer starts fresh\n"
        "  --format F          NCHW | NHWC activation layout (default NCHW)\n"
        "  --limit N           train on the first N training images only (0: all, the default)\n"
        "  --test-limit N      evaluate on the first N test images only (0: all, the default)\n"
        "  --no-prefetch       prepare batches on the training thread\n"
        "  --distributed       train data-parallel over the MPI job (implied when started by mpirun;\n"
        "                      alone, a job of one process)\n"
        "  --sync-bn           batch norm over the whole global batch (sync_batch_norm2d); needs a\n"
        "                      data-parallel run\n"
        "Data-parallel: mpirun -np K train_fashion_mnist --batch-size B ... trains on K * B images\n"
        "per step, B per process (--batch-size is per process). Set XGRAD_NUM_THREADS (or --threads)\n"
        "so that K * threads does not exceed the cores.\n";

    [[noreturn]] void usage_error(const std::string& message)
    {
        std::cerr << "train_fashion_mnist: " << message << "\n\n" << usage_text;
        std::exit(2);
    }

    // The ranges of the numeric flags (examples/common/cli.hpp parses them whole).
    constexpr std::int64_t max_epochs = 1000000;
    constexpr std::int64_t max_batch_size = 1000000;
    constexpr std::int64_t max_threads = 65536;
    constexpr double max_lr = 1000;

    train_config parse(int argc, char** argv)
    {
        train_config c;
        for (int i = 1; i < argc; ++i)
        {
            std::string flag = argv[i], value;
            if (flag == "-h" || flag == "--help")
            {
                std::cout << usage_text;
                std::exit(0);
            }
            if (flag == "--no-prefetch")
            {
                c.prefetch = false;
                continue;
            }
            if (flag == "--distributed" || flag == "--sync-bn")
            {
                (flag == "--distributed" ? c.distributed : c.sync_bn) = true;
                continue;
            }
            if (const auto eq = flag.find('='); eq != std::string::npos)
            {
                value = flag.substr(eq + 1);
                flag = flag.substr(0, eq);
            }
            else if (flag.rfind("--", 0) != 0)
                usage_error("unexpected argument '" + flag + "' (options start with --)");
            else if (i + 1 < argc)
                value = argv[++i];
            else
                usage_error(flag + " needs a value");

            try
            {
                if (flag == "--epochs")
                    c.epochs = parse_int_flag(flag, value, 1, max_epochs);
                else if (flag == "--batch-size")
                    c.batch_size = parse_int_flag(flag, value, 1, max_batch_size);
                else if (flag == "--lr")
                    c.lr = parse_positive_flag(flag, value, max_lr);
                else if (flag == "--optimizer")
                    c.optimizer = value;
                else if (flag == "--schedule")
                    c.schedule = value;
                else if (flag == "--threads")
                    c.threads = static_cast<int>(parse_int_flag(flag, value, 1, max_threads));
                else if (flag == "--device")
                    c.device = value;
                else if (flag == "--data-dir")
                    c.data_dir = value;
                else if (flag == "--seed")
                    c.seed = parse_uint_flag(flag, value, 0, UINT64_MAX);
                else if (flag == "--out")
                    c.out = value;
                else if (flag == "--resume")
                    c.resume = value;
                else if (flag == "--init-from")
                    c.init_from = value;
                else if (flag == "--format")
                    c.data_format = value;
                else if (flag == "--limit")
                    c.limit = parse_int_flag(flag, value, 0, INT64_MAX);
                else if (flag == "--test-limit")
                    c.test_limit = parse_int_flag(flag, value, 0, INT64_MAX);
                else
                    usage_error("unknown option '" + flag + "'");
            }
            catch (const xgrad::invalid_argument& e)
            {
                usage_error(e.what());
            }
        }
        c.distributed = c.distributed || xgrad::distributed::launched_by_mpi();
        // Converting to sync batch norm in one process would train as plain batch norm: refused
        // rather than silently meaning nothing.
        if (c.sync_bn && !c.distributed)
            usage_error("--sync-bn needs a data-parallel run (started by mpirun, or --distributed)");
        // A resumed run takes its weights from its checkpoint; other weights would be overwritten.
        if (!c.resume.empty() && !c.init_from.empty())
            usage_error("--init-from starts a new run and --resume continues one; give one of them");
        return c;
    }

    std::string fixed(double v, int digits)
    {
        std::ostringstream s;
        s << std::fixed << std::setprecision(digits) << v;
        return s.str();
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
        if (c.threads > 0)
            xgrad::set_num_threads(c.threads);
        const xgrad::device dev = xgrad::parse_device(c.device);

        // Both sets are checked when they are read (an empty set, images of another size than
        // the model's input) rather than at the first batch or step.
        const auto train_data =
            std::make_shared<const data::image_dataset>(xgrad::examples::load_fashion_data(c.data_dir, true, c.limit));
        const auto test_data = std::make_shared<const data::image_dataset>(
            xgrad::examples::load_fashion_data(c.data_dir, false, c.test_limit));
        xgrad::generator gen(c.seed);
        std::shared_ptr<xgrad::nn::module> model = xgrad::examples::make_fashion_model(c.data_format, gen);
        model->to(dev);
        if (!c.init_from.empty())
        {
            // Every tensor of the model must be in the file (strict): a partial match is more
            // likely another model than a fine-tuning start.
            const auto loaded = xgrad::io::load_weights(c.init_from, *model);
            log << "weights from " << c.init_from.string()
                << (loaded.converted.empty()
                        ? ""
                        : " (" + std::to_string(loaded.converted.size()) + " tensors cast to the model's dtypes)")
                << "\n";
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
        lo.num_replicas = world.size();
        lo.rank = world.rank();
        data::data_loader loader(train_data, lo);
        const auto schedule = xgrad::optim::make_schedule(
            c.schedule, c.lr, xgrad::checked_mul(c.epochs, loader.batches_per_epoch(), "--epochs * batches per epoch"));

        xgrad::train::trainer_options o;
        o.epochs = c.epochs;
        o.device = dev;
        o.out = c.out;
        o.schedule = schedule.get();
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
                          {"seed", std::to_string(c.seed)},
                          {"batch_size", std::to_string(c.batch_size)},
                          {"lr", fixed(c.lr, 10)},
                          {"schedule", c.schedule},
                          {"epochs", std::to_string(c.epochs)},
                          {"limit", std::to_string(c.limit)},
                          {"ranks", ranks},
                          {"sync_bn", c.sync_bn ? "1" : "0"}};
        xgrad::train::trainer t(*model, *opt, loader, o);
        if (!c.resume.empty())
        {
            const auto info = t.resume(c.resume);
            log << "resumed from " << c.resume.string() << " after epoch " << info.epoch << "\n";
        }
        log << "model: " << model->describe() << "\n"
            << "parameters: " << xgrad::nn::count_parameters(*model) << ", training images: " << train_data->size
            << ", test images: " << test_data->size << ", batch size: " << c.batch_size
            << ", optimizer: " << opt->type_name() << " (lr " << c.lr << ", " << c.schedule
            << "), threads: " << xgrad::get_num_threads() << ", format: " << c.data_format
            << ", device: " << to_string(dev) << "\n";
        if (ddp)
            log << "data-parallel: " << ranks << " processes, " << c.batch_size << " images each per step ("
                << xgrad::checked_mul(c.batch_size, world.size(), "--batch-size * processes") << " per step), "
                << (c.sync_bn ? "synchronised" : "per-process") << " batch norm\n";
        xgrad::train::fit_result r = t.fit();
        if (ddp)
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
        const auto r = train(config, out, isatty(STDOUT_FILENO) != 0);
        const auto& last = r.metrics.back();
        out << "\ntest accuracy after " << last.epoch << " epochs: " << 100.0 * last.test_accuracy << "%\n"
            << "metrics (CSV):   " << r.csv.string() << "\n"
            << "plot (SVG):      " << r.plot.string() << "\n"
            << "checkpoint:      " << r.checkpoint.string() << "\n"
            << "evaluate it:     evaluate --checkpoint " << r.checkpoint.string() << "\n"
            << "summary peer=xgrad images_per_s=" << r.images_per_s << " train_loss=" << last.train_loss
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
