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
#include <unistd.h>

#include <cstdlib>
#include <iostream>
#include <stdexcept>
#include <string>

#include "common/training.hpp"

namespace
{
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

    xgrad::examples::train_config parse(int argc, char** argv)
    {
        xgrad::examples::train_config c;
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

            if (flag == "--epochs") c.epochs = to_int(flag, value);
            else if (flag == "--batch-size") c.batch_size = to_int(flag, value);
            else if (flag == "--lr") c.lr = to_double(flag, value);
            else if (flag == "--optimizer") c.optimizer = value;
            else if (flag == "--schedule") c.schedule = value;
            else if (flag == "--threads")
            {
                const std::int64_t t = to_int(flag, value);
                if (t < 1 || t > 65536)
                    usage_error("--threads expects an integer in [1, 65536], got '" + value + "'");
                c.threads = static_cast<int>(t);
            }
            else if (flag == "--device") c.device = value;
            else if (flag == "--data-dir") c.data_dir = value;
            else if (flag == "--seed") c.seed = static_cast<std::uint64_t>(to_int(flag, value));
            else if (flag == "--out") c.out = value;
            else if (flag == "--resume") c.resume = value;
            else if (flag == "--format") c.data_format = value;
            else if (flag == "--limit") c.limit = to_int(flag, value);
            else if (flag == "--test-limit") c.test_limit = to_int(flag, value);
            else usage_error("unknown option '" + flag + "'");
        }
        return c;
    }
}

int main(int argc, char** argv)
{
    xgrad::examples::restart_with_short_blas_spin(argv);
    const xgrad::examples::train_config config = parse(argc, argv);
    try
    {
        const auto r = xgrad::examples::train(config, std::cout, isatty(STDOUT_FILENO) != 0);
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
