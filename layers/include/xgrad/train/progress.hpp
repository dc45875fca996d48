#pragma once
// Progress display for training loops (xgrad::train::trainer::fit draws one per epoch).
//
// On a terminal, progress_bar redraws one line in place ("\r", then the line padded with
// spaces over the previous one; no escape codes), at most every redraw_interval seconds and
// always when the last batch is reported. Elsewhere (a log file, a pipe, CI) it prints plain
// lines without "\r", one each time the epoch passes another tenth of its batches, so a log
// holds at most ten lines per epoch plus the final one.

#include <cstddef>
#include <functional>
#include <iostream>
#include <string>

namespace xgrad::train
{
    // "12.3s" below a minute, "1m05s" below an hour, "2h03m04s" above; "--" for a negative
    // or non-finite value (an unknown duration).
    std::string format_duration(double seconds);

    // Whether standard output is a terminal (isatty(STDOUT_FILENO)).
    bool stdout_is_terminal();

    class progress_bar
    {
    public:
        using size_type = std::size_t;
        // Returns a time in seconds; only differences between calls are used.
        using clock_type = std::function<double()>;

        // Seconds between two redraws on a terminal.
        static constexpr double redraw_interval = 0.1;
        // Widest line drawn, in columns; the label is shortened to fit.
        static constexpr size_type max_columns = 100;

        // label: shown first on every line, e.g. "epoch 1/2". total_batches: batches in the
        // epoch, at least 1. out: where to draw. is_terminal: redraw in place (true) or print
        // plain lines (false). clock: empty for std::chrono::steady_clock. The elapsed time
        // starts counting here. Throws std::invalid_argument when total_batches is 0.
        progress_bar(std::string label, size_type total_batches, std::ostream& out = std::cout,
                     bool is_terminal = stdout_is_terminal(), clock_type clock = {});

        progress_bar(const progress_bar&) = delete;
        progress_bar& operator=(const progress_bar&) = delete;

        // Reports that batches_done batches (images_done images) are finished and the mean
        // loss so far is running_loss; draws when due. Throws std::invalid_argument when
        // batches_done exceeds the total, std::logic_error after finish().
        void update(size_type batches_done, size_type images_done, double running_loss);

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
        size_type m_last_width = 0;
        bool m_finished = false;
        double m_final_elapsed = 0.0;
    };
}
