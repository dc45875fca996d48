// The data_loader (xgrad/data/loader.hpp): epoch orders, batch sizes, normalisation, layouts,
// dtypes, prefetching on a background thread against computing in place, abandoning epochs,
// errors from the worker. When Debian's Fashion-MNIST files are installed, their known counts
// and statistics. IDX files are tested in test_data_idx.cpp (same executable, test_data).
#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <ctime>
#include <filesystem>
#include <memory>
#include <numeric>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "data_test_helpers.hpp"
#include "tests/support/check_error.hpp"
#include "xgrad/data/idx.hpp"
#include "xgrad/data/loader.hpp"
#include "xgrad/errors.hpp"
#include "xgrad/factories.hpp"

namespace fs = std::filesystem;
using namespace xgrad;
using namespace xgrad::data;
using namespace data_test;

namespace
{
    loader_options plain_options(std::int64_t batch_size)
    {
        loader_options o;
        o.batch_size = batch_size;
        o.mean = 0.5;
        o.std = 0.25;
        return o;
    }

    /// The examples of an epoch in visiting order, read from the int64 labels (label = example
    /// when classes >= size).
    std::vector<std::int64_t> order_of(const std::vector<batch>& batches)
    {
        std::vector<std::int64_t> order;
        for (const batch& b : batches)
            for (const double v : to_vector(b.labels))
                order.push_back(static_cast<std::int64_t>(v));
        return order;
    }

    bool same_batches(const std::vector<batch>& a, const std::vector<batch>& b)
    {
        const auto same = [](const batch& x, const batch& y) {
            return x.index == y.index && x.images.shape() == y.images.shape() && x.images.dtype() == y.images.dtype() &&
                   to_vector(x.images) == to_vector(y.images) && to_vector(x.labels) == to_vector(y.labels);
        };
        return std::equal(a.begin(), a.end(), b.begin(), b.end(), same);
    }

    std::vector<std::int64_t> iota_vector(std::int64_t n)
    {
        std::vector<std::int64_t> v(static_cast<std::size_t>(n));
        std::iota(v.begin(), v.end(), std::int64_t{0});
        return v;
    }
}

TEST_CASE("data_loader: every example once per epoch, batch sizes, drop_last")
{
    const auto ds = make_dataset(103);
    for (const bool prefetch : {true, false})
    {
        CAPTURE(prefetch);
        loader_options o = plain_options(10);
        o.prefetch = prefetch;
        data_loader loader(ds, o);
        CHECK(loader.size() == 103);
        CHECK(loader.batches_per_epoch() == 11);
        CHECK(loader.options().batch_size == 10);
        for (std::int64_t epoch : {0, 1, 5})
        {
            const std::vector<batch> batches = run_epoch(loader, epoch);
            REQUIRE(batches.size() == 11);
            for (std::size_t k = 0; k < batches.size(); ++k)
            {
                CHECK(batches[k].index == static_cast<std::int64_t>(k));
                const std::int64_t b = k < 10 ? 10 : 3;
                CHECK(batches[k].images.shape() == shape_type{b, 1, 2, 3});
                CHECK(batches[k].labels.shape() == shape_type{b});
            }
            std::vector<std::int64_t> order = order_of(batches);
            std::sort(order.begin(), order.end());
            CHECK(order == iota_vector(103));
            // After the end, next() keeps answering nullopt.
            CHECK_FALSE(loader.next().has_value());
            CHECK_FALSE(loader.next().has_value());
        }

        o.drop_last = true;
        data_loader dropping(ds, o);
        CHECK(dropping.batches_per_epoch() == 10);
        const std::vector<batch> batches = run_epoch(dropping, 3);
        REQUIRE(batches.size() == 10);
        for (const batch& b : batches)
            CHECK(b.labels.numel() == 10);
        const std::vector<std::int64_t> order = order_of(batches);
        CHECK(std::set<std::int64_t>(order.begin(), order.end()).size() == 100);
        // The examples kept are the first 100 of the same shuffled order.
        o.drop_last = false;
        data_loader keeping(ds, o);
        const std::vector<std::int64_t> full = order_of(run_epoch(keeping, 3));
        CHECK(order == std::vector<std::int64_t>(full.begin(), full.begin() + 100));
    }
    // A batch larger than the dataset, and an empty dataset.
    data_loader one(ds, plain_options(1000));
    CHECK(one.batches_per_epoch() == 1);
    CHECK(run_epoch(one, 0).at(0).labels.numel() == 103);
    loader_options o = plain_options(1000);
    o.drop_last = true;
    data_loader none(ds, o);
    CHECK(none.batches_per_epoch() == 0);
    CHECK(run_epoch(none, 0).empty());
    data_loader empty(make_dataset(0), plain_options(4));
    CHECK(run_epoch(empty, 0).empty());
}

