#pragma once
// The profiler (core/src/profiler/): where a program's time goes, per op and per kernel.
//
//   {
//       xgrad::profiler::scope prof;      // recording starts
//       ... train a few steps ...
//       const auto r = prof.report();     // the aggregate so far (recording goes on)
//       std::cout << xgrad::profiler::format_table(r);
//   }                                     // recording stops
//
// While a scope lives, every op (add, matmul, conv2d, fused_batch_norm, ...) and every backend
// kernel call (the entries of backends/common/kernel_list.hpp, on every device) is timed on the
// thread that runs it; so is every node of a backward pass. Each row of the report is one
// (name, kind, phase): kind op or kernel, phase forward or backward (the ops a backward rule
// runs, and their kernels, count as backward; so does each node's own row, named after the
// node, e.g. "matmul"). For each: calls, total time (from entry to exit, what it called
// included), self time (total less the time of the ops and kernels it called), and for ops the
// bytes of their tensor inputs and outputs (numel * itemsize of each defined one; kernels have
// no bytes of their own: their op's are the figure to read). Times are wall-clock, steady_clock,
// per thread: a kernel that spreads work over the thread pool counts its wall time once, on
// the thread that called it. Device kernels (CUDA) are timed as their launch, which returns
// before the device finishes, unless the kernel waits.
//
// Events: each timed call is also kept as an event (name, kind, phase, thread, start, duration)
// for a trace, up to max_events per scope (later ones are counted in dropped_events, the
// aggregate stays complete). xgrad::train::write_chrome_trace (xgrad/train/profile.hpp) writes
// them as a Chrome trace (chrome://tracing, Perfetto).
//
// Cost: without a scope each op and each kernel call pays one relaxed atomic load; with one,
// a clock read at entry and exit and an update of the thread's own tables (merged into the
// report when asked).
//
// Errors: a second scope while one lives throws std::logic_error (one recording at a time);
// max_events above max_events_limit throws xgrad::invalid_argument.
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace xgrad::profiler
{
    enum class kind : std::uint8_t
    {
        op,
        kernel
    };
    enum class phase : std::uint8_t
    {
        forward,
        backward
    };
    const char* name(kind k) noexcept;  // "op", "kernel"
    const char* name(phase p) noexcept; // "forward", "backward"

    struct row
    {
        std::string name;
        profiler::kind kind = kind::op;
        profiler::phase phase = phase::forward;
        std::int64_t calls = 0;
        double total_ms = 0.0;
        double self_ms = 0.0;
        std::int64_t bytes = 0;
    };

    struct event
    {
        std::string name;
        profiler::kind kind = kind::op;
        profiler::phase phase = phase::forward;
        int thread = 0;        // 0, 1, ...: threads in the order they first recorded
        double start_us = 0.0; // since the scope started
        double duration_us = 0.0;
    };

    struct report
    {
        /// Sorted by self time, largest first (then by name, kind and phase).
        std::vector<row> rows;
        std::vector<event> events; // in the order they ended, per thread
        std::int64_t dropped_events = 0;
        double wall_ms = 0.0; // since the scope started (or was reset)
    };

    /// Whether a scope is recording.
    inline bool enabled() noexcept;

    class scope
    {
    public:
        static constexpr std::size_t max_events_limit = std::size_t{1} << 26;

        explicit scope(std::size_t max_events = std::size_t{1} << 20);
        ~scope();
        scope(const scope&) = delete;
        scope& operator=(const scope&) = delete;

        /// Everything recorded so far, on every thread (recording goes on).
        profiler::report report() const;
        /// Forgets what was recorded; the wall time starts again.
        void reset();
    };

    /// The report as a table of at most max_rows rows (the largest self times), with a header
    /// and the total of the self times over the wall time.
    std::string format_table(const report& r, std::size_t max_rows = 30);

    namespace detail
    {
        extern std::atomic<bool> g_enabled;
    }

    inline bool enabled() noexcept { return detail::g_enabled.load(std::memory_order_relaxed); }
}
