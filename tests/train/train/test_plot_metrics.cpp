// xgrad::train's SVG chart of metrics and its CSV logs (epoch metrics and steps). The progress
// bar and duration formatting are test_plot.cpp's (the same executable, test_plot).
#include "tests/support/check_error.hpp"
#include "tests/train/io/child_process.hpp"
#include "tests/train/train/plot_test_helpers.hpp"
#include "xgrad/train/metrics.hpp"

#include <doctest/doctest.h>

#include <cctype>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>
#include <sys/stat.h>
#include <unistd.h>
#include <vector>

namespace fs = std::filesystem;
using namespace xgrad::train;

namespace
{
    using plot_test::count_of;
    using plot_test::not_a_number;

    // Whether "nan" or "inf" appears as a word start (not inside e.g. "dominant-baseline").
    bool has_non_finite_text(const std::string& text)
    {
        for (const char* word : {"nan", "inf"})
        {
            for (auto pos = text.find(word); pos != std::string::npos; pos = text.find(word, pos + 1))
            {
                if (pos == 0 || !std::isalpha(static_cast<unsigned char>(text[pos - 1])))
                {
                    return true;
                }
            }
        }
        return false;
    }

    // A fresh folder under the system temporary folder, removed at the end of the scope.
    struct scratch_dir
    {
        fs::path path;
        scratch_dir()
        {
            static int counter = 0;
            path = fs::temp_directory_path() /
                   ("xgrad_test_plot_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
            fs::remove_all(path);
            fs::create_directories(path);
        }
        ~scratch_dir()
        {
            std::error_code ignored;
            fs::remove_all(path, ignored);
        }
        std::vector<std::string> entries() const
        {
            std::vector<std::string> names;
            for (const auto& entry : fs::directory_iterator(path))
            {
                names.push_back(entry.path().filename().string());
            }
            return names;
        }
    };

    std::string read_text(const fs::path& path)
    {
        std::ifstream in(path, std::ios::binary);
        std::ostringstream text;
        text << in.rdbuf();
        return text.str();
    }

    void write_text(const fs::path& path, const std::string& text)
    {
        std::ofstream out(path, std::ios::binary);
        out << text;
    }

    // Checks that every element opened in the document is closed in order; returns the
    // number of elements.
    std::size_t check_tags_balanced(const std::string& svg)
    {
        std::vector<std::string> open;
        std::size_t elements = 0;
        for (auto pos = svg.find('<'); pos != std::string::npos; pos = svg.find('<', pos + 1))
        {
            const auto end = svg.find('>', pos);
            REQUIRE(end != std::string::npos);
            const std::string tag = svg.substr(pos + 1, end - pos - 1);
            REQUIRE(!tag.empty());
            if (tag[0] == '/')
            {
                REQUIRE_MESSAGE(!open.empty(), "closing " << tag << " with nothing open");
                CHECK(open.back() == tag.substr(1));
                open.pop_back();
                continue;
            }
            ++elements;
            if (tag.back() != '/')
            {
                open.push_back(tag.substr(0, tag.find_first_of(" \n")));
            }
        }
        CHECK(open.empty());
        return elements;
    }