TEST_CASE("data_loader: the order depends on (seed, epoch) alone")
{
    const auto ds = make_dataset(50);
    loader_options o = plain_options(8);
    o.seed = 42;
    data_loader a(ds, o);
    data_loader b(ds, o);
    const auto a0 = order_of(run_epoch(a, 0));
    const auto a1 = order_of(run_epoch(a, 1));
    const auto a2 = order_of(run_epoch(a, 2));
    // b resumes at epoch 2 directly, then goes back to 0: the same orders.
    CHECK(order_of(run_epoch(b, 2)) == a2);
    CHECK(order_of(run_epoch(b, 0)) == a0);
    CHECK(a0 != a1);
    CHECK(a1 != a2);
    const std::vector<std::int64_t> identity = iota_vector(50);
    CHECK(a0 != identity);

    o.seed = 43;
    data_loader c(ds, o);
    CHECK(order_of(run_epoch(c, 0)) != a0);

    o.shuffle = false;
    data_loader d(ds, o);
    CHECK(order_of(run_epoch(d, 0)) == identity);
    CHECK(order_of(run_epoch(d, 7)) == identity);
}

TEST_CASE("data_loader: normalised values, layouts and dtypes")
{
    const auto ds = make_dataset(5, 2, 3);
    const double mean = 0.5, sd = 0.25;
    // Exact values of (byte / 255 - mean) / std for the bytes 0, 51, 255.
    {
        auto small = std::make_shared<image_dataset>(image_dataset{1, 1, 3, 10, {0, 51, 255}, {4}});
        loader_options o = plain_options(1);
        o.dtype = dtype::float64;
        data_loader loader(small, o);
        const auto batches = run_epoch(loader, 0);
        REQUIRE(batches.size() == 1);
        const std::vector<double> v = to_vector(batches[0].images);
        REQUIRE(v.size() == 3);
        CHECK(v[0] == doctest::Approx(-2.0).epsilon(1e-12));
        CHECK(v[1] == doctest::Approx(-1.2).epsilon(1e-12));
        CHECK(v[2] == doctest::Approx(2.0).epsilon(1e-12));
        CHECK(to_vector(batches[0].labels) == std::vector<double>{4.0});
        CHECK(batches[0].labels.dtype() == dtype::int64);
    }

    struct dtype_case
    {
        dtype dt;
        double tolerance; // relative rounding of the dtype
    };
    for (const dtype_case c : {dtype_case{dtype::float32, 1e-7}, dtype_case{dtype::float64, 1e-15},
                               dtype_case{dtype::float16, 1e-3}, dtype_case{dtype::bfloat16, 4e-3}})
        for (const std::string format : {"NCHW", "NHWC"})
        {
            CAPTURE(c.dt);
            CAPTURE(format);
            loader_options o = plain_options(2);
            o.dtype = c.dt;
            o.data_format = format;
            data_loader loader(ds, o);
            for (const batch& b : run_epoch(loader, 1))
            {
                const std::int64_t n = b.labels.numel();
                CHECK(b.images.dtype() == c.dt);
                CHECK(b.labels.dtype() == dtype::int64);
                CHECK(b.images.shape() == (format == "NCHW" ? shape_type{n, 1, 2, 3} : shape_type{n, 2, 3, 1}));
                const std::vector<double> v = to_vector(b.images);
                const std::vector<double> labels = to_vector(b.labels);
                for (std::int64_t i = 0; i < n; ++i)
                {
                    const auto example = static_cast<std::int64_t>(labels[static_cast<std::size_t>(i)]);
                    for (std::int64_t y = 0; y < 2; ++y)
                        for (std::int64_t x = 0; x < 3; ++x)
                        {
                            // Row-major index of (i, 0, y, x) in [n, 1, 2, 3] or (i, y, x, 0) in [n, 2, 3, 1].
                            const std::int64_t at = format == "NCHW" ? ((i * 1 + 0) * 2 + y) * 3 + x
                                                                     : ((i * 2 + y) * 3 + x) * 1 + 0;
                            const std::uint8_t byte = ds->images[static_cast<std::size_t>(example * 6 + y * 3 + x)];
                            const double expected = (byte / 255.0 - mean) / sd;
                            CHECK(v[static_cast<std::size_t>(at)] ==
                                  doctest::Approx(expected).epsilon(c.tolerance).scale(1.0));
                        }
                }
            }
        }
}

