#pragma once
// What the CSV and SVG halves of the metrics files share (train/src/train/metrics_csv.cpp).
#include <filesystem>
#include <string>

namespace xgrad::train::detail
{
    /// "'<path>'", for messages.
    std::string quoted(const std::filesystem::path& path);
    /// Writes content atomically and durably (xgrad/io/atomic_file.hpp), throwing
    /// std::runtime_error "<what>: cannot write '<path>': <reason>" on failure.
    void write_atomically(const std::filesystem::path& path, const std::string& content, const char* what);
    /// A double with 17 significant digits (reads back exactly); "nan", "inf", "-inf".
    std::string csv_number(double value);
}
