#pragma once
// A Fashion-MNIST training run through the library's trainer (xgrad/train/trainer.hpp), set
// up as the train_fashion_mnist example sets it up: the same model, loader, optimizer,
// per-step schedule and run metadata. Shared by test_training.cpp and test_cuda_training.cpp.
// The model is the example's own (examples/common/fashion_model.cpp, compiled into those two
// test executables, so they build and run with XGRAD_BUILD_EXAMPLES=OFF too).
#include <cstdint>
#include <filesystem>
#include <memory>
#include <ostream>
#include <string>

#include "examples/common/fashion_model.hpp"
#include "xgrad/layers.hpp"
#include "xgrad/train.hpp"
#include "xgrad/xgrad.hpp"

namespace fashion_run
{
    struct config
    {
        std::int64_t epochs = 2;
        std::int64_t batch_size = 32;
        double lr = 2e-3;
        std::string optimizer = "adamw";
        std::string schedule = "cosine";
        std::string device = "cpu";
        std::filesystem::path data_dir = xgrad::data::default_fashion_mnist_dir;
        std::uint64_t seed = 0;
        std::filesystem::path out;
        std::filesystem::path resume; // empty: from scratch
        std::string data_format = "NCHW";
        std::int64_t limit = 256;
        std::int64_t test_limit = 200;
    };

    /// Trains as configured (resuming from c.resume when set); progress and summaries go to `log`.
    inline xgrad::train::fit_result run(const config& c, std::ostream& log)
    {
        using namespace xgrad;
        const device dev = parse_device(c.device);
        const auto train_data =
            std::make_shared<const data::image_dataset>(data::load_mnist(c.data_dir, true, c.limit));
        const auto test_data =
            std::make_shared<const data::image_dataset>(data::load_mnist(c.data_dir, false, c.test_limit));
        generator gen(c.seed);
        auto model = examples::make_fashion_model(c.data_format, gen);
        model->to(dev);
        auto opt = optim::make_optimizer(c.optimizer, *model, c.lr);
        data::loader_options lo;
        lo.batch_size = c.batch_size;
        lo.seed = c.seed;
        lo.data_format = c.data_format;
        data::data_loader loader(train_data, lo);
        const auto schedule = optim::make_schedule(c.schedule, c.lr, c.epochs * loader.batches_per_epoch());
        train::trainer_options o;
        o.epochs = c.epochs;
        o.device = dev;
        o.out = c.out;
        o.schedule = schedule.get();
        o.test_data = test_data;
        o.log = &log;
        o.run_metadata = {{"data_format", c.data_format},
                          {"seed", std::to_string(c.seed)},
                          {"batch_size", std::to_string(c.batch_size)},
                          {"lr", std::to_string(c.lr)},
                          {"schedule", c.schedule},
                          {"epochs", std::to_string(c.epochs)},
                          {"limit", std::to_string(c.limit)}};
        train::trainer t(*model, *opt, loader, o);
        if (!c.resume.empty())
            t.resume(c.resume);
        return t.fit();
    }
}