    std::vector<epoch_metrics> three_epochs()
    {
        return {{1, 0.52, 0.81, 0.41, 0.85, 30.5},
                {2, 0.35, 0.87, 0.33, 0.88, 29.8},
                {3, 0.30, 0.89, 0.31, 0.885, 30.1}};
    }
}

TEST_CASE("metrics_svg: two panels, one path and one circle per point per series")
{
    const std::string svg = metrics_svg(three_epochs(), "Fashion-MNIST");
    CHECK(svg.rfind("<svg", 0) == 0);
    CHECK(svg.substr(svg.find_last_not_of("\n") - 5, 6) == "</svg>");
    CHECK(svg.find("xmlns=\"http://www.w3.org/2000/svg\"") != std::string::npos);
    CHECK(check_tags_balanced(svg) > 50);

    CHECK(count_of(svg, "<path ") == 4);
    for (const char* series : {"loss-train", "loss-test", "accuracy-train", "accuracy-test"})
    {
        CAPTURE(series);
        CHECK(count_of(svg, std::string("class=\"series ") + series + "\"") == 1);
        CHECK(count_of(svg, std::string("class=\"point ") + series + "\"") == 3);
    }
    CHECK(count_of(svg, "class=\"panel ") == 2);
    CHECK(svg.find("class=\"legend\"") != std::string::npos);
    CHECK(svg.find(">epoch</text>") != std::string::npos);
    CHECK(svg.find(">accuracy (%)</text>") != std::string::npos);
    CHECK(svg.find("88.50%") != std::string::npos); // last test accuracy, in percent
    CHECK(svg.find(">Fashion-MNIST</text>") != std::string::npos);
    CHECK(!has_non_finite_text(svg));
}

TEST_CASE("metrics_svg: the title is escaped, one epoch shows, NaN is skipped")
{
    const std::string escaped = metrics_svg(three_epochs(), "a < b & \"c\" > 'd'");
    CHECK(escaped.find("a &lt; b &amp; &quot;c&quot; &gt; &apos;d&apos;") != std::string::npos);
    CHECK(escaped.find("a < b") == std::string::npos);
    check_tags_balanced(escaped);

    const std::string one = metrics_svg({{1, 0.6, 0.78, 0.5, 0.8, 31.0}}, "one");
    check_tags_balanced(one);
    CHECK(count_of(one, "<path ") == 4);
    CHECK(count_of(one, "class=\"point ") == 4);
    CHECK(!has_non_finite_text(one));

    auto metrics = three_epochs();
    metrics[1].test_loss = not_a_number;
    metrics[2].train_accuracy = std::numeric_limits<double>::infinity();
    const std::string gaps = metrics_svg(metrics, "gaps");
    check_tags_balanced(gaps);
    CHECK(count_of(gaps, "class=\"point loss-test\"") == 2);
    CHECK(count_of(gaps, "class=\"point accuracy-train\"") == 2);
    CHECK(count_of(gaps, "class=\"series loss-test\"") == 1);
    const auto path_start = gaps.find("class=\"series loss-test\" d=\"");
    const auto path_end = gaps.find('"', path_start + 29);
    CHECK(count_of(gaps.substr(path_start, path_end - path_start), "M") == 2); // broken at the gap
    CHECK(!has_non_finite_text(gaps));

    for (auto& m : metrics)
    {
        m.test_loss = not_a_number;
    }
    const std::string no_test_loss = metrics_svg(metrics, "none");
    CHECK(count_of(no_test_loss, "class=\"series loss-test\"") == 0);
    CHECK(count_of(no_test_loss, "<path ") == 3);

    const std::string empty = metrics_svg({}, "empty");
    check_tags_balanced(empty);
    CHECK(count_of(empty, "<path ") == 0);

    auto percent = three_epochs();
    percent[2].test_accuracy = 88.5;
    CHECK_ERROR(metrics_svg(percent, "t"), std::invalid_argument, "epoch 3", "test_accuracy", "[0, 1]");
}

TEST_CASE("write_metrics_svg: atomic write, clear error for a missing folder")
{
    scratch_dir dir;
    const fs::path path = dir.path / "metrics.svg";
    write_text(path, "old");
    write_metrics_svg(path, three_epochs(), "run");
    CHECK(read_text(path) == metrics_svg(three_epochs(), "run"));
    CHECK(dir.entries() == std::vector<std::string>{"metrics.svg"});

    const std::string missing = (dir.path / "no_such_folder" / "metrics.svg").string();
    CHECK_ERROR(write_metrics_svg(missing, three_epochs(), "run"), std::runtime_error, missing.c_str());
    CHECK_ERROR(write_metrics_svg(dir.path / "bad.svg", {{1, 0.5, 50.0, 0.5, 0.5, 1.0}}, "run"), std::invalid_argument,
                "bad.svg", "train_accuracy");
    CHECK(dir.entries() == std::vector<std::string>{"metrics.svg"});
}

TEST_CASE("metrics CSV: round trip at full precision")
{
    scratch_dir dir;
    const fs::path path = dir.path / "metrics.csv";
    std::vector<epoch_metrics> metrics = three_epochs();
    metrics[0].train_loss = 1.0 / 3.0;
    metrics[1].test_accuracy = 0.1 + 0.2;
    metrics[2].seconds = not_a_number;
    metrics[2].test_loss = -std::numeric_limits<double>::infinity();
    metrics[0].lr = 2e-3;
    metrics[1].lr = 1.0 / 7.0;
    write_metrics_csv(path, metrics);
    CHECK(dir.entries() == std::vector<std::string>{"metrics.csv"});

    const std::string text = read_text(path);
    CHECK(text.rfind("epoch,train_loss,train_accuracy,test_loss,test_accuracy,seconds,lr\n", 0) == 0);
    CHECK(count_of(text, "\n") == 4);

    const auto back = read_metrics_csv(path);
    REQUIRE(back.size() == 3);
    for (std::size_t i = 0; i < 3; ++i)
    {
        CAPTURE(i);
        CHECK(back[i].epoch == metrics[i].epoch);
        CHECK(back[i].train_loss == metrics[i].train_loss);
        CHECK(back[i].train_accuracy == metrics[i].train_accuracy);
        CHECK(back[i].test_accuracy == metrics[i].test_accuracy);
        if (i < 2)
        {
            CHECK(back[i].test_loss == metrics[i].test_loss);
            CHECK(back[i].seconds == metrics[i].seconds);
        }
    }
    CHECK(std::isnan(back[2].seconds));
    CHECK(back[2].test_loss == -std::numeric_limits<double>::infinity());
    CHECK(back[0].lr == 2e-3);
    CHECK(back[1].lr == 1.0 / 7.0);
    CHECK(std::isnan(back[2].lr));

    // Appending a row, as a resumed run does, keeps the earlier ones.
    auto appended = back;
    appended.push_back({4, 0.28, 0.9, 0.3, 0.89, 30.0});
    write_metrics_csv(path, appended);
    CHECK(read_metrics_csv(path).size() == 4);

    // Only the header: no rows. Windows line ends and blank lines are accepted.
    write_metrics_csv(path, {});
    CHECK(read_metrics_csv(path).empty());
    write_text(path, std::string(metrics_csv_header) + "\r\n2,0.5,0.75,0.25,0.8,12,0.01\r\n\r\n");
    const auto crlf = read_metrics_csv(path);
    REQUIRE(crlf.size() == 1);
    CHECK(crlf[0].epoch == 2);
    CHECK(crlf[0].seconds == 12.0);
    CHECK(crlf[0].lr == 0.01);
    // A log written before the lr column (a run resumed across the change) still reads.
    write_text(path, std::string(metrics_csv_header_v1) + "\n2,0.5,0.75,0.25,0.8,12\n");
    const auto old = read_metrics_csv(path);
    REQUIRE(old.size() == 1);
    CHECK(old[0].seconds == 12.0);
    CHECK(std::isnan(old[0].lr));
}

TEST_CASE("metrics CSV: malformed files name the path and line")
{
    scratch_dir dir;
    const fs::path path = dir.path / "metrics.csv";
    // The six-field log of before the lr column; the seven-field one below.
    const std::string header = std::string(metrics_csv_header_v1) + "\n";
    const std::string where = path.string();
    const std::string good = "1,0.5,0.8,0.4,0.85,30\n";
    write_text(path, std::string(metrics_csv_header) + "\n" + good);
    CHECK_ERROR(read_metrics_csv(path), std::runtime_error, where.c_str(), "line 2", "expected 7", "got 6");
    write_text(path, std::string(metrics_csv_header) + "\n1,0.5,0.8,0.4,0.85,30,fast\n");
    CHECK_ERROR(read_metrics_csv(path), std::runtime_error, "line 2", "lr 'fast'");

    write_text(path, header + good + "2,0.5,0.9,0.4\n");
    CHECK_ERROR(read_metrics_csv(path), std::runtime_error, where.c_str(), "line 3", "expected 6", "got 4");
    write_text(path, header + good + good + "3,0.5,abc,0.4,0.8,1\n");
    CHECK_ERROR(read_metrics_csv(path), std::runtime_error, "line 4", "train_accuracy 'abc'");
    write_text(path, header + "1.5,0.5,0.8,0.4,0.85,30\n");
    CHECK_ERROR(read_metrics_csv(path), std::runtime_error, "line 2", "epoch '1.5'");
    write_text(path, header + "1,0.5,0.8,0.4,0.85,\n");
    CHECK_ERROR(read_metrics_csv(path), std::runtime_error, "line 2", "seconds");
    write_text(path, "epoch,loss\n" + good);
    CHECK_ERROR(read_metrics_csv(path), std::runtime_error, "line 1", "header");
    write_text(path, "");
    CHECK_ERROR(read_metrics_csv(path), std::runtime_error, where.c_str(), "empty");

    const std::string missing = (dir.path / "absent.csv").string();
    CHECK_ERROR(read_metrics_csv(missing), std::runtime_error, missing.c_str());
    const std::string nowhere = (dir.path / "no_such_folder" / "metrics.csv").string();
    CHECK_ERROR(write_metrics_csv(nowhere, three_epochs()), std::runtime_error, nowhere.c_str());
    CHECK(dir.entries() == std::vector<std::string>{"metrics.csv"});
}

TEST_CASE("metrics CSV: a FIFO is refused at once, and epochs outside [1, 2147483647] are refused")
{
    scratch_dir dir;
    const fs::path fifo = dir.path / "metrics.csv";
    REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
    const auto r = child_test::run_in_child([&] {
        read_metrics_csv(fifo);
        return std::string("read");
    });
    INFO(child_test::describe(r));
    CHECK(r.exited);
    CHECK(r.report.find("exception: read_metrics_csv: " + fifo.string() + ": not a regular file") == 0);
    fs::remove(fifo);

    const fs::path path = dir.path / "epochs.csv";
    const std::string header = std::string(metrics_csv_header_v1) + "\n";
    for (const char* epoch : {"0", "-3", "2147483648", "99999999999999999999"})
    {
        CAPTURE(epoch);
        write_text(path, header + epoch + ",0.5,0.8,0.4,0.85,30\n");
        const std::string where = path.string();
        const std::string what = std::string("epoch '") + epoch + "' is not an integer in [1, 2147483647]";
        CHECK_ERROR(read_metrics_csv(path), std::runtime_error, where.c_str(), "line 2", what.c_str());
    }
    write_text(path, header + "2147483647,0.5,0.8,0.4,0.85,30\n");
    CHECK(read_metrics_csv(path).at(0).epoch == 2147483647);
}

TEST_CASE("steps CSV: round trip, and malformed rows named by path and line")
{
    scratch_dir dir;
    const fs::path path = dir.path / "steps.csv";
    const std::vector<step_metrics> steps{{1, 0, 2.25, 1e-3}, {1, 1, 1.0 / 3.0, 2e-3}, {2, 0, not_a_number, 0.0}};
    write_steps_csv(path, steps);
    CHECK(read_text(path).rfind("epoch,step,loss,lr\n1,0,2.25,0.001\n", 0) == 0);
    const auto back = read_steps_csv(path);
    REQUIRE(back.size() == 3);
    CHECK(back[1].epoch == 1);
    CHECK(back[1].step == 1);
    CHECK(back[1].loss == 1.0 / 3.0);
    CHECK(back[1].lr == 2e-3);
    CHECK(std::isnan(back[2].loss));

    const std::string where = path.string();
    write_text(path, "epoch,step,loss,lr\n1,-1,0.5,0.1\n");
    CHECK_ERROR(read_steps_csv(path), std::runtime_error, where.c_str(), "line 2", "step '-1'");
    write_text(path, "epoch,step,loss,lr\n1,0,0.5\n");
    CHECK_ERROR(read_steps_csv(path), std::runtime_error, "line 2", "expected 4", "got 3");
    write_text(path, "epoch,step,loss,lr\n0,0,0.5,0.1\n");
    CHECK_ERROR(read_steps_csv(path), std::runtime_error, "line 2", "epoch '0'");
    write_text(path, "epoch,step,loss\n");
    CHECK_ERROR(read_steps_csv(path), std::runtime_error, "line 1", "header 'epoch,step,loss,lr'");
}

TEST_CASE("metrics_svg: the step row, with the loss of every step and the learning rate")
{
    const std::string without = metrics_svg(three_epochs(), "run");
    CHECK(without.find("height=\"440\"") != std::string::npos);
    CHECK(without.find("panel step-loss") == std::string::npos);

    std::vector<step_metrics> steps;
    for (int e = 1; e <= 3; ++e)
        for (std::int64_t s = 0; s < 40; ++s)
            steps.push_back({e, s, 2.0 / static_cast<double>(e + s), 0.1 * (1.0 - (e * 40 + s) / 200.0)});
    const std::string svg = metrics_svg(three_epochs(), "run", steps);
    CHECK(svg.find("height=\"810\"") != std::string::npos);
    CHECK(svg.find("<g class=\"panel step-loss\">") != std::string::npos);
    CHECK(svg.find("<g class=\"panel lr\">") != std::string::npos);
    CHECK(svg.find("class=\"series step-loss-train\"") != std::string::npos);
    CHECK(svg.find("class=\"series lr-lr\"") != std::string::npos);
    // 120 steps: lines without a circle per step; the epoch panels keep theirs.
    CHECK(count_of(svg, "class=\"point step-loss") == 0);
    CHECK(count_of(svg, "class=\"point loss-train") == 3);
    // A few steps get their points.
    steps.resize(10);
    CHECK(count_of(metrics_svg(three_epochs(), "run", steps), "class=\"point lr-lr") == 10);
}
