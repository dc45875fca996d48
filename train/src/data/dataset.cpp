// Datasets other than MNIST-format files (see xgrad/data/dataset.hpp): tensors in memory, and
// CIFAR-10's binary batches.
#include "xgrad/data/dataset.hpp"

#include <algorithm>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "../io/input_file.hpp"
#include "xgrad/errors.hpp"
#include "xgrad/factories.hpp"
#include "xgrad/io/atomic_file.hpp"
#include "xgrad/ops/shape.hpp"

namespace xgrad::data
{
    tensor_dataset::tensor_dataset(tensor inputs, tensor labels) : m_inputs(std::move(inputs))
    {
        const auto describe = [](const tensor& t) {
            return t.defined() ? shape_to_string(t.shape()) + " " + std::string(name(t.dtype())) + " on " +
                                     to_string(t.device())
                               : std::string("undefined");
        };
        if (!m_inputs.defined() || m_inputs.dim() < 1 || !is_floating(m_inputs.dtype()) ||
            m_inputs.device() != cpu_device)
            throw xgrad::invalid_argument("tensor_dataset: inputs must be a floating CPU tensor [n, ...], got " +
                                          describe(m_inputs));
        if (!labels.defined() || labels.dim() != 1 || labels.dtype() != dtype::int64 || labels.device() != cpu_device ||
            labels.size(0) != m_inputs.size(0))
            throw xgrad::invalid_argument("tensor_dataset: labels must be an int64 CPU tensor [" +
                                          std::to_string(m_inputs.size(0)) + "] (one per input), got " +
                                          describe(labels));
        m_size = m_inputs.size(0);
        m_labels.resize(static_cast<std::size_t>(m_size));
        to_host(labels, m_labels.data(), dtype::int64);
    }

    example tensor_dataset::get(std::int64_t index) const
    {
        if (index < 0 || index >= m_size)
            throw xgrad::invalid_argument("tensor_dataset: index " + std::to_string(index) + " is outside [0, " +
                                          std::to_string(m_size) + ")");
        example e;
        // A view (tensors are never written in place), without the batch dimension.
        shape_type shape(m_inputs.shape().begin() + 1, m_inputs.shape().end());
        e.input = slice(m_inputs, 0, index, index + 1).reshape(shape);
        e.label = m_labels[static_cast<std::size_t>(index)];
        return e;
    }

    image_dataset load_cifar10(const std::filesystem::path& dir, bool train, const dataset_options& options)
    {
        constexpr std::int64_t side = 32, plane = side * side, record = 1 + 3 * plane;
        if (options.classes < 10 || options.classes > 256)
            throw xgrad::invalid_argument("load_cifar10: classes must be in [10, 256] (CIFAR-10 has 10), got " +
                                          std::to_string(options.classes));
        if (options.limit < 0 || options.min_size < 0 || (options.rows != 0 && options.rows != side) ||
            (options.cols != 0 && options.cols != side))
            throw xgrad::invalid_argument("load_cifar10: limit and min_size must be >= 0 and rows, cols 0 or 32, got "
                                          "limit " +
                                          std::to_string(options.limit) + ", min_size " +
                                          std::to_string(options.min_size) + ", rows " + std::to_string(options.rows) +
                                          ", cols " + std::to_string(options.cols));
        std::vector<std::filesystem::path> files;
        if (train)
            for (int i = 1; i <= 5; ++i)
                files.push_back(dir / ("data_batch_" + std::to_string(i) + ".bin"));
        else
            files.push_back(dir / "test_batch.bin");

        image_dataset ds;
        ds.rows = ds.cols = side;
        ds.channels = 3;
        ds.classes = options.classes;
        std::int64_t total = 0;
        std::vector<unsigned char> bytes;
        for (const auto& path : files)
        {
            try
            {
                xgrad::io::detail::input_file in(path);
                // The size is checked before anything is read or allocated for it.
                if (in.size() % record != 0)
                    throw data_error(path.string() + ": is " + std::to_string(in.size()) +
                                     " bytes, not a whole number of 3073-byte CIFAR-10 records (a label byte and a "
                                     "3x32x32 image)");
                const std::int64_t n = static_cast<std::int64_t>(in.size() / record);
                total += n;
                const std::int64_t keep = options.limit > 0
                                              ? std::max<std::int64_t>(0, std::min(n, options.limit - ds.size))
                                              : n;
                if (keep == 0)
                    continue;
                bytes.resize(static_cast<std::size_t>(keep * record));
                in.read_exact(bytes.data(), bytes.size(), "the records");
                ds.images.reserve(ds.images.size() + static_cast<std::size_t>(keep * 3 * plane));
                for (std::int64_t r = 0; r < keep; ++r)
                {
                    const unsigned char* rec = bytes.data() + r * record;
                    if (rec[0] >= 10)
                        throw data_error(path.string() + ": record " + std::to_string(r) + " has label " +
                                         std::to_string(rec[0]) + ", not a CIFAR-10 class (0 to 9)");
                    ds.labels.push_back(rec[0]);
                    ds.images.insert(ds.images.end(), rec + 1, rec + record);
                }
                ds.size += keep;
            }
            catch (const xgrad::io::file_error& e)
            {
                throw data_error(e.what());
            }
        }
        if (total < options.min_size)
            throw data_error(dir.string() + ": the CIFAR-10 " + (train ? "training" : "test") + " files hold " +
                             std::to_string(total) + " images, fewer than the " + std::to_string(options.min_size) +
                             " required");
        return ds;
    }
}
