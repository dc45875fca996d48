// xgrad::train's building blocks: classifier metrics (tally, accuracy, evaluate_classifier
// over images or any dataset, and the mode it restores), checkpoint paths and the
// resume-compatibility check, and the trainer's options (schedule by epoch, a plateau scheduler
// and its resume, no output folder, no test data, a test set of either kind, callbacks, errors).
// Whole training runs are in test_training.cpp.
#include <doctest/doctest.h>

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "tests/support/check_error.hpp"
#include "xgrad/layers.hpp"
#include "xgrad/train.hpp"
#include "xgrad/xgrad.hpp"

namespace fs = std::filesystem;
using namespace xgrad;

namespace
{
    tensor floats(const std::vector<float>& v, const shape_type& shape)
    {
        return from_host(v.data(), shape, dtype::float32);
    }

    tensor int64s(const std::vector<std::int64_t>& v)
    {
        return from_host(v.data(), {static_cast<std::int64_t>(v.size())}, dtype::int64);
    }

    /// n images of 2x2 pixels, 3 classes; pixel values and labels from a seeded generator.
    std::shared_ptr<const data::image_dataset> tiny_dataset(std::int64_t n, std::uint64_t seed)
    {
        generator gen(seed);
        data::image_dataset d;
        d.size = n;
        d.rows = 2;
        d.cols = 2;
        d.classes = 3;
        for (std::int64_t i = 0; i < n * 4; ++i)
            d.images.push_back(static_cast<std::uint8_t>(gen.below(256)));
        for (std::int64_t i = 0; i < n; ++i)
            d.labels.push_back(static_cast<std::uint8_t>(gen.below(3)));
        return std::make_shared<const data::image_dataset>(std::move(d));
    }

    /// flatten + linear(4 -> 3), recording the mode each forward ran in; throws on demand.
    class probe final : public nn::module
    {
    public:
        explicit probe(generator& gen)
        {
            m_linear = register_module("linear", std::make_shared<nn::linear>(4, 3, gen));
        }
        tensor forward(const tensor& x) override
        {
            modes.push_back(is_training());
            if (throw_in_forward)
                throw std::runtime_error("probe: forward failed on purpose");
            return m_linear->forward(x.reshape({x.size(0), 4}));
        }
        std::vector<bool> modes;
        bool throw_in_forward = false;

    private:
        std::shared_ptr<nn::linear> m_linear;
    };

    /// The images of `d` as the loader normalises them, [n, 1, 2, 2].
    tensor all_images(const data::image_dataset& d)
    {
        data::loader_options o;
        std::vector<float> v;
        for (const std::uint8_t b : d.images)
            v.push_back(static_cast<float>((b / 255.0 - o.mean) / o.std));
        return floats(v, {d.size, 1, d.rows, d.cols});
    }

    tensor all_labels(const data::image_dataset& d)
    {
        std::vector<std::int64_t> y(d.labels.begin(), d.labels.end());
        return int64s(y);
    }

    struct temp_dir
    {
        fs::path path;
        explicit temp_dir(const std::string& name)
        {
            path = fs::temp_directory_path() / ("xgrad_test_train_" + name + "_" + std::to_string(::getpid()));
            fs::remove_all(path);
            fs::create_directories(path);
        }
        ~temp_dir() { fs::remove_all(path); }
    };
}

