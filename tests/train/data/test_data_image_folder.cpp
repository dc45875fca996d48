// image_folder (xgrad/data/image_folder.hpp): the classes and files torchvision's ImageFolder
// finds, in its order; the examples through a loader with transforms, reproducible; the folder
// errors; and a short training run on a folder of written images.
#include <doctest/doctest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "data_test_helpers.hpp"
#include "image_test_helpers.hpp"
#include "tests/support/check_error.hpp"
#include "tests/support/scratch_folder.hpp"
#include "xgrad/data/image_folder.hpp"
#include "xgrad/data/loader.hpp"
#include "xgrad/data/transforms.hpp"
#include "xgrad/errors.hpp"
#include "xgrad/factories.hpp"
#include "xgrad/nn/linear.hpp"
#include "xgrad/optim/sgd.hpp"
#include "xgrad/train/trainer.hpp"

namespace fs = std::filesystem;
using namespace xgrad;
using namespace xgrad::data;
using data_test::run_epoch;
using image_test::write_jpeg;
using image_test::write_png;

namespace
{
    /// A w x h RGB image of one colour, as 8-bit samples.
    std::vector<unsigned char> solid(int w, int h, unsigned char r, unsigned char g, unsigned char b)
    {
        std::vector<unsigned char> s;
        for (int i = 0; i < w * h; ++i)
            s.insert(s.end(), {r, g, b});
        return s;
    }

    std::vector<float> values(const tensor& t)
    {
        const tensor c = t.to(dtype::float32).contiguous();
        return {c.data<float>(), c.data<float>() + c.numel()};
    }

    /// A dataset's examples through a transform of no randomness (an evaluation's resize and
    /// normalisation).
    class transformed final : public dataset
    {
    public:
        transformed(std::shared_ptr<const dataset> source, transform t) : m_source(std::move(source)), m_t(std::move(t))
        {
        }
        std::int64_t size() const override { return m_source->size(); }
        example get(std::int64_t i) const override
        {
            example e = m_source->get(i);
            generator unused(0);
            e.input = m_t(e.input, unused);
            return e;
        }

    private:
        std::shared_ptr<const dataset> m_source;
        transform m_t;
    };

    /// A linear classifier of [b, 3, 8, 8] images.
    class flat_linear final : public nn::module
    {
    public:
        flat_linear(std::int64_t classes, generator& gen)
        {
            m_linear = register_module("linear", std::make_shared<nn::linear>(3 * 8 * 8, classes, gen));
        }
        tensor forward(const tensor& x) override { return m_linear->forward(x.reshape({x.size(0), 3 * 8 * 8})); }

    private:
        std::shared_ptr<nn::linear> m_linear;
    };
}

TEST_CASE("image_folder: torchvision's classes, files and order")
{
    test_support::scratch_folder dir("xgrad_image_folder_");
    const fs::path root = dir.path;
    fs::create_directories(root / "dog" / "sub");
    fs::create_directories(root / "cat");
    // Values that name the file: red = 10 * k for the k-th file written.
    const auto png = [&](const fs::path& p, unsigned char red) {
        REQUIRE(write_png(p, 4, 2, PNG_COLOR_TYPE_RGB, 8, solid(4, 2, red, 0, 255)));
    };
    png(root / "dog" / "z.png", 10);
    png(root / "dog" / "a.png", 20);
    REQUIRE(write_jpeg(root / "dog" / "B.JPG", 4, 2, 3, solid(4, 2, 30, 0, 255)));
    png(root / "dog" / "sub" / "c.jpeg", 40); // a PNG named .jpeg: read by its bytes
    png(root / "cat" / "y.PNG", 50);
    REQUIRE(write_jpeg(root / "cat" / "x.jpeg", 4, 2, 3, solid(4, 2, 60, 0, 255)));
    std::ofstream(root / "dog" / "notes.txt") << "not listed";
    std::ofstream(root / "cat" / "image.png.bak") << "not listed";
    fs::create_directories(root / "cat" / "folder.png"); // a folder, not a file
    std::ofstream(root / "README.png") << "a file at the root is no class";

    const image_folder ds(root);
    CHECK(ds.classes() == std::vector<std::string>{"cat", "dog"});
    // Folder by folder (dog before dog/sub), each folder's names sorted by their bytes ('B' < 'a').
    const std::vector<fs::path> want{root / "cat" / "x.jpeg", root / "cat" / "y.PNG", root / "dog" / "B.JPG",
                                     root / "dog" / "a.png",  root / "dog" / "z.png", root / "dog" / "sub" / "c.jpeg"};
    CHECK(ds.files() == want);
    CHECK(ds.labels() == std::vector<std::int64_t>{0, 0, 1, 1, 1, 1});
    REQUIRE(ds.size() == 6);
    const example e = ds.get(3); // dog/a.png
    CHECK(e.label == 1);
    CHECK(e.input.shape() == shape_type{3, 2, 4});
    CHECK(values(e.input)[0] == 20 / 255.0f);
    CHECK(values(e.input)[8 * 2] == 1.0f);
    image_options gray;
    gray.channels = 1;
    const image_folder one(root, gray);
    CHECK(one.get(3).input.shape() == shape_type{1, 2, 4});
    CHECK(values(one.get(3).input)[0] == static_cast<float>(0.299 * (20 / 255.0) + 0.114 * (255 / 255.0)));
    CHECK_ERROR(ds.get(6), xgrad::invalid_argument, "image_folder", "index 6", "[0, 6)");

    // A broken file fails its get, naming it, and the others still read.
    std::ofstream(root / "dog" / "z.png", std::ios::trunc) << "broken";
    const image_folder with_broken(root);
    const std::string z = (root / "dog" / "z.png").string();
    CHECK_ERROR(with_broken.get(4), data_error, z.c_str(), "not a PNG or JPEG image");
    CHECK(with_broken.get(5).label == 1);

    // A class folder with no image, no class folder, no folder at all.
    fs::create_directories(root / "bird");
    std::ofstream(root / "bird" / "a.txt") << "no image";
    CHECK_ERROR(image_folder(root), data_error, "bird", "holds no .png, .jpg or .jpeg file");
    test_support::scratch_folder empty("xgrad_image_folder_empty_");
    CHECK_ERROR(image_folder(empty.path), data_error, "no class folder");
    CHECK_ERROR(image_folder(empty / "missing"), data_error, "missing", "not a folder");
    image_options bad;
    bad.channels = 0;
    CHECK_ERROR(image_folder(root, bad), xgrad::invalid_argument, "image_folder", "channels must be 1, 3 or 4");
}