TEST_CASE("data_loader: prefetching gives the batches computed in place")
{
    const auto ds = make_dataset(77, 3, 4);
    for (const dtype dt : {dtype::float32, dtype::float16})
        for (const bool shuffle : {true, false})
        {
            loader_options o = plain_options(9);
            o.dtype = dt;
            o.shuffle = shuffle;
            o.seed = 5;
            o.prefetch = true;
            data_loader on(ds, o);
            o.prefetch = false;
            data_loader off(ds, o);
            for (std::int64_t epoch : {0, 1, 2})
                CHECK(same_batches(run_epoch(on, epoch), run_epoch(off, epoch)));
        }
}

TEST_CASE("data_loader: abandoning an epoch, destroying mid-epoch")
{
    const auto ds = make_dataset(60);
    for (const bool prefetch : {true, false})
    {
        CAPTURE(prefetch);
        loader_options o = plain_options(7);
        o.prefetch = prefetch;
        data_loader reference(ds, o);
        const auto epoch1 = run_epoch(reference, 1);
        const auto epoch2 = run_epoch(reference, 2);

        data_loader loader(ds, o);
        loader.start_epoch(2);
        REQUIRE(loader.next().has_value());
        REQUIRE(loader.next().has_value());
        // Abandoned after two batches: epoch 1 starts from its first batch.
        CHECK(same_batches(run_epoch(loader, 1), epoch1));
        // Abandoned at once, twice in a row, then restarted at the same epoch.
        loader.start_epoch(1);
        loader.start_epoch(2);
        CHECK(same_batches(run_epoch(loader, 2), epoch2));
        loader.start_epoch(1);
        REQUIRE(loader.next().has_value());
        CHECK(same_batches(run_epoch(loader, 1), epoch1));
    }
    // Destroyed before any epoch, right after starting one, holding a batch, and with the
    // worker busy on a large batch.
    const auto big = make_dataset(256, 64, 64);
    for (int round = 0; round < 20; ++round)
    {
        {
            data_loader loader(ds, plain_options(7));
        }
        {
            data_loader loader(ds, plain_options(7));
            loader.start_epoch(round);
        }
        std::optional<batch> kept;
        {
            data_loader loader(big, plain_options(100));
            loader.start_epoch(round);
            kept = loader.next();
            loader.start_epoch(round + 1); // the worker may be building batch 1 of the old epoch
        }
        REQUIRE(kept.has_value());
        CHECK(kept->labels.numel() == 100); // the batch outlives the loader
    }
}

