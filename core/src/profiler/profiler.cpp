// The profiler's recording (xgrad/profiler.hpp, core/src/profiler/record.hpp).
//
// Each thread keeps a stack of open frames (thread_local: opening and closing a frame touches
// no shared state). A frame that closes is merged, under one mutex, into the scope's table of
// rows and its list of events: a few hundred ops and kernels per training step make the lock
// cheap, and rows stay complete when threads come and go (the loader's workers, a resized
// thread pool). Each scope has a generation number; a frame opened under an earlier one (a
// call still running on another thread when its scope ended) is dropped when it closes, so a
// new scope never sees the old one's calls.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <mutex>
#include <sstream>
#include <stdexcept>
#include <tuple>
#include <vector>

#include "core/src/profiler/record.hpp"
#include "xgrad/errors.hpp"

namespace xgrad::profiler
{
    namespace detail
    {
        std::atomic<bool> g_enabled{false};
    }

    namespace
    {
        using clock_type = std::chrono::steady_clock;

        struct frame
        {
            const char* name = nullptr; // a literal, or
            std::string owned;          // a copied name when name is null
            kind k = kind::op;
            phase ph = phase::forward;
            std::uint64_t generation = 0;
            clock_type::time_point start;
            std::int64_t child_ns = 0;
            std::int64_t bytes = 0;
        };

        struct totals
        {
            std::int64_t calls = 0;
            std::int64_t total_ns = 0;
            std::int64_t self_ns = 0;
            std::int64_t bytes = 0;
        };

        using key_type = std::tuple<std::string, kind, phase>;

        /// The recording of the live scope, shared by every thread.
        struct recording
        {
            std::mutex mutex;
            std::uint64_t generation = 0; // of the live scope (0: none yet)
            bool live = false;
            clock_type::time_point start;
            std::size_t max_events = 0;
            std::map<key_type, totals> rows;
            std::vector<event> events;
            std::int64_t dropped = 0;
            int next_thread = 0;
        };

        recording& state()
        {
            static recording r; // never destroyed before a thread_local frame stack that uses it
            return r;
        }

        /// The generation each thread last saw, its number in that generation, and its stack.
        struct thread_frames
        {
            std::vector<frame> stack;
            int backward_depth = 0;
            std::uint64_t id_generation = 0;
            int id = 0;
        };

        thread_frames& frames()
        {
            thread_local thread_frames t;
            return t;
        }

        /// The generation a new frame belongs to: read without the lock (a frame of a scope that
        /// ends meanwhile is dropped when it closes).
        std::atomic<std::uint64_t> g_generation{0};

        /// A new generation with empty tables, its wall time from now; r.mutex held. Frames
        /// open now belong to the old generation and are dropped when they close.
        void restart(recording& r)
        {
            ++r.generation;
            g_generation.store(r.generation, std::memory_order_release);
            r.start = clock_type::now();
            r.rows.clear();
            r.events.clear();
            r.dropped = 0;
            r.next_thread = 0;
        }
    }

    const char* name(kind k) noexcept { return k == kind::op ? "op" : "kernel"; }
    const char* name(phase p) noexcept { return p == phase::forward ? "forward" : "backward"; }

    namespace detail
    {
        void timed::begin(const char* name, const std::string* owned, kind k) noexcept
        {
            try
            {
                thread_frames& t = frames();
                frame f;
                f.name = name;
                if (!name)
                    f.owned = *owned;
                f.k = k;
                f.ph = t.backward_depth > 0 ? phase::backward : phase::forward;
                f.generation = g_generation.load(std::memory_order_acquire);
                t.stack.push_back(std::move(f));
                t.stack.back().start = clock_type::now();
                m_active = true;
            }
            catch (...)
            {
                // Out of memory for the stack: this call goes unrecorded.
            }
        }

        void timed::end() noexcept
        {
            const clock_type::time_point stop = clock_type::now();
            thread_frames& t = frames();
            if (t.stack.empty())
                return;
            frame f = std::move(t.stack.back());
            t.stack.pop_back();
            const std::int64_t total = std::chrono::duration_cast<std::chrono::nanoseconds>(stop - f.start).count();
            if (!t.stack.empty())
                t.stack.back().child_ns += total;
            recording& r = state();
            try
            {
                std::lock_guard<std::mutex> lock(r.mutex);
                if (!r.live || f.generation != r.generation)
                    return;
                if (t.id_generation != r.generation)
                {
                    t.id_generation = r.generation;
                    t.id = r.next_thread++;
                }
                std::string label = f.name ? std::string(f.name) : std::move(f.owned);
                if (r.events.size() < r.max_events)
                {
                    event e;
                    e.name = label;
                    e.kind = f.k;
                    e.phase = f.ph;
                    e.thread = t.id;
                    e.start_us = std::chrono::duration<double, std::micro>(f.start - r.start).count();
                    e.duration_us = static_cast<double>(total) / 1e3;
                    r.events.push_back(std::move(e));
                }
                else
                    ++r.dropped;
                totals& row = r.rows[key_type{std::move(label), f.k, f.ph}];
                ++row.calls;
                row.total_ns += total;
                row.self_ns += std::max<std::int64_t>(0, total - f.child_ns);
                row.bytes += f.bytes;
            }
            catch (...)
            {
                // Out of memory for the tables: this call goes unrecorded.
            }
        }

