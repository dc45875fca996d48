// Loads a checkpoint written by train_fashion_mnist and prints its test accuracy and the
// confusion matrix on the Fashion-MNIST test set.
//
//   evaluate --checkpoint FILE [--strip-prefix P] [--data-dir DIR] [--threads T] [--device cpu|cuda]
//            [--limit N]
//
// FILE is a checkpoint (its metadata says which activation layout the model was trained in)
// or any safetensors file holding the model's weights under its names, such as a PyTorch
// state_dict of the same model (docs/interop.md); dtypes are cast to the model's.
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <iomanip>
#include <iostream>
#include <memory>
#include <string>

#include "common/cli.hpp"
#include "common/fashion_model.hpp"
#include "xgrad/train/checkpoints.hpp"
#include "xgrad/train/evaluate.hpp"

int main(int argc, char** argv)
{
    std::filesystem::path checkpoint, data_dir = xgrad::data::default_fashion_mnist_dir;
    std::string device = "cpu", strip_prefix;
    int threads = 0;
    std::int64_t limit = 0;
    xgrad::examples::arg_parser p("evaluate",
                                  "Prints the test accuracy and the confusion matrix of a Fashion-MNIST model: a "
                                  "checkpoint of\ntrain_fashion_mnist, or the weights of the same model saved by "
                                  "PyTorch as safetensors.");
    p.add_path("--checkpoint", checkpoint, "FILE", "the model's weights (required)");
    p.add_string("--strip-prefix", strip_prefix, "P",
                 "remove P from the start of the file's names first (e.g. \"module.\" for a file saved from a "
                 "wrapped PyTorch model)");
    p.add_path("--data-dir", data_dir, "DIR", "MNIST-format folder");
    p.add_int("--threads", threads, 1, 65536, "T", "CPU threads (default: XGRAD_NUM_THREADS or all cores)");
    p.add_string("--device", device, "D", "cpu | cuda[:i]");
    p.add_int("--limit", limit, 0, INT64_MAX, "N", "evaluate on the first N test images only (0: all)");
    p.parse(argc, argv);
    if (checkpoint.empty())
        p.usage_error("--checkpoint is required");

    try
    {
        if (threads > 0)
            xgrad::set_num_threads(threads);
        const xgrad::device dev = xgrad::parse_device(device);
        // A checkpoint says which layout its run used (checked against the accepted layouts,
        // naming the file); the weights are the same in both, so a file without it (a PyTorch
        // state_dict) is evaluated channels-first.
        const xgrad::io::metadata_map metadata = xgrad::io::read_safetensors_metadata(checkpoint);
        const std::string fmt = metadata.count("data_format")
                                    ? xgrad::train::checkpoint_data_format(checkpoint, metadata)
                                    : std::string("NCHW");
        xgrad::generator gen(0); // the weights are replaced by the file's
        auto model = xgrad::examples::make_fashion_model(fmt, gen);
        model->to(dev);
        xgrad::io::load_weights_options wo;
        wo.strip_prefix = strip_prefix;
        const auto loaded = xgrad::io::load_weights(checkpoint, *model, wo);
        const auto epoch = loaded.metadata.find("epoch");
        const auto test = std::make_shared<const xgrad::data::image_dataset>(
            xgrad::examples::load_fashion_data(data_dir, false, limit));
        xgrad::train::evaluate_options eo;
        eo.device = dev;
        eo.data_format = fmt;
        const auto ev = xgrad::train::evaluate_classifier(*model, test, eo);

        std::cout << "checkpoint: " << checkpoint.string() << " ("
                  << (epoch != loaded.metadata.end() ? "epoch " + epoch->second + ", " : std::string()) << fmt << ")"
                  << xgrad::examples::load_notes(loaded) << "\n"
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
