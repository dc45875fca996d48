// docs/tutorial.md walks through this file: a small CNN for MNIST-format images, trained
// with xgrad from an outside CMake project.
//
//   my_cnn [DATA_DIR] [LIMIT] [EPOCHS]
#include <xgrad/layers.hpp>
#include <xgrad/train.hpp>
#include <xgrad/xgrad.hpp>

#include <cstdlib>
#include <iostream>
#include <memory>
#include <string>

namespace nn = xgrad::nn;

// [model]
std::shared_ptr<nn::sequential> make_model(xgrad::generator& gen)
{
    auto model = std::make_shared<nn::sequential>();
    nn::conv2d_options conv(1, 16, 3); // 1 -> 16 channels, 3x3 kernel
    conv.padding = {1, 1};             // keep 28x28
    model->add("conv", std::make_shared<nn::conv2d>(conv, gen));
    model->add("bn", std::make_shared<nn::batch_norm2d>(16));
    model->add("relu", std::make_shared<nn::relu>());
    model->add("pool", std::make_shared<nn::max_pool2d>(2)); // -> 14x14
    model->add("gap", std::make_shared<nn::adaptive_avg_pool2d>(std::array<std::int64_t, 2>{7, 7}));
    model->add("flatten", std::make_shared<nn::flatten>());
    model->add("fc", std::make_shared<nn::linear>(16 * 7 * 7, 10, gen));
    nn::fuse(*model); // bn, relu and pool run as one fused op
    return model;
}
// [model]

int main(int argc, char** argv)
{
    const std::string data_dir = argc > 1 ? argv[1] : xgrad::data::default_fashion_mnist_dir;
    const std::int64_t limit = argc > 2 ? std::atoll(argv[2]) : 0;
    const std::int64_t epochs = argc > 3 ? std::atoll(argv[3]) : 1;
    try
    {
        // [data]
        auto train = std::make_shared<const xgrad::data::image_dataset>(
            xgrad::data::load_mnist(data_dir, /*train=*/true, limit));
        const auto test = xgrad::data::load_mnist(data_dir, /*train=*/false, limit);
        xgrad::data::loader_options lo;
        lo.batch_size = 64;
        lo.seed = 1;
        xgrad::data::data_loader loader(train, lo);
        // [data]

        // [train]
        xgrad::generator gen(1); // the whole run follows from this seed
        auto model = make_model(gen);
        xgrad::optim::adam_options ao;
        ao.lr = 2e-3;
        ao.weight_decay = 0.01;
        xgrad::optim::adam opt(*model, ao, /*decoupled_weight_decay=*/true); // AdamW
        for (std::int64_t epoch = 0; epoch < epochs; ++epoch)
        {
            model->train();
            loader.start_epoch(epoch);
            double loss_sum = 0;
            std::int64_t seen = 0;
            while (auto batch = loader.next())
            {
                const xgrad::tensor loss = xgrad::cross_entropy(model->forward(batch->images), batch->labels);
                opt.zero_grad();
                loss.backward();
                opt.step();
                loss_sum += loss.item() * static_cast<double>(batch->labels.size(0));
                seen += batch->labels.size(0);
            }
            std::cout << "epoch " << epoch + 1 << ": train loss " << loss_sum / static_cast<double>(seen) << "\n";
        }
        // [train]

        // [evaluate]
        // Mean cross-entropy, accuracy and confusion matrix, in eval mode and without a graph.
        const auto metrics =
            xgrad::train::evaluate_classifier(*model, std::make_shared<const xgrad::data::image_dataset>(test));
        std::cout << "test loss: " << metrics.loss << ", test accuracy: " << 100.0 * metrics.accuracy << "%\n";
        // [evaluate]

        // [save]
        xgrad::io::save_checkpoint("my_cnn.safetensors", *model, &opt, epochs);
        auto restored = make_model(gen);
        xgrad::io::load_checkpoint("my_cnn.safetensors", *restored);
        // [save]
    }
    catch (const std::exception& e)
    {
        std::cerr << "my_cnn: " << e.what() << "\n";
        return 1;
    }
    return 0;
}
