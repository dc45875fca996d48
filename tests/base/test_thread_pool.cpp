// Tests for xgrad/thread_pool.hpp: coverage of every index, chunk sizes, exceptions, nesting,
// thread-count changes, and concurrent callers.
#include "xgrad/thread_pool.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <limits>
#include <mutex>
#include <numeric>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

using xgrad::get_num_threads;
using xgrad::parallel_for;
using xgrad::set_num_threads;

namespace
{
    /// Restores the thread count a test started with.
    struct thread_count_guard
    {
        int m_saved = get_num_threads();
        ~thread_count_guard() { set_num_threads(m_saved); }
    };

    struct chunk_record
    {
        std::int64_t m_begin;
        std::int64_t m_end;
    };
}

TEST_CASE("thread_pool: the default thread count is positive") { CHECK(get_num_threads() >= 1); }

TEST_CASE("thread_pool: every index is covered exactly once")
{
    thread_count_guard guard;
    const std::int64_t begins[] = {-7, 0, 13};
    const std::int64_t lengths[] = {0, 1, 2, 3, 5, 8, 10, 63, 64, 100, 1000, 12345};
    const std::int64_t grains[] = {1, 2, 3, 7, 64, 1000};
    const int thread_counts[] = {1, 2, 3, 4, 7, 16};
    int failures = 0;
    for (int threads : thread_counts)
    {
        set_num_threads(threads);
        REQUIRE(get_num_threads() == threads);
        for (std::int64_t begin : begins)
            for (std::int64_t length : lengths)
                for (std::int64_t grain : grains)
                {
                    const std::int64_t end = begin + length;
                    std::vector<std::atomic<int>> hits(static_cast<std::size_t>(length));
                    std::mutex chunks_mutex;
                    std::vector<chunk_record> chunks;
                    parallel_for(begin, end, grain, [&](std::int64_t b, std::int64_t e) {
                        {
                            std::lock_guard<std::mutex> lock(chunks_mutex);
                            chunks.push_back({b, e});
                        }
                        for (std::int64_t i = b; i < e; ++i)
                            hits[static_cast<std::size_t>(i - begin)].fetch_add(1);
                    });
                    bool ok = std::all_of(hits.begin(), hits.end(),
                                          [](const std::atomic<int>& h) { return h.load() == 1; });
                    // Chunk count and sizes.
                    ok = ok && static_cast<int>(chunks.size()) <= threads;
                    if (length == 0)
                        ok = ok && chunks.empty();
                    else
                        ok = ok && !chunks.empty();
                    for (const chunk_record& c : chunks)
                        ok = ok && c.m_begin < c.m_end && c.m_end - c.m_begin >= std::min(grain, length);
                    // Ranges shorter than 2 * grain run as one chunk; otherwise the range is
                    // split into min(threads, length / grain) chunks.
                    if (length > 0)
                    {
                        const auto want = std::max<std::int64_t>(1, std::min<std::int64_t>(threads, length / grain));
                        ok = ok && static_cast<std::int64_t>(chunks.size()) == want;
                    }
                    if (!ok && ++failures <= 5)
                        MESSAGE("failed: threads=" << threads << " begin=" << begin << " length=" << length
                                                   << " grain=" << grain << " chunks=" << chunks.size());
                }
    }
    CHECK(failures == 0);
}

TEST_CASE("thread_pool: empty and reversed ranges do nothing; grain below 1 counts as 1")
{
    thread_count_guard guard;
    set_num_threads(4);
    int calls = 0;
    parallel_for(5, 5, 1, [&](std::int64_t, std::int64_t) { ++calls; });
    parallel_for(10, 3, 1, [&](std::int64_t, std::int64_t) { ++calls; });
    CHECK(calls == 0);

    for (std::int64_t grain : {0, -5})
    {
        std::vector<std::atomic<int>> hits(100);
        parallel_for(0, 100, grain, [&](std::int64_t b, std::int64_t e) {
            for (std::int64_t i = b; i < e; ++i)
                hits[static_cast<std::size_t>(i)].fetch_add(1);
        });
        CHECK(std::all_of(hits.begin(), hits.end(), [](const std::atomic<int>& h) { return h.load() == 1; }));
    }
}

