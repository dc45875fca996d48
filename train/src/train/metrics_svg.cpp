// The SVG chart of the metrics (see xgrad/train/metrics.hpp): hand-written SVG, one panel per
// quantity, so the chart needs no plotting library and opens in any browser.
#include "metrics_internal.hpp"
#include "xgrad/train/metrics.hpp"

#include <algorithm>
#include <atomic>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <map>
#include <sstream>
#include <stdexcept>
#include <system_error>
#include <unistd.h>

namespace xgrad::train
{
    namespace fs = std::filesystem;

    namespace
    {
        using detail::csv_number;
        using detail::quoted;

        // ---- SVG --------------------------------------------------------------------------

        std::string xml_escape(const std::string& text)
        {
            std::string out;
            out.reserve(text.size());
            for (const char c : text)
            {
                switch (c)
                {
                case '&': out += "&amp;"; break;
                case '<': out += "&lt;"; break;
                case '>': out += "&gt;"; break;
                case '"': out += "&quot;"; break;
                case '\'': out += "&apos;"; break;
                default:
                    // Control characters other than tab and newlines are not allowed in XML.
                    if (static_cast<unsigned char>(c) < 0x20 && c != '\t' && c != '\n' && c != '\r')
                    {
                        out += ' ';
                    }
                    else
                    {
                        out += c;
                    }
                }
            }
            return out;
        }

        std::string fixed(double value, int decimals)
        {
            char buffer[64];
            std::snprintf(buffer, sizeof(buffer), "%.*f", decimals, value);
            return buffer;
        }

        // A coordinate with one decimal, enough for a screen.
        std::string coord(double value) { return fixed(value, 1); }

        // 1, 2 or 5 times a power of ten, so that range / step is close to target.
        double nice_step(double range, double target)
        {
            const double raw = range / target;
            const double magnitude = std::pow(10.0, std::floor(std::log10(raw)));
            const double normalized = raw / magnitude;
            const double factor = normalized < 1.5 ? 1.0 : normalized < 3.0 ? 2.0 : normalized < 7.0 ? 5.0 : 10.0;
            return factor * magnitude;
        }

        int decimals_for(double step) { return std::max(0, static_cast<int>(-std::floor(std::log10(step) + 1e-9))); }

        struct axis
        {
            double lo = 0.0;
            double hi = 1.0;
            double step = 0.2;
        };

        // A value axis around the finite values, widened to whole steps, clamped to [floor, ceiling].
        axis value_axis(const std::vector<double>& values, double floor, double ceiling)
        {
            double lo = INFINITY;
            double hi = -INFINITY;
            for (const double v : values)
            {
                if (std::isfinite(v))
                {
                    lo = std::min(lo, v);
                    hi = std::max(hi, v);
                }
            }
            if (!(lo <= hi)) // no finite value
            {
                lo = floor;
                hi = std::isfinite(ceiling) ? ceiling : 1.0;
            }
            const double pad = hi > lo ? (hi - lo) * 0.05 : std::max(std::fabs(lo) * 0.05, 0.05);
            lo -= pad;
            hi += pad;
            axis a;
            a.step = nice_step(hi - lo, 5.0);
            a.lo = std::max(floor, std::floor(lo / a.step) * a.step);
            a.hi = std::min(ceiling, std::ceil(hi / a.step) * a.step);
            return a;
        }

        constexpr double width = 1000.0;
        constexpr double height = 440.0;     // one row; the step row adds row_height
        constexpr double row_height = 370.0; // the first row's epoch label stays above the second's titles
        constexpr double panel_width = width / 2.0;
        constexpr double row_top = 96.0; // of the first row's plots
        constexpr double row_bottom = 370.0;
        constexpr std::size_t max_points = 60;
        constexpr const char* lr_color = "#2b8a3e";
        constexpr double inner_pad = 14.0; // keeps the first and last points off the frame
        constexpr const char* train_color = "#1f77b4";
        constexpr const char* test_color = "#e8590c";
        constexpr const char* test_dash = "7 4";

        struct series
        {
            const char* name; // "train" or "test"
            const char* color;
            const char* dash; // empty for a solid line
            std::vector<double> values;
        };

        struct panel
        {
            const char* id; // "loss" or "accuracy"
            std::string title;
            std::string y_label;
            int value_decimals; // in the title's last values; negative: three significant digits
            std::string unit;   // appended to the title's last values
            axis y;
            std::vector<series> lines;
        };