TEST_CASE("data_loader: errors")
{
    const auto ds = make_dataset(10);
    const auto reject = [&](const loader_options& o, const char* part) {
        CHECK_ERROR(data_loader(ds, o), xgrad::invalid_argument, "data_loader", part);
    };
    loader_options o = plain_options(4);
    o.batch_size = 0;
    reject(o, "batch_size must be >= 1, got 0");
    o = plain_options(4);
    o.std = 0;
    reject(o, "std must be finite and > 0");
    o.std = std::nan("");
    reject(o, "std must be finite and > 0");
    o = plain_options(4);
    o.mean = INFINITY;
    reject(o, "mean must be finite");
    o = plain_options(4);
    o.data_format = "NCWH";
    reject(o, "\"NCWH\"");
    o = plain_options(4);
    o.dtype = dtype::int64;
    reject(o, "dtype must be floating");
    CHECK_ERROR(data_loader(std::shared_ptr<const image_dataset>(), plain_options(4)), xgrad::invalid_argument, "null");
    CHECK_ERROR(data_loader(std::shared_ptr<const xgrad::data::dataset>(), plain_options(4)), xgrad::invalid_argument,
                "null");
    auto short_images = make_dataset(10);
    short_images->images.pop_back();
    CHECK_ERROR(data_loader(short_images, plain_options(4)), xgrad::invalid_argument, "images hold 59 bytes");
    auto short_labels = make_dataset(10);
    short_labels->labels.pop_back();
    CHECK_ERROR(data_loader(short_labels, plain_options(4)), xgrad::invalid_argument, "labels hold 9 bytes");
    // Sizes whose product overflows are named as such (checked arithmetic), not compared wrapped.
    auto huge = make_dataset(0);
    huge->rows = std::int64_t{1} << 32;
    huge->cols = std::int64_t{1} << 32;
    CHECK_ERROR(data_loader(huge, plain_options(4)), xgrad::invalid_argument, "data_loader: the dataset's rows * cols",
                "4294967296 * 4294967296 overflows");
    huge->rows = 1 << 20;
    huge->cols = 1 << 20;
    huge->size = std::int64_t{1} << 40;
    CHECK_ERROR(data_loader(huge, plain_options(4)), xgrad::invalid_argument, "size * channels * rows * cols",
                "overflows");

    data_loader loader(ds, plain_options(4));
    CHECK_THROWS_AS(loader.next(), std::logic_error);
    CHECK_ERROR(loader.start_epoch(-1), xgrad::invalid_argument, "epoch must be >= 0");

    // A hand-built dataset with a label out of range fails at the batch holding it; with
    // prefetch the error arises on the worker thread and next() rethrows it, every time.
    auto bad = make_dataset(30, 2, 3, 10);
    bad->labels[25] = 200;
    for (const bool prefetch : {true, false})
    {
        CAPTURE(prefetch);
        loader_options bo = plain_options(10);
        bo.shuffle = false;
        bo.prefetch = prefetch;
        data_loader l(bad, bo);
        l.start_epoch(0);
        CHECK(l.next().has_value());
        CHECK(l.next().has_value());
        CHECK_ERROR(l.next(), data_error, "label 200 of example 25");
        CHECK_ERROR(l.next(), data_error, "label 200 of example 25");
        l.start_epoch(1); // recovers until the same batch
        CHECK(l.next()->index == 0);
    }
}

TEST_CASE("Fashion-MNIST from Debian's dataset-fashion-mnist, when installed")
{
    const fs::path dir = default_fashion_mnist_dir;
    if (!fs::is_directory(dir))
    {
        MESSAGE("skipped: " << dir.string() << " does not exist (install dataset-fashion-mnist)");
        return;
    }
    const auto start = std::chrono::steady_clock::now();
    const std::clock_t cpu_start = std::clock();
    const auto train = std::make_shared<const image_dataset>(load_mnist(dir, true));
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    MESSAGE("loaded the Fashion-MNIST training set in "
            << seconds << " s (" << double(std::clock() - cpu_start) / CLOCKS_PER_SEC << " s of CPU time)");
    CHECK(train->size == 60000);
    CHECK(train->rows == 28);
    CHECK(train->cols == 28);
    CHECK(train->images.size() == 60000u * 28 * 28);
    std::vector<std::int64_t> counts(10);
    for (const std::uint8_t label : train->labels)
    {
        REQUIRE(label < 10);
        ++counts[label];
    }
    CHECK(counts == std::vector<std::int64_t>(10, 6000));
    // The loader's default normalisation is this training set's pixel mean and deviation.
    double sum = 0, sum_sq = 0;
    for (const std::uint8_t b : train->images)
    {
        sum += b / 255.0;
        sum_sq += (b / 255.0) * (b / 255.0);
    }
    const double mean = sum / static_cast<double>(train->images.size());
    const double sd = std::sqrt(sum_sq / static_cast<double>(train->images.size()) - mean * mean);
    const loader_options defaults;
    CHECK(mean == doctest::Approx(defaults.mean).epsilon(0.001));
    CHECK(sd == doctest::Approx(defaults.std).epsilon(0.001));

    const image_dataset test = load_mnist(dir, false);
    CHECK(test.size == 10000);
    CHECK(test.rows == 28);
    CHECK(test.cols == 28);
    std::vector<std::int64_t> test_counts(10);
    for (const std::uint8_t label : test.labels)
        ++test_counts[label];
    CHECK(test_counts == std::vector<std::int64_t>(10, 1000));

    // One prefetched epoch over the training set visits every example once.
    data_loader loader(train, loader_options{});
    loader.start_epoch(0);
    std::int64_t seen = 0, batches = 0;
    std::vector<std::int64_t> label_counts(10);
    while (auto b = loader.next())
    {
        ++batches;
        seen += b->labels.numel();
        for (const double v : to_vector(b->labels))
            ++label_counts[static_cast<std::size_t>(v)];
    }
    CHECK(seen == 60000);
    CHECK(batches == loader.batches_per_epoch());
    CHECK(label_counts == counts);
}
