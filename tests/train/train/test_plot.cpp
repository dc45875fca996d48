// xgrad::train's progress bar (terminal and log output, driven by an injected clock),
// duration formatting, the SVG chart of metrics and the CSV metrics log.
#include "tests/support/check_error.hpp"
#include "tests/train/io/child_process.hpp"
#include "xgrad/train/metrics.hpp"
#include "xgrad/train/progress.hpp"

#include <doctest/doctest.h>

#include <cctype>
#include <cmath>
#include <cstdlib>
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
    std::size_t count_of(const std::string& text, const std::string& part)
    {
        std::size_t count = 0;
        for (auto pos = text.find(part); pos != std::string::npos; pos = text.find(part, pos + part.size()))
        {
            ++count;
        }
        return count;
    }

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

    std::vector<std::string> split(const std::string& text, char separator)
    {
        std::vector<std::string> parts;
        std::string part;
        std::istringstream in(text);
        while (std::getline(in, part, separator))
        {
            parts.push_back(part);
        }
        return parts;
    }

    // A clock the test advances by hand.
    struct manual_clock
    {
        double now = 100.0;
        progress_bar::clock_type function()
        {
            return [this] { return now; };
        }
    };

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

    constexpr double not_a_number = std::numeric_limits<double>::quiet_NaN();
}

TEST_CASE("format_duration")
{
    CHECK(format_duration(0.0) == "0.0s");
    CHECK(format_duration(12.34) == "12.3s");
    CHECK(format_duration(59.94) == "59.9s");
    CHECK(format_duration(59.96) == "1m00s");
    CHECK(format_duration(65.0) == "1m05s");
    CHECK(format_duration(3599.4) == "59m59s");
    CHECK(format_duration(3723.0) == "1h02m03s");
    CHECK(format_duration(-1.0) == "--");
    CHECK(format_duration(not_a_number) == "--");
    CHECK(format_duration(std::numeric_limits<double>::infinity()) == "--");
}

TEST_CASE("progress_bar: plain lines every tenth of the epoch when not a terminal")
{
    manual_clock clock;
    std::ostringstream out;
    progress_bar bar("epoch 1/2", 100, out, false, clock.function());
    for (std::size_t batch = 1; batch <= 100; ++batch)
    {
        clock.now = 100.0 + 0.01 * static_cast<double>(batch);
        bar.update(batch, batch * 64, 0.5);
    }
    const double seconds = bar.finish();
    CHECK(seconds == doctest::Approx(1.0));

    const std::string text = out.str();
    CHECK(text.find('\r') == std::string::npos);
    CHECK(text.find('\x1b') == std::string::npos);
    const auto lines = split(text, '\n');
    REQUIRE(lines.size() == 10); // at 10%, 20%, ..., 90%, then the final line
    CHECK(lines[0] == "epoch 1/2: 10/100 batches (10%), 6400 img/s, loss 0.5000, ETA 0.9s");
    CHECK(lines[4] == "epoch 1/2: 50/100 batches (50%), 6400 img/s, loss 0.5000, ETA 0.5s");
    CHECK(lines[9] == "epoch 1/2: 100/100 batches, 6400 img/s, loss 0.5000, done in 1.0s");
    CHECK(text.back() == '\n');

    // finish() once more prints nothing and keeps the time.
    clock.now += 5.0;
    CHECK(bar.finish() == doctest::Approx(1.0));
    CHECK(out.str() == text);
}

TEST_CASE("progress_bar: few batches still print at most one line each")
{
    manual_clock clock;
    std::ostringstream out;
    progress_bar bar("eval", 3, out, false, clock.function());
    for (std::size_t batch = 1; batch <= 3; ++batch)
    {
        clock.now += 2.0;
        bar.update(batch, batch * 10, 1.0);
    }
    bar.finish();
    const auto lines = split(out.str(), '\n');
    REQUIRE(lines.size() == 3); // 33%, 66%, final
    CHECK(lines[0].find("1/3 batches (33%)") != std::string::npos);
    CHECK(lines[0].find("ETA 4.0s") != std::string::npos);
    CHECK(lines[2].find("done in 6.0s") != std::string::npos);
}