        std::string last_finite_text(const std::vector<double>& values, int decimals, const std::string& unit)
        {
            for (auto it = values.rbegin(); it != values.rend(); ++it)
            {
                if (std::isfinite(*it))
                {
                    if (decimals < 0) // three significant digits, for values of any scale
                    {
                        char buffer[64];
                        std::snprintf(buffer, sizeof(buffer), "%.3g", *it);
                        return buffer + unit;
                    }
                    return fixed(*it, decimals) + unit;
                }
            }
            return "n/a";
        }

        /// One panel at (origin, row offset dy): xs are the points' positions on the epoch axis;
        /// points get circles only when there are few of them.
        void draw_panel(std::ostringstream& svg, const panel& p, double origin, double dy,
                        const std::vector<double>& xs, double x_lo, double x_hi, double x_step)
        {
            const double plot_top = row_top + dy, plot_bottom = row_bottom + dy;
            const bool points = xs.size() <= max_points;
            const double left = origin + 78.0;
            const double right = origin + panel_width - 24.0;
            const auto x_of = [&](double epoch) {
                if (x_hi == x_lo) // a single epoch: centred
                {
                    return (left + right) / 2;
                }
                return left + inner_pad + (epoch - x_lo) / (x_hi - x_lo) * (right - left - 2 * inner_pad);
            };
            const auto y_of = [&](double value) {
                return plot_bottom - (value - p.y.lo) / (p.y.hi - p.y.lo) * (plot_bottom - plot_top);
            };

            svg << "<g class=\"panel " << p.id << "\">\n";
            // Title with the last values of each line.
            svg << "<text x=\"" << coord((left + right) / 2) << "\" y=\"" << coord(plot_top - 12)
                << "\" text-anchor=\"middle\" font-size=\"15\"><tspan font-weight=\"bold\">" << xml_escape(p.title)
                << "</tspan><tspan dx=\"10\" fill=\"#555\" font-size=\"13\">last:";
            const char* separator = " ";
            for (const series& s : p.lines)
            {
                svg << separator << s.name << " " << last_finite_text(s.values, p.value_decimals, p.unit);
                separator = ", ";
            }
            svg << "</tspan></text>\n";

            // Grid, ticks and tick labels.
            const int y_decimals = decimals_for(p.y.step);
            for (long k = std::lround(std::ceil(p.y.lo / p.y.step - 1e-9)); k * p.y.step <= p.y.hi + p.y.step * 1e-9;
                 ++k)
            {
                const double value = k * p.y.step;
                const std::string y = coord(y_of(value));
                svg << "<line x1=\"" << coord(left) << "\" y1=\"" << y << "\" x2=\"" << coord(right) << "\" y2=\"" << y
                    << "\" stroke=\"#e6e6e6\"/>\n";
                svg << "<line x1=\"" << coord(left - 5) << "\" y1=\"" << y << "\" x2=\"" << coord(left) << "\" y2=\""
                    << y << "\" stroke=\"#333\"/>\n";
                svg << "<text x=\"" << coord(left - 8) << "\" y=\"" << y
                    << "\" text-anchor=\"end\" dominant-baseline=\"middle\" font-size=\"12\">"
                    << fixed(value, y_decimals) << "</text>\n";
            }
            for (long k = std::lround(std::ceil(x_lo / x_step - 1e-9)); k * x_step <= x_hi + 1e-9; ++k)
            {
                const double value = k * x_step;
                const std::string x = coord(x_of(value));
                svg << "<line x1=\"" << x << "\" y1=\"" << coord(plot_top) << "\" x2=\"" << x << "\" y2=\""
                    << coord(plot_bottom) << "\" stroke=\"#f0f0f0\"/>\n";
                svg << "<line x1=\"" << x << "\" y1=\"" << coord(plot_bottom) << "\" x2=\"" << x << "\" y2=\""
                    << coord(plot_bottom + 5) << "\" stroke=\"#333\"/>\n";
                svg << "<text x=\"" << x << "\" y=\"" << coord(plot_bottom + 20)
                    << "\" text-anchor=\"middle\" font-size=\"12\">" << fixed(value, 0) << "</text>\n";
            }
            // Frame and axis labels.
            svg << "<rect x=\"" << coord(left) << "\" y=\"" << coord(plot_top) << "\" width=\"" << coord(right - left)
                << "\" height=\"" << coord(plot_bottom - plot_top) << "\" fill=\"none\" stroke=\"#333\"/>\n";
            svg << "<text x=\"" << coord((left + right) / 2) << "\" y=\"" << coord(plot_bottom + 44)
                << "\" text-anchor=\"middle\" font-size=\"13\">epoch</text>\n";
            const double label_x = origin + 22.0;
            const double label_y = (plot_top + plot_bottom) / 2;
            svg << "<text x=\"" << coord(label_x) << "\" y=\"" << coord(label_y)
                << "\" text-anchor=\"middle\" font-size=\"13\" transform=\"rotate(-90 " << coord(label_x) << " "
                << coord(label_y) << ")\">" << xml_escape(p.y_label) << "</text>\n";

            // Lines: one path per series, broken where a value is not finite; then the points.
            for (const series& s : p.lines)
            {
                std::string d;
                bool pen_down = false;
                for (std::size_t i = 0; i < xs.size(); ++i)
                {
                    if (!std::isfinite(s.values[i]))
                    {
                        pen_down = false;
                        continue;
                    }
                    d += (d.empty() ? "" : " ") + std::string(pen_down ? "L" : "M") + coord(x_of(xs[i])) + "," +
                         coord(y_of(s.values[i]));
                    pen_down = true;
                }
                if (d.empty())
                {
                    continue;
                }
                svg << "<path class=\"series " << p.id << "-" << s.name << "\" d=\"" << d
                    << "\" fill=\"none\" stroke=\"" << s.color << "\" stroke-width=\"2\"";
                if (*s.dash != '\0')
                {
                    svg << " stroke-dasharray=\"" << s.dash << "\"";
                }
                svg << " stroke-linejoin=\"round\"/>\n";
                for (std::size_t i = 0; points && i < xs.size(); ++i)
                {
                    if (std::isfinite(s.values[i]))
                    {
                        svg << "<circle class=\"point " << p.id << "-" << s.name << "\" cx=\"" << coord(x_of(xs[i]))
                            << "\" cy=\"" << coord(y_of(s.values[i])) << "\" r=\"4\" fill=\"" << s.color
                            << "\" stroke=\"#fff\" stroke-width=\"1\"/>\n";
                    }
                }
            }
            svg << "</g>\n";
        }

