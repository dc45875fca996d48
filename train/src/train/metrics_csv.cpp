// The per-epoch and per-step CSV logs (see xgrad/train/metrics.hpp). Both are read the same
// way: opened as every reader opens files (a FIFO or a folder is refused at once instead of
// blocking), read whole once their size is checked against a bound, then parsed line by line
// with the line number in every error.
#include "metrics_internal.hpp"
#include "xgrad/train/metrics.hpp"

#include "../io/input_file.hpp"
#include "xgrad/io/atomic_file.hpp"

#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <limits>
#include <sstream>
#include <stdexcept>
#include <string>
#include <system_error>
#include <vector>

namespace xgrad::train
{
    namespace fs = std::filesystem;

    namespace detail
    {
        std::string quoted(const fs::path& path) { return "'" + path.string() + "'"; }

        void write_atomically(const fs::path& path, const std::string& content, const char* what)
        {
            try
            {
                xgrad::io::write_file_atomically(path, content);
            }
            catch (const xgrad::io::file_error& e)
            {
                throw std::runtime_error(std::string(what) + ": cannot write " + quoted(path) + ": " + e.what());
            }
        }

        std::string csv_number(double value)
        {
            if (std::isnan(value))
                return "nan";
            if (std::isinf(value))
                return value > 0 ? "inf" : "-inf";
            char buffer[64];
            std::snprintf(buffer, sizeof(buffer), "%.17g", value);
            return buffer;
        }
    }

    namespace
    {
        using detail::csv_number;
        using detail::quoted;

        // An epoch row is under 170 bytes: this is over a million epochs, and bounds the read.
        constexpr std::uint64_t max_metrics_csv_bytes = 256ull << 20;
        // A step row is under 80 bytes: over ten million steps.
        constexpr std::uint64_t max_steps_csv_bytes = 1ull << 30;

        std::string trim(const std::string& text)
        {
            const auto first = text.find_first_not_of(" \t");
            if (first == std::string::npos)
                return {};
            const auto last = text.find_last_not_of(" \t");
            return text.substr(first, last - first + 1);
        }

        template <class T>
        bool parse_whole(const std::string& text, T& value)
        {
            const char* begin = text.data();
            const char* end = begin + text.size();
            const auto result = std::from_chars(begin, end, value);
            return !text.empty() && result.ec == std::errc() && result.ptr == end;
        }

        /// Reads a CSV log whose first line is one of `headers`, calling row(fields, where,
        /// header index) for every non-blank line after it; `where` starts the row's errors.
        void read_csv(const fs::path& path, const char* who, std::uint64_t max_bytes,
                      const std::vector<const char*>& headers,
                      const std::function<void(const std::vector<std::string>&, const std::string&, std::size_t)>& row)
        {
            std::string text;
            try
            {
                xgrad::io::detail::input_file file(path);
                if (file.size() > max_bytes)
                    throw std::runtime_error(std::string(who) + ": " + quoted(path) + " is " +
                                             std::to_string(file.size()) + " bytes, more than the " +
                                             std::to_string(max_bytes) + " a metrics log can take");
                text.resize(static_cast<std::size_t>(file.size()));
                file.read_exact(text.data(), text.size(), "the metrics log");
            }
            catch (const xgrad::io::file_error& e)
            {
                throw std::runtime_error(std::string(who) + ": " + e.what());
            }
            std::istringstream in(text);
            std::string line;
            std::size_t line_number = 0, header = headers.size();
            while (std::getline(in, line))
            {
                ++line_number;
                if (!line.empty() && line.back() == '\r')
                    line.pop_back();
                const std::string where = std::string(who) + ": " + quoted(path) + " line " +
                                          std::to_string(line_number) + ": ";
                if (header == headers.size())
                {
                    for (std::size_t h = 0; h < headers.size() && header == headers.size(); ++h)
                        if (trim(line) == headers[h])
                            header = h;
                    if (header == headers.size())
                        throw std::runtime_error(where + "expected the header '" + headers[0] + "', got '" + line +
                                                 "'");
                    continue;
                }
                if (trim(line).empty())
                    continue;
                std::vector<std::string> fields;
                std::string field;
                std::istringstream split(line);
                while (std::getline(split, field, ','))
                    fields.push_back(trim(field));
                if (line.back() == ',')
                    fields.emplace_back();
                row(fields, where, header);
            }
            if (header == headers.size())
                throw std::runtime_error(std::string(who) + ": " + quoted(path) + " is empty (expected the header '" +
                                         headers[0] + "')");
        }