TEST_CASE("progress_bar: redraws one line in place on a terminal")
{
    manual_clock clock;
    std::ostringstream out;
    progress_bar bar("epoch 1/2", 4, out, true, clock.function());
    clock.now += 1.0;
    bar.update(1, 32, 2.5);
    CHECK(out.str() == "\repoch 1/2 [######..................] 1/4 32.0 img/s loss 2.5000 ETA 3.0s");
    clock.now += 1.0;
    bar.update(2, 64, 2.25);
    clock.now += 2.0;
    bar.update(4, 128, 2.0);
    CHECK(bar.finish() == doctest::Approx(4.0));

    const std::string text = out.str();
    CHECK(count_of(text, "\n") == 1);
    CHECK(text.back() == '\n');
    const auto draws = split(text.substr(1, text.size() - 2), '\r');
    REQUIRE(draws.size() == 4);
    CHECK(draws[1] == "epoch 1/2 [############............] 2/4 32.0 img/s loss 2.2500 ETA 2.0s");
    CHECK(draws[2].find("4/4") != std::string::npos);
    CHECK(draws[2].find("ETA 0.0s") != std::string::npos);
    // The final line is padded with spaces over the longer one before it.
    CHECK(draws[3].size() == draws[2].size());
    CHECK(draws[3].rfind("epoch 1/2 [########################] 4/4 32.0 img/s loss 2.0000 in 4.0s ", 0) == 0);
    CHECK(text.find('\x1b') == std::string::npos);
}

TEST_CASE("progress_bar: terminal redraws are rate limited but the last batch always shows")
{
    manual_clock clock;
    std::ostringstream out;
    const std::size_t total = 1000;
    progress_bar bar("epoch 3/10", total, out, true, clock.function());
    for (std::size_t batch = 1; batch <= total; ++batch)
    {
        clock.now = 100.0 + 0.001 * static_cast<double>(batch); // one second in all
        bar.update(batch, batch * 64, 1.0 / static_cast<double>(batch));
    }
    bar.finish();
    const std::string text = out.str();
    const std::size_t redraws = count_of(text, "\r");
    CHECK(redraws >= 10);
    CHECK(redraws <= 13); // about ten a second, the last batch, and finish()
    const auto draws = split(text.substr(1, text.size() - 2), '\r');
    for (const auto& draw : draws)
    {
        CHECK(draw.size() <= progress_bar::max_columns);
    }
    CHECK(draws[draws.size() - 2].find("1000/1000") != std::string::npos);
    CHECK(draws.back().find("in 1.0s") != std::string::npos);
    CHECK(draws.back().find("64000 img/s") != std::string::npos);

    // Reports at the same instant are not redrawn, except the last batch.
    std::ostringstream quick;
    progress_bar fast("fast", 5, quick, true, clock.function());
    for (std::size_t batch = 1; batch <= 5; ++batch)
    {
        fast.update(batch, batch, 0.1);
    }
    CHECK(count_of(quick.str(), "\r") == 2);
    CHECK(quick.str().find("5/5") != std::string::npos);
    CHECK(quick.str().find("-- img/s") != std::string::npos); // no time elapsed yet
}

TEST_CASE("progress_bar: a shorter redraw covers the previous line, a long label is cut")
{
    manual_clock clock;
    std::ostringstream out;
    progress_bar bar("epoch 1/1", 10, out, true, clock.function());
    clock.now += 1.0;
    bar.update(1, 1, 123456789.0);
    clock.now += 1.0;
    bar.update(2, 2, 1.0);
    const auto draws = split(out.str().substr(1), '\r');
    REQUIRE(draws.size() == 2);
    CHECK(draws[1].size() == draws[0].size());
    CHECK(draws[1].find("loss 1.0000 ETA 8.0s   ") != std::string::npos);

    std::ostringstream wide;
    progress_bar labelled(std::string(300, 'x'), 10, wide, true, clock.function());
    labelled.update(1, 1, 1.0);
    labelled.finish();
    const std::string text = wide.str();
    for (const auto& draw : split(text.substr(1, text.size() - 2), '\r'))
    {
        CHECK(draw.size() <= progress_bar::max_columns);
        CHECK(draw.find("...") != std::string::npos);
    }
}