        void draw_legend(std::ostringstream& svg)
        {
            struct entry
            {
                const char* name;
                const char* color;
                const char* dash;
            };
            const entry entries[] = {{"train", train_color, ""}, {"test", test_color, test_dash}};
            double x = width / 2 - 90.0;
            const double y = 58.0;
            svg << "<g class=\"legend\">\n";
            for (const entry& e : entries)
            {
                svg << "<line x1=\"" << coord(x) << "\" y1=\"" << coord(y) << "\" x2=\"" << coord(x + 34) << "\" y2=\""
                    << coord(y) << "\" stroke=\"" << e.color << "\" stroke-width=\"2\"";
                if (*e.dash != '\0')
                {
                    svg << " stroke-dasharray=\"" << e.dash << "\"";
                }
                svg << "/>\n<circle cx=\"" << coord(x + 17) << "\" cy=\"" << coord(y) << "\" r=\"4\" fill=\"" << e.color
                    << "\" stroke=\"#fff\"/>\n";
                svg << "<text x=\"" << coord(x + 42) << "\" y=\"" << coord(y)
                    << "\" dominant-baseline=\"middle\" font-size=\"13\">" << e.name << "</text>\n";
                x += 110.0;
            }
            svg << "</g>\n";
        }
    }

    std::string metrics_svg(const std::vector<epoch_metrics>& metrics, const std::string& title,
                            const std::vector<step_metrics>& steps)
    {
        for (const epoch_metrics& m : metrics)
        {
            for (const auto& [name, value] :
                 {std::pair{"train_accuracy", m.train_accuracy}, std::pair{"test_accuracy", m.test_accuracy}})
            {
                if (std::isfinite(value) && (value < 0.0 || value > 1.0))
                {
                    throw std::invalid_argument("metrics_svg: epoch " + std::to_string(m.epoch) + " " + name + " " +
                                                csv_number(value) + " is outside [0, 1] (accuracies are fractions)");
                }
            }
        }
        std::vector<epoch_metrics> rows = metrics;
        std::stable_sort(rows.begin(), rows.end(),
                         [](const epoch_metrics& a, const epoch_metrics& b) { return a.epoch < b.epoch; });

        std::vector<double> epochs;
        series train_loss{"train", train_color, "", {}};
        series test_loss{"test", test_color, test_dash, {}};
        series train_acc{"train", train_color, "", {}};
        series test_acc{"test", test_color, test_dash, {}};
        for (const epoch_metrics& m : rows)
        {
            epochs.push_back(m.epoch);
            train_loss.values.push_back(m.train_loss);
            test_loss.values.push_back(m.test_loss);
            train_acc.values.push_back(m.train_accuracy * 100.0);
            test_acc.values.push_back(m.test_accuracy * 100.0);
        }

        // Epoch axis: ticks at whole epochs; a single epoch is drawn in the middle.
        double x_lo = 1.0;
        double x_hi = 1.0;
        if (!epochs.empty())
        {
            x_lo = *std::min_element(epochs.begin(), epochs.end());
            x_hi = *std::max_element(epochs.begin(), epochs.end());
        }
        const double x_step = x_hi > x_lo ? std::max(1.0, nice_step(x_hi - x_lo, 8.0)) : 1.0;

        // The steps, at epoch - 1 + (step + 1) / (steps in that epoch).
        std::vector<double> step_xs;
        series step_loss{"train", train_color, "", {}};
        series step_lr{"lr", lr_color, "", {}};
        {
            std::map<int, std::int64_t> per_epoch;
            for (const step_metrics& st : steps)
                per_epoch[st.epoch] = std::max(per_epoch[st.epoch], st.step + 1);
            for (const step_metrics& st : steps)
            {
                step_xs.push_back(st.epoch - 1.0 +
                                  static_cast<double>(st.step + 1) / static_cast<double>(per_epoch[st.epoch]));
                step_loss.values.push_back(st.loss);
                step_lr.values.push_back(st.lr);
            }
        }
        double step_lo = x_lo, step_hi = x_hi;
        if (!step_xs.empty())
        {
            step_lo = std::min(step_lo, *std::min_element(step_xs.begin(), step_xs.end()));
            step_hi = std::max(step_hi, *std::max_element(step_xs.begin(), step_xs.end()));
        }
        const double step_x_step = step_hi > step_lo ? std::max(1.0, nice_step(step_hi - step_lo, 8.0)) : 1.0;
        const double total_height = steps.empty() ? height : height + row_height;

        std::vector<double> losses = train_loss.values;
        losses.insert(losses.end(), test_loss.values.begin(), test_loss.values.end());
        std::vector<double> accuracies = train_acc.values;
        accuracies.insert(accuracies.end(), test_acc.values.begin(), test_acc.values.end());

        panel loss_panel{
            "loss", "Loss", "cross-entropy loss", 4, "", value_axis(losses, 0.0, INFINITY), {train_loss, test_loss}};
        panel accuracy_panel{
            "accuracy", "Accuracy", "accuracy (%)", 2, "%", value_axis(accuracies, 0.0, 100.0), {train_acc, test_acc}};

        std::ostringstream svg;
        svg << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << width << "\" height=\"" << total_height
            << "\" viewBox=\"0 0 " << width << " " << total_height
            << "\" font-family=\"DejaVu Sans, Helvetica, Arial, sans-serif\" fill=\"#222\">\n";
        svg << "<title>" << xml_escape(title) << "</title>\n";
        svg << "<rect width=\"100%\" height=\"100%\" fill=\"#fff\"/>\n";
        svg << "<text x=\"" << coord(width / 2) << "\" y=\"30\" text-anchor=\"middle\" "
            << "font-size=\"19\" font-weight=\"bold\">" << xml_escape(title) << "</text>\n";
        draw_legend(svg);
        if (rows.empty())
        {
            svg << "<text x=\"" << coord(width / 2) << "\" y=\"" << coord(height / 2)
                << "\" text-anchor=\"middle\" font-size=\"15\" fill=\"#888\">no epochs yet</text>\n";
        }
        draw_panel(svg, loss_panel, 0.0, 0.0, epochs, x_lo, x_hi, x_step);
        draw_panel(svg, accuracy_panel, panel_width, 0.0, epochs, x_lo, x_hi, x_step);
        if (!steps.empty())
        {
            panel step_loss_panel{
                "step-loss", "Loss per step", "training loss", 4, "", value_axis(step_loss.values, 0.0, INFINITY),
                {step_loss}};
            panel lr_panel{
                "lr", "Learning rate", "learning rate", -1, "", value_axis(step_lr.values, 0.0, INFINITY), {step_lr}};
            draw_panel(svg, step_loss_panel, 0.0, row_height, step_xs, step_lo, step_hi, step_x_step);
            draw_panel(svg, lr_panel, panel_width, row_height, step_xs, step_lo, step_hi, step_x_step);
        }
        svg << "</svg>\n";
        return svg.str();
    }

    void write_metrics_svg(const fs::path& path, const std::vector<epoch_metrics>& metrics, const std::string& title,
                           const std::vector<step_metrics>& steps)
    {
        std::string document;
        try
        {
            document = metrics_svg(metrics, title, steps);
        }
        catch (const std::invalid_argument& error)
        {
            throw std::invalid_argument("write_metrics_svg " + quoted(path) + ": " + error.what());
        }
        detail::write_atomically(path, document, "write_metrics_svg");
    }
}