        void note_bytes(std::int64_t bytes) noexcept
        {
            if (!enabled())
                return;
            thread_frames& t = frames();
            for (auto it = t.stack.rbegin(); it != t.stack.rend(); ++it)
                if (it->k == kind::op)
                {
                    it->bytes += bytes;
                    return;
                }
        }

        backward_phase::backward_phase() noexcept { ++frames().backward_depth; }
        backward_phase::~backward_phase() { --frames().backward_depth; }
    }

    scope::scope(std::size_t max_events)
    {
        if (max_events > max_events_limit)
            throw xgrad::invalid_argument("profiler::scope: max_events must be at most " +
                                          std::to_string(max_events_limit) + ", got " + std::to_string(max_events));
        recording& r = state();
        std::lock_guard<std::mutex> lock(r.mutex);
        if (r.live)
            throw std::logic_error("profiler::scope: a scope is already recording (one at a time)");
        r.live = true;
        r.max_events = max_events;
        restart(r);
        detail::g_enabled.store(true, std::memory_order_release);
    }

    scope::~scope()
    {
        recording& r = state();
        std::lock_guard<std::mutex> lock(r.mutex);
        detail::g_enabled.store(false, std::memory_order_release);
        r.live = false;
        // The tables are released now; calls still running elsewhere are dropped as they end.
        std::map<key_type, totals>().swap(r.rows);
        std::vector<event>().swap(r.events);
    }

    void scope::reset()
    {
        recording& r = state();
        std::lock_guard<std::mutex> lock(r.mutex);
        restart(r);
    }

    report scope::report() const
    {
        recording& r = state();
        profiler::report out;
        {
            std::lock_guard<std::mutex> lock(r.mutex);
            out.wall_ms = std::chrono::duration<double, std::milli>(clock_type::now() - r.start).count();
            out.events = r.events;
            out.dropped_events = r.dropped;
            out.rows.reserve(r.rows.size());
            for (const auto& [key, t] : r.rows)
            {
                row x;
                x.name = std::get<0>(key);
                x.kind = std::get<1>(key);
                x.phase = std::get<2>(key);
                x.calls = t.calls;
                x.total_ms = static_cast<double>(t.total_ns) / 1e6;
                x.self_ms = static_cast<double>(t.self_ns) / 1e6;
                x.bytes = t.bytes;
                out.rows.push_back(std::move(x));
            }
        }
        std::stable_sort(out.rows.begin(), out.rows.end(),
                         [](const row& a, const row& b) { return a.self_ms > b.self_ms; });
        return out;
    }

    std::string format_table(const report& r, std::size_t max_rows)
    {
        std::ostringstream os;
        double self_sum = 0.0;
        for (const row& x : r.rows)
            self_sum += x.self_ms;
        char line[256];
        std::snprintf(line, sizeof line, "%-34s %-6s %-8s %9s %11s %11s %7s %11s\n", "name", "kind", "phase", "calls",
                      "total ms", "self ms", "self %", "MB");
        os << line;
        const std::size_t n = std::min(max_rows, r.rows.size());
        for (std::size_t i = 0; i < n; ++i)
        {
            const row& x = r.rows[i];
            const std::string shown = x.name.size() > 34 ? x.name.substr(0, 31) + "..." : x.name;
            std::snprintf(line, sizeof line, "%-34s %-6s %-8s %9lld %11.3f %11.3f %6.1f%% %11.2f\n", shown.c_str(),
                          name(x.kind), name(x.phase), static_cast<long long>(x.calls), x.total_ms, x.self_ms,
                          self_sum > 0 ? 100.0 * x.self_ms / self_sum : 0.0, static_cast<double>(x.bytes) / 1e6);
            os << line;
        }
        if (r.rows.size() > n)
            os << "(" << (r.rows.size() - n) << " more rows)\n";
        std::snprintf(line, sizeof line, "self time recorded: %.3f ms of %.3f ms wall (%.1f%%)%s\n", self_sum,
                      r.wall_ms, r.wall_ms > 0 ? 100.0 * self_sum / r.wall_ms : 0.0,
                      r.dropped_events ? ", some events beyond max_events not kept for the trace" : "");
        os << line;
        return os.str();
    }
}
