// xgrad::train's progress bar (terminal and log output, driven by an injected clock), duration
// formatting and the terminal's width. The SVG chart of metrics and the CSV metrics log are
// test_plot_metrics.cpp's (the same executable, test_plot).
#include "tests/support/check_error.hpp"
#include "tests/train/train/plot_test_helpers.hpp"
#include "xgrad/train/progress.hpp"

#include <doctest/doctest.h>

#include <cstdlib>
#include <limits>
#include <sstream>
#include <string>
#include <unistd.h>
#include <vector>

using namespace xgrad::train;

namespace
{
    using plot_test::count_of;
    using plot_test::not_a_number;

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
