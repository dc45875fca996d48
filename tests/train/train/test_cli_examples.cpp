// The example programs run with bad command lines and bad datasets: one parser for all of them
// (--help, --flag=value, unknown options and usage errors exit 2); every numeric flag out of
// range is a usage error (exit status 2) naming the flag, the value and the range; a dataset
// the model cannot take is an error (exit status 1) naming the file and what is wrong, raised
// when the data is read, before training. Registered only when the examples are built; the
// programs' paths come from CMake.
#include <doctest/doctest.h>

#include <zlib.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "tests/support/gzip_file.hpp"
#include "tests/support/run_program.hpp"
#include "tests/support/scratch_folder.hpp"
#include "xgrad/data/idx.hpp"
#include "xgrad/io/safetensors.hpp"
#include "xgrad/train/metrics.hpp"

namespace fs = std::filesystem;
using xgrad::data::idx_array;
using xgrad::data::write_idx;

namespace
{
    /// A fresh temporary folder for one test case.
    struct scratch_folder : test_support::scratch_folder
    {
        scratch_folder() : test_support::scratch_folder("xgrad_test_cli_") {}
    };

    using test_support::run_result;

    /// Runs `program` with `args`, its output into a file of `dir`, killed after 120 s.
    run_result run(const char* program, const std::vector<std::string>& args, const fs::path& dir)
    {
        std::vector<std::string> argv{program};
        argv.insert(argv.end(), args.begin(), args.end());
        return test_support::run_program(argv, dir);
    }

    std::string read_text(const fs::path& p)
    {
        std::ifstream in(p, std::ios::binary);
        return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    }

    /// Checks that the run exited with `status` and printed every one of `parts`.
    void check_run(const run_result& r, int status, const std::vector<std::string>& parts)
    {
        CHECK_MESSAGE(r.status == status, "exit status " << r.status << ", output:\n" << r.output);
        for (const auto& part : parts)
            CHECK_MESSAGE(r.output.find(part) != std::string::npos, "output lacks '" << part << "':\n" << r.output);
    }

    /// An MNIST-format folder: `train` and `test` images of rows x cols, one label each.
    void write_set(const fs::path& dir, const char* prefix, std::int64_t n, std::int64_t rows, std::int64_t cols,
                   std::int64_t labels = -1)
    {
        fs::create_directories(dir);
        const std::string p = prefix;
        write_idx(dir / (p + "-images-idx3-ubyte"),
                  idx_array{{n, rows, cols}, std::vector<std::uint8_t>(static_cast<std::size_t>(n * rows * cols), 9)});
        const std::int64_t m = labels < 0 ? n : labels;
        std::vector<std::uint8_t> l(static_cast<std::size_t>(m));
        for (std::size_t i = 0; i < l.size(); ++i)
            l[i] = static_cast<std::uint8_t>(i % 10);
        write_idx(dir / (p + "-labels-idx1-ubyte.gz"), idx_array{{m}, l});
    }
}

TEST_CASE("examples: a small .gz that inflates far past its header costs train_fashion_mnist no memory")
{
    scratch_folder dir;
    // One 28x28 image announced, 128 MiB of zeros behind it, in a 130 kB file.
    std::vector<std::uint8_t> head = {0, 0, 8, 3, 0, 0, 0, 1, 0, 0, 0, 28, 0, 0, 0, 28};
    head.resize(head.size() + 28 * 28, 5);
    test_support::write_gzip(dir / "train-images-idx3-ubyte.gz", head, std::size_t{128} << 20);
    write_idx(dir / "train-labels-idx1-ubyte", idx_array{{1}, {3}});
    const run_result r = run(XGRAD_TRAIN_FASHION_MNIST,
                             {"--data-dir", dir.path.string(), "--out", (dir / "out").string()}, dir.path);
    check_run(r, 1, {"training set: " + (dir / "train-images-idx3-ubyte.gz").string() + ": trailing data"});
    // Against the same program refusing a folder that holds no data (its own footprint, which
    // depends on the build: a CUDA build maps the CUDA libraries): inflating the stream would
    // take 128 MiB more; reading a bounded prefix of it, a few MB.
    const run_result base = run(XGRAD_TRAIN_FASHION_MNIST,
                                {"--data-dir", (dir / "absent").string(), "--out", (dir / "out").string()}, dir.path);
    check_run(base, 1, {"absent"});
    CHECK_MESSAGE(r.peak_rss_kb < base.peak_rss_kb + 32 * 1024,
                  "peak RSS " << r.peak_rss_kb << " kB, refusing a missing folder " << base.peak_rss_kb << " kB");
}

