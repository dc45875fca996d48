// The library's training loop on the device: the Fashion-MNIST run of
// tests/support/fashion_run_helpers.hpp with device "cuda" learns as it does on the CPU (the same run,
// within float tolerance of the losses).
#include "tests/backends/cuda/cuda_test_helpers.hpp"

#include <unistd.h>

#include <filesystem>
#include <sstream>
#include <string>

#include "tests/support/fashion_run_helpers.hpp"
#include "xgrad/data/idx.hpp"

namespace fs = std::filesystem;
using namespace cuda_test;

TEST_CASE("the Fashion-MNIST training run runs on cuda:0 and matches the CPU run")
{
    const fs::path data_dir = xgrad::data::default_fashion_mnist_dir;
    if (!fs::exists(data_dir / "train-images-idx3-ubyte.gz"))
    {
        MESSAGE("Fashion-MNIST is not installed at " << data_dir.string()
                                                     << " (Debian package dataset-fashion-mnist): skipped");
        return;
    }
    // The process id keeps concurrent runs of the test (other build folders) out of each other's files.
    const fs::path out = fs::temp_directory_path() / ("xgrad_test_cuda_training_" + std::to_string(::getpid()));
    fs::remove_all(out);
    const auto run = [&](const std::string& dev, const std::string& format) {
        fashion_run::config c;
        c.data_dir = data_dir;
        c.out = out / (dev + format);
        c.epochs = 1;
        c.batch_size = 32;
        c.lr = 2e-3;
        c.limit = 256;
        c.test_limit = 128;
        c.device = dev;
        c.data_format = format;
        std::ostringstream log;
        return fashion_run::run(c, log);
    };
    for (const std::string format : {"NCHW", "NHWC"})
    {
        CAPTURE(format);
        const auto on_cpu = run("cpu", format);
        const auto on_gpu = run("cuda", format);
        REQUIRE(on_gpu.metrics.size() == 1);
        // Same data, same initial weights, same order: the losses differ only by the
        // backends' rounding, compounded over 8 steps of an adaptive optimiser.
        CHECK(on_gpu.metrics[0].train_loss == doctest::Approx(on_cpu.metrics[0].train_loss).epsilon(2e-3));
        CHECK(on_gpu.metrics[0].test_loss == doctest::Approx(on_cpu.metrics[0].test_loss).epsilon(2e-3));
    }
    fs::remove_all(out);
}