TEST_CASE("classifier_tally counts predictions, ties to the lowest class, and sums the given loss")
{
    train::classifier_tally tally(3);
    // Rows predict 2, 0 (tie of 0 and 1), 1, 2; labels 2, 1, 1, 0.
    tally.add(floats({0, 1, 5, 3, 3, 1, -1, 2, 0, 0, 4, 4.5f}, {4, 3}), int64s({2, 1, 1, 0}), 6.0);
    CHECK(tally.examples() == 4);
    CHECK(tally.correct() == 2);
    const auto r = tally.result();
    CHECK(r.accuracy == doctest::Approx(0.5));
    CHECK(r.loss == doctest::Approx(1.5));
    const std::vector<std::vector<std::int64_t>> confusion = {{0, 0, 1}, {1, 1, 0}, {0, 0, 1}};
    CHECK(r.confusion == confusion);

    // Without a given loss, the summed cross-entropy is computed.
    train::classifier_tally own(3);
    const tensor logits = floats({0.5f, -1, 2, 1, 1, 1}, {2, 3});
    const tensor labels = int64s({2, 2});
    own.add(logits, labels);
    CHECK(own.result().loss == doctest::Approx(cross_entropy(logits, labels).item()).epsilon(1e-6));
    CHECK(train::accuracy(logits, labels) == doctest::Approx(0.5)); // row 1 ties: class 0, not 2

    // An empty tally reports zeros.
    const auto none = train::classifier_tally(2).result();
    CHECK(none.examples == 0);
    CHECK(none.accuracy == 0);
    CHECK(none.loss == 0);
}

TEST_CASE("classifier_tally refuses bad shapes and labels, and a refused batch counts nothing")
{
    CHECK_ERROR(train::classifier_tally(0), xgrad::invalid_argument, "classes must be at least 1");
    train::classifier_tally tally(3);
    CHECK_ERROR(tally.add(floats({0, 1}, {1, 2}), int64s({0})), xgrad::invalid_argument, "logits must be [batch, 3]",
                "[1, 2]");
    CHECK_ERROR(tally.add(floats({0, 1, 2}, {3}), int64s({0})), xgrad::invalid_argument, "logits");
    CHECK_ERROR(tally.add(floats({0, 1, 2, 3, 4, 5}, {2, 3}), int64s({0})), xgrad::invalid_argument,
                "labels must be [2]");
    CHECK_ERROR(tally.add(floats({0, 1, 2, 3, 4, 5}, {2, 3}), int64s({1, 3}), 0.0), xgrad::invalid_argument,
                "label 3 of row 1", "[0, 3)");
    CHECK_ERROR(tally.add(floats({0, 1, 2}, {1, 3}), int64s({-1}), 0.0), xgrad::invalid_argument, "label -1");
    CHECK(tally.examples() == 0);
    CHECK(tally.result().confusion == std::vector<std::vector<std::int64_t>>(3, std::vector<std::int64_t>(3, 0)));
    CHECK_ERROR(train::accuracy(floats({1, 2}, {2}), int64s({0, 1})), xgrad::invalid_argument, "accuracy");
}

TEST_CASE("evaluate_classifier: the metrics of the whole dataset, in eval mode, whatever the batch size")
{
    const auto data = tiny_dataset(37, 5);
    generator gen(3);
    probe model(gen);
    tensor logits;
    {
        no_grad guard;
        logits = model.forward(all_images(*data));
    }
    const tensor labels = all_labels(*data);
    train::classifier_tally whole(3);
    whole.add(logits, labels);
    const auto want = whole.result();

    for (const std::int64_t batch : {1, 5, 37, 500})
    {
        CAPTURE(batch);
        model.modes.clear();
        train::evaluate_options o;
        o.batch_size = batch;
        const auto got = train::evaluate_classifier(model, data, o);
        CHECK(got.examples == 37);
        CHECK(got.accuracy == want.accuracy);
        CHECK(got.confusion == want.confusion);
        CHECK(got.loss == doctest::Approx(want.loss).epsilon(1e-5));
        CHECK(model.modes.size() == static_cast<std::size_t>((37 + batch - 1) / batch));
        for (const bool training : model.modes)
            CHECK_FALSE(training);
        CHECK(model.is_training()); // restored
    }
    model.eval();
    train::evaluate_classifier(model, data);
    CHECK_FALSE(model.is_training()); // restored to eval, not switched to train
}