TEST_CASE("examples: every numeric flag out of range is a usage error naming flag, value and range")
{
    scratch_folder dir;
    struct bad_flag
    {
        const char* program;
        std::vector<std::string> args;
        std::vector<std::string> message;
    };
    const std::string int64_max = "9223372036854775807";
    const std::vector<bad_flag> cases = {
        {XGRAD_TRAIN_FASHION_MNIST,
         {"--epochs", int64_max},
         {"--epochs expects an integer in [1, 1000000], got '" + int64_max + "'"}},
        {XGRAD_TRAIN_FASHION_MNIST, {"--epochs=0"}, {"--epochs", "got '0'"}},
        {XGRAD_TRAIN_FASHION_MNIST,
         {"--batch-size", "99999999999999999999"},
         {"--batch-size expects an integer in [1, 1000000]"}},
        {XGRAD_TRAIN_FASHION_MNIST, {"--batch-size", "-64"}, {"--batch-size", "got '-64'"}},
        {XGRAD_TRAIN_FASHION_MNIST,
         {"--threads", "65537"},
         {"--threads expects an integer in [1, 65536], got '65537'"}},
        {XGRAD_TRAIN_FASHION_MNIST,
         {"--seed", "-1"},
         {"--seed expects an integer in [0, 18446744073709551615], got '-1'"}},
        {XGRAD_TRAIN_FASHION_MNIST, {"--seed", "18446744073709551616"}, {"--seed", "got '18446744073709551616'"}},
        {XGRAD_TRAIN_FASHION_MNIST,
         {"--limit", "-1"},
         {"--limit expects an integer in [0, " + int64_max + "], got '-1'"}},
        {XGRAD_TRAIN_FASHION_MNIST, {"--test-limit", "1e3"}, {"--test-limit expects an integer", "got '1e3'"}},
        {XGRAD_TRAIN_FASHION_MNIST, {"--lr", "inf"}, {"--lr expects a number in (0, 1000], got 'inf'"}},
        {XGRAD_TRAIN_FASHION_MNIST, {"--lr", "0"}, {"--lr", "got '0'"}},
        {XGRAD_EVALUATE,
         {"--threads", "0", "--checkpoint", "c"},
         {"--threads expects an integer in [1, 65536], got '0'"}},
        {XGRAD_EVALUATE,
         {"--limit", int64_max + "0", "--checkpoint", "c"},
         {"--limit expects an integer in [0, " + int64_max + "]"}},
        {XGRAD_TWO_MOONS,
         {"--epochs", int64_max},
         {"--epochs expects an integer in [1, 1000000], got '" + int64_max + "'"}},
        {XGRAD_TWO_MOONS, {"--hidden", "100000"}, {"--hidden expects an integer in [1, 4096], got '100000'"}},
        {XGRAD_TWO_MOONS, {"--seed", "-1"}, {"--seed expects an integer in [0, 18446744073709551615], got '-1'"}},
        {XGRAD_TWO_MOONS, {"--threads", "-1"}, {"--threads expects an integer in [0, 65536], got '-1'"}},
        {XGRAD_TWO_MOONS, {"--samples", "1"}, {"--samples expects an integer in [2, 1000000], got '1'"}},
        {XGRAD_TWO_MOONS, {"--lr", "nan"}, {"--lr expects a number in (0, 1000], got 'nan'"}},
    };
    for (const auto& c : cases)
    {
        CAPTURE(c.program);
        CAPTURE(c.args[0]);
        check_run(run(c.program, c.args, dir.path), 2, c.message);
    }
    // In range: accepted (a short run).
    check_run(run(XGRAD_TWO_MOONS,
                  {"--epochs", "2", "--samples", "16", "--hidden", "4", "--seed", "18446744073709551615"}, dir.path),
              0, {"final train loss"});
}

