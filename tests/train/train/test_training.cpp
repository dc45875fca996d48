// Whole training runs through the library's trainer (xgrad/train/trainer.hpp), set up as the
// Fashion-MNIST example sets it up (tests/support/fashion_run_helpers.hpp): the loss falls on a small
// slice of the data, a run resumed from a checkpoint computes exactly what the uninterrupted
// run computes, and checkpoints of other runs are refused.
#include <doctest/doctest.h>

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>

#include "tests/support/fashion_run_helpers.hpp"
#include "xgrad/xgrad.hpp"

namespace fs = std::filesystem;
using namespace xgrad;

namespace
{
    /// A fresh folder under the system's temporary directory, removed at the end of the scope.
    struct temp_dir
    {
        fs::path path;
        explicit temp_dir(const std::string& name)
        {
            path = fs::temp_directory_path() / ("xgrad_test_training_" + name + "_" + std::to_string(::getpid()));
            fs::remove_all(path);
            fs::create_directories(path);
        }
        ~temp_dir() { fs::remove_all(path); }
    };

    /// A learnable 10-class MNIST-format dataset written as IDX files: class k is a bright 6x6
    /// square at a class-specific position of a 28x28 image, plus uniform noise. A CNN
    /// separates the classes easily, so a few epochs must lower the loss.
    void write_synthetic_mnist(const fs::path& dir, std::int64_t train_n, std::int64_t test_n)
    {
        generator gen(1234);
        const auto write = [&](const std::string& prefix, std::int64_t n) {
            data::idx_array images, labels;
            images.shape = {n, 28, 28};
            labels.shape = {n};
            images.data.resize(static_cast<std::size_t>(n * 28 * 28));
            labels.data.resize(static_cast<std::size_t>(n));
            for (std::int64_t i = 0; i < n; ++i)
            {
                const auto k = static_cast<std::uint8_t>(gen.below(10));
                labels.data[static_cast<std::size_t>(i)] = k;
                const std::int64_t r0 = 2 + 4 * (k / 5) * 3, c0 = 2 + 5 * (k % 5);
                for (std::int64_t r = 0; r < 28; ++r)
                    for (std::int64_t c = 0; c < 28; ++c)
                    {
                        const bool on = r >= r0 && r < r0 + 6 && c >= c0 && c < c0 + 6;
                        images.data[static_cast<std::size_t>((i * 28 + r) * 28 + c)] =
                            static_cast<std::uint8_t>((on ? 160 : 0) + gen.below(80));
                    }
            }
            data::write_idx(dir / (prefix + "-images-idx3-ubyte.gz"), images);
            data::write_idx(dir / (prefix + "-labels-idx1-ubyte.gz"), labels);
        };
        write("train", train_n);
        write("t10k", test_n);
    }

    std::string file_bytes(const fs::path& p)
    {
        std::ifstream in(p, std::ios::binary);
        REQUIRE_MESSAGE(in, "cannot open " << p.string());
        return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
    }

    fashion_run::config small_config(const fs::path& data_dir, const fs::path& out)
    {
        fashion_run::config c;
        c.data_dir = data_dir;
        c.out = out;
        c.epochs = 2;
        c.batch_size = 32;
        c.lr = 2e-3;
        c.limit = 256;
        c.test_limit = 200;
        return c;
    }
}

TEST_CASE("training on a small slice of Fashion-MNIST lowers the loss")
{
    temp_dir tmp("loss");
    fs::path data_dir = data::default_fashion_mnist_dir;
    if (!fs::exists(data_dir / "train-images-idx3-ubyte.gz"))
    {
        MESSAGE("Fashion-MNIST is not installed at "
                << data_dir.string()
                << " (Debian package dataset-fashion-mnist): using a synthetic MNIST-format dataset");
        data_dir = tmp.path / "data";
        fs::create_directories(data_dir);
        write_synthetic_mnist(data_dir, 1024, 200);
    }
    fashion_run::config c = small_config(data_dir, tmp.path / "run");
    c.epochs = 3;
    c.limit = 1024;
    c.test_limit = 500;
    std::ostringstream log;
    const auto r = fashion_run::run(c, log);

    REQUIRE(r.metrics.size() == 3);
    // The first epoch's mean loss includes the untrained start (about ln 10 = 2.30); two more
    // epochs over the same 1024 images must bring it well below. Thresholds are loose on
    // purpose: they separate learning from not learning, not one optimiser from another.
    CHECK(r.metrics[0].train_loss < 2.5);
    CHECK(r.metrics[2].train_loss < 0.8 * r.metrics[0].train_loss);
    CHECK(r.metrics[2].test_loss < r.metrics[0].test_loss);
    // Chance is 10%; 1024 images of Fashion-MNIST give a small CNN well over 60%.
    CHECK(r.metrics[2].test_accuracy > 0.6);
    for (const auto& m : r.metrics)
    {
        CHECK(std::isfinite(m.train_loss));
        CHECK(m.seconds > 0);
    }
    // Everything the trainer promises is on disk.
    CHECK(fs::exists(r.csv));
    CHECK(fs::exists(r.plot));
    for (int e = 1; e <= 3; ++e)
        CHECK(fs::exists(train::checkpoint_path(c.out, e)));
    CHECK(train::read_metrics_csv(r.csv).size() == 3);
    // Non-terminal output is plain lines: no carriage returns.
    CHECK(log.str().find('\r') == std::string::npos);
    CHECK(log.str().find("epoch 3/3") != std::string::npos);
}

