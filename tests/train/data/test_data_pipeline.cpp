// The data pipeline beyond MNIST-format bytes: datasets a user implements and tensor datasets,
// CIFAR-10's binary format (on files the test writes), images of several channels with a
// normalisation per channel, and transforms: their values, their seeding (one generator per
// example, so batches do not depend on prefetching or on the run before), their errors.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "data_test_helpers.hpp"
#include "tests/support/check_error.hpp"
#include "tests/support/scratch_folder.hpp"
#include "xgrad/data/dataset.hpp"
#include "xgrad/data/transforms.hpp"
#include "xgrad/errors.hpp"
#include "xgrad/factories.hpp"
#include "xgrad/ops/shape.hpp"

namespace fs = std::filesystem;
using namespace xgrad;
using namespace xgrad::data;
using data_test::run_epoch;

namespace
{
    loader_options options(std::int64_t batch, bool prefetch = true)
    {
        loader_options o;
        o.batch_size = batch;
        o.shuffle = true;
        o.seed = 9;
        o.prefetch = prefetch;
        return o;
    }

    /// A CIFAR-10 batch file of n records: label (i + offset) % 10, pixel p of channel c is
    /// (i + offset + 7c + p) % 256.
    void write_cifar(const fs::path& path, int n, int offset, int bad_label_at = -1)
    {
        std::string bytes;
        for (int i = 0; i < n; ++i)
        {
            bytes += static_cast<char>(i == bad_label_at ? 10 : (i + offset) % 10);
            for (int c = 0; c < 3; ++c)
                for (int p = 0; p < 1024; ++p)
                    bytes += static_cast<char>((i + offset + 7 * c + p) % 256);
        }
        std::ofstream(path, std::ios::binary) << bytes;
    }

    /// A user's dataset: example i is a [2, 3, 4] image filled with i, label i % 3.
    class counting_dataset final : public dataset
    {
    public:
        explicit counting_dataset(std::int64_t n) : m_n(n) {}
        std::int64_t size() const override { return m_n; }
        example get(std::int64_t i) const override
        {
            if (i == m_bad)
                return {zeros({5}), 0};
            return {full({2, 3, 4}, static_cast<double>(i)), i % 3};
        }
        std::int64_t m_bad = -1;

    private:
        std::int64_t m_n;
    };
}

TEST_CASE("load_cifar10: the binary batches, in order, checked before they are kept")
{
    test_support::scratch_folder dir("xgrad_cifar_");
    for (int b = 1; b <= 5; ++b)
        write_cifar(dir / ("data_batch_" + std::to_string(b) + ".bin"), 3, 10 * b);
    write_cifar(dir / "test_batch.bin", 4, 0);
    const image_dataset train = load_cifar10(dir.path, true);
    CHECK(train.size == 15);
    CHECK(train.channels == 3);
    CHECK(train.rows == 32);
    CHECK(train.cols == 32);
    CHECK(train.images.size() == 15u * 3072u);
    // Example 4 is the second record of data_batch_2 (offset 20): label 1, channel 2 pixel 5 = 40.
    CHECK(train.labels[4] == 1);
    CHECK(train.images[4 * 3072 + 2 * 1024 + 5] == (1 + 20 + 14 + 5) % 256);
    dataset_options limited;
    limited.limit = 5;
    CHECK(load_cifar10(dir.path, true, limited).size == 5);
    CHECK(load_cifar10(dir.path, false).size == 4);

    // A file that is not whole records, a label that is no class, a missing file.
    {
        std::ofstream(dir / "data_batch_3.bin", std::ios::binary | std::ios::app) << "x";
    }
    CHECK_ERROR(load_cifar10(dir.path, true), xgrad::data::data_error, "data_batch_3.bin",
                "not a whole number of 3073-byte");
    write_cifar(dir / "data_batch_3.bin", 3, 0, 2);
    CHECK_ERROR(load_cifar10(dir.path, true), xgrad::data::data_error, "data_batch_3.bin", "record 2 has label 10");
    fs::remove(dir / "data_batch_3.bin");
    CHECK_ERROR(load_cifar10(dir.path, true), xgrad::data::data_error, "data_batch_3.bin");
    dataset_options too_many;
    too_many.min_size = 100;
    CHECK_ERROR(load_cifar10(dir.path, false, too_many), xgrad::data::data_error,
                "4 images, fewer than the 100 required");
    dataset_options wrong;
    wrong.rows = 28;
    CHECK_ERROR(load_cifar10(dir.path, false, wrong), xgrad::invalid_argument, "load_cifar10", "rows 28");
}