TEST_CASE("examples: a dataset the model cannot take is named when it is read")
{
    scratch_folder dir;
    const auto train = [&](const fs::path& data) {
        return run(XGRAD_TRAIN_FASHION_MNIST,
                   {"--data-dir", data.string(), "--epochs", "1", "--out", (dir / "out").string(), "--threads", "1"},
                   dir.path);
    };
    // 32x32 training images: the file, the size found and the size the model takes.
    write_set(dir / "d32", "train", 4, 32, 32);
    write_set(dir / "d32", "t10k", 4, 28, 28);
    check_run(train(dir / "d32"), 1,
              {"training set: " + (dir / "d32" / "train-images-idx3-ubyte").string(), "32x32", "expected 28x28"});
    // The same for the test set, through evaluate too.
    write_set(dir / "t32", "train", 4, 28, 28);
    write_set(dir / "t32", "t10k", 4, 28, 32);
    check_run(train(dir / "t32"), 1,
              {"test set: " + (dir / "t32" / "t10k-images-idx3-ubyte").string(), "28x32", "expected 28x28"});
    // An empty training set: said first, naming the file.
    write_set(dir / "empty", "train", 0, 28, 28);
    write_set(dir / "empty", "t10k", 4, 28, 28);
    const run_result empty = train(dir / "empty");
    check_run(empty, 1, {"training set: " + (dir / "empty" / "train-images-idx3-ubyte").string(), "holds no images"});
    CHECK_MESSAGE(empty.output.find("make_schedule") == std::string::npos, empty.output);
    // Labels and images that disagree: both files and both counts.
    write_set(dir / "count", "train", 5, 28, 28, 4);
    write_set(dir / "count", "t10k", 4, 28, 28);
    check_run(train(dir / "count"), 1,
              {(dir / "count" / "train-images-idx3-ubyte").string() + ": holds 5 images but " +
               (dir / "count" / "train-labels-idx1-ubyte.gz").string() + " holds 4 labels"});
    // A dataset it can take trains (one epoch of 4 images).
    write_set(dir / "good", "train", 4, 28, 28);
    write_set(dir / "good", "t10k", 4, 28, 28);
    check_run(train(dir / "good"), 0, {"test accuracy after 1 epoch: "});
    // evaluate checks the test set the same way.
    const std::string checkpoint = (dir / "out" / "checkpoint_epoch_1.safetensors").string();
    check_run(run(XGRAD_EVALUATE, {"--checkpoint", checkpoint, "--data-dir", (dir / "t32").string()}, dir.path), 1,
              {"test set: " + (dir / "t32" / "t10k-images-idx3-ubyte").string(), "28x32", "expected 28x28"});
    // A checkpoint whose layout metadata is not one the model takes is named, with the field,
    // the value and the accepted values, before a model is built with it.
    auto content = xgrad::io::load_safetensors(checkpoint);
    content.metadata["data_format"] = "bogus";
    const std::string bogus = (dir / "bogus.safetensors").string();
    xgrad::io::save_safetensors(bogus, content.tensors, content.metadata);
    check_run(run(XGRAD_EVALUATE, {"--checkpoint", bogus, "--data-dir", (dir / "good").string()}, dir.path), 1,
              {bogus + ": metadata 'data_format' is 'bogus', not one of the accepted values 'NCHW', 'NHWC'"});
}

