// write_chrome_trace (xgrad/train/profile.hpp): the profiler's events as a Chrome trace that
// parses as JSON, one complete event per call with the fields the viewers read, thread names,
// the dropped count; and a path that cannot be written is an io::file_error naming it.
#include <doctest/doctest.h>

#include <fstream>
#include <set>
#include <string>

#include <nlohmann/json.hpp>

#include "tests/support/check_error.hpp"
#include "tests/support/scratch_folder.hpp"
#include "xgrad/autograd.hpp"
#include "xgrad/factories.hpp"
#include "xgrad/io/atomic_file.hpp"
#include "xgrad/ops/elementwise.hpp"
#include "xgrad/ops/reduce.hpp"
#include "xgrad/train/profile.hpp"

using namespace xgrad;

TEST_CASE("write_chrome_trace: a Chrome trace of every recorded call")
{
    test_support::scratch_folder dir("profile_trace");
    profiler::report r;
    {
        profiler::scope s;
        const tensor x = ones({8}).requires_grad_();
        sum(exp(x) * x).backward();
        r = s.report();
    }
    REQUIRE_FALSE(r.events.empty());
    const auto path = dir.path / "trace.json";
    train::write_chrome_trace(r, path);
    const nlohmann::json doc = nlohmann::json::parse(std::ifstream(path));
    REQUIRE(doc.contains("traceEvents"));
    const auto& events = doc["traceEvents"];
    std::size_t complete = 0, names = 0;
    std::set<std::string> cats;
    for (const auto& e : events)
    {
        if (e["ph"] == "X")
        {
            ++complete;
            CHECK(e["name"].is_string());
            CHECK(e["ts"].get<double>() >= 0.0);
            CHECK(e["dur"].get<double>() >= 0.0);
            CHECK(e["pid"] == 0);
            CHECK(e["tid"] == 0);
            cats.insert(e["cat"].get<std::string>());
        }
        else
        {
            CHECK(e["ph"] == "M");
            CHECK(e["name"] == "thread_name");
            ++names;
        }
    }
    CHECK(complete == r.events.size());
    CHECK(names == 1);
    CHECK(cats.count("op,forward") == 1);
    CHECK(cats.count("kernel,forward") == 1);
    CHECK(cats.count("op,backward") == 1);
    CHECK(doc["otherData"]["dropped_events"] == 0);
    CHECK(doc["displayTimeUnit"] == "ms");

    CHECK_ERROR(train::write_chrome_trace(r, dir.path / "missing" / "trace.json"), io::file_error, "missing");
}