TEST_CASE("evaluate_classifier restores the mode when the model throws, and names bad input")
{
    const auto data = tiny_dataset(4, 1);
    generator gen(1);
    probe model(gen);
    model.throw_in_forward = true;
    CHECK_ERROR(train::evaluate_classifier(model, data), std::runtime_error, "failed on purpose");
    CHECK(model.is_training());
    model.throw_in_forward = false;
    CHECK_ERROR(train::evaluate_classifier(model, std::shared_ptr<const data::image_dataset>()),
                xgrad::invalid_argument, "null");
    CHECK_ERROR(train::evaluate_classifier(model, std::shared_ptr<const data::dataset>()), xgrad::invalid_argument,
                "null");
    train::evaluate_options o;
    o.batch_size = 0;
    CHECK_ERROR(train::evaluate_classifier(model, data, o), xgrad::invalid_argument, "batch_size");
    CHECK(model.is_training());
}

TEST_CASE("evaluate_classifier over a data::dataset: the same metrics as over the same images")
{
    // The tensor dataset holds the images as the loader normalises the image_dataset's bytes.
    const auto images = tiny_dataset(23, 9);
    const auto examples = std::make_shared<const data::tensor_dataset>(all_images(*images), all_labels(*images));
    generator gen(8);
    probe model(gen);
    train::evaluate_options o;
    o.batch_size = 7;
    const auto want = train::evaluate_classifier(model, images, o);
    const auto got = train::evaluate_classifier(model, examples, o);
    CHECK(got.examples == 23);
    CHECK(got.accuracy == want.accuracy);
    CHECK(got.confusion == want.confusion); // 3 classes, counted from the logits' width
    CHECK(got.loss == doctest::Approx(want.loss).epsilon(1e-6));
    // An empty dataset: no example, no batch, no classes.
    const auto none = std::make_shared<const data::tensor_dataset>(zeros({0, 1, 2, 2}), zeros({0}, dtype::int64));
    CHECK(train::evaluate_classifier(model, none, o).examples == 0);
}

TEST_CASE("trainer: a test set that is a data::dataset, and the refusals of both kinds at once or empty")
{
    const auto images = tiny_dataset(12, 6);
    const auto test_images = tiny_dataset(9, 7);
    const auto test_examples = std::make_shared<const data::tensor_dataset>(all_images(*test_images),
                                                                            all_labels(*test_images));
    data::loader_options lo;
    lo.batch_size = 4;
    lo.prefetch = false;
    // The same run twice, the test set given each way: the same test metrics.
    std::vector<train::epoch_metrics> runs[2];
    for (int way = 0; way < 2; ++way)
    {
        generator gen(11);
        probe model(gen);
        optim::sgd opt(model, {0.1, 0.0, 0.0, 0.0, false});
        data::data_loader loader(images, lo);
        train::trainer_options o;
        o.epochs = 2;
        if (way == 0)
            o.test_data = test_images;
        else
            o.test_dataset = test_examples;
        runs[way] = train::trainer(model, opt, loader, o).fit().metrics;
    }
    for (std::size_t e = 0; e < 2; ++e)
    {
        CHECK(std::isfinite(runs[1][e].test_loss));
        CHECK(runs[1][e].test_accuracy == runs[0][e].test_accuracy);
        CHECK(runs[1][e].test_loss == doctest::Approx(runs[0][e].test_loss).epsilon(1e-6));
    }
    generator gen(12);
    probe model(gen);
    optim::sgd opt(model, {0.1, 0.0, 0.0, 0.0, false});
    data::data_loader loader(images, lo);
    train::trainer_options both;
    both.test_data = test_images;
    both.test_dataset = test_examples;
    CHECK_ERROR(train::trainer(model, opt, loader, both), xgrad::invalid_argument, "test_data and test_dataset");
    train::trainer_options empty;
    empty.test_dataset = std::make_shared<const data::tensor_dataset>(zeros({0, 1, 2, 2}), zeros({0}, dtype::int64));
    CHECK_ERROR(train::trainer(model, opt, loader, empty), xgrad::invalid_argument, "test_dataset is set but empty");
}