TEST_CASE("thread_pool: extreme ranges")
{
    thread_count_guard guard;
    set_num_threads(3);
    // The full int64 range, in three huge chunks: only the bounds are checked.
    const std::int64_t lo = std::numeric_limits<std::int64_t>::min();
    const std::int64_t hi = std::numeric_limits<std::int64_t>::max();
    std::mutex m;
    std::vector<std::pair<std::int64_t, std::int64_t>> chunks;
    parallel_for(lo, hi, std::int64_t{1} << 60, [&](std::int64_t b, std::int64_t e) {
        std::lock_guard<std::mutex> lock(m);
        chunks.emplace_back(b, e);
    });
    std::sort(chunks.begin(), chunks.end());
    REQUIRE(chunks.size() == 3);
    CHECK(chunks.front().first == lo);
    CHECK(chunks.back().second == hi);
    for (std::size_t i = 1; i < chunks.size(); ++i)
        CHECK(chunks[i].first == chunks[i - 1].second);

    // A huge grain must not overflow when doubled.
    int calls = 0;
    parallel_for(0, 10, hi, [&](std::int64_t b, std::int64_t e) {
        ++calls;
        CHECK(b == 0);
        CHECK(e == 10);
    });
    CHECK(calls == 1);
}

TEST_CASE("thread_pool: workers really run chunks in parallel")
{
    thread_count_guard guard;
    set_num_threads(4);
    // Each chunk waits (bounded) until two chunks are in flight at once. The caller runs a
    // chunk itself, so this only completes early if a worker picks up another one.
    for (int round = 0; round < 20; ++round)
    {
        std::atomic<int> in_flight{0};
        std::atomic<bool> met{false};
        std::mutex ids_mutex;
        std::set<std::thread::id> ids;
        parallel_for(0, 4, 1, [&](std::int64_t, std::int64_t) {
            {
                std::lock_guard<std::mutex> lock(ids_mutex);
                ids.insert(std::this_thread::get_id());
            }
            in_flight.fetch_add(1);
            const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
            while (!met.load() && std::chrono::steady_clock::now() < deadline)
            {
                if (in_flight.load() >= 2)
                    met.store(true);
                std::this_thread::yield();
            }
            in_flight.fetch_sub(1);
        });
        CHECK(met.load());
        CHECK(ids.size() >= 2);
    }
}

TEST_CASE("thread_pool: exceptions propagate after all chunks finished")
{
    thread_count_guard guard;
    for (int threads : {1, 2, 4, 8})
    {
        set_num_threads(threads);
        CAPTURE(threads);

        // One chunk throws; every other chunk still runs.
        std::vector<std::atomic<int>> hits(1000);
        auto body = [&](std::int64_t b, std::int64_t e) {
            for (std::int64_t i = b; i < e; ++i)
                hits[static_cast<std::size_t>(i)].fetch_add(1);
            if (b <= 500 && 500 < e)
                throw std::runtime_error("chunk with 500");
        };
        CHECK_THROWS_WITH_AS(parallel_for(0, 1000, 10, body), "chunk with 500", std::runtime_error);
        CHECK(std::all_of(hits.begin(), hits.end(), [](const std::atomic<int>& h) { return h.load() == 1; }));

        // Every chunk throws: exactly one exception arrives, and it is one of them.
        std::atomic<int> chunks{0};
        try
        {
            parallel_for(0, 1000, 1, [&](std::int64_t b, std::int64_t) {
                chunks.fetch_add(1);
                throw std::out_of_range(std::to_string(b));
            });
            FAIL("no exception");
        }
        catch (const std::out_of_range& e)
        {
            CHECK(!std::string(e.what()).empty());
        }
        CHECK(chunks.load() == threads);

        // The pool keeps working afterwards.
        std::atomic<std::int64_t> sum{0};
        parallel_for(0, 1000, 1, [&](std::int64_t b, std::int64_t e) {
            std::int64_t local = 0;
            for (std::int64_t i = b; i < e; ++i)
                local += i;
            sum.fetch_add(local);
        });
        CHECK(sum.load() == 999 * 1000 / 2);
    }
    // The inline path (range too small to split) propagates too.
    CHECK_THROWS_AS(parallel_for(0, 3, 2, [](std::int64_t, std::int64_t) { throw std::logic_error("x"); }),
                    std::logic_error);
}

TEST_CASE("thread_pool: nested calls run inline on the caller")
{
    thread_count_guard guard;
    set_num_threads(4);
    const std::int64_t rows = 64, cols = 300;
    std::vector<int> grid(static_cast<std::size_t>(rows * cols), 0);
    std::atomic<int> inner_calls{0};
    std::atomic<int> inner_not_whole{0};
    std::atomic<int> inner_other_thread{0};
    parallel_for(0, rows, 1, [&](std::int64_t r0, std::int64_t r1) {
        for (std::int64_t r = r0; r < r1; ++r)
        {
            const auto outer_thread = std::this_thread::get_id();
            parallel_for(0, cols, 1, [&](std::int64_t c0, std::int64_t c1) {
                inner_calls.fetch_add(1);
                if (c0 != 0 || c1 != cols)
                    inner_not_whole.fetch_add(1);
                if (std::this_thread::get_id() != outer_thread)
                    inner_other_thread.fetch_add(1);
                for (std::int64_t c = c0; c < c1; ++c)
                    grid[static_cast<std::size_t>(r * cols + c)] += 1;
            });
        }
    });
    CHECK(inner_calls.load() == rows);
    CHECK(inner_not_whole.load() == 0);
    CHECK(inner_other_thread.load() == 0);
    CHECK(std::all_of(grid.begin(), grid.end(), [](int v) { return v == 1; }));

    // After the nested call the pool is usable from the top level again.
    std::vector<std::atomic<int>> hits(500);
    parallel_for(0, 500, 1, [&](std::int64_t b, std::int64_t e) {
        for (std::int64_t i = b; i < e; ++i)
            hits[static_cast<std::size_t>(i)].fetch_add(1);
    });
    CHECK(std::all_of(hits.begin(), hits.end(), [](const std::atomic<int>& h) { return h.load() == 1; }));
}

