// write_chrome_trace: see xgrad/train/profile.hpp. The trace is built as one JSON document with
// nlohmann-json and written in one atomic write.
#include "xgrad/train/profile.hpp"

#include <set>
#include <string>

#include <nlohmann/json.hpp>

#include "xgrad/io/atomic_file.hpp"

namespace xgrad::train
{
    void write_chrome_trace(const profiler::report& r, const std::filesystem::path& path)
    {
        using json = nlohmann::json;
        json events = json::array();
        std::set<int> threads;
        for (const profiler::event& e : r.events)
        {
            threads.insert(e.thread);
            events.push_back({{"name", e.name},
                              {"cat", std::string(profiler::name(e.kind)) + "," + profiler::name(e.phase)},
                              {"ph", "X"},
                              {"ts", e.start_us},
                              {"dur", e.duration_us},
                              {"pid", 0},
                              {"tid", e.thread}});
        }
        for (const int t : threads)
            events.push_back({{"name", "thread_name"},
                              {"ph", "M"},
                              {"pid", 0},
                              {"tid", t},
                              {"args", {{"name", "xgrad thread " + std::to_string(t)}}}});
        const json doc = {{"traceEvents", std::move(events)},
                          {"displayTimeUnit", "ms"},
                          {"otherData", {{"dropped_events", r.dropped_events}, {"wall_ms", r.wall_ms}}}};
        io::write_file_atomically(path, doc.dump());
    }
}