TEST_CASE("checkpoint_path and check_resume_compatible")
{
    CHECK(train::checkpoint_path("run", 3) == fs::path("run") / "checkpoint_epoch_3.safetensors");
    CHECK_ERROR(train::checkpoint_path("run", -1), xgrad::invalid_argument, "epoch", "-1");

    const io::metadata_map expected = {{"seed", "0"}, {"batch_size", "64"}, {"lr", "0.001"}};
    io::metadata_map found = expected;
    found["format"] = "xgrad-checkpoint"; // keys the run does not name are ignored
    CHECK_NOTHROW(train::check_resume_compatible("a.safetensors", found, expected));
    found["seed"] = "7";
    found.erase("lr");
    CHECK_ERROR(train::check_resume_compatible("dir/a.safetensors", found, expected), xgrad::invalid_argument,
                "dir/a.safetensors", "seed: checkpoint 7, this run 0", "lr: checkpoint (absent), this run 0.001");
    try
    {
        train::check_resume_compatible("a", found, expected);
    }
    catch (const std::exception& e)
    {
        CHECK(std::string(e.what()).find("batch_size") == std::string::npos); // equal keys are not listed
    }

    // A key that may grow: a larger count passes, a smaller one, a non-count or another key not.
    const io::metadata_map run = {{"epochs", "5"}, {"seed", "0"}};
    const std::vector<std::string> grow{"epochs"};
    CHECK_NOTHROW(train::check_resume_compatible("a", {{"epochs", "2"}, {"seed", "0"}}, run, grow));
    CHECK_ERROR(train::check_resume_compatible("a", {{"epochs", "9"}, {"seed", "0"}}, run, grow),
                xgrad::invalid_argument, "epochs: checkpoint 9, this run 5 (it may only grow)");
    CHECK_ERROR(train::check_resume_compatible("a", {{"epochs", "two"}, {"seed", "0"}}, run, grow),
                xgrad::invalid_argument, "epochs: checkpoint two");
    CHECK_ERROR(train::check_resume_compatible("a", {{"epochs", "2"}, {"seed", "0"}}, run), xgrad::invalid_argument,
                "epochs: checkpoint 2, this run 5");
    CHECK_ERROR(train::check_resume_compatible("a", {{"epochs", "5"}, {"seed", "1"}}, run, {"seed"}),
                xgrad::invalid_argument, "seed: checkpoint 1, this run 0 (it may only grow)");
}

TEST_CASE("checkpoint_data_format: the layout a checkpoint names, validated before a model is built with it")
{
    const fs::path dir = fs::temp_directory_path() / ("xgrad_test_data_format_" + std::to_string(::getpid()));
    fs::create_directories(dir);
    const fs::path file = dir / "ckpt.safetensors";
    const std::string where = file.string();
    const auto save_with = [&](const io::metadata_map& metadata) {
        io::save_safetensors(file, {{"model.w", ones({1})}}, metadata);
    };

    save_with({{"data_format", "NHWC"}});
    CHECK(train::checkpoint_data_format(file) == "NHWC");
    save_with({{"data_format", "bogus"}});
    CHECK_ERROR(train::checkpoint_data_format(file), io::format_error, where.c_str(), "metadata 'data_format'",
                "'bogus'", "accepted values 'NCHW', 'NHWC'");
    save_with({{"data_format", "nchw"}});
    CHECK_ERROR(train::checkpoint_data_format(file), io::format_error, where.c_str(), "'nchw'");
    save_with({{"epoch", "1"}});
    CHECK_ERROR(train::checkpoint_data_format(file), io::format_error, where.c_str(), "'data_format' is missing",
                "'NCHW', 'NHWC'");
    CHECK_ERROR(train::checkpoint_data_format("in-memory", {{"data_format", ""}}), io::format_error, "in-memory",
                "'data_format' is ''");
    fs::remove_all(dir);
}

