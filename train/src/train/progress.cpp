#include "xgrad/train/progress.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <vector>

#include <sys/ioctl.h>
#include <unistd.h>

namespace xgrad::train
{
    namespace
    {
        constexpr std::size_t bar_width = 24, min_bar_width = 8;

        std::string printf_string(const char* format, double value)
        {
            char buffer[64];
            std::snprintf(buffer, sizeof(buffer), format, value);
            return buffer;
        }

        std::string format_rate(std::size_t images, double seconds)
        {
            if (!(seconds > 0.0))
            {
                return "-- img/s";
            }
            const double rate = static_cast<double>(images) / seconds;
            return printf_string(rate >= 100.0 ? "%.0f img/s" : "%.1f img/s", rate);
        }

        std::string format_loss(double loss) { return printf_string("loss %.4f", loss); }

        std::string format_bar(std::size_t done, std::size_t total, std::size_t width = bar_width)
        {
            const std::size_t filled = done * width / total;
            return "[" + std::string(filled, '#') + std::string(width - filled, '.') + "]";
        }

        std::string format_lr(double lr) { return printf_string("lr %.2e", lr); }

        std::string format_count(std::size_t done, std::size_t total)
        {
            return std::to_string(done) + "/" + std::to_string(total);
        }
    }

    std::string format_duration(double seconds)
    {
        if (!std::isfinite(seconds) || seconds < 0.0)
        {
            return "--";
        }
        if (seconds < 59.95) // would round to "60.0s"
        {
            return printf_string("%.1fs", seconds);
        }
        const long long total = std::llround(seconds);
        const long long hours = total / 3600;
        const long long minutes = (total % 3600) / 60;
        const long long secs = total % 60;
        char buffer[64];
        if (hours > 0)
        {
            std::snprintf(buffer, sizeof(buffer), "%lldh%02lldm%02llds", hours, minutes, secs);
        }
        else
        {
            std::snprintf(buffer, sizeof(buffer), "%lldm%02llds", minutes, secs);
        }
        return buffer;
    }

    bool stdout_is_terminal() { return ::isatty(STDOUT_FILENO) == 1; }

    std::size_t terminal_columns()
    {
        winsize w{};
        if (::ioctl(STDOUT_FILENO, TIOCGWINSZ, &w) == 0 && w.ws_col > 0)
            return w.ws_col;
        if (const char* env = std::getenv("COLUMNS"))
        {
            char* end = nullptr;
            const long n = std::strtol(env, &end, 10);
            if (end != env && *end == '\0' && n >= 10 && n <= 10000)
                return static_cast<std::size_t>(n);
        }
        return 80;
    }

    progress_bar::progress_bar(std::string label, size_type total_batches, std::ostream& out, bool is_terminal,
                               clock_type clock)
        : m_label(std::move(label)), m_total(total_batches), m_out(out), m_is_terminal(is_terminal),
          m_clock(std::move(clock)), m_start(0.0)
    {
        if (m_total == 0)
        {
            throw std::invalid_argument("progress_bar '" + m_label + "': total_batches must be at least 1, got 0");
        }
        m_start = now();
        if (&m_out == &std::cout)
            m_columns = terminal_columns;
        else
            m_columns = [] { return size_type{80}; };
    }

    void progress_bar::set_columns(columns_type columns) { m_columns = std::move(columns); }

    void progress_bar::set_run(size_type later_batches)
    {
        m_has_run = true;
        m_later_batches = later_batches;
    }

    double progress_bar::now() const
    {
        if (m_clock)
        {
            return m_clock();
        }
        using seconds = std::chrono::duration<double>;
        return std::chrono::duration_cast<seconds>(std::chrono::steady_clock::now().time_since_epoch()).count();
    }

    double progress_bar::elapsed() const { return m_finished ? m_final_elapsed : std::max(0.0, now() - m_start); }

    void progress_bar::update(size_type batches_done, size_type images_done, double running_loss, double lr)
    {
        if (m_finished)
        {
            throw std::logic_error("progress_bar '" + m_label + "': update() after finish()");
        }
        if (batches_done > m_total)
        {
            throw std::invalid_argument("progress_bar '" + m_label + "': batches_done " + std::to_string(batches_done) +
                                        " exceeds total_batches " + std::to_string(m_total));
        }
        m_batches = batches_done;
        m_images = images_done;
        m_loss = running_loss;
        m_lr = lr;

        const double t = now();
        const double elapsed_s = std::max(0.0, t - m_start);
        if (m_is_terminal)
        {
            const bool due = !m_drawn || t - m_last_draw >= redraw_interval;
            if (due || batches_done == m_total)
            {
                draw_terminal(status_text(elapsed_s, false));
                m_last_draw = t;
                m_drawn = true;
            }
            return;
        }
        // Not a terminal: one line per tenth of the epoch passed; the last one is left to
        // finish(), which prints the totals.
        const size_type tenth = batches_done * 10 / m_total;
        if (tenth > m_last_tenth && batches_done < m_total)
        {
            m_out << status_text(elapsed_s, false) << '\n';
            m_out.flush();
            m_last_tenth = tenth;
        }
    }