TEST_CASE("examples: one command line for every program (--help, --flag=value, unknown options, exit 2)")
{
    scratch_folder dir;
    struct program
    {
        const char* path;
        const char* name;
    };
    for (const program& p :
         {program{XGRAD_TRAIN_FASHION_MNIST, "train_fashion_mnist"}, program{XGRAD_EVALUATE, "evaluate"},
          program{XGRAD_TWO_MOONS, "two_moons"}, program{XGRAD_BATCH_NORM_TOUR, "batch_norm_tour"}})
    {
        CAPTURE(p.name);
        const std::string name = p.name;
        check_run(run(p.path, {"--help"}, dir.path), 0, {"usage: " + name, "-h, --help"});
        check_run(run(p.path, {"-h"}, dir.path), 0, {"usage: " + name});
        // Before, an unknown flag read as "needs a value", and batch_norm_tour ignored it (exit 0).
        check_run(run(p.path, {"--bogus"}, dir.path), 2,
                  {name + ": unknown option '--bogus'", "Try '" + name + " --help'."});
        check_run(run(p.path, {"--bogus=1"}, dir.path), 2, {"unknown option '--bogus'"});
        check_run(run(p.path, {"stray"}, dir.path), 2, {"unexpected argument 'stray'"});
    }
    // Descriptions, ranges and defaults in the help.
    check_run(run(XGRAD_TRAIN_FASHION_MNIST, {"--help"}, dir.path), 0,
              {"--epochs N", "epochs to train [1, 1000000] (default 2)", "--optimizer sgd|adam|adamw|rmsprop|adagrad",
               "(default adamw)", "--init-from FILE"});
    check_run(run(XGRAD_TWO_MOONS, {"--help"}, dir.path), 0, {"--hidden N", "(default 32)"});
    // A value missing, a value given to a switch, a value outside the choices.
    check_run(run(XGRAD_TRAIN_FASHION_MNIST, {"--epochs"}, dir.path), 2, {"--epochs needs a value"});
    check_run(run(XGRAD_TRAIN_FASHION_MNIST, {"--no-prefetch=1"}, dir.path), 2, {"--no-prefetch takes no value"});
    check_run(run(XGRAD_TRAIN_FASHION_MNIST, {"--workers", "0"}, dir.path), 2, {"--workers", "[1, 256]"});
    check_run(run(XGRAD_TRAIN_FASHION_MNIST, {"--format", "nchw"}, dir.path), 2,
              {"--format expects one of 'NCHW', 'NHWC', got 'nchw'"});
    check_run(run(XGRAD_TRAIN_FASHION_MNIST, {"--resume", "a", "--init-from", "b"}, dir.path), 2,
              {"--init-from starts a new run and --resume continues one"});
    check_run(run(XGRAD_EVALUATE, {"--limit=5"}, dir.path), 2, {"evaluate: --checkpoint is required"});
    // evaluate takes --flag=value (it refused it before), and says what a file that is not
    // safetensors is.
    write_set(dir / "data", "t10k", 4, 28, 28);
    const fs::path text = dir / "notes.txt";
    std::ofstream(text) << "these are notes, not a model\n";
    check_run(run(XGRAD_EVALUATE, {"--checkpoint=" + text.string(), "--data-dir=" + (dir / "data").string()}, dir.path),
              1, {text.string() + ": not a safetensors file"});
}

TEST_CASE("examples: --precision bf16 says when bfloat16 is storage only; XGRAD_SIMD caps the kernels' level")
{
    scratch_folder dir;
    write_set(dir / "data", "train", 4, 28, 28);
    write_set(dir / "data", "t10k", 4, 28, 28);
    const std::vector<std::string> args{XGRAD_TRAIN_FASHION_MNIST,
                                        "--data-dir",
                                        (dir / "data").string(),
                                        "--epochs",
                                        "1",
                                        "--batch-size",
                                        "4",
                                        "--out",
                                        (dir / "out").string(),
                                        "--threads",
                                        "1",
                                        "--precision",
                                        "bf16"};
    // Below avx512 no processor runs the AMX tiles: the note must be there, whatever this
    // machine has. sse2 is a level every x86-64 processor has, so the cap is what is in use.
    const run_result capped = test_support::run_program(args, dir.path, {{"XGRAD_SIMD", "sse2"}});
    check_run(capped, 0, {"cpu kernels: simd sse2", "note: bfloat16 here is storage, not arithmetic"});
    const run_result bogus = test_support::run_program(args, dir.path, {{"XGRAD_SIMD", "avx1024"}});
    check_run(bogus, 0, {"XGRAD_SIMD=avx1024 is not one of avx512, avx2 (avx2_fma), sse2, scalar, dispatch: ignored"});
    // float32 runs never print it.
    std::vector<std::string> f32 = args;
    f32.back() = "f32";
    const run_result plain = test_support::run_program(f32, dir.path, {{"XGRAD_SIMD", "sse2"}});
    check_run(plain, 0, {"cpu kernels: simd sse2"});
    CHECK_MESSAGE(plain.output.find("bfloat16 here is storage") == std::string::npos, plain.output);
}