TEST_CASE("image_folder through a loader with transforms: batches, reproducible, training")
{
    // Two classes told apart by colour: reddish and bluish 12x10 images, each a little
    // different, half of them PNG and half JPEG.
    test_support::scratch_folder dir("xgrad_image_train_");
    for (const char* cls : {"blue", "red"})
        fs::create_directories(dir / cls);
    for (int i = 0; i < 8; ++i)
    {
        const auto shade = static_cast<unsigned char>(150 + 10 * i);
        const auto low = static_cast<unsigned char>(20 + 5 * i);
        const auto blue = solid(12, 10, low, low, shade), red = solid(12, 10, shade, low, low);
        if (i % 2 == 0)
        {
            REQUIRE(write_png(dir / "blue" / ("b" + std::to_string(i) + ".png"), 12, 10, PNG_COLOR_TYPE_RGB, 8, blue));
            REQUIRE(write_png(dir / "red" / ("r" + std::to_string(i) + ".png"), 12, 10, PNG_COLOR_TYPE_RGB, 8, red));
        }
        else
        {
            REQUIRE(write_jpeg(dir / "blue" / ("b" + std::to_string(i) + ".jpg"), 12, 10, 3, blue, 90));
            REQUIRE(write_jpeg(dir / "red" / ("r" + std::to_string(i) + ".jpg"), 12, 10, 3, red, 90));
        }
    }
    auto folder = std::make_shared<const image_folder>(dir.path);
    REQUIRE(folder->size() == 16);

    loader_options o;
    o.batch_size = 4;
    o.seed = 5;
    o.transform = compose({random_resized_crop(8, 8, 0.5, 1.0), random_horizontal_flip(0.5),
                           color_jitter(0.2, 0.2, 0.2, 0.02), normalize({0.5, 0.5, 0.5}, {0.25, 0.25, 0.25})});
    data_loader a(folder, o);
    const auto epoch = run_epoch(a, 0);
    REQUIRE(epoch.size() == 4);
    CHECK(epoch[0].images.shape() == shape_type{4, 3, 8, 8});
    // The labels are the folders' classes (blue 0, red 1), whatever the shuffle.
    std::vector<int> per_class(2, 0);
    for (const auto& b : epoch)
        for (const float l : values(b.labels))
            ++per_class[static_cast<std::size_t>(l)];
    CHECK(per_class == std::vector<int>{8, 8});
    // The same seed without prefetch and with three workers: the same batches; another epoch,
    // other draws.
    o.prefetch = false;
    data_loader b(folder, o);
    o.prefetch = true;
    o.num_workers = 3;
    data_loader c(folder, o);
    const auto eb = run_epoch(b, 0), ec = run_epoch(c, 0);
    for (std::size_t i = 0; i < epoch.size(); ++i)
    {
        CHECK(values(eb[i].images) == values(epoch[i].images));
        CHECK(values(ec[i].images) == values(epoch[i].images));
        CHECK(values(eb[i].labels) == values(epoch[i].labels));
    }
    CHECK(values(run_epoch(b, 1)[0].images) != values(epoch[0].images));
    o.data_format = "NHWC";
    data_loader channels_last(folder, o);
    CHECK(run_epoch(channels_last, 0)[0].images.shape() == shape_type{4, 8, 8, 3});

    // A few epochs of a linear classifier through the trainer: the colour separates the
    // classes, so the training loss falls and the folder is learnt.
    o.data_format = "NCHW";
    data_loader loader(folder, o);
    generator gen(3);
    flat_linear model(2, gen);
    optim::sgd opt(model, {0.05, 0.9, 0.0, 0.0, false});
    train::trainer_options to;
    to.epochs = 6;
    // Evaluated as torchvision's evaluation pipelines do: resized, centre-cropped, normalised.
    to.test_dataset = std::make_shared<const transformed>(
        folder, compose({resize_shorter_side(8), center_crop(8, 8), normalize({0.5}, {0.25})}));
    const auto fit = train::trainer(model, opt, loader, to).fit();
    REQUIRE(fit.metrics.size() == 6);
    CHECK(fit.metrics.back().train_loss < 0.5 * fit.metrics.front().train_loss);
    CHECK(fit.metrics.back().train_accuracy == 1.0);
    CHECK(fit.metrics.back().test_accuracy == 1.0);
}