TEST_CASE("progress_bar: bad use is reported")
{
    std::ostringstream out;
    CHECK_ERROR(progress_bar("epoch 1/1", 0, out, false), std::invalid_argument, "epoch 1/1", "total_batches");
    progress_bar bar("epoch 1/1", 5, out, false);
    CHECK_ERROR(bar.update(6, 6, 0.0), std::invalid_argument, "batches_done 6", "total_batches 5");
    bar.update(5, 5, 0.0);
    CHECK(bar.finish() >= 0.0);
    CHECK_ERROR(bar.update(5, 5, 0.0), std::logic_error, "after finish");
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

TEST_CASE("progress_bar: the line fits the terminal, whatever its width; the run's ETA and the learning rate")
{
    manual_clock clock;
    // Wide: every field, the run's ETA from the later epochs at this epoch's pace.
    std::ostringstream out;
    progress_bar bar("epoch 1/3", 10, out, true, clock.function());
    bar.set_columns([] { return std::size_t{200}; });
    bar.set_run(20);
    clock.now += 2.0;
    bar.update(2, 128, 1.5, 1e-3);
    CHECK(out.str() == "\repoch 1/3 [####....................] 2/10 64.0 img/s loss 1.5000 lr 1.00e-03 ETA 8.0s "
                       "run 28.0s");

    // A 70-column terminal: every redraw of a 1000-batch epoch stays within 69 columns (a line
    // that wraps leaves a new line behind at each redraw: 174 lines an epoch before), and the
    // count, the loss and the ETA are still there.
    for (const std::size_t columns : {70, 50, 30, 12})
    {
        CAPTURE(columns);
        std::ostringstream narrow;
        progress_bar b("epoch 12/100", 1000, narrow, true, clock.function());
        b.set_columns([columns] { return columns; });
        b.set_run(99000);
        for (std::size_t batch = 1; batch <= 1000; ++batch)
        {
            clock.now += 0.01;
            b.update(batch, batch * 64, 2.0, 0.05);
        }
        b.finish();
        const std::string text = narrow.str();
        CHECK(count_of(text, "\n") == 1);
        const auto draws = split(text.substr(1, text.size() - 2), '\r');
        for (const auto& draw : draws)
            CHECK_MESSAGE(draw.size() <= columns - 1, "'" << draw << "'");
        if (columns >= 50)
        {
            CHECK(draws[draws.size() - 2].find("1000/1000") != std::string::npos);
            CHECK(draws[draws.size() - 2].find("loss 2.0000") != std::string::npos);
            CHECK(draws[draws.size() - 2].find("ETA 0.0s") != std::string::npos);
        }
        if (columns == 70)
        {
            // The bar shrank, then the learning rate and the run's ETA were left out; the bar,
            // the rate and the epoch's ETA stayed.
            CHECK(draws[1].find("[........]") != std::string::npos);
            CHECK(draws[1].find("img/s") != std::string::npos);
            CHECK(draws[1].find("lr 5.00e-02") == std::string::npos);
            CHECK(draws[1].find("run ") == std::string::npos);
        }
    }

    // A resized window is followed at the next redraw.
    std::size_t columns = 120;
    std::ostringstream resized;
    progress_bar r("epoch 1/1", 10, resized, true, clock.function());
    r.set_columns([&columns] { return columns; });
    clock.now += 1.0;
    r.update(1, 1, 1.0, 0.1);
    columns = 40;
    clock.now += 1.0;
    r.update(2, 2, 1.0, 0.1);
    const auto draws = split(resized.str().substr(1), '\r');
    REQUIRE(draws.size() == 2);
    CHECK(draws[0].find("lr 1.00e-01") != std::string::npos);
    CHECK(draws[1].find_last_not_of(' ') < 39);

    // Plain lines carry both too.
    std::ostringstream plain;
    progress_bar p("epoch 1/2", 10, plain, false, clock.function());
    p.set_run(10);
    clock.now += 1.0;
    p.update(5, 320, 0.5, 2e-3);
    CHECK(plain.str() == "epoch 1/2: 5/10 batches (50%), 320 img/s, loss 0.5000, lr 2.00e-03, ETA 1.0s (run 3.0s)\n");
}

TEST_CASE("terminal_columns: the terminal's width, else COLUMNS, else 80")
{
    if (::isatty(STDOUT_FILENO))
    {
        CHECK(xgrad::train::terminal_columns() >= 1);
        return;
    }
    ::setenv("COLUMNS", "57", 1);
    CHECK(xgrad::train::terminal_columns() == 57);
    ::setenv("COLUMNS", "5x", 1);
    CHECK(xgrad::train::terminal_columns() == 80);
    ::setenv("COLUMNS", "3", 1);
    CHECK(xgrad::train::terminal_columns() == 80);
    ::unsetenv("COLUMNS");
    CHECK(xgrad::train::terminal_columns() == 80);
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