TEST_CASE("examples: a run whose loss diverges stops with exit 1 naming the step; --on-non-finite skip goes on")
{
    scratch_folder dir;
    write_set(dir / "data", "train", 8, 28, 28);
    write_set(dir / "data", "t10k", 4, 28, 28);
    const auto train = [&](std::vector<std::string> extra) {
        std::vector<std::string> args{"--data-dir",   (dir / "data").string(),
                                      "--batch-size", "4",
                                      "--epochs",     "5",
                                      "--out",        (dir / "out").string(),
                                      "--threads",    "1",
                                      "--optimizer",  "sgd",
                                      "--lr",         "1000"};
        args.insert(args.end(), extra.begin(), extra.end());
        return run(XGRAD_TRAIN_FASHION_MNIST, args, dir.path);
    };
    // Before, this finished with exit 0 and wrote NaN checkpoints.
    const run_result stopped = train({});
    check_run(stopped, 1, {"training stopped at epoch", "the model keeps its values from before this step"});
    CHECK_MESSAGE(stopped.output.find("test accuracy after") == std::string::npos, stopped.output);
    const run_result skipped = train({"--on-non-finite", "skip"});
    check_run(skipped, 0, {"steps skipped (loss or gradient not finite)", "test accuracy after 5 epochs"});
}

TEST_CASE("examples: the end of a run, --init-from, and evaluate on a checkpoint without metadata")
{
    scratch_folder dir;
    write_set(dir / "data", "train", 8, 28, 28);
    write_set(dir / "data", "t10k", 4, 28, 28);
    const auto train = [&](std::vector<std::string> extra) {
        std::vector<std::string> args{"--data-dir", (dir / "data").string(), "--epochs",  "1", "--batch-size", "4",
                                      "--out",      (dir / "out").string(),  "--threads", "1"};
        args.insert(args.end(), extra.begin(), extra.end());
        return run(XGRAD_TRAIN_FASHION_MNIST, args, dir.path);
    };
    // The evaluate beside the program, by its path; no machine-readable lines unless asked for.
    const std::string checkpoint = (dir / "out" / "checkpoint_epoch_1.safetensors").string();
    const fs::path evaluate = fs::path(XGRAD_TRAIN_FASHION_MNIST).parent_path() / "evaluate";
    const run_result plain = train({});
    check_run(plain, 0, {"evaluate it:     " + evaluate.string() + " --checkpoint " + checkpoint});
    CHECK_MESSAGE(plain.output.find("summary peer=") == std::string::npos, plain.output);
    check_run(train({"--summary"}), 0, {"summary peer=xgrad images_per_s="});

    // A state dict without xgrad's prefix or metadata, as PyTorch saves one: evaluate builds the
    // channels-first model for it, and a run starts from it with --init-from.
    const auto content = xgrad::io::load_safetensors(checkpoint);
    xgrad::io::tensor_map weights;
    for (const auto& [name, t] : content.tensors)
        if (name.rfind("model.", 0) == 0)
            weights[name.substr(6)] = t;
    const std::string plain_weights = (dir / "weights.safetensors").string();
    xgrad::io::save_safetensors(plain_weights, weights);
    check_run(run(XGRAD_EVALUATE, {"--checkpoint", plain_weights, "--data-dir", (dir / "data").string()}, dir.path), 0,
              {"(NCHW)", "test accuracy:"});
    check_run(train({"--init-from", plain_weights, "--format", "NHWC"}), 0,
              {"weights from " + plain_weights, "test accuracy after 1 epoch: "});
    // A file for another model is refused, naming the file and the tensors.
    weights.erase("fc2.bias");
    xgrad::io::save_safetensors(plain_weights, weights);
    check_run(train({"--init-from", plain_weights}), 1, {plain_weights, "'fc2.bias' is missing"});

    // PyTorch-saved names under a wrapper's prefix and without the batch norms' counters: both
    // programs take --strip-prefix, and the counters the file lacks are kept, with a note.
    xgrad::io::tensor_map wrapped;
    for (const auto& [name, t] : content.tensors)
        if (name.rfind("model.", 0) == 0 && name.find("num_batches_tracked") == std::string::npos)
            wrapped["module." + name.substr(6)] = t;
    const std::string wrapped_file = (dir / "wrapped.safetensors").string();
    xgrad::io::save_safetensors(wrapped_file, wrapped);
    check_run(run(XGRAD_EVALUATE, {"--checkpoint", wrapped_file, "--data-dir", (dir / "data").string()}, dir.path), 1,
              {"every unexpected name is a missing one with 'module.' in front", "--strip-prefix module."});
    check_run(run(XGRAD_EVALUATE,
                  {"--checkpoint", wrapped_file, "--strip-prefix", "module.", "--data-dir", (dir / "data").string()},
                  dir.path),
              0, {"bn1.num_batches_tracked, bn2.num_batches_tracked not in the file: kept", "test accuracy:"});
    check_run(train({"--init-from", wrapped_file, "--strip-prefix", "module."}), 0,
              {"weights from " + wrapped_file, "not in the file: kept", "test accuracy after 1 epoch: "});
    check_run(train({"--strip-prefix", "module."}), 2, {"--strip-prefix applies to the file of --init-from"});
}

