#pragma once
// Shared by the dataset tests (tests/layers/data/test_data_*.cpp, one ctest executable
// test_data): the byte vector type, a small hand-built image dataset whose pixels name their
// example, and the batches of one epoch of a loader.
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "xgrad/data/idx.hpp"
#include "xgrad/data/loader.hpp"

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

    /// Every batch of epoch `epoch` of `loader`, in order.
    inline std::vector<xgrad::data::batch> run_epoch(xgrad::data::data_loader& loader, std::int64_t epoch)
    {
        loader.start_epoch(epoch);
        std::vector<xgrad::data::batch> out;
        while (auto b = loader.next())
            out.push_back(std::move(*b));
        return out;
    }
}
