#pragma once
// Progress display for training loops (xgrad::train::trainer::fit draws one per epoch).
//
// On a terminal, progress_bar redraws one line in place ("\r", then the line padded with
// spaces over the previous one; no escape codes), at most every redraw_interval seconds and
// always when the last batch is reported. The line fits the terminal: it is at most one column
// narrower than the terminal's width (asked again at every redraw, so a resized window is
// followed) and max_columns; when that is narrow the bar shrinks first, then the learning
// rate, the run's ETA, the rate, the bar and the count are left out in that order, and last
// the label is cut. A line that wraps would leave a new line behind at every redraw.
// Elsewhere (a log file, a pipe, CI) it prints plain lines without "\r", one each time the
// epoch passes another tenth of its batches, so a log holds at most ten lines per epoch plus
// the final one.
//
// With set_run(later_batches) the line also shows the whole run's ETA ("run 1m05s": this
// epoch's remaining batches and the later ones, at this epoch's pace), and an update with a
// learning rate shows it ("lr 1.00e-03").

#include <cstddef>
#include <functional>
#include <iostream>
#include <limits>
#include <string>

namespace xgrad::train
{
    // "12.3s" below a minute, "1m05s" below an hour, "2h03m04s" above; "--" for a negative
    // or non-finite value (an unknown duration).
    std::string format_duration(double seconds);

    // Whether standard output is a terminal (isatty(STDOUT_FILENO)).
    bool stdout_is_terminal();

    // The width of the terminal on standard output in columns (TIOCGWINSZ), else the COLUMNS
    // environment variable when it is a number in [10, 10000], else 80.
    std::size_t terminal_columns();
    class progress_bar
    {
    public:
        using size_type = std::size_t;
        // Returns a time in seconds; only differences between calls are used.
        using clock_type = std::function<double()>;
        // Returns the terminal's width in columns.
        using columns_type = std::function<size_type()>;

        // Seconds between two redraws on a terminal.
        static constexpr double redraw_interval = 0.1;
        // Widest line drawn, in columns; the label is shortened to fit.
        static constexpr size_type max_columns = 100;

        // label: shown first on every line, e.g. "epoch 1/2". total_batches: batches in the
        // epoch, at least 1. out: where to draw. is_terminal: redraw in place (true) or print
        // plain lines (false). clock: empty for std::chrono::steady_clock. The elapsed time
        // starts counting here. The width is terminal_columns() when out is std::cout, else
        // 80 (set_columns changes it). Throws std::invalid_argument when total_batches is 0.
        progress_bar(std::string label, size_type total_batches, std::ostream& out = std::cout,
                     bool is_terminal = stdout_is_terminal(), clock_type clock = {});

        progress_bar(const progress_bar&) = delete;
        progress_bar& operator=(const progress_bar&) = delete;

        // Where the terminal's width comes from (a test passes a fixed one).
        void set_columns(columns_type columns);
        // Batches of the run after this epoch, for the run's ETA.
        void set_run(size_type later_batches);

        // Reports that batches_done batches (images_done images) are finished and the mean
        // loss so far is running_loss, at learning rate lr (NaN: not shown); draws when due.
        // Throws std::invalid_argument when batches_done exceeds the total,
        // std::logic_error after finish().
        void update(size_type batches_done, size_type images_done, double running_loss,
                    double lr = std::numeric_limits<double>::quiet_NaN());

        // Draws the final state with the total time and ends the line; returns the seconds
        // elapsed since construction. Later calls print nothing and return the same value.
        double finish();

        // Seconds since construction (frozen by finish()).
        double elapsed() const;

        size_type total_batches() const noexcept { return m_total; }
        bool is_terminal() const noexcept { return m_is_terminal; }

    private:
        double now() const;
        std::string status_text(double elapsed_s, bool final) const;
        void draw_terminal(const std::string& text);

        std::string m_label;
        size_type m_total;
        std::ostream& m_out;
        bool m_is_terminal;
        clock_type m_clock;
        double m_start;
        double m_last_draw = 0.0;
        bool m_drawn = false;
        size_type m_last_tenth = 0;
        size_type m_batches = 0;
        size_type m_images = 0;
        double m_loss = 0.0;
        double m_lr = std::numeric_limits<double>::quiet_NaN();
        columns_type m_columns;
        bool m_has_run = false;
        size_type m_later_batches = 0;
        size_type m_last_width = 0;
        bool m_finished = false;
        double m_final_elapsed = 0.0;
    };
}