TEST_CASE("examples: --resume with more --epochs extends a finished run")
{
    scratch_folder dir;
    write_set(dir / "data", "train", 8, 28, 28);
    write_set(dir / "data", "t10k", 4, 28, 28);
    const auto train = [&](std::vector<std::string> extra) {
        std::vector<std::string> args{"--data-dir", (dir / "data").string(), "--batch-size", "4",
                                      "--out",      (dir / "out").string(),  "--threads",    "1"};
        args.insert(args.end(), extra.begin(), extra.end());
        return run(XGRAD_TRAIN_FASHION_MNIST, args, dir.path);
    };
    check_run(train({"--epochs", "1"}), 0, {"test accuracy after 1 epoch: "});
    const std::string first = (dir / "out" / "checkpoint_epoch_1.safetensors").string();
    // Nothing left to do: refused, saying how to extend (before, any other count was refused).
    check_run(train({"--epochs", "1", "--resume", first}), 1, {"already completed 1 of 1 epochs"});
    const run_result extended = train({"--epochs", "3", "--resume", first});
    check_run(extended, 0,
              {"resumed from " + first + " after epoch 1", "epoch 3/3", "test accuracy after 3 epochs: ",
               "note: the checkpoint's run planned 1 epoch and this one 3: the cosine schedule now spans 3 epochs, "
               "so the learning rate goes from "});
    // The last figure has the epoch lines' two decimals.
    const auto at = extended.output.find("test accuracy after 3 epochs: ");
    REQUIRE(at != std::string::npos);
    const std::string figure = extended.output.substr(at + 30, extended.output.find('%', at) - at - 30);
    CHECK_MESSAGE((figure.size() >= 4 && figure[figure.size() - 3] == '.'), figure);
    CHECK(fs::exists(dir / "out" / "checkpoint_epoch_3.safetensors"));
    // The logs: an lr column per epoch, and every step of the three epochs (2 a epoch: 8
    // images, batch 4), the first epoch's kept from the first run.
    const auto epochs = xgrad::train::read_metrics_csv(dir / "out" / "metrics.csv");
    REQUIRE(epochs.size() == 3);
    for (const auto& m : epochs)
        CHECK((m.lr > 0.0 && m.lr <= 2e-3));
    const auto steps = xgrad::train::read_steps_csv(dir / "out" / "steps.csv");
    REQUIRE(steps.size() == 6);
    CHECK(steps[0].epoch == 1);
    CHECK(steps[5].epoch == 3);
    CHECK(steps[5].step == 1);
    CHECK(steps[0].lr == 2e-3);       // the cosine schedule starts at the peak
    CHECK(steps[5].lr < steps[4].lr); // and falls
    for (const auto& st : steps)
        CHECK(std::isfinite(st.loss));
    CHECK(read_text(dir / "out" / "metrics.svg").find("panel step-loss") != std::string::npos);
    // Other settings must still agree, and the count may only grow.
    check_run(train({"--epochs", "4", "--seed", "5", "--resume", first}), 1, {"seed: checkpoint 0, this run 5"});
    const std::string third = (dir / "out" / "checkpoint_epoch_3.safetensors").string();
    check_run(train({"--epochs", "2", "--resume", third}), 1, {"epochs: checkpoint 3, this run 2 (it may only grow)"});
}