TEST_CASE("data_loader: images of three channels, normalised per channel, in both layouts")
{
    auto ds = std::make_shared<image_dataset>();
    ds->size = 2;
    ds->rows = 1;
    ds->cols = 2;
    ds->channels = 3;
    ds->images = {0, 255, 51, 102, 255, 0, /* example 1 */ 10, 20, 30, 40, 50, 60};
    ds->labels = {4, 7};
    loader_options o = options(2);
    o.shuffle = false;
    o.dtype = dtype::float64;
    o.channel_mean = {0.0, 0.5, 1.0};
    o.channel_std = {1.0, 0.5, 2.0};
    const auto value = [](double byte, double m, double s) { return (byte / 255.0 - m) / s; };
    data_loader nchw(ds, o);
    const auto b = run_epoch(nchw, 0).at(0);
    CHECK(b.images.shape() == shape_type{2, 3, 1, 2});
    const auto v = to_vector(b.images);
    CHECK(v[0] == value(0, 0.0, 1.0));
    CHECK(v[1] == value(255, 0.0, 1.0));
    CHECK(v[2] == value(51, 0.5, 0.5));
    CHECK(v[5] == value(0, 1.0, 2.0));
    CHECK(v[6] == value(10, 0.0, 1.0));
    CHECK(to_vector(b.labels) == std::vector<double>{4, 7});
    o.data_format = "NHWC";
    data_loader nhwc(ds, o);
    const auto c = run_epoch(nhwc, 0).at(0);
    CHECK(c.images.shape() == shape_type{2, 1, 2, 3});
    CHECK(to_vector(c.images) == to_vector(b.images.permute({0, 2, 3, 1}).contiguous()));

    o.channel_std = {1.0, 1.0};
    CHECK_ERROR(data_loader(ds, o), xgrad::invalid_argument, "one value per channel (3)", "got 3 and 2");
    o.channel_std = {1.0, 0.0, 1.0};
    CHECK_ERROR(data_loader(ds, o), xgrad::invalid_argument, "std must be finite and > 0", "channel 1");
}

TEST_CASE("data_loader over a user's dataset and a tensor dataset")
{
    auto source = std::make_shared<counting_dataset>(7);
    for (const bool prefetch : {true, false})
    {
        CAPTURE(prefetch);
        loader_options o = options(3, prefetch);
        o.shuffle = false;
        data_loader loader(source, o);
        CHECK(loader.images() == nullptr);
        CHECK(loader.batches_per_epoch() == 3);
        const auto batches = run_epoch(loader, 0);
        REQUIRE(batches.size() == 3);
        CHECK(batches[0].images.shape() == shape_type{3, 2, 3, 4});
        CHECK(batches[2].images.shape() == shape_type{1, 2, 3, 4});
        CHECK(to_vector(batches[1].labels) == std::vector<double>{0, 1, 2});
        CHECK(to_vector(batches[2].images)[0] == 6.0);
    }
    // NHWC lays a [C, H, W] input out channels-last.
    loader_options o = options(2);
    o.data_format = "NHWC";
    data_loader channels_last(source, o);
    CHECK(run_epoch(channels_last, 0).at(0).images.shape() == shape_type{2, 3, 4, 2});

    // An input that does not fit the batch names the example.
    source->m_bad = 4;
    o = options(7);
    o.shuffle = false;
    data_loader bad(source, o);
    bad.start_epoch(0);
    CHECK_ERROR(bad.next(), xgrad::invalid_argument, "example 4's input is [5] float32", "of one shape", "[2, 3, 4]");

    // tensor_dataset: views of the rows.
    generator gen(1);
    const tensor x = randn({5, 2, 2, 2}, gen);
    const std::vector<std::int64_t> labels{3, 1, 4, 1, 5};
    auto td = std::make_shared<tensor_dataset>(x, from_host(labels.data(), {5}, dtype::int64));
    CHECK(td->size() == 5);
    const example e = td->get(2);
    CHECK(e.label == 4);
    CHECK(to_vector(e.input) == to_vector(slice(x, 0, 2, 3)));
    o = options(5);
    o.shuffle = false;
    data_loader tl(td, o);
    CHECK(to_vector(run_epoch(tl, 0).at(0).images) == to_vector(x));
    CHECK_ERROR(td->get(5), xgrad::invalid_argument, "index 5", "[0, 5)");
    CHECK_ERROR(tensor_dataset(x, zeros({4}, dtype::int64)), xgrad::invalid_argument, "labels", "[5]", "[4] int64");
    CHECK_ERROR(tensor_dataset(zeros({5}, dtype::int64), zeros({5}, dtype::int64)), xgrad::invalid_argument,
                "inputs must be a floating");
}