TEST_CASE("trainer: a per-epoch schedule, no output folder, no test data, a custom loss and a callback")
{
    const auto data = tiny_dataset(12, 2);
    generator gen(4);
    probe model(gen);
    optim::sgd_options so;
    so.lr = 0.1;
    optim::sgd opt(model, so);
    data::loader_options lo;
    lo.batch_size = 5;
    lo.prefetch = false;
    data::data_loader loader(data, lo);
    optim::step_lr schedule(0.1, 1, 0.5); // 0.1, 0.05, 0.025 by epoch

    train::trainer_options o;
    o.epochs = 3;
    o.schedule = &schedule;
    o.schedule_by = train::schedule_unit::epoch;
    std::int64_t loss_calls = 0;
    o.loss = [&](const tensor& logits, const tensor& labels) {
        ++loss_calls;
        return cross_entropy(logits, labels) * 2.0;
    };
    std::vector<double> lr_seen;
    std::vector<int> epochs_seen;
    o.on_epoch_end = [&](const train::epoch_metrics& m) {
        lr_seen.push_back(opt.lr());
        epochs_seen.push_back(m.epoch);
    };
    train::trainer t(model, opt, loader, o);
    const auto r = t.fit();
    CHECK(loss_calls == 9); // 3 batches (5, 5, 2) per epoch
    CHECK(epochs_seen == std::vector<int>{1, 2, 3});
    REQUIRE(lr_seen.size() == 3);
    CHECK(lr_seen[0] == doctest::Approx(0.1));
    CHECK(lr_seen[1] == doctest::Approx(0.05));
    CHECK(lr_seen[2] == doctest::Approx(0.025));
    CHECK(t.epochs_done() == 3);
    REQUIRE(r.metrics.size() == 3);
    for (const auto& m : r.metrics)
    {
        CHECK(std::isnan(m.test_loss));
        CHECK(std::isnan(m.test_accuracy));
        CHECK(m.train_loss > 0); // twice the cross-entropy: the custom loss is what is reported
    }
    CHECK(r.csv.empty());
    CHECK(r.checkpoint.empty());
    CHECK(opt.step_count() == 9);
    CHECK(model.is_training());
    CHECK_ERROR(t.fit(), xgrad::invalid_argument, "all 3 epochs are done");
}

TEST_CASE("trainer: bad options, and a resume refused before anything is loaded")
{
    temp_dir tmp("options");
    const auto data = tiny_dataset(8, 3);
    generator gen(5);
    probe model(gen);
    auto opt = optim::make_optimizer("adam", model, 1e-2);
    data::loader_options lo;
    lo.batch_size = 4;
    lo.prefetch = false;
    data::data_loader loader(data, lo);

    train::trainer_options o;
    o.epochs = 0;
    CHECK_ERROR(train::trainer(model, *opt, loader, o), xgrad::invalid_argument, "epochs must be at least 1");
    o.epochs = 1;
    o.test_batch_size = 0;
    CHECK_ERROR(train::trainer(model, *opt, loader, o), xgrad::invalid_argument, "test_batch_size");
    data::loader_options dl = lo;
    dl.batch_size = 9;
    dl.drop_last = true;
    data::data_loader empty_loader(data, dl);
    o.test_batch_size = 500;
    CHECK_ERROR(train::trainer(model, *opt, empty_loader, o), xgrad::invalid_argument, "no batch per epoch");

    // Epoch 1 of a 2-epoch run with seed "1", then a resume by a run that says seed "2".
    o.epochs = 2;
    o.out = tmp.path / "a";
    o.run_metadata = {{"seed", "1"}};
    o.test_data = data;
    std::ostringstream log;
    o.log = &log;
    {
        train::trainer_options first = o;
        first.epochs = 1;
        train::trainer t(model, *opt, loader, first);
        const auto r = t.fit();
        CHECK(fs::exists(r.checkpoint));
        CHECK(fs::exists(r.csv));
        CHECK(fs::exists(r.plot));
        CHECK(std::isfinite(r.metrics[0].test_loss));
        CHECK(log.str().find("epoch 1/1: train loss ") != std::string::npos);
    }
    const fs::path ckpt = train::checkpoint_path(o.out, 1);
    generator other_gen(99);
    probe fresh(other_gen);
    auto fresh_opt = optim::make_optimizer("adam", fresh, 1e-2);
    const tensor before = fresh.parameters()[0];
    o.run_metadata = {{"seed", "2"}};
    train::trainer t(fresh, *fresh_opt, loader, o);
    const std::string ckpt_name = ckpt.string();
    CHECK_ERROR(t.resume(ckpt), xgrad::invalid_argument, ckpt_name.c_str(), "seed: checkpoint 1, this run 2");
    CHECK(to_vector(fresh.parameters()[0]) == to_vector(before));
    CHECK(t.epochs_done() == 0);

    // The same metadata resumes, taking epoch 1's metrics from the CSV.
    o.run_metadata = {{"seed", "1"}};
    train::trainer again(fresh, *fresh_opt, loader, o);
    CHECK(again.resume(ckpt).epoch == 1);
    CHECK(again.epochs_done() == 1);
    REQUIRE(again.history().size() == 1);
    CHECK(to_vector(fresh.parameters()[0]) != to_vector(before));
    const auto r = again.fit();
    CHECK(r.first_epoch == 1);
    CHECK(r.metrics.size() == 2);
    CHECK(train::read_metrics_csv(r.csv).size() == 2);
}

