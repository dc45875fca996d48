// The data loader's worker threads (loader_options::num_workers): with any number of workers
// the batches are the ones made on the calling thread, in order, epoch after epoch and after
// an abandoned epoch; the workers really do prepare batches at the same time; a failing batch
// is reported when the caller reaches it, after the batches before it; bad counts are refused.
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "data_test_helpers.hpp"
#include "tests/support/check_error.hpp"
#include "xgrad/data/dataset.hpp"
#include "xgrad/data/transforms.hpp"
#include "xgrad/errors.hpp"
#include "xgrad/factories.hpp"

using namespace xgrad;
using namespace xgrad::data;
using data_test::run_epoch;

namespace
{
    loader_options options(std::int64_t batch, std::int64_t workers, bool prefetch = true)
    {
        loader_options o;
        o.batch_size = batch;
        o.seed = 5;
        o.prefetch = prefetch;
        o.num_workers = workers;
        return o;
    }

    /// Example i: a [1, 4, 4] image of value i, label i % 3; get(bad) throws.
    class plain_dataset : public dataset
    {
    public:
        explicit plain_dataset(std::int64_t n, std::int64_t bad = -1) : m_n(n), m_bad(bad) {}
        std::int64_t size() const override { return m_n; }
        example get(std::int64_t i) const override
        {
            if (i == m_bad)
                throw data_error("example " + std::to_string(i) + " is unreadable");
            return {full({1, 4, 4}, static_cast<double>(i)), i % 3};
        }

    private:
        std::int64_t m_n, m_bad;
    };

    /// Counts how many get() calls are in flight at once. The first call waits (at most
    /// `patience`) for a second to start, so that with two or more workers the overlap is
    /// certain and with one the test ends with a count of 1 instead of hanging.
    class overlap_dataset final : public dataset
    {
    public:
        explicit overlap_dataset(std::chrono::milliseconds patience) : m_patience(patience) {}
        std::int64_t size() const override { return 8; }
        example get(std::int64_t i) const override
        {
            std::unique_lock<std::mutex> lock(m_mutex);
            const int now = ++m_in_flight;
            m_most = std::max(m_most, now);
            m_cv.notify_all();
            if (!m_waited)
            {
                m_waited = true;
                m_cv.wait_for(lock, m_patience, [this] { return m_most >= 2; });
            }
            --m_in_flight;
            return {full({1, 2, 2}, static_cast<double>(i)), 0};
        }
        int most() const
        {
            std::lock_guard<std::mutex> lock(m_mutex);
            return m_most;
        }

    private:
        std::chrono::milliseconds m_patience;
        mutable std::mutex m_mutex;
        mutable std::condition_variable m_cv;
        mutable int m_in_flight = 0, m_most = 0;
        mutable bool m_waited = false;
    };

    void check_same(const std::vector<batch>& a, const std::vector<batch>& b)
    {
        REQUIRE(a.size() == b.size());
        for (std::size_t i = 0; i < a.size(); ++i)
        {
            CHECK(a[i].index == b[i].index);
            CHECK(to_vector(a[i].images) == to_vector(b[i].images));
            CHECK(to_vector(a[i].labels) == to_vector(b[i].labels));
        }
    }
}

TEST_CASE("data_loader workers: any number of them gives the batches of the calling thread, in order")
{
    auto images = data_test::make_dataset(37, 4, 4);
    auto source = std::make_shared<plain_dataset>(37);
    for (const bool with_transform : {false, true})
    {
        INFO("transform ", with_transform);
        loader_options base = options(5, 1, false);
        if (with_transform)
            base.transform = compose({random_crop(4, 4, 1), random_horizontal_flip(0.5), random_erasing(0.5)});
        data_loader inline_images(images, base), inline_source(source, base);
        for (const std::int64_t workers : {1, 2, 3, 8})
        {
            INFO("workers ", workers);
            loader_options o = base;
            o.prefetch = true;
            o.num_workers = workers;
            data_loader a(images, o), b(source, o);
            for (const std::int64_t epoch : {0, 1})
            {
                check_same(run_epoch(a, epoch), run_epoch(inline_images, epoch));
                check_same(run_epoch(b, epoch), run_epoch(inline_source, epoch));
            }
            // An epoch abandoned after one batch, while workers build the next ones: the
            // next epoch is unaffected.
            a.start_epoch(3);
            CHECK(a.next().has_value());
            check_same(run_epoch(a, 2), run_epoch(inline_images, 2));
            // Destroyed mid-epoch with batches in flight: joins without hanging.
            auto c = std::make_unique<data_loader>(source, o);
            c->start_epoch(0);
            CHECK(c->next().has_value());
            c.reset();
        }
    }
}

TEST_CASE("data_loader workers: batches are prepared at the same time")
{
    for (const std::int64_t workers : {1, 3})
    {
        INFO("workers ", workers);
        // Three workers meet at once (the wait ends when the second get starts; 20 s is only
        // the bound on a machine that stalls); one worker waits out a short patience alone.
        auto ds = std::make_shared<overlap_dataset>(std::chrono::milliseconds(workers == 1 ? 300 : 20000));
        data_loader loader(ds, options(1, workers));
        CHECK(run_epoch(loader, 0).size() == 8u);
        if (workers == 1)
            CHECK(ds->most() == 1);
        else
            CHECK(ds->most() >= 2);
    }
}

TEST_CASE("data_loader workers: a failing batch is thrown when reached, after the batches before it")
{
    // Example 13 is in batch 13 / 4 = 3 without shuffling.
    auto source = std::make_shared<plain_dataset>(30, 13);
    loader_options o = options(4, 4);
    o.shuffle = false;
    data_loader loader(source, o);
    loader.start_epoch(0);
    for (int k = 0; k < 3; ++k)
    {
        const auto b = loader.next();
        REQUIRE(b.has_value());
        CHECK(b->index == k);
    }
    CHECK_ERROR(loader.next(), data_error, "example 13 is unreadable");
    CHECK_ERROR(loader.next(), data_error, "example 13 is unreadable");
    // A new epoch starts afresh (and meets the same example again at batch 3).
    loader.start_epoch(1);
    CHECK(loader.next().has_value());
}

TEST_CASE("data_loader workers: the count is checked")
{
    auto source = std::make_shared<plain_dataset>(4);
    for (const std::int64_t bad : {std::int64_t{0}, std::int64_t{-1}, loader_options::max_workers + 1})
    {
        const std::string want = "num_workers must be in [1, 256], got " + std::to_string(bad);
        CHECK_ERROR(data_loader(source, options(2, bad)), xgrad::invalid_argument, want.c_str());
    }
}
