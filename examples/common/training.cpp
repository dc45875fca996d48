// The Fashion-MNIST training run (see training.hpp).
#include "common/training.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cmath>
#include <iomanip>
#include <ostream>
#include <sstream>

#include "common/progress.hpp"

namespace xgrad::examples
{
    const char* const fashion_mnist_classes[10] = {"T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
                                                   "Sandal",      "Shirt",   "Sneaker",  "Bag",   "Ankle boot"};

    std::shared_ptr<nn::sequential> make_fashion_model(const std::string& data_format, generator& gen)
    {
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

    void restart_with_short_blas_spin(char** argv)
    {
        if (std::getenv("OPENBLAS_THREAD_TIMEOUT") != nullptr)
            return;
        if (::setenv("OPENBLAS_THREAD_TIMEOUT", "4", 0) != 0)
            return;
        ::execv("/proc/self/exe", argv); // returns only on failure: then run as we are
    }

    std::filesystem::path checkpoint_path(const std::filesystem::path& out, std::int64_t epoch)
    {
        return out / ("checkpoint_epoch_" + std::to_string(epoch) + ".safetensors");
    }

    namespace
    {
        /// Number of rows of logits [b, classes] whose largest entry is at the label.
        std::int64_t count_correct(const tensor& logits, const tensor& labels,
                                   std::vector<std::vector<std::int64_t>>* confusion = nullptr)
        {
            const std::int64_t b = logits.size(0), k = logits.size(1);
            std::vector<float> l(static_cast<std::size_t>(b * k));
            std::vector<std::int64_t> y(static_cast<std::size_t>(b));
            to_host(logits, l.data(), dtype::float32);
            to_host(labels, y.data(), dtype::int64);
            std::int64_t correct = 0;
            for (std::int64_t i = 0; i < b; ++i)
            {
                const float* row = l.data() + i * k;
                const std::int64_t pred = std::max_element(row, row + k) - row;
                correct += pred == y[static_cast<std::size_t>(i)];
                if (confusion)
                    ++(*confusion)[static_cast<std::size_t>(y[static_cast<std::size_t>(i)])][static_cast<std::size_t>(pred)];
            }
            return correct;
        }

        device parse_device_or_throw(const std::string& name)
        {
            return parse_device(name); // throws naming the device
        }

        std::string fixed(double v, int digits)
        {
            std::ostringstream s;
            s << std::fixed << std::setprecision(digits) << v;
            return s.str();
        }
    }

    evaluation evaluate(nn::module& model, std::shared_ptr<const xgrad::data::image_dataset> data,
                        const std::string& data_format, device dev, std::int64_t batch_size)
    {
        struct mode_restore
        {
            nn::module& m;
            bool was_training;
            ~mode_restore() { m.train(was_training); }
        } restore{model, model.is_training()};
        model.eval();
        no_grad guard;
        xgrad::data::loader_options o;
        o.batch_size = batch_size;
        o.shuffle = false;
        o.data_format = data_format;
        const std::int64_t classes = data->classes;
        xgrad::data::data_loader loader(std::move(data), o);
        loader.start_epoch(0);
        evaluation r;
        r.confusion.assign(static_cast<std::size_t>(classes), std::vector<std::int64_t>(static_cast<std::size_t>(classes), 0));
        double loss_sum = 0;
        std::int64_t correct = 0, seen = 0;
        while (auto b = loader.next())
        {
            const tensor logits = model.forward(b->images.to(dev));
            const std::int64_t n = b->labels.size(0);
            loss_sum += cross_entropy(logits, b->labels.to(dev), reduction::sum).item();
            correct += count_correct(logits, b->labels, &r.confusion);
            seen += n;
        }
        r.loss = seen ? loss_sum / static_cast<double>(seen) : 0.0;
        r.accuracy = seen ? static_cast<double>(correct) / static_cast<double>(seen) : 0.0;
        return r;
    }

    train_result train(const train_config& c, std::ostream& log, bool log_is_terminal)
    {
        if (c.epochs < 1)
            throw xgrad::invalid_argument("--epochs must be at least 1, got " + std::to_string(c.epochs));
        if (c.batch_size < 1)
            throw xgrad::invalid_argument("--batch-size must be at least 1, got " + std::to_string(c.batch_size));
        if (!(c.lr > 0))
            throw xgrad::invalid_argument("--lr must be positive, got " + std::to_string(c.lr));
        if (c.data_format != "NCHW" && c.data_format != "NHWC")
            throw xgrad::invalid_argument("--format must be NCHW or NHWC, got " + c.data_format);
        if (c.threads < 0)
            throw xgrad::invalid_argument("--threads must be at least 1, got " + std::to_string(c.threads));
        if (c.threads > 0)
            set_num_threads(c.threads);
        const device dev = parse_device_or_throw(c.device);

        const auto train_data =
            std::make_shared<const xgrad::data::image_dataset>(xgrad::data::load_mnist(c.data_dir, true, c.limit));
        const auto test_data =
            std::make_shared<const xgrad::data::image_dataset>(xgrad::data::load_mnist(c.data_dir, false, c.test_limit));

        generator gen(c.seed);
        auto model = make_fashion_model(c.data_format, gen);
        model->to(dev);
        auto opt = optim::make_optimizer(c.optimizer, *model, c.lr);

        xgrad::data::loader_options lo;
        lo.batch_size = c.batch_size;
        lo.shuffle = true;
        lo.seed = c.seed;
        lo.data_format = c.data_format;
        lo.prefetch = c.prefetch;
        xgrad::data::data_loader loader(train_data, lo);
        const std::int64_t steps_per_epoch = loader.batches_per_epoch();
        const auto schedule = optim::make_schedule(c.schedule, c.lr, c.epochs * steps_per_epoch);

        train_result result;
        std::filesystem::create_directories(c.out);
        result.csv = c.out / "metrics.csv";
        result.plot = c.out / "metrics.svg";

        // What a checkpoint must agree on to continue this run exactly.
        const io::metadata_map run_meta = {
            {"data_format", c.data_format}, {"seed", std::to_string(c.seed)},
            {"batch_size", std::to_string(c.batch_size)}, {"lr", fixed(c.lr, 10)},
            {"schedule", c.schedule}, {"epochs", std::to_string(c.epochs)},
            {"limit", std::to_string(c.limit)}};

        if (!c.resume.empty())
        {
            const io::checkpoint_info info = io::load_checkpoint(c.resume, *model, opt.get());
            std::string differences;
            for (const auto& [key, value] : run_meta)
            {
                const auto it = info.metadata.find(key);
                const std::string found = it == info.metadata.end() ? "(absent)" : it->second;
                if (found != value)
                    differences += "\n  " + key + ": checkpoint " + found + ", this run " + value;
            }
            if (!differences.empty())
                throw xgrad::invalid_argument(c.resume.string() +
                                              ": the checkpoint was written by a run with other settings; resuming "
                                              "would not continue it exactly:" + differences);
            if (info.epoch >= c.epochs)
                throw xgrad::invalid_argument(c.resume.string() + ": the checkpoint has already completed " +
                                              std::to_string(info.epoch) + " of " + std::to_string(c.epochs) +
                                              " epochs: the run is complete (a different --epochs is another run, "
                                              "since the learning-rate schedule spans the whole run)");
            result.first_epoch = info.epoch;
            if (std::filesystem::exists(result.csv))
                for (const auto& m : read_metrics_csv(result.csv))
                    if (m.epoch <= info.epoch)
                        result.metrics.push_back(m);
            log << "resumed from " << c.resume.string() << " after epoch " << info.epoch << "\n";
        }

        log << "model: " << model->describe() << "\n"
            << "parameters: " << nn::count_parameters(*model) << ", training images: " << train_data->size
            << ", test images: " << test_data->size << ", batch size: " << c.batch_size << ", optimizer: "
            << opt->type_name() << " (lr " << c.lr << ", " << c.schedule << "), threads: " << get_num_threads()
            << ", format: " << c.data_format << ", device: " << to_string(dev) << "\n";

        double train_seconds = 0;
        std::int64_t train_images = 0;
        for (std::int64_t epoch = result.first_epoch; epoch < c.epochs; ++epoch)
        {
            model->train();
            loader.start_epoch(epoch);
            progress_bar bar("epoch " + std::to_string(epoch + 1) + "/" + std::to_string(c.epochs),
                             static_cast<std::size_t>(steps_per_epoch), log, log_is_terminal);
            double loss_sum = 0;
            std::int64_t correct = 0, seen = 0, done = 0;
            while (auto b = loader.next())
            {
                opt->set_lr(schedule->lr_at(epoch * steps_per_epoch + b->index));
                const tensor logits = model->forward(b->images.to(dev));
                const tensor loss = cross_entropy(logits, b->labels.to(dev));
                opt->zero_grad();
                loss.backward();
                opt->step();

                const std::int64_t n = b->labels.size(0);
                loss_sum += loss.item() * static_cast<double>(n);
                correct += count_correct(logits.detach(), b->labels);
                seen += n;
                bar.update(static_cast<std::size_t>(++done), static_cast<std::size_t>(seen), loss_sum / static_cast<double>(seen));
            }
            const double seconds = bar.finish();
            train_seconds += seconds;
            train_images += seen;

            const evaluation ev = evaluate(*model, test_data, c.data_format, dev);
            epoch_metrics m;
            m.epoch = static_cast<int>(epoch + 1);
            m.train_loss = loss_sum / static_cast<double>(seen);
            m.train_accuracy = static_cast<double>(correct) / static_cast<double>(seen);
            m.test_loss = ev.loss;
            m.test_accuracy = ev.accuracy;
            m.seconds = seconds;
            result.metrics.push_back(m);
            log << "epoch " << epoch + 1 << "/" << c.epochs << ": train loss " << fixed(m.train_loss, 4)
                << ", train accuracy " << fixed(100 * m.train_accuracy, 2) << "%, test loss "
                << fixed(m.test_loss, 4) << ", test accuracy " << fixed(100 * m.test_accuracy, 2) << "%, "
                << fixed(seconds, 1) << " s (" << fixed(static_cast<double>(seen) / seconds, 0) << " images/s)\n";

            write_metrics_csv(result.csv, result.metrics);
            write_metrics_svg(result.plot, result.metrics,
                              "xgrad: Fashion-MNIST CNN (" + c.data_format + ", " + std::string(opt->type_name()) +
                                  ", batch " + std::to_string(c.batch_size) + ")");
            result.checkpoint = checkpoint_path(c.out, epoch + 1);
            io::save_checkpoint(result.checkpoint, *model, opt.get(), epoch + 1, run_meta);
        }
        result.images_per_s = train_seconds > 0 ? static_cast<double>(train_images) / train_seconds : 0.0;
        return result;
    }
}