TEST_CASE("trainer: a plateau scheduler sets each epoch's rate, and a resumed run continues its sequence")
{
    temp_dir tmp("plateau");
    const auto data = tiny_dataset(10, 6);
    data::loader_options lo;
    lo.batch_size = 4;
    lo.prefetch = false;
    // The first epoch's loss is the first best; nothing beats it by 1e9, so with patience 0 every
    // later epoch halves the rate for the next: 0.1, 0.1, 0.05, 0.025.
    optim::plateau_options po;
    po.mode = "max";
    po.threshold_mode = "abs";
    po.threshold = 1e9;
    po.patience = 0;
    po.factor = 0.5;
    const auto run = [&](std::int64_t epochs, const fs::path& resume_from) {
        generator gen(8);
        auto model = std::make_shared<probe>(gen);
        auto opt = optim::make_optimizer("sgd", *model, 0.1);
        data::data_loader loader(data, lo);
        optim::reduce_lr_on_plateau plateau(0.1, po);
        train::trainer_options o;
        o.epochs = epochs;
        o.out = tmp.path / "run";
        o.plateau = &plateau;
        o.plateau_on = train::plateau_metric::train_loss;
        train::trainer t(*model, *opt, loader, o);
        if (!resume_from.empty())
            t.resume(resume_from);
        const auto r = t.fit();
        return std::make_pair(r.metrics, to_vector(model->parameters()[0]));
    };
    const auto whole = run(4, {});
    REQUIRE(whole.first.size() == 4);
    const double want[] = {0.1, 0.1, 0.05, 0.025};
    for (std::size_t e = 0; e < 4; ++e)
        CHECK(whole.first[e].lr == want[e]);
    // Resumed after epoch 2 by a fresh process: the same rates and bit for bit the same weights.
    const auto resumed = run(4, train::checkpoint_path(tmp.path / "run", 2));
    REQUIRE(resumed.first.size() == 4);
    CHECK(resumed.first[2].lr == want[2]);
    CHECK(resumed.first[3].lr == want[3]);
    CHECK(resumed.second == whole.second);
    const auto metadata = io::read_safetensors_metadata(train::checkpoint_path(tmp.path / "run", 4));
    CHECK(metadata.at("lr_scheduler.num_bad_epochs") == "0");
    CHECK(metadata.at("lr_scheduler.last_epoch") == "4");

    // Refusals: a checkpoint without the plateau's state or with state it rejects (named with
    // the file), and options that cannot work together.
    generator gen(9);
    probe model(gen);
    auto opt = optim::make_optimizer("sgd", model, 0.1);
    data::data_loader loader(data, lo);
    const fs::path bare = tmp.path / "bare.safetensors";
    io::save_checkpoint(bare, model, opt.get(), 1);
    optim::reduce_lr_on_plateau plateau(0.1, po);
    train::trainer_options o;
    o.epochs = 3;
    o.plateau = &plateau;
    o.plateau_on = train::plateau_metric::train_accuracy;
    train::trainer t(model, *opt, loader, o);
    const std::string bare_name = bare.string();
    CHECK_ERROR(t.resume(bare), xgrad::invalid_argument, bare_name.c_str(), "no plateau state", "lr_scheduler.");
    const fs::path bad = tmp.path / "bad.safetensors";
    io::save_checkpoint(bad, model, opt.get(), 1, {{"lr_scheduler.lr", "-1"}});
    const std::string bad_name = bad.string();
    CHECK_ERROR(t.resume(bad), xgrad::invalid_argument, bad_name.c_str(), "reduce_lr_on_plateau", "'lr'",
                "'best' is missing");
    CHECK(t.epochs_done() == 0);
    CHECK(plateau.last_epoch() == 0);
    optim::constant_lr constant(0.1);
    train::trainer_options both = o;
    both.schedule = &constant;
    CHECK_ERROR(train::trainer(model, *opt, loader, both), xgrad::invalid_argument, "both schedule and plateau");
    train::trainer_options on_test = o;
    on_test.plateau_on = train::plateau_metric::test_loss;
    CHECK_ERROR(train::trainer(model, *opt, loader, on_test), xgrad::invalid_argument, "plateau_on", "no test set");
    train::trainer_options clash = o;
    clash.run_metadata = {{"lr_scheduler.best", "1"}};
    CHECK_ERROR(train::trainer(model, *opt, loader, clash), xgrad::invalid_argument, "'lr_scheduler.best'");
}

