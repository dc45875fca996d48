#include "predicted_classes.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "xgrad/factories.hpp"

namespace xgrad::train::detail
{
    tensor predicted_classes(const tensor& logits)
    {
        const std::int64_t rows = logits.size(0), cols = logits.size(1);
        std::vector<float> values(static_cast<std::size_t>(rows * cols));
        to_host(logits, values.data(), dtype::float32);
        std::vector<std::int64_t> classes(static_cast<std::size_t>(rows));
        for (std::int64_t i = 0; i < rows; ++i)
        {
            const float* row = values.data() + i * cols;
            classes[static_cast<std::size_t>(i)] = std::max_element(row, row + cols) - row;
        }
        return from_host(classes.data(), {rows}, dtype::int64);
    }
}
