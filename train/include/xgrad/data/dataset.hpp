#pragma once
// Datasets beyond bytes in memory, and the readers of other formats (layers/src/data/
// dataset.cpp): the interface a user implements (a size and an example by index), a dataset of
// tensors, and CIFAR-10's binary format. A data_loader (xgrad/data/loader.hpp) batches any of
// them, applying transforms (xgrad/data/transforms.hpp) on its background thread.
#include <cstdint>
#include <filesystem>
#include <vector>

#include "xgrad/data/idx.hpp"
#include "xgrad/tensor.hpp"

namespace xgrad::data
{
    /// One example: its input (for images, a floating [C, H, W] tensor on the CPU) and its
    /// class.
    struct example
    {
        tensor input;
        std::int64_t label = 0;
    };

    /// What a data_loader reads: `size()` examples, example i by `get(i)`. get is called from
    /// the loader's background thread, so it must be safe to call from another thread than the
    /// one that made the dataset (a const function reading immutable state is). It may throw:
    /// the loader hands the exception to the caller of next().
    class dataset
    {
    public:
        virtual ~dataset() = default;
        virtual std::int64_t size() const = 0;
        virtual example get(std::int64_t index) const = 0;
    };

    /// Examples that are slices of two tensors: inputs [n, ...] (floating) and labels [n]
    /// (int64), on the CPU. get(i) is inputs[i] (a view) and labels[i]. Throws
    /// xgrad::invalid_argument naming the shapes and dtypes when they do not fit.
    class tensor_dataset final : public dataset
    {
    public:
        tensor_dataset(tensor inputs, tensor labels);
        std::int64_t size() const override { return m_size; }
        example get(std::int64_t index) const override;

    private:
        tensor m_inputs;
        std::vector<std::int64_t> m_labels; // read once: get() runs per example
        std::int64_t m_size = 0;
    };

    /// CIFAR-10 in its binary version: `dir`/data_batch_{1..5}.bin (train) or test_batch.bin,
    /// each a sequence of 3073-byte records: the label (0..9), then the 32x32 image as three
    /// 1024-byte planes (red, green, blue). Returns an image_dataset of 3 channels, 32x32,
    /// 10 classes, the files in order. Every file is checked before its data is kept: a missing
    /// file, a size that is not a whole number of records, or a label above 9 (in the records
    /// kept) throws
    /// data_error naming the file (and the record). options: limit and min_size as for
    /// load_mnist (classes must be 10 or more, rows and cols 0 or 32).
    image_dataset load_cifar10(const std::filesystem::path& dir, bool train, const dataset_options& options = {});
}