    double progress_bar::finish()
    {
        if (m_finished)
        {
            return m_final_elapsed;
        }
        m_final_elapsed = std::max(0.0, now() - m_start);
        m_finished = true;
        const std::string text = status_text(m_final_elapsed, true);
        if (m_is_terminal)
        {
            draw_terminal(text);
            m_out << '\n';
        }
        else
        {
            m_out << text << '\n';
        }
        m_out.flush();
        return m_final_elapsed;
    }

    std::string progress_bar::status_text(double elapsed_s, bool final) const
    {
        std::string timing, run;
        if (final)
        {
            timing = (m_is_terminal ? "in " : "done in ") + format_duration(elapsed_s);
        }
        else
        {
            double eta = -1.0, run_eta = -1.0;
            if (m_batches > 0)
            {
                const double per_batch = elapsed_s / static_cast<double>(m_batches);
                eta = per_batch * static_cast<double>(m_total - m_batches);
                run_eta = eta + per_batch * static_cast<double>(m_later_batches);
            }
            timing = "ETA " + format_duration(eta);
            if (m_has_run)
                run = "run " + format_duration(run_eta);
        }
        const std::string lr = std::isnan(m_lr) ? std::string() : format_lr(m_lr);

        if (!m_is_terminal)
        {
            std::string rest = ": " + format_count(m_batches, m_total) + " batches";
            if (!final)
                rest += " (" + std::to_string(m_batches * 100 / m_total) + "%)";
            rest += ", " + format_rate(m_images, elapsed_s) + ", " + format_loss(m_loss);
            if (!lr.empty())
                rest += ", " + lr;
            rest += ", " + timing;
            if (!run.empty())
                rest += " (" + run + ")";
            return m_label + rest;
        }

        // The widest line that does not wrap: one column short of the terminal's width.
        const size_type columns = m_columns ? m_columns() : size_type{80};
        const size_type width = std::max<size_type>(1, std::min(max_columns, columns > 1 ? columns - 1 : 1));
        // Fields after the label, in display order; dropped in `drop_order` while too wide.
        enum field
        {
            bar,
            count,
            rate,
            loss,
            learning_rate,
            eta,
            run_eta,
            field_count
        };
        std::vector<std::string> text(field_count);
        text[count] = format_count(m_batches, m_total);
        text[rate] = format_rate(m_images, elapsed_s);
        text[loss] = format_loss(m_loss);
        text[learning_rate] = lr;
        text[eta] = timing;
        text[run_eta] = run;
        const auto compose = [&](size_type bar_columns) {
            std::string rest;
            for (int f = 0; f < field_count; ++f)
            {
                const std::string piece = f == bar ? (bar_columns ? format_bar(m_batches, m_total, bar_columns) : "")
                                                   : text[static_cast<size_type>(f)];
                if (!piece.empty())
                    rest += " " + piece;
            }
            return rest;
        };
        size_type bar_columns = bar_width;
        std::string rest = compose(bar_columns);
        const int drop_order[] = {learning_rate, run_eta, rate, bar, count};
        std::size_t dropped = 0;
        while (m_label.size() + rest.size() > width)
        {
            const size_type over = m_label.size() + rest.size() - width;
            if (bar_columns > min_bar_width)
                bar_columns = std::max(min_bar_width, bar_columns > over ? bar_columns - over : 0);
            else if (dropped < std::size(drop_order))
            {
                const int f = drop_order[dropped++];
                if (f == bar)
                    bar_columns = 0;
                else
                    text[static_cast<size_type>(f)].clear();
            }
            else
                break;
            rest = compose(bar_columns);
        }

        std::string label = m_label;
        if (label.size() + rest.size() > width)
        {
            const size_type room = rest.size() < width ? width - rest.size() : 0;
            label = room >= 3 ? label.substr(0, room - 3) + "..." : label.substr(0, room);
        }
        std::string line = label + rest;
        if (line.size() > width)
            line.resize(width);
        return line;
    }

    void progress_bar::draw_terminal(const std::string& text)
    {
        m_out << '\r' << text;
        if (m_last_width > text.size())
        {
            m_out << std::string(m_last_width - text.size(), ' ');
        }
        m_last_width = text.size();
        m_out.flush();
    }
}