TEST_CASE("examples: --schedule takes a spec: a one-cycle per step, a plateau per epoch resumed, a bad key named")
{
    scratch_folder dir;
    write_set(dir / "data", "train", 8, 28, 28);
    write_set(dir / "data", "t10k", 4, 28, 28);
    const auto train = [&](const std::string& out, std::vector<std::string> extra) {
        std::vector<std::string> args{"--data-dir", (dir / "data").string(), "--batch-size", "4",
                                      "--out",      (dir / out).string(),    "--threads",    "1"};
        args.insert(args.end(), extra.begin(), extra.end());
        return run(XGRAD_TRAIN_FASHION_MNIST, args, dir.path);
    };
    // 2 epochs of 2 steps: from 0.01 / 25 up to 0.01 at step 1, then down.
    check_run(train("cycle", {"--epochs", "2", "--schedule", "onecycle:max_lr=0.01,pct_start=0.5"}), 0,
              {"test accuracy after 2 epochs"});
    const auto steps = xgrad::train::read_steps_csv(dir / "cycle" / "steps.csv");
    REQUIRE(steps.size() == 4);
    CHECK(steps[0].lr == doctest::Approx(4e-4).epsilon(1e-12));
    CHECK(steps[1].lr == doctest::Approx(0.01).epsilon(1e-12));
    CHECK(steps[3].lr < steps[2].lr);
    // Nothing beats the first epoch's test loss by 1e9: every later epoch halves the rate.
    const std::string plateau = "plateau:mode=max,threshold_mode=abs,threshold=1e9,patience=0,factor=0.5";
    check_run(train("plateau", {"--epochs", "2", "--schedule", plateau}), 0, {"test accuracy after 2 epochs"});
    const std::string second = (dir / "plateau" / "checkpoint_epoch_2.safetensors").string();
    check_run(train("plateau", {"--epochs", "3", "--schedule", plateau, "--resume", second}), 0,
              {"test accuracy after 3 epochs"});
    const auto epochs = xgrad::train::read_metrics_csv(dir / "plateau" / "metrics.csv");
    REQUIRE(epochs.size() == 3);
    CHECK(epochs[0].lr == 2e-3);
    CHECK(epochs[1].lr == 2e-3);
    CHECK(epochs[2].lr == 1e-3); // from the state the checkpoint of epoch 2 holds
    check_run(train("bad", {"--schedule", "cosine:warmup=abc"}), 1,
              {"make_schedule: cosine: warmup: 'abc' is not an integer"});
    check_run(train("bad", {"--schedule", "plateau:cooldown=-1"}), 1, {"reduce_lr_on_plateau", "cooldown", "-1"});
}

TEST_CASE("examples: --profile prints the first epoch's table and writes its trace")
{
    scratch_folder dir;
    write_set(dir / "data", "train", 8, 28, 28);
    write_set(dir / "data", "t10k", 4, 28, 28);
    const fs::path out = dir / "out";
    const run_result r = run(XGRAD_TRAIN_FASHION_MNIST,
                             {"--data-dir", (dir / "data").string(), "--epochs", "2", "--batch-size", "4", "--out",
                              out.string(), "--threads", "1", "--profile"},
                             dir.path);
    check_run(r, 0,
              {"profile of the first epoch", "name", "self ms", "conv2d", "kernel", "backward",
               "trace (chrome://tracing, Perfetto): " + (out / "profile_trace.json").string()});
    // Once, after the first epoch only.
    CHECK(r.output.find("profile of the first epoch") == r.output.rfind("profile of the first epoch"));
    CHECK(r.output.find("profile of the first epoch") < r.output.find("epoch 2/2: train loss"));
    CHECK(fs::file_size(out / "profile_trace.json") > 100);
}