TEST_CASE("thread_pool: set_num_threads rejects counts below 1")
{
    thread_count_guard guard;
    set_num_threads(3);
    CHECK_THROWS_AS(set_num_threads(0), std::invalid_argument);
    CHECK_THROWS_AS(set_num_threads(-4), std::invalid_argument);
    try
    {
        set_num_threads(0);
    }
    catch (const std::invalid_argument& e)
    {
        CHECK(std::string(e.what()).find('0') != std::string::npos);
    }
    try
    {
        set_num_threads(-17);
    }
    catch (const std::invalid_argument& e)
    {
        CHECK(std::string(e.what()).find("-17") != std::string::npos);
    }
    CHECK(get_num_threads() == 3);
}

TEST_CASE("thread_pool: changing the thread count repeatedly")
{
    thread_count_guard guard;
    const int counts[] = {1, 2, 8, 3, 1, 16, 4, 2, 5, 1, 7, 7, 2};
    for (int rep = 0; rep < 10; ++rep)
        for (int n : counts)
        {
            set_num_threads(n);
            CHECK(get_num_threads() == n);
            std::atomic<std::int64_t> sum{0};
            std::atomic<int> chunks{0};
            parallel_for(0, 10000, 1, [&](std::int64_t b, std::int64_t e) {
                chunks.fetch_add(1);
                std::int64_t local = 0;
                for (std::int64_t i = b; i < e; ++i)
                    local += i;
                sum.fetch_add(local);
            });
            CHECK(sum.load() == std::int64_t{9999} * 10000 / 2);
            CHECK(chunks.load() == n);
        }

    // Changing the count from inside a chunk neither deadlocks nor disturbs the running call.
    set_num_threads(4);
    std::atomic<int> hits{0};
    parallel_for(0, 4, 1, [&](std::int64_t b, std::int64_t e) {
        if (b == 0)
            set_num_threads(2);
        hits.fetch_add(static_cast<int>(e - b));
    });
    CHECK(hits.load() == 4);
    CHECK(get_num_threads() == 2);
    std::atomic<int> chunks{0};
    parallel_for(0, 100, 1, [&](std::int64_t, std::int64_t) { chunks.fetch_add(1); });
    CHECK(chunks.load() == 2);
}

TEST_CASE("thread_pool: concurrent callers get correct results")
{
    thread_count_guard guard;
    set_num_threads(4);
    constexpr int callers = 3;
    constexpr int iterations = 200;
    std::atomic<int> failures{0};
    std::atomic<bool> stop_resizer{false};

    auto caller = [&](int id) {
        std::vector<std::int64_t> data(static_cast<std::size_t>(1000 + id * 37));
        for (int it = 0; it < iterations; ++it)
        {
            const auto n = static_cast<std::int64_t>(data.size());
            parallel_for(0, n, 1 + it % 50, [&](std::int64_t b, std::int64_t e) {
                for (std::int64_t i = b; i < e; ++i)
                    data[static_cast<std::size_t>(i)] += i * (id + 1);
            });
            std::atomic<std::int64_t> sum{0};
            parallel_for(0, n, 16, [&](std::int64_t b, std::int64_t e) {
                std::int64_t local = 0;
                for (std::int64_t i = b; i < e; ++i)
                    local += data[static_cast<std::size_t>(i)];
                sum.fetch_add(local);
            });
            const std::int64_t want = (it + 1) * (id + 1) * (n - 1) * n / 2;
            if (sum.load() != want)
                failures.fetch_add(1);
        }
    };
    // A third party keeps changing the thread count meanwhile.
    std::thread resizer([&] {
        int n = 1;
        while (!stop_resizer.load())
        {
            set_num_threads(n);
            n = n % 6 + 1;
            std::this_thread::yield();
        }
    });
    std::vector<std::thread> threads;
    for (int id = 0; id < callers; ++id)
        threads.emplace_back(caller, id);
    for (std::thread& t : threads)
        t.join();
    stop_resizer.store(true);
    resizer.join();
    CHECK(failures.load() == 0);
}