TEST_CASE("topk_correct and topk_accuracy: the label among the k largest logits")
{
    // Row 0: label 2 is the 4th largest; row 1: label 0 ties the largest; row 2: label 1 is the
    // largest; row 3: a NaN elsewhere ranks above the label; row 4: the label's logit is NaN.
    const double nan = std::nan("");
    const std::vector<double> l{0.5,  3.0, 0.2, 1.0, 2.0, 1.0,  2.0, 0.0, 0.0, 9.0,
                                -1.0, 1.0, nan, 0.1, 0.3, -1.0, 1.0, 2.0, nan, 0.0};
    const tensor logits = from_host(l.data(), {5, 4}, dtype::float64);
    const std::vector<std::int64_t> y{2, 0, 1, 2, 2};
    const tensor labels = from_host(y.data(), {5}, dtype::int64);
    CHECK(train::topk_correct(logits, labels, 1) == 2); // rows 1 (tie) and 2
    CHECK(train::topk_correct(logits, labels, 2) == 3); // and row 3 (only the NaN above)
    CHECK(train::topk_correct(logits, labels, 3) == 3); // row 0: three entries above its label
    CHECK(train::topk_correct(logits, labels, 4) == 4); // every row but the NaN label
    CHECK(train::topk_accuracy(logits, labels, 4) == doctest::Approx(0.8));
    // float32 and bfloat16 logits rank the same.
    CHECK(train::topk_correct(logits.to(dtype::float32), labels, 2) == 3);
    CHECK(train::topk_accuracy(zeros({0, 4}), zeros({0}, dtype::int64), 2) == 0.0);
    CHECK_ERROR(train::topk_correct(logits, labels, 5), xgrad::invalid_argument, "k must be in [1, 4]", "got 5");
    CHECK_ERROR(train::topk_correct(logits, labels, 0), xgrad::invalid_argument, "k must be in [1, 4]");
    const std::vector<std::int64_t> bad{2, 0, 4, 2, 2};
    CHECK_ERROR(train::topk_correct(logits, from_host(bad.data(), {5}, dtype::int64), 1), xgrad::invalid_argument,
                "label 4 of row 2");
    CHECK_ERROR(train::topk_correct(logits, labels.slice(0, 0, 3), 1), xgrad::invalid_argument, "labels must be [5]");
}
