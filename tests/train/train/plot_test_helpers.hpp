#pragma once
// Shared by the tests of xgrad::train's plots and progress output (test_plot.cpp: the progress
// bar and durations; test_plot_metrics.cpp: the SVG chart and the CSV logs; one ctest
// executable, test_plot).
#include <cstddef>
#include <limits>
#include <string>

namespace plot_test
{
    inline std::size_t count_of(const std::string& text, const std::string& part)
    {
        std::size_t count = 0;
        for (auto pos = text.find(part); pos != std::string::npos; pos = text.find(part, pos + part.size()))
        {
            ++count;
        }
        return count;
    }

    inline constexpr double not_a_number = std::numeric_limits<double>::quiet_NaN();
}