TEST_CASE("a run resumed from its epoch-1 checkpoint equals the uninterrupted run")
{
    temp_dir tmp("resume");
    const fs::path data_dir = tmp.path / "data";
    fs::create_directories(data_dir);
    write_synthetic_mnist(data_dir, 256, 200);

    for (const std::string format : {"NCHW", "NHWC"})
        for (const std::string optimizer : {"adamw", "sgd"})
        {
            CAPTURE(format);
            CAPTURE(optimizer);
            fashion_run::config whole = small_config(data_dir, tmp.path / ("whole_" + format + optimizer));
            whole.data_format = format;
            whole.optimizer = optimizer;
            std::ostringstream log;
            const auto a = fashion_run::run(whole, log);

            fashion_run::config resumed = whole;
            resumed.out = tmp.path / ("resumed_" + format + optimizer);
            resumed.resume = train::checkpoint_path(whole.out, 1);
            const auto b = fashion_run::run(resumed, log);

            CHECK(b.first_epoch == 1);
            // The final checkpoints hold every parameter, buffer (running statistics) and
            // optimiser state entry, and the same metadata: equal bytes mean equal state.
            const std::string final_a = file_bytes(train::checkpoint_path(whole.out, 2));
            const std::string final_b = file_bytes(train::checkpoint_path(resumed.out, 2));
            CHECK(final_a.size() == final_b.size());
            CHECK_MESSAGE(final_a == final_b, "the resumed run's final state differs from the uninterrupted run's");
            REQUIRE(b.metrics.size() == 1); // no metrics.csv in the new folder: only its own epoch
            CHECK(b.metrics[0].train_loss == a.metrics[1].train_loss);
            CHECK(b.metrics[0].test_accuracy == a.metrics[1].test_accuracy);
        }
}

TEST_CASE("resuming refuses a checkpoint of a run with other settings, or a broken one")
{
    temp_dir tmp("refuse");
    const fs::path data_dir = tmp.path / "data";
    fs::create_directories(data_dir);
    write_synthetic_mnist(data_dir, 64, 32);
    fashion_run::config c = small_config(data_dir, tmp.path / "run");
    c.epochs = 1;
    c.limit = 64;
    c.test_limit = 32;
    std::ostringstream log;
    fashion_run::run(c, log);
    const fs::path ckpt = train::checkpoint_path(c.out, 1);

    const auto message_of = [&](fashion_run::config cfg) {
        try
        {
            fashion_run::run(cfg, log);
        }
        catch (const std::exception& e)
        {
            return std::string(e.what());
        }
        return std::string("(no error)");
    };

    fashion_run::config other = c;
    other.resume = ckpt;
    other.out = tmp.path / "other";
    other.epochs = 2; // the schedule spans the run: a different total is a different run
    std::string m = message_of(other);
    CHECK(m.find("epochs") != std::string::npos);
    CHECK(m.find(ckpt.string()) != std::string::npos);

    other = c;
    other.resume = ckpt;
    other.out = tmp.path / "other";
    other.seed = 7;
    CHECK(message_of(other).find("seed") != std::string::npos);

    other = c;
    other.resume = ckpt;
    other.out = tmp.path / "other";
    other.data_format = "NHWC";
    CHECK(message_of(other).find("data_format") != std::string::npos);

    other = c;
    other.resume = ckpt;
    other.out = tmp.path / "other";
    other.optimizer = "sgd";
    CHECK(message_of(other).find("optimizer") != std::string::npos);

    // Already complete: nothing left to do is an error, not a silent no-op.
    other = c;
    other.resume = ckpt;
    other.out = tmp.path / "other";
    CHECK(message_of(other).find("already completed") != std::string::npos);

    // A truncated checkpoint.
    const fs::path cut = tmp.path / "cut.safetensors";
    {
        const std::string bytes = file_bytes(ckpt);
        std::ofstream out(cut, std::ios::binary);
        out.write(bytes.data(), static_cast<std::streamsize>(bytes.size() / 2));
    }
    other = c;
    other.epochs = 2;
    other.resume = cut;
    other.out = tmp.path / "other";
    CHECK(message_of(other).find(cut.string()) != std::string::npos);

    // A missing data folder names the folder.
    other = c;
    other.data_dir = tmp.path / "no_such_folder";
    other.out = tmp.path / "other2";
    CHECK(message_of(other).find("no_such_folder") != std::string::npos);

    // Bad settings are named.
    other = c;
    other.data_format = "CHWN";
    m = message_of(other);
    CHECK(m.find("data_format") != std::string::npos);
    CHECK(m.find("CHWN") != std::string::npos);
    other = c;
    other.batch_size = 0;
    CHECK(message_of(other).find("batch_size") != std::string::npos);
}