TEST_CASE("transforms: flip, crop with padding, erasing, normalize, compose")
{
    // [1, 2, 3]: rows 0 1 2 / 3 4 5.
    const tensor x = arange(0, 6, 1, dtype::float64).reshape({1, 2, 3});
    generator gen(3);
    CHECK(to_vector(random_horizontal_flip(1.0)(x, gen)) == std::vector<double>{2, 1, 0, 5, 4, 3});
    CHECK(to_vector(random_horizontal_flip(0.0)(x, gen)) == to_vector(x));
    // A crop of the whole padded image is the padded image; each window position is drawn.
    CHECK(to_vector(random_crop(4, 5, 1, -1.0)(x, gen)) ==
          std::vector<double>{-1, -1, -1, -1, -1, -1, 0, 1, 2, -1, -1, 3, 4, 5, -1, -1, -1, -1, -1, -1});
    // Every one of the 3 x 3 window positions of a 2x3 crop in the 4x5 padded image occurs.
    const std::vector<double> padded{-1, -1, -1, -1, -1, -1, 0, 1, 2, -1, -1, 3, 4, 5, -1, -1, -1, -1, -1, -1};
    std::vector<int> seen(9, 0);
    for (int i = 0; i < 400; ++i)
    {
        const auto v = to_vector(random_crop(2, 3, 1, -1.0)(x, gen));
        int matches = 0;
        for (int top = 0; top < 3; ++top)
            for (int left = 0; left < 3; ++left)
            {
                bool same = true;
                for (int r = 0; r < 2; ++r)
                    for (int q = 0; q < 3; ++q)
                        same = same && v[static_cast<std::size_t>(r * 3 + q)] ==
                                           padded[static_cast<std::size_t>((top + r) * 5 + left + q)];
                if (same)
                {
                    ++seen[static_cast<std::size_t>(top * 3 + left)];
                    ++matches;
                }
            }
        CHECK(matches >= 1);
    }
    for (int count : seen)
        CHECK(count > 10); // about 44 each of 400
    // Erasing with p = 1 sets a rectangle of the given area to the value; p = 0 leaves the input.
    const tensor big = ones({3, 10, 10}, dtype::float32);
    const auto erased = to_vector(random_erasing(1.0, 0.2, 0.2, 1.0, 1.0, 7.0)(big, gen));
    int sevens = 0;
    for (double v : erased)
        sevens += v == 7.0;
    // Area 0.2 of 10x10 with aspect 1: a side of round(sqrt(20)) = 4, 16 values in each channel.
    CHECK(sevens == 3 * 16);
    CHECK(to_vector(random_erasing(0.0)(big, gen)) == to_vector(big));
    CHECK(to_vector(normalize({1.0}, {2.0})(x, gen)) == std::vector<double>{-0.5, 0.0, 0.5, 1.0, 1.5, 2.0});
    const transform both = compose({random_horizontal_flip(1.0), normalize({0.0}, {0.5})});
    CHECK(to_vector(both(x, gen)) == std::vector<double>{4, 2, 0, 10, 8, 6});

    CHECK_ERROR(random_horizontal_flip(1.5), xgrad::invalid_argument, "random_horizontal_flip", "p");
    CHECK_ERROR(random_crop(0, 3), xgrad::invalid_argument, "random_crop", "the size must be in [1, 2147483647]");
    // Sizes whose padded extent or output would overflow are refused when the transform is made
    // (before, h + 2 * padding overflowed and the message showed negative sizes).
    CHECK_ERROR(random_crop(4, 4, std::int64_t{1} << 62), xgrad::invalid_argument, "random_crop", "padding in [0,");
    CHECK_ERROR(random_crop(std::int64_t{1} << 40, 4), xgrad::invalid_argument, "random_crop", "1099511627776x4");
    CHECK_ERROR(random_crop(5, 5)(x, gen), xgrad::invalid_argument, "random_crop", "does not fit", "[1, 2, 3]");
    CHECK_ERROR(random_erasing(0.5, 0.5, 0.2), xgrad::invalid_argument, "random_erasing", "scale");
    CHECK_ERROR(normalize({0.0, 0.0}, {1.0})(x, gen), xgrad::invalid_argument, "normalize", "2 values", "1 channels");
    CHECK_ERROR(normalize({0.0}, {0.0}), xgrad::invalid_argument, "normalize", "std");
    CHECK_ERROR(random_horizontal_flip()(zeros({2, 3}), gen), xgrad::invalid_argument, "[C, H, W]", "[2, 3]");
    CHECK_ERROR(compose({transform()}), xgrad::invalid_argument, "compose", "empty");
}

