#pragma once
// The Fashion-MNIST training run behind examples/train_fashion_mnist and examples/evaluate,
// kept out of main() so that the tests can run it (resume equals an uninterrupted run; the
// loss falls).
//
// A run is a pure function of its config: the model's initial weights come from
// generator(seed), each epoch's batch order from (seed, epoch), and the learning rate from the
// global step, so a run resumed from the checkpoint of epoch k computes exactly what the
// uninterrupted run computes after epoch k (with the same thread count).
#include <cstdint>
#include <filesystem>
#include <iosfwd>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/plot.hpp"
#include "xgrad/layers.hpp"
#include "xgrad/xgrad.hpp"

namespace xgrad::examples
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
        std::filesystem::path resume;    // empty: start from scratch
        std::string data_format = "NCHW";
        std::int64_t limit = 0;          // > 0: train on the first `limit` images only
        std::int64_t test_limit = 0;     // > 0: evaluate on the first `test_limit` test images
        bool prefetch = true;
    };

    /// conv3x3(1->32)+BN+ReLU+maxpool2, conv3x3(32->64)+BN+ReLU+maxpool2, flatten,
    /// linear(64*7*7 -> 128)+ReLU, linear(128 -> 10), for 28x28 single-channel images.
    std::shared_ptr<nn::sequential> make_fashion_model(const std::string& data_format, generator& gen);

    struct evaluation
    {
        double loss = 0, accuracy = 0;
        std::vector<std::vector<std::int64_t>> confusion; // [true][predicted]
    };
    /// Mean cross-entropy, accuracy and confusion matrix of `model` (in eval mode) on `data`.
    /// The model's training/eval mode is restored on return, also when an exception leaves.
    evaluation evaluate(nn::module& model, std::shared_ptr<const xgrad::data::image_dataset> data,
                        const std::string& data_format, device dev, std::int64_t batch_size = 500);

    struct train_result
    {
        std::vector<epoch_metrics> metrics; // every epoch so far, earlier runs' included on resume
        double images_per_s = 0;            // training images per second over this run's epochs
        std::filesystem::path csv, plot, checkpoint;
        std::int64_t first_epoch = 0;       // epochs already done when this run started
    };

    /// Trains as configured, printing progress and per-epoch summaries to `log` (a progress
    /// bar when `log` is the terminal). Writes into config.out: metrics.csv, metrics.svg and
    /// checkpoint_epoch_<n>.safetensors after every epoch. Throws on bad configuration, data or
    /// checkpoint (naming the file and the problem).
    train_result train(const train_config& config, std::ostream& log, bool log_is_terminal);

    /// The checkpoint file of epoch n in `out`.
    std::filesystem::path checkpoint_path(const std::filesystem::path& out, std::int64_t epoch);

    extern const char* const fashion_mnist_classes[10];

    /// OpenBLAS (xgrad's GEMM) reads OPENBLAS_THREAD_TIMEOUT once, when the library is loaded:
    /// for how long its worker threads spin (calling sched_yield) after each GEMM before they
    /// sleep. In a training step GEMMs alternate with xgrad's own parallel kernels, and with the
    /// default timeout the spinning threads take the cores from xgrad's pool (measured on the
    /// 2-core development machine: 868 images/s by default, 1153 with a timeout of 2^4 cycles).
    /// When the variable is unset, this sets it to 4 and restarts the program once (execv of
    /// /proc/self/exe with the same arguments); it returns when nothing needs doing or the
    /// restart is impossible. Call it first thing in main.
    void restart_with_short_blas_spin(char** argv);
}
