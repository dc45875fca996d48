// The trainer's checks of what its options and loader announce (xgrad/train/trainer.hpp): an
// epoch count its metrics cannot number, an empty training or test set, a test set of another
// image size than the training set. All refused at construction, before any step.
#include <doctest/doctest.h>

#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <limits>
#include <memory>
#include <string>

#include "tests/support/check_error.hpp"
#include "xgrad/layers.hpp"
#include "xgrad/train.hpp"
#include "xgrad/xgrad.hpp"

using namespace xgrad;

namespace
{
    std::shared_ptr<const data::image_dataset> blank_dataset(std::int64_t n, std::int64_t rows, std::int64_t cols)
    {
        data::image_dataset d;
        d.size = n;
        d.rows = rows;
        d.cols = cols;
        d.classes = 3;
        d.images.assign(static_cast<std::size_t>(n * rows * cols), 100);
        d.labels.assign(static_cast<std::size_t>(n), 1);
        return std::make_shared<const data::image_dataset>(std::move(d));
    }

    std::shared_ptr<nn::sequential> tiny_model(std::int64_t pixels, generator& gen)
    {
        auto model = std::make_shared<nn::sequential>();
        model->add("flatten", std::make_shared<nn::flatten>());
        model->add("fc", std::make_shared<nn::linear>(pixels, 3, gen));
        return model;
    }

    data::loader_options plain(std::int64_t batch)
    {
        data::loader_options lo;
        lo.batch_size = batch;
        lo.prefetch = false;
        return lo;
    }
}

TEST_CASE("trainer limits: epochs its metrics cannot number are refused, not run")
{
    generator gen(1);
    auto model = tiny_model(4, gen);
    auto opt = optim::make_optimizer("sgd", *model, 0.1);
    data::data_loader loader(blank_dataset(6, 2, 2), plain(2));
    train::trainer_options o;
    o.epochs = std::numeric_limits<std::int64_t>::max();
    CHECK_ERROR(train::trainer(*model, *opt, loader, o), xgrad::invalid_argument,
                "trainer: epochs must be at most 2147483647, got 9223372036854775807");
    o.epochs = std::int64_t{1} << 31;
    CHECK_ERROR(train::trainer(*model, *opt, loader, o), xgrad::invalid_argument, "got 2147483648");
    o.epochs = std::numeric_limits<int>::max();
    CHECK_NOTHROW(train::trainer(*model, *opt, loader, o)); // constructed, not run
}

TEST_CASE("trainer limits: empty sets and a test set of another image size")
{
    generator gen(1);
    auto model = tiny_model(4, gen);
    auto opt = optim::make_optimizer("sgd", *model, 0.1);
    data::data_loader empty(blank_dataset(0, 2, 2), plain(2));
    train::trainer_options o;
    CHECK_ERROR(train::trainer(*model, *opt, empty, o), xgrad::invalid_argument,
                "trainer: the training set holds no examples");

    data::data_loader loader(blank_dataset(6, 2, 2), plain(2));
    o.test_data = blank_dataset(0, 2, 2);
    CHECK_ERROR(train::trainer(*model, *opt, loader, o), xgrad::invalid_argument,
                "trainer: the test set holds no examples");
    o.test_data = blank_dataset(3, 2, 3);
    CHECK_ERROR(train::trainer(*model, *opt, loader, o), xgrad::invalid_argument,
                "the test set's images are 1x2x3, the training set's 1x2x2");
    o.test_data = blank_dataset(3, 2, 2);
    o.epochs = 1;
    train::trainer t(*model, *opt, loader, o);
    CHECK(t.fit().metrics.size() == 1);
}

TEST_CASE("trainer: a loss that is not finite stops the run before the step, or the step is skipped")
{
    namespace fs = std::filesystem;
    const fs::path out = fs::temp_directory_path() / ("xgrad_nonfinite_" + std::to_string(::getpid()));
    fs::remove_all(out);
    generator gen(2);
    auto model = tiny_model(4, gen);
    auto opt = optim::make_optimizer("sgd", *model, 0.1);
    data::data_loader loader(blank_dataset(6, 2, 2), plain(2));
    train::trainer_options o;
    o.epochs = 3;
    o.out = out;
    // A loss that turns infinite from the 5th call on (the 2nd step of epoch 2): what a learning
    // rate that diverges does, at a known step.
    int calls = 0;
    o.loss = [&calls](const tensor& logits, const tensor& labels) {
        const tensor l = cross_entropy(logits, labels);
        return ++calls >= 5 ? l * HUGE_VAL : l;
    };
    {
        train::trainer t(*model, *opt, loader, o);
        try
        {
            (void)t.fit();
            FAIL("fit() did not stop");
        }
        catch (const train::non_finite_error& e)
        {
            const std::string msg = e.what();
            CHECK(msg.find("training stopped at epoch 2, step 2") != std::string::npos);
            CHECK(msg.find("the loss is inf") != std::string::npos);
        }
        // The last good checkpoint is epoch 1's, and the model holds finite values.
        CHECK(fs::exists(out / "checkpoint_epoch_1.safetensors"));
        CHECK(!fs::exists(out / "checkpoint_epoch_2.safetensors"));
        for (const tensor& p : model->parameters())
            for (double v : to_vector(p))
                CHECK(std::isfinite(v));
        CHECK(opt->step_count() == 4); // 3 steps in epoch 1, 1 in epoch 2: the bad one was not taken
    }
    // skip_step: the bad steps are skipped and counted; the parameters stay finite.
    fs::remove_all(out);
    calls = 0;
    auto model2 = tiny_model(4, gen);
    auto opt2 = optim::make_optimizer("sgd", *model2, 0.1);
    o.on_non_finite = train::non_finite_policy::skip_step;
    train::trainer t2(*model2, *opt2, loader, o);
    const auto r = t2.fit();
    REQUIRE(r.metrics.size() == 3);
    CHECK(r.metrics[0].skipped_steps == 0);
    CHECK(r.metrics[1].skipped_steps == 2);
    CHECK(r.metrics[2].skipped_steps == 3);
    CHECK(opt2->step_count() == 4);
    for (const tensor& p : model2->parameters())
        for (double v : to_vector(p))
            CHECK(std::isfinite(v));
    fs::remove_all(out);
}