TEST_CASE("data_loader with transforms: one generator per example, reproducible, prefetch or not")
{
    auto ds = data_test::make_dataset(20, 4, 4);
    loader_options o = options(6);
    o.transform = compose({random_crop(4, 4, 2), random_horizontal_flip(0.5), random_erasing(0.5)});
    data_loader a(ds, o);
    o.prefetch = false;
    data_loader b(ds, o);
    const auto ea = run_epoch(a, 3), eb = run_epoch(b, 3);
    REQUIRE(ea.size() == eb.size());
    for (std::size_t i = 0; i < ea.size(); ++i)
    {
        CHECK(to_vector(ea[i].images) == to_vector(eb[i].images));
        CHECK(to_vector(ea[i].labels) == to_vector(eb[i].labels));
    }
    // The same epoch again (as a resumed run makes it) after other epochs: the same batches.
    run_epoch(b, 0);
    const auto again = run_epoch(b, 3);
    CHECK(to_vector(again[1].images) == to_vector(ea[1].images));
    // Another epoch draws other crops.
    CHECK(to_vector(run_epoch(b, 4)[0].images) != to_vector(ea[0].images));
    // The transformed batch has the data format's layout.
    CHECK(ea[0].images.shape() == shape_type{6, 1, 4, 4});
}

TEST_CASE("data_loader: an image's transforms run on its pixels before the normalisation, as torchvision's")
{
    // torchvision pads the raw image with 0 (black) and normalises afterwards, so a padded
    // pixel of channel c becomes (0 - mean[c]) / std[c]; padding the normalised image with 0
    // would give the channel's mean instead.
    auto ds = std::make_shared<image_dataset>();
    ds->size = 1;
    ds->rows = 1;
    ds->cols = 2;
    ds->channels = 3;
    ds->images = {0, 255, 51, 102, 200, 10};
    ds->labels = {3};
    loader_options o = options(1);
    o.dtype = dtype::float64;
    o.channel_mean = {0.4914, 0.4822, 0.4465};
    o.channel_std = {0.2470, 0.2435, 0.2616};
    // A crop of the whole padded 3x4 image: its border is padding, its middle row the image.
    o.transform = random_crop(3, 4, 1);
    data_loader loader(ds, o);
    const auto v = to_vector(run_epoch(loader, 0).at(0).images);
    REQUIRE(v.size() == 3u * 3u * 4u);
    for (std::size_t c = 0; c < 3; ++c)
    {
        const double m = o.channel_mean[c], s = o.channel_std[c];
        for (std::size_t p = 0; p < 12; ++p)
        {
            CAPTURE(c);
            CAPTURE(p);
            const bool inside = p == 5 || p == 6;
            // float64 throughout: byte / 255, then (x - m) / s, as the formula computes it.
            const double expected = inside ? (ds->images[c * 2 + (p - 5)] / 255.0 - m) / s : (0.0 - m) / s;
            CHECK(v[c * 12 + p] == expected);
        }
    }
    // The transform sees [0, 1] pixels: with mean 0 and std 1 an identity list gives byte / 255.
    o.channel_mean.clear();
    o.channel_std.clear();
    o.mean = 0.0;
    o.std = 1.0;
    o.transform = compose({});
    data_loader raw(ds, o);
    const auto r = to_vector(run_epoch(raw, 0).at(0).images);
    for (std::size_t i = 0; i < r.size(); ++i)
        CHECK(r[i] == ds->images[i] / 255.0);
}

TEST_CASE("data_loader: a dataset whose size() is beyond what a loader can order is refused by name")
{
    loader_options o;
    o.batch_size = 4;
    // Before, 2^61 examples reached start_epoch as an std::length_error from the order's vector.
    CHECK_ERROR(data_loader(std::make_shared<counting_dataset>(std::int64_t{1} << 61), o), xgrad::invalid_argument,
                "data_loader: the dataset's size() is 2305843009213693952", "outside [0, 1099511627776]");
    CHECK_ERROR(data_loader(std::make_shared<counting_dataset>(-1), o), xgrad::invalid_argument, "size() is -1");
}
