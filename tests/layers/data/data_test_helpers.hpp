#pragma once
// Shared by the dataset tests (tests/layers/data/test_data_idx.cpp and tests/layers/data/test_data_loader.cpp, one
// ctest executable test_data): the byte vector type and a small hand-built image dataset whose
// pixels name their example.
#include <cstdint>
#include <memory>
#include <vector>

#include "xgrad/data/idx.hpp"

namespace data_test
{
    using xgrad::data::image_dataset;
    using bytes_type = std::vector<std::uint8_t>;

    /// n examples of rows x cols; example i has label i % classes and pixel p = (i + 3p) % 256,
    /// so pixel 0 names the example (n <= 256).
    inline std::shared_ptr<image_dataset> make_dataset(std::int64_t n, std::int64_t rows = 2, std::int64_t cols = 3,
                                                       std::int64_t classes = 256)
    {
        auto ds = std::make_shared<image_dataset>(image_dataset{n, rows, cols, classes, {}, {}});
        for (std::int64_t i = 0; i < n; ++i)
        {
            ds->labels.push_back(static_cast<std::uint8_t>(i % classes));
            for (std::int64_t p = 0; p < rows * cols; ++p)
                ds->images.push_back(static_cast<std::uint8_t>((i + 3 * p) % 256));
        }
        return ds;
    }
}
