// xgrad and PyTorch, both ways, on the example's Fashion-MNIST model (examples/common/
// fashion_model.cpp against tests/interop/torch_peer.py's torch.nn twin):
//
// - a model trained a few steps in xgrad (channels-first and channels-last), saved as a
//   checkpoint, loads into the PyTorch model with the two lines docs/interop.md gives, and
//   gives xgrad's logits on a batch, in eval and in training mode;
// - a model trained a few steps in PyTorch, its state_dict saved as safetensors, loads into
//   xgrad with io::load_weights and gives PyTorch's logits, in both layouts.
//
// Needs a Python that imports torch: the environment variable XGRAD_INTEROP_PYTHON when set
// (a virtual environment's bin/python, a conda python), else the one configured as the CMake
// cache variable XGRAD_INTEROP_PYTHON (/usr/bin/python3 by default, where Debian's
// python3-torch installs), else the first python3 on PATH. Without one the executable says
// which it tried and exits with 77, which ctest reports as skipped.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include "common/fashion_model.hpp"
#include "tests/support/run_program.hpp"
#include "tests/support/scratch_folder.hpp"
#include "xgrad/io/safetensors.hpp"
#include "xgrad/layers.hpp"
#include "xgrad/xgrad.hpp"

namespace
{
    namespace fs = std::filesystem;
    using xgrad::tensor;

    const std::string peer = XGRAD_INTEROP_PEER;
    /// The interpreter the test runs torch_peer.py with (see the header), chosen by main.
    std::string python;

    bool imports_torch(const std::string& interpreter)
    {
        const std::string probe = "'" + interpreter + "' -c 'import torch' >/dev/null 2>&1";
        return std::system(probe.c_str()) == 0;
    }

    /// Random images of the model's input shape, NCHW.
    tensor images(xgrad::generator& gen) { return xgrad::randn({8, 1, 28, 28}, gen); }

    tensor in_layout(const tensor& x_nchw, const std::string& format)
    {
        return format == "NHWC" ? x_nchw.permute({0, 2, 3, 1}).contiguous() : x_nchw;
    }
}

TEST_CASE("interop: an xgrad checkpoint loads into the equivalent PyTorch model and gives the same logits")
{
    for (const std::string format : {"NCHW", "NHWC"})
    {
        INFO("trained in ", format);
        test_support::scratch_folder dir("xgrad_interop");
        xgrad::generator gen(11);
        auto model = xgrad::examples::make_fashion_model(format, gen);
        const auto opt = xgrad::optim::make_optimizer("sgd", *model, 0.05);
        for (int step = 0; step < 3; ++step)
        {
            const tensor x = in_layout(images(gen), format);
            std::vector<std::int64_t> labels(8);
            for (std::size_t i = 0; i < labels.size(); ++i)
                labels[i] = static_cast<std::int64_t>((3 * step + 7 * i) % 10);
            const tensor y = xgrad::from_host(labels.data(), {8}, xgrad::dtype::int64);
            opt->zero_grad();
            xgrad::cross_entropy((*model)(x), y).backward();
            opt->step();
        }
        const fs::path ckpt = dir.path / "xgrad.safetensors";
        xgrad::io::save_checkpoint(ckpt, *model, opt.get(), 1);

        const tensor x = images(gen);
        xgrad::no_grad guard;
        model->eval();
        const tensor logits_eval = (*model)(in_layout(x, format));
        model->train();
        const tensor logits_train = (*model)(in_layout(x, format));
        const fs::path batch = dir.path / "batch.safetensors";
        xgrad::io::save_safetensors(batch, {{"x", x}, {"logits_eval", logits_eval}, {"logits_train", logits_train}});

        const auto r = test_support::run_program({python, peer, "check", ckpt.string(), batch.string()}, dir.path);
        INFO(r.output);
        CHECK(r.status == 0);
        CHECK(r.output.find("eval logits: max abs difference") != std::string::npos);
        CHECK(r.output.find("training-mode logits: max abs difference") != std::string::npos);
    }
}

TEST_CASE("interop: a PyTorch state_dict saved as safetensors loads into xgrad and gives PyTorch's logits")
{
    test_support::scratch_folder dir("xgrad_interop");
    const auto r = test_support::run_program({python, peer, "make", dir.path.string()}, dir.path);
    INFO(r.output);
    REQUIRE(r.status == 0);
    const auto batch = xgrad::io::load_safetensors(dir.path / "torch_batch.safetensors").tensors;
    const tensor x = batch.at("x");
    const std::vector<double> expected = xgrad::to_vector(batch.at("logits_eval"));
    const double scale = std::max(1.0, *std::max_element(expected.begin(), expected.end(),
                                                         [](double a, double b) { return std::abs(a) < std::abs(b); }));
    for (const std::string format : {"NCHW", "NHWC"})
    {
        INFO("loaded into ", format);
        xgrad::generator gen(3);
        auto model = xgrad::examples::make_fashion_model(format, gen);
        const auto loaded = xgrad::io::load_weights(dir.path / "torch_model.safetensors", *model);
        CHECK(loaded.converted.empty());
        CHECK(model->buffer("bn1.num_batches_tracked").item<std::int64_t>() == 3);
        model->eval();
        xgrad::no_grad guard;
        const std::vector<double> actual = xgrad::to_vector((*model)(in_layout(x, format)));
        REQUIRE(actual.size() == expected.size());
        // The tolerance of torch_peer.py, argued there.
        for (std::size_t i = 0; i < actual.size(); ++i)
            CHECK_MESSAGE(std::abs(actual[i] - expected[i]) <= 1e-4 * scale,
                          "logit " << i << ": " << actual[i] << " vs PyTorch's " << expected[i]);
    }
}

int main(int argc, char** argv)
{
    // Skipped, not failed, where PyTorch is not installed: it is a peer, not a dependency.
    std::vector<std::string> candidates;
    if (const char* env = std::getenv("XGRAD_INTEROP_PYTHON"); env && *env)
        candidates.push_back(env); // asked for by name: the only one tried
    else
        candidates = {XGRAD_INTEROP_PYTHON, "python3"};
    for (const std::string& c : candidates)
        if (imports_torch(c))
        {
            python = c;
            break;
        }
    if (python.empty())
    {
        std::cout << "test_interop: skipped: no Python that imports torch (tried";
        for (const std::string& c : candidates)
            std::cout << " " << c;
        std::cout << "; install Debian's python3-torch, as tools/bootstrap.sh test does, or point "
                     "XGRAD_INTEROP_PYTHON at a python with torch)\n";
        return 77;
    }
    std::cout << "test_interop: PyTorch from " << python << "\n";
    doctest::Context context(argc, argv);
    return context.run();
}
