#pragma once
// Profiler output for files (train/src/train/profile.cpp); the recording and the table are
// xgrad/profiler.hpp's.
#include <filesystem>

#include "xgrad/profiler.hpp"

namespace xgrad::train
{
    /// Writes r's events as a Chrome trace to `path`, atomically (xgrad/io/atomic_file.hpp):
    /// the JSON object format, {"traceEvents": [...], "displayTimeUnit": "ms", ...}, one complete
    /// event ("ph": "X") per timed call with its name, "cat" "<kind>,<phase>" (e.g.
    /// "kernel,backward"), "ts" and "dur" in microseconds since the scope started, "pid" 0 and
    /// "tid" the thread's number, plus one "thread_name" metadata event per thread. chrome://tracing
    /// and Perfetto open it. The number of events the scope did not keep is in
    /// "otherData": {"dropped_events": n}. Throws io::file_error naming the path when it cannot
    /// be written.
    void write_chrome_trace(const profiler::report& r, const std::filesystem::path& path);
}
