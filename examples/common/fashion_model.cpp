// The Fashion-MNIST classifier (see fashion_model.hpp).
#include "fashion_model.hpp"

namespace xgrad::examples
{
    const char* const fashion_mnist_classes[10] = {"T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
                                                   "Sandal",      "Shirt",   "Sneaker",  "Bag",   "Ankle boot"};

    std::shared_ptr<nn::sequential> make_fashion_model(const std::string& data_format, generator& gen,
                                                       const std::string& precision)
    {
        if (precision != "f32" && precision != "bf16")
            throw invalid_argument("precision must be f32 or bf16, got '" + precision + "'");
        const bool bf16 = precision == "bf16";
        auto model = std::make_shared<nn::sequential>();
        const auto conv = [&](std::int64_t in, std::int64_t out) {
            nn::conv2d_options o(in, out, 3);
            o.padding = {1, 1};
            o.data_format = data_format;
            if (bf16)
                o.compute_dtype = dtype::bfloat16;
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
        model->add("flatten", std::make_shared<nn::flatten>(1, -1, data_format));
        nn::linear_options fc1(64 * 7 * 7, 128);
        if (bf16)
            fc1.compute_dtype = dtype::float32; // back from bfloat16 activations
        model->add("fc1", std::make_shared<nn::linear>(fc1, gen));
        model->add("relu3", std::make_shared<nn::relu>());
        model->add("fc2", std::make_shared<nn::linear>(128, 10, gen));
        // bn + relu + pool as one op each (the same function, an activation tensor fewer).
        nn::fuse(*model);
        return model;
    }

    data::image_dataset load_fashion_data(const std::filesystem::path& dir, bool train, std::int64_t limit)
    {
        data::dataset_options o;
        o.classes = 10;
        o.limit = limit;
        o.rows = fashion_image_rows;
        o.cols = fashion_image_cols;
        o.min_size = 1; // an empty set would fail later with a message about steps or batches
        try
        {
            return data::load_mnist(dir, train, o);
        }
        catch (const data::data_error& e)
        {
            throw data::data_error(std::string(train ? "training set: " : "test set: ") + e.what());
        }
    }

    std::string load_notes(const io::load_weights_result& loaded)
    {
        std::string notes;
        if (!loaded.converted.empty())
            notes = std::to_string(loaded.converted.size()) + " tensors cast to the model's dtypes";
        if (!loaded.kept.empty())
        {
            notes += notes.empty() ? "" : "; ";
            for (std::size_t i = 0; i < loaded.kept.size(); ++i)
                notes += (i ? ", " : "") + loaded.kept[i];
            notes += " not in the file: kept";
        }
        if (!loaded.checksummed)
            notes += std::string(notes.empty() ? "" : "; ") +
                     "no checksums in the file (another tool wrote it): loaded unchecked";
        return notes.empty() ? notes : " (" + notes + ")";
    }
}