        void expect_fields(const std::vector<std::string>& fields, std::size_t n, const std::string& where)
        {
            if (fields.size() != n)
                throw std::runtime_error(where + "expected " + std::to_string(n) + " comma-separated fields, got " +
                                         std::to_string(fields.size()));
        }

        int parse_epoch(const std::string& field, const std::string& where)
        {
            // Epochs count from 1 (the trainer writes the number of epochs completed).
            int epoch = 0;
            if (!parse_whole(field, epoch) || epoch < 1)
                throw std::runtime_error(where + "epoch '" + field + "' is not an integer in [1, " +
                                         std::to_string(std::numeric_limits<int>::max()) + "]");
            return epoch;
        }

        double parse_number(const std::string& field, const char* name, const std::string& where)
        {
            double v = 0;
            if (!parse_whole(field, v))
                throw std::runtime_error(where + name + " '" + field + "' is not a number");
            return v;
        }
    }

    void write_metrics_csv(const fs::path& path, const std::vector<epoch_metrics>& metrics)
    {
        std::string text = std::string(metrics_csv_header) + "\n";
        for (const epoch_metrics& m : metrics)
            text += std::to_string(m.epoch) + "," + csv_number(m.train_loss) + "," + csv_number(m.train_accuracy) +
                    "," + csv_number(m.test_loss) + "," + csv_number(m.test_accuracy) + "," + csv_number(m.seconds) +
                    "," + csv_number(m.lr) + "\n";
        detail::write_atomically(path, text, "write_metrics_csv");
    }

    std::vector<epoch_metrics> read_metrics_csv(const fs::path& path)
    {
        std::vector<epoch_metrics> rows;
        read_csv(path, "read_metrics_csv", max_metrics_csv_bytes, {metrics_csv_header, metrics_csv_header_v1},
                 [&](const std::vector<std::string>& fields, const std::string& where, std::size_t header) {
                     // The log before the lr column (header 1) has six fields.
                     expect_fields(fields, header == 0 ? 7 : 6, where);
                     epoch_metrics m;
                     m.epoch = parse_epoch(fields[0], where);
                     static const char* const names[] = {"train_loss",    "train_accuracy", "test_loss",
                                                         "test_accuracy", "seconds",        "lr"};
                     double* const targets[] = {&m.train_loss,    &m.train_accuracy, &m.test_loss,
                                                &m.test_accuracy, &m.seconds,        &m.lr};
                     for (std::size_t i = 0; i + 1 < fields.size(); ++i)
                         *targets[i] = parse_number(fields[i + 1], names[i], where);
                     rows.push_back(m);
                 });
        return rows;
    }

    void write_steps_csv(const fs::path& path, const std::vector<step_metrics>& steps)
    {
        std::string text = std::string(steps_csv_header) + "\n";
        for (const step_metrics& s : steps)
            text += std::to_string(s.epoch) + "," + std::to_string(s.step) + "," + csv_number(s.loss) + "," +
                    csv_number(s.lr) + "\n";
        detail::write_atomically(path, text, "write_steps_csv");
    }

    std::vector<step_metrics> read_steps_csv(const fs::path& path)
    {
        std::vector<step_metrics> rows;
        read_csv(path, "read_steps_csv", max_steps_csv_bytes, {steps_csv_header},
                 [&](const std::vector<std::string>& fields, const std::string& where, std::size_t) {
                     expect_fields(fields, 4, where);
                     step_metrics s;
                     s.epoch = parse_epoch(fields[0], where);
                     if (!parse_whole(fields[1], s.step) || s.step < 0)
                         throw std::runtime_error(where + "step '" + fields[1] +
                                                  "' is not an integer in [0, 9223372036854775807]");
                     s.loss = parse_number(fields[2], "loss", where);
                     s.lr = parse_number(fields[3], "lr", where);
                     rows.push_back(s);
                 });
        return rows;
    }
}
