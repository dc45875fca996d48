// Trains a small CNN on Fashion-MNIST with xgrad and shows it learning.
//
//   train_fashion_mnist [--epochs N] [--batch-size B] [--lr LR] [--optimizer sgd|adam|adamw]
//                       [--schedule constant|step|cosine] [--threads T] [--device cpu|cuda]
//                       [--data-dir DIR] [--seed S] [--out DIR] [--resume CHECKPOINT]
//                       [--format NCHW|NHWC] [--limit N] [--test-limit N] [--no-prefetch]
//
// Prints a progress bar per epoch (plain lines when the output is not a terminal), the train
// and test loss and accuracy after each epoch, and writes into --out: metrics.csv, metrics.svg
// (loss and accuracy per epoch) and checkpoint_epoch_<n>.safetensors after every epoch.
// --resume continues a run from one of its checkpoints exactly where it stopped. The last
// line is a machine-readable summary (bench/train_compare reads it).
//
// The program is the model (common/fashion_model.hpp), its command line, and the library's
// training loop (xgrad/train/trainer.hpp) set up from it.
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <iomanip>
#include <iostream>
#include <sstream>
#include <stdexcept>
#include <string>

#include "common/fashion_model.hpp"
#include "xgrad/train.hpp"

namespace
{
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
        std::filesystem::path resume; // empty: start from scratch
        std::string data_format = "NCHW";
        std::int64_t limit = 0;      // > 0: train on the first `limit` images only
        std::int64_t test_limit = 0; // > 0: evaluate on the first `test_limit` test images
        bool prefetch = true;
    };

    const char* usage_text =
        "usage: train_fashion_mnist [options]\n"
        "  --epochs N          epochs to train (default 2)\n"
        "  --batch-size B      images per batch (default 64)\n"
        "  --lr LR             peak learning rate (default 0.002)\n"
        "  --optimizer NAME    sgd (momentum 0.9, Nesterov) | adam | adamw (default adamw)\n"
        "  --schedule NAME     constant | step | cosine (default cosine, per step over the run)\n"
        "  --threads T         CPU threads (default: XGRAD_NUM_THREADS or all cores)\n"
        "  --device D          cpu | cuda[:i] (default cpu)\n"
        "  --data-dir DIR      MNIST-format folder (default /usr/share/datasets/fashion-mnist)\n"
        "  --seed S            seed of the weights and the batch order (default 0)\n"
        "  --out DIR           where metrics.csv, metrics.svg and checkpoints go (default fashion_mnist_run)\n"
        "  --resume FILE       continue from a checkpoint of a run with the same settings\n"
        "  --format F          NCHW | NHWC activation layout (default NCHW)\n"
        "  --limit N           train on the first N training images only\n"
        "  --test-limit N      evaluate on the first N test images only\n"
        "  --no-prefetch       prepare batches on the training thread\n";

    [[noreturn]] void usage_error(const std::string& message)
    {
        std::cerr << "train_fashion_mnist: " << message << "\n\n" << usage_text;
        std::exit(2);
    }

    std::int64_t to_int(const std::string& flag, const std::string& v)
    {
        try
        {
            std::size_t used = 0;
            const long long n = std::stoll(v, &used);
            if (used == v.size())
                return n;
        }
        catch (const std::exception&)
        {
        }
        usage_error(flag + " expects an integer, got '" + v + "'");
    }

    double to_double(const std::string& flag, const std::string& v)
    {
        try
        {
            std::size_t used = 0;
            const double d = std::stod(v, &used);
            if (used == v.size())
                return d;
        }
        catch (const std::exception&)
        {
        }
        usage_error(flag + " expects a number, got '" + v + "'");
    }

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
            if (const auto eq = flag.find('='); eq != std::string::npos)
            {
                value = flag.substr(eq + 1);
                flag = flag.substr(0, eq);
            }
            else if (i + 1 < argc)
                value = argv[++i];
            else
                usage_error(flag + " needs a value");

            if (flag == "--epochs")
                c.epochs = to_int(flag, value);
            else if (flag == "--batch-size")
                c.batch_size = to_int(flag, value);
            else if (flag == "--lr")
                c.lr = to_double(flag, value);
            else if (flag == "--optimizer")
                c.optimizer = value;
            else if (flag == "--schedule")
                c.schedule = value;
            else if (flag == "--threads")
            {
                const std::int64_t t = to_int(flag, value);
                if (t < 1 || t > 65536)
                    usage_error("--threads expects an integer in [1, 65536], got '" + value + "'");
                c.threads = static_cast<int>(t);
            }
            else if (flag == "--device")
                c.device = value;
            else if (flag == "--data-dir")
                c.data_dir = value;
            else if (flag == "--seed")
                c.seed = static_cast<std::uint64_t>(to_int(flag, value));
            else if (flag == "--out")
                c.out = value;
            else if (flag == "--resume")
                c.resume = value;
            else if (flag == "--format")
                c.data_format = value;
            else if (flag == "--limit")
                c.limit = to_int(flag, value);
            else if (flag == "--test-limit")
                c.test_limit = to_int(flag, value);
            else
                usage_error("unknown option '" + flag + "'");
        }
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
        if (c.epochs < 1)
            throw xgrad::invalid_argument("--epochs must be at least 1, got " + std::to_string(c.epochs));
        if (c.batch_size < 1)
            throw xgrad::invalid_argument("--batch-size must be at least 1, got " + std::to_string(c.batch_size));
        if (!(c.lr > 0))
            throw xgrad::invalid_argument("--lr must be positive, got " + std::to_string(c.lr));
        if (c.data_format != "NCHW" && c.data_format != "NHWC")
            throw xgrad::invalid_argument("--format must be NCHW or NHWC, got " + c.data_format);
        if (c.threads > 0)
            xgrad::set_num_threads(c.threads);
        const xgrad::device dev = xgrad::parse_device(c.device);

        const auto train_data =
            std::make_shared<const data::image_dataset>(data::load_mnist(c.data_dir, true, c.limit));
        const auto test_data =
            std::make_shared<const data::image_dataset>(data::load_mnist(c.data_dir, false, c.test_limit));
        xgrad::generator gen(c.seed);
        auto model = xgrad::examples::make_fashion_model(c.data_format, gen);
        model->to(dev);
        auto opt = xgrad::optim::make_optimizer(c.optimizer, *model, c.lr);
        data::loader_options lo;
        lo.batch_size = c.batch_size;
        lo.shuffle = true;
        lo.seed = c.seed;
        lo.data_format = c.data_format;
        lo.prefetch = c.prefetch;
        data::data_loader loader(train_data, lo);
        const auto schedule = xgrad::optim::make_schedule(c.schedule, c.lr, c.epochs * loader.batches_per_epoch());

        xgrad::train::trainer_options o;
        o.epochs = c.epochs;
        o.device = dev;
        o.out = c.out;
        o.schedule = schedule.get();
        o.test_data = test_data;
        o.log = &log;
        o.log_is_terminal = log_is_terminal;
        o.plot_title = "xgrad: Fashion-MNIST CNN (" + c.data_format + ", " + std::string(opt->type_name()) +
                       ", batch " + std::to_string(c.batch_size) + ")";
        // What a checkpoint must agree on to continue this run exactly.
        o.run_metadata = {{"data_format", c.data_format},
                          {"seed", std::to_string(c.seed)},
                          {"batch_size", std::to_string(c.batch_size)},
                          {"lr", fixed(c.lr, 10)},
                          {"schedule", c.schedule},
                          {"epochs", std::to_string(c.epochs)},
                          {"limit", std::to_string(c.limit)}};
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
        return t.fit();
    }
}

int main(int argc, char** argv)
{
    const train_config config = parse(argc, argv);
    try
    {
        const auto r = train(config, std::cout, isatty(STDOUT_FILENO) != 0);
        const auto& last = r.metrics.back();
        std::cout << "\ntest accuracy after " << last.epoch << " epochs: " << 100.0 * last.test_accuracy << "%\n"
                  << "metrics (CSV):   " << r.csv.string() << "\n"
                  << "plot (SVG):      " << r.plot.string() << "\n"
                  << "checkpoint:      " << r.checkpoint.string() << "\n"
                  << "evaluate it:     evaluate --checkpoint " << r.checkpoint.string() << "\n"
                  << "summary peer=xgrad images_per_s=" << r.images_per_s << " train_loss=" << last.train_loss
                  << " test_acc=" << last.test_accuracy << "\n";
    }
    catch (const std::exception& e)
    {
        std::cerr << "train_fashion_mnist: error: " << e.what() << "\n";
        return 1;
    }
    return 0;
}
