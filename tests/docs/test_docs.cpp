// The documents against the tree (docs_check.hpp): every path, test, label, option and
// identifier a Markdown file of the project names exists; and the check itself finds each kind
// of mistake when one is planted.
#include <doctest/doctest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "tests/docs/docs_check.hpp"

namespace
{
    const docs_check::tree& the_tree()
    {
        static const docs_check::tree t = docs_check::scan(
            XGRAD_SOURCE_DIR,
            {std::string(XGRAD_SOURCE_DIR) + "/base/include", std::string(XGRAD_SOURCE_DIR) + "/core/include",
             std::string(XGRAD_SOURCE_DIR) + "/nn/include", std::string(XGRAD_SOURCE_DIR) + "/train/include",
             XGRAD_GENERATED_INCLUDE_DIR},
            XGRAD_BINARY_DIR);
        return t;
    }
}

TEST_CASE("every path, test, label, option and identifier the documents name exists")
{
    const docs_check::tree& t = the_tree();
    REQUIRE(t.documents.size() > 15);
    REQUIRE(t.tests.count("test_batch_norm"));
    REQUIRE(t.labels.count("gradcheck"));
    std::size_t problems = 0;
    for (const auto& doc : t.documents)
        for (const auto& p : docs_check::check_document(t, doc, docs_check::read_file(doc)))
        {
            const std::string where = p.document + ":" + std::to_string(p.line) + ": " + p.what;
            FAIL_CHECK(where);
            ++problems;
        }
    CHECK(problems == 0);
}

TEST_CASE("the check reports a planted wrong path, test, label, option and identifier, and only those")
{
    const docs_check::tree& t = the_tree();
    const std::string planted =
        "The kernels live in `backends/cpu/kernels/no_such_file.cpp` and `xgrad/nn/gone.hpp`;\n"
        "run `ctest -L no_such_label` or the test `test_no_such_test`, with `XGRAD_NO_SUCH_OPTION`.\n"
        "The kernel `cpu::no_such_kernel` and [a link](no/such/doc.md).\n"
        "Real ones: `backends/cpu/kernels/conv.cpp`, `xgrad/nn/fuse.hpp`, `optim/sgd.hpp`,\n"
        "`ctest -L gradcheck`, label `unit`; the test `test_batch_norm`, `XGRAD_SIMD`, `cpu::argmax`,\n"
        "`nn::fuse(model)`, [the guide](../CONTRIBUTING.md), `build/examples/evaluate`.\n";
    const auto found = docs_check::check_document(t, t.root / "docs" / "planted.md", planted);
    std::vector<std::string> whats;
    for (const auto& p : found)
        whats.push_back(p.what);
    INFO("reported: " << [&] {
        std::string s;
        for (const auto& w : whats)
            s += "\n  " + w;
        return s;
    }());
    const auto reported = [&](const std::string& part) {
        return std::any_of(whats.begin(), whats.end(),
                           [&](const std::string& w) { return w.find(part) != std::string::npos; });
    };
    CHECK(reported("path backends/cpu/kernels/no_such_file.cpp"));
    CHECK(reported("path xgrad/nn/gone.hpp"));
    CHECK(reported("label no_such_label"));
    CHECK(reported("test test_no_such_test"));
    CHECK(reported("XGRAD_NO_SUCH_OPTION"));
    CHECK(reported("no code names no_such_kernel"));
    CHECK(reported("link to no/such/doc.md"));
    CHECK(found.size() == 7); // nothing on the line of real names
}
