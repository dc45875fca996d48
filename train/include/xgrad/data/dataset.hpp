#pragma once
// The datasets (train/src/data/dataset.cpp): images held in memory as bytes (image_dataset, what
// the file readers give: IDX in xgrad/data/idx.hpp, CIFAR-10 below), the interface a user
// implements for any other data (a size and an example by index), a dataset of tensors, and the
// error every reader throws for a file that is not what it should be. A data_loader
// (xgrad/data/loader.hpp) batches any of them, applying transforms (xgrad/data/transforms.hpp) on
// its background thread, and the trainer evaluates on either kind.
#include <cstdint>
#include <filesystem>
#include <stdexcept>
#include <vector>

#include "xgrad/tensor.hpp"

namespace xgrad::data
{
    /// A file that is not what a reader expects; the message starts with the file's path.
    class data_error : public std::runtime_error
    {
    public:
        using std::runtime_error::runtime_error;
    };

    /// An image classification dataset held in memory: `images` [n, channels, rows, cols]
    /// bytes (channel planes, as CIFAR-10 stores them; 1 channel for MNIST-format data) and
    /// `labels` [n] in [0, classes).
    struct image_dataset
    {
        std::int64_t size = 0, rows = 0, cols = 0, classes = 10;
        std::vector<std::uint8_t> images; // n * channels * rows * cols
        std::vector<std::uint8_t> labels; // n
        std::int64_t channels = 1;
    };

    /// What the file readers (load_idx_dataset, load_mnist, load_cifar10) require of the files,
    /// and what they keep.
    struct dataset_options
    {
        /// Every label (of the whole file, also beyond `limit`) must be below it; in [1, 256].
        std::int64_t classes = 10;
        /// > 0: keep only the first `limit` examples; 0 keeps them all.
        std::int64_t limit = 0;
        /// > 0: the images must have exactly this many rows / cols (e.g. a model's input size);
        /// 0 accepts any.
        std::int64_t rows = 0, cols = 0;
        /// The files must hold at least this many examples (counted before `limit`).
        std::int64_t min_size = 0;
    };

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
