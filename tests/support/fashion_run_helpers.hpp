#pragma once
// A Fashion-MNIST training run through the library's trainer (xgrad/train/trainer.hpp), set
// up as the train_fashion_mnist example sets it up: the same model, loader, optimizer,
// per-step schedule and run metadata. Shared by test_training.cpp and test_cuda_training.cpp.
#include <cstdint>
#include <filesystem>
#include <memory>
#include <ostream>
#include <string>

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

    /// conv3x3(1->32)+BN+ReLU+maxpool2, conv3x3(32->64)+BN+ReLU+maxpool2, flatten,
    /// linear(64*7*7 -> 128)+ReLU, linear(128 -> 10): the example's model.
    inline std::shared_ptr<xgrad::nn::sequential> make_model(const std::string& data_format, xgrad::generator& gen)
    {
        using namespace xgrad;
        auto model = std::make_shared<nn::sequential>();
        const auto conv = [&](std::int64_t in, std::int64_t out) {
            nn::conv2d_options o(in, out, 3);
            o.padding = {1, 1};
            o.data_format = data_format;
            return std::make_shared<nn::conv2d>(o, gen);
        };
        const auto bn = [&](std::int64_t c) {
            nn::batch_norm_options o(c);
            o.data_format = data_format;
            return std::make_shared<nn::batch_norm2d>(o);
        };
        model->add("conv1", conv(1, 32));
        model->add("bn1", bn(32));
        model->add("relu1", std::make_shared<nn::relu>());
        model->add("pool1", std::make_shared<nn::max_pool2d>(2, data_format));
        model->add("conv2", conv(32, 64));
        model->add("bn2", bn(64));
        model->add("relu2", std::make_shared<nn::relu>());
        model->add("pool2", std::make_shared<nn::max_pool2d>(2, data_format));
        model->add("flatten", std::make_shared<nn::flatten>());
        model->add("fc1", std::make_shared<nn::linear>(64 * 7 * 7, 128, gen));
        model->add("relu3", std::make_shared<nn::relu>());
        model->add("fc2", std::make_shared<nn::linear>(128, 10, gen));
        return model;
    }

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
        auto model = make_model(c.data_format, gen);
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
