// Loads a checkpoint written by train_fashion_mnist and prints its test accuracy and the
// confusion matrix on the Fashion-MNIST test set.
//
//   evaluate --checkpoint FILE [--data-dir DIR] [--threads T] [--device cpu|cuda] [--limit N]
//
// The checkpoint's metadata says which activation layout the model was trained in.
#include <cstdint>
#include <cstdlib>
#include <iomanip>
#include <iostream>
#include <memory>
#include <string>

#include "common/cli.hpp"
#include "common/fashion_model.hpp"
#include "xgrad/train/checkpoints.hpp"
#include "xgrad/train/evaluate.hpp"

namespace
{
    const char* usage_text =
        "usage: evaluate --checkpoint FILE [--data-dir DIR] [--threads T] [--device D] [--limit N]\n"
        "  --threads T   CPU threads, 1 to 65536\n"
        "  --limit N     evaluate on the first N test images only (0: all, the default)\n";

    [[noreturn]] void usage_error(const std::string& message)
    {
        std::cerr << "evaluate: " << message << "\n\n" << usage_text;
        std::exit(2);
    }
}

int main(int argc, char** argv)
{
    std::string checkpoint, data_dir = xgrad::data::default_fashion_mnist_dir, device = "cpu";
    int threads = 0;
    std::int64_t limit = 0;
    for (int i = 1; i < argc; ++i)
    {
        const std::string flag = argv[i];
        if (flag == "-h" || flag == "--help")
        {
            std::cout << usage_text;
            return 0;
        }
        if (i + 1 >= argc)
            usage_error(flag + " needs a value");
        const std::string value = argv[++i];
        try
        {
            if (flag == "--checkpoint")
                checkpoint = value;
            else if (flag == "--data-dir")
                data_dir = value;
            else if (flag == "--device")
                device = value;
            else if (flag == "--threads")
                threads = static_cast<int>(xgrad::examples::parse_int_flag(flag, value, 1, 65536));
            else if (flag == "--limit")
                limit = xgrad::examples::parse_int_flag(flag, value, 0, INT64_MAX);
            else
                usage_error("unknown option '" + flag + "'");
        }
        catch (const xgrad::invalid_argument& e)
        {
            usage_error(e.what());
        }
    }
    if (checkpoint.empty())
        usage_error("--checkpoint is required");

    try
    {
        if (threads > 0)
            xgrad::set_num_threads(threads);
        const xgrad::device dev = xgrad::parse_device(device);
        // The layout is part of the model: read it (from the header only, checked against the
        // accepted layouts and naming the file) before building the model to load into.
        const std::string fmt = xgrad::train::checkpoint_data_format(checkpoint);
        xgrad::generator gen(0); // the weights are replaced by the checkpoint's
        auto model = xgrad::examples::make_fashion_model(fmt, gen);
        model->to(dev);
        const auto info = xgrad::io::load_checkpoint(checkpoint, *model);
        const auto test = std::make_shared<const xgrad::data::image_dataset>(
            xgrad::examples::load_fashion_data(data_dir, false, limit));
        xgrad::train::evaluate_options eo;
        eo.device = dev;
        eo.data_format = fmt;
        const auto ev = xgrad::train::evaluate_classifier(*model, test, eo);

        std::cout << "checkpoint: " << checkpoint << " (epoch " << info.epoch << ", " << fmt << ")\n"
                  << "test images: " << test->size << "\n"
                  << "test loss: " << std::fixed << std::setprecision(4) << ev.loss << "\n"
                  << "test accuracy: " << std::setprecision(2) << 100.0 * ev.accuracy << "%\n\n"
                  << "confusion matrix (rows: true class, columns: predicted class)\n";
        std::cout << std::setw(14) << "";
        for (int j = 0; j < 10; ++j)
            std::cout << std::setw(6) << j;
        std::cout << "  recall\n";
        for (int i = 0; i < 10; ++i)
        {
            std::int64_t total = 0;
            for (int j = 0; j < 10; ++j)
                total += ev.confusion[static_cast<std::size_t>(i)][static_cast<std::size_t>(j)];
            std::cout << std::setw(2) << i << " " << std::left << std::setw(11)
                      << xgrad::examples::fashion_mnist_classes[i] << std::right;
            for (int j = 0; j < 10; ++j)
                std::cout << std::setw(6) << ev.confusion[static_cast<std::size_t>(i)][static_cast<std::size_t>(j)];
            const double recall =
                total
                    ? 100.0 *
                          static_cast<double>(ev.confusion[static_cast<std::size_t>(i)][static_cast<std::size_t>(i)]) /
                          static_cast<double>(total)
                    : 0.0;
            std::cout << std::setw(7) << std::setprecision(1) << recall << "%\n";
        }
    }
    catch (const std::exception& e)
    {
        std::cerr << "evaluate: error: " << e.what() << "\n";
        return 1;
    }
    return 0;
}
