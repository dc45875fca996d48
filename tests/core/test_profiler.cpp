// The profiler (xgrad/profiler.hpp): off without a scope; in one, every op, kernel and backward
// node is a row with its calls, total and self time, and an op's tensor bytes; events for the
// trace up to max_events; one scope at a time; reset; other threads' calls; the table; and the
// kernels still compute the same bits through the profiled tables.
#include <doctest/doctest.h>

#include <cmath>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "xgrad/autograd.hpp"
#include "xgrad/errors.hpp"
#include "xgrad/factories.hpp"
#include "xgrad/ops/elementwise.hpp"
#include "xgrad/ops/matmul.hpp"
#include "xgrad/ops/reduce.hpp"
#include "xgrad/profiler.hpp"
#include "xgrad/tensor.hpp"

using namespace xgrad;
namespace prof = xgrad::profiler;

namespace
{
    const prof::row* find(const prof::report& r, const std::string& name, prof::kind k, prof::phase p)
    {
        for (const prof::row& x : r.rows)
            if (x.name == name && x.kind == k && x.phase == p)
                return &x;
        return nullptr;
    }

    /// A small graph: three adds, a matmul, a sum, and its backward.
    tensor run_graph()
    {
        generator gen(3);
        const tensor a = randn({4, 5}, gen).requires_grad_(), b = randn({4, 5}, gen), w = randn({5, 3}, gen);
        tensor y = add(add(add(a, b), b), b);
        const tensor loss = sum(matmul(y, w));
        loss.backward();
        return a.grad();
    }
}

TEST_CASE("profiler: nothing is recorded without a scope")
{
    CHECK_FALSE(prof::enabled());
    run_graph();
    prof::scope s;
    CHECK(prof::enabled());
    CHECK(s.report().rows.empty());
}

TEST_CASE("profiler: ops, kernels and backward nodes with calls, times and bytes")
{
    const tensor want = run_graph();
    prof::report r;
    tensor got;
    {
        prof::scope s;
        got = run_graph();
        r = s.report();
    }
    CHECK_FALSE(prof::enabled());
    // The profiled kernel tables compute what the real ones do.
    CHECK(to_vector(got) == to_vector(want));

    const prof::row* add_op = find(r, "add", prof::kind::op, prof::phase::forward);
    REQUIRE(add_op != nullptr);
    CHECK(add_op->calls == 3);
    // Two [4, 5] float32 inputs and one output per call.
    CHECK(add_op->bytes == 3 * 3 * 20 * 4);
    const prof::row* binary = find(r, "binary", prof::kind::kernel, prof::phase::forward);
    REQUIRE(binary != nullptr);
    CHECK(binary->calls >= 3);
    CHECK(binary->bytes == 0);
    const prof::row* mm = find(r, "matmul", prof::kind::op, prof::phase::forward);
    REQUIRE(mm != nullptr);
    CHECK(mm->calls == 1);
    // The backward pass: the node's own row, and the kernels its rule ran.
    const prof::row* mm_back = find(r, "matmul_backward", prof::kind::op, prof::phase::backward);
    REQUIRE(mm_back != nullptr);
    CHECK(mm_back->calls == 1);
    CHECK(find(r, "matmul", prof::kind::kernel, prof::phase::backward) != nullptr);
    CHECK(find(r, "add_backward", prof::kind::op, prof::phase::backward) != nullptr);
    // Self time never exceeds total time; an op's total covers its kernels' time.
    for (const prof::row& x : r.rows)
    {
        CAPTURE(x.name);
        CHECK(x.self_ms >= 0.0);
        CHECK(x.self_ms <= x.total_ms + 1e-9);
        CHECK(x.calls > 0);
    }
    CHECK(mm->total_ms >= find(r, "matmul", prof::kind::kernel, prof::phase::forward)->self_ms);
    // Sorted by self time.
    for (std::size_t i = 1; i < r.rows.size(); ++i)
        CHECK(r.rows[i - 1].self_ms >= r.rows[i].self_ms);
    // One event per call, all on this thread.
    std::int64_t calls = 0;
    for (const prof::row& x : r.rows)
        calls += x.calls;
    CHECK(static_cast<std::int64_t>(r.events.size()) == calls);
    CHECK(r.dropped_events == 0);
    for (const prof::event& e : r.events)
    {
        CHECK(e.thread == 0);
        CHECK(e.duration_us >= 0.0);
        CHECK(e.start_us >= 0.0);
    }
    CHECK(r.wall_ms > 0.0);
}

TEST_CASE("profiler: a view moves no bytes")
{
    prof::scope s;
    const tensor x = ones({6, 4}).requires_grad_();
    (void)x.reshape({4, 6});
    (void)x.transpose(0, 1);
    const prof::report r = s.report();
    const prof::row* reshape = find(r, "reshape", prof::kind::op, prof::phase::forward);
    REQUIRE(reshape != nullptr);
    CHECK(reshape->bytes == 0);
}

TEST_CASE("profiler: one scope at a time, reset, and bounded events")
{
    {
        prof::scope s;
        CHECK_THROWS_AS(prof::scope(), std::logic_error);
        run_graph();
        CHECK_FALSE(s.report().rows.empty());
        s.reset();
        CHECK(s.report().rows.empty());
        CHECK(s.report().events.empty());
    }
    {
        // A new scope starts empty.
        prof::scope s(2);
        CHECK(s.report().rows.empty());
        run_graph();
        const prof::report r = s.report();
        std::int64_t calls = 0;
        for (const prof::row& x : r.rows)
            calls += x.calls;
        CHECK(r.events.size() == 2u);
        CHECK(r.dropped_events == calls - 2);
        CHECK(prof::format_table(r).find("some events beyond max_events") != std::string::npos);
    }
    CHECK_THROWS_AS(prof::scope(prof::scope::max_events_limit + 1), xgrad::invalid_argument);
}

TEST_CASE("profiler: calls on other threads are recorded, each thread with its own number")
{
    prof::scope s;
    run_graph();
    std::thread t([] {
        no_grad guard;
        (void)exp(ones({10}));
    });
    t.join();
    const prof::report r = s.report();
    const prof::row* e = find(r, "exp", prof::kind::op, prof::phase::forward);
    REQUIRE(e != nullptr);
    CHECK(e->calls == 1);
    bool other = false;
    for (const prof::event& ev : r.events)
        other = other || (ev.name == "exp" && ev.thread == 1);
    CHECK(other);
}

TEST_CASE("profiler: the table")
{
    prof::scope s;
    run_graph();
    const prof::report r = s.report();
    const std::string all = prof::format_table(r, 1000);
    CHECK(all.find("name") == 0);
    CHECK(all.find("matmul_backward") != std::string::npos);
    CHECK(all.find("self time recorded:") != std::string::npos);
    CHECK(all.find("more rows") == std::string::npos);
    const std::string top = prof::format_table(r, 2);
    CHECK(top.find("(" + std::to_string(r.rows.size() - 2) + " more rows)") != std::string::npos);
    // The first row shown is the largest self time.
    CHECK(top.find(r.rows[0].name) != std::string::npos);
}
