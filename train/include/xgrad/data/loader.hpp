#pragma once
// Batches of a dataset as tensors (train/src/data/loader.cpp): an image_dataset of bytes in
// memory (MNIST-format, CIFAR-10), or any data::dataset (xgrad/data/dataset.hpp).
//
// Each epoch visits the dataset in an order given by (seed, epoch) alone — shuffled with
// xgrad::generator when `shuffle`, in order otherwise — so a run resumed at an epoch sees the
// same batches as an uninterrupted one. A background thread prepares the next batch (bytes
// -> normalised float tensor, labels -> int64) while the caller trains on the current one;
// with num_workers > 1, that many threads each prepare one of the next num_workers batches.
//
// A batch of an image_dataset holds images [b, C, rows, cols] ("NCHW") or [b, rows, cols, C]
// ("NHWC") with value (byte / 255 - mean[c]) / std[c] (channel_mean / channel_std, or mean /
// std for every channel) rounded once to the options' dtype, and labels [b] int64. A batch of
// a data::dataset stacks its examples' inputs (which must all have one shape; a [C, H, W]
// input is laid out as data_format says, any other shape as it is) converted to the options'
// dtype. The last batch of an epoch is smaller unless drop_last (which leaves its examples
// out). With prefetch on or off, and with any number of workers, the batches are identical and
// come in the same order; prefetching keeps up to num_workers batches ready or in the making
// ahead of the one the caller takes next.
//
// Transforms (options.transform, xgrad/data/transforms.hpp) run on each example's [C, H, W]
// input in float32 (float64 for a float64 batch) before it joins the batch, on the background
// threads. For an image_dataset they see the pixels as byte / 255 in [0, 1], and the
// normalisation above follows them, as torchvision's transforms of the image come before its
// Normalize: a crop's padding of 0 is a black pixel, (0 - mean[c]) / std[c] once normalised. A
// transform meant for normalised values (torchvision's RandomErasing after Normalize) goes after
// a data::normalize in the list, with the loader's mean 0 and std 1. With num_workers > 1
// a dataset's get and the transforms are called from several threads at once (each for
// another example), so they must be safe to call concurrently; the built-in ones are. Each example
// gets its own generator, seeded from (seed, epoch, example index) alone, so the batches are
// the same whatever the prefetching, and a resumed run makes the ones it would have made.
//
// Sharding (data-parallel training, K = num_replicas processes, this one `rank`): every rank
// builds the same one-process order (same seed, same epoch); step j's global batch is
// order[j*K*B, (j+1)*K*B) with B = batch_size, and rank r takes its elements [r*B, (r+1)*B),
// clipped to the global batch. So the concatenation over r = 0..K-1 of the ranks' batch j is
// the batch j of a one-process loader with batch size K*B, and the last step's batch may be
// smaller, or EMPTY ([0, 1, rows, cols]), on some ranks. batches_per_epoch() is the same on
// every rank (ceil(size / (K*B)), floor with drop_last, which drops an incomplete global
// batch), and next() returns a batch, possibly empty, for every step on every rank, so ranks
// stay in step without communicating. global_batch_size(j) is the number of examples of step j
// over all ranks (what a data-parallel loss is scaled by). K = 1 is the one-process loader.
//
// A loader is driven by one thread at a time (start_epoch, next); the background threads are
// internal. Batches are new tensors that outlive the loader.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "xgrad/data/dataset.hpp"
#include "xgrad/data/transforms.hpp"
#include "xgrad/dtype.hpp"
#include "xgrad/tensor.hpp"

namespace xgrad::data
{
    struct loader_options
    {
        std::int64_t batch_size = 64;
        bool shuffle = true;
        bool drop_last = false;
        std::uint64_t seed = 0;
        /// Normalisation of byte / 255 (Fashion-MNIST's training-set statistics by default),
        /// of every channel, or per channel when channel_mean / channel_std hold one value per
        /// channel of the image_dataset (CIFAR-10's are about {0.4914, 0.4822, 0.4465} and
        /// {0.2470, 0.2435, 0.2616}), after the transform if there is one. Not used for a
        /// data::dataset (normalize is a transform).
        double mean = 0.2860;
        double std = 0.3530;
        std::vector<double> channel_mean, channel_std;
        /// Applied to each example (see above); empty: none.
        xgrad::data::transform transform;
        std::string data_format = "NCHW";
        xgrad::dtype dtype = xgrad::dtype::float32;
        /// Prepare the next batches on background threads.
        bool prefetch = true;
        /// With prefetch: how many background threads prepare batches, each one batch at a
        /// time, at most num_workers batches ahead. In [1, max_workers].
        std::int64_t num_workers = 1;
        static constexpr std::int64_t max_workers = 256;
        /// The most examples a dataset given to a loader may have (2^40): each epoch's order
        /// holds an 8-byte index per example.
        static constexpr std::int64_t max_examples = std::int64_t{1} << 40;
        /// Sharding (see above): the number of processes sharing each step's global batch of
        /// num_replicas * batch_size examples, and which share this loader yields.
        std::int64_t num_replicas = 1;
        std::int64_t rank = 0;
    };

    struct batch
    {
        tensor images;
        tensor labels;
        std::int64_t index = 0; // batch number within the epoch (the step)
    };

    class data_loader
    {
    public:
        /// The dataset is shared, not copied, and must not change while the loader exists.
        /// Throws xgrad::invalid_argument for a null dataset, one whose images / labels do not
        /// hold size * channels * rows * cols / size bytes, batch_size < 1, std not finite and
        /// > 0, mean not finite, channel_mean / channel_std not empty nor one value per channel
        /// (or not finite, a std not > 0), a data_format other than "NCHW" and "NHWC", a
        /// non-floating dtype, num_replicas < 1, rank outside [0, num_replicas), num_workers
        /// outside [1, max_workers], or num_replicas * batch_size overflowing int64.
        /// With prefetch, starts the background threads; the destructor stops and joins them,
        /// also in the middle of an epoch.
        data_loader(std::shared_ptr<const image_dataset> dataset, const loader_options& options);
        /// The same over any dataset (mean, std and the channel values are not used); its size()
        /// must be in [0, loader_options::max_examples] (else xgrad::invalid_argument). Errors
        /// while making a batch, thrown by next(): what the dataset's get or a transform throws,
        /// and xgrad::invalid_argument naming the example for an input that is undefined, not
        /// floating, not on the CPU, or of another shape than the batch's first.
        data_loader(std::shared_ptr<const dataset> dataset, const loader_options& options);
        ~data_loader();
        data_loader(const data_loader&) = delete;
        data_loader& operator=(const data_loader&) = delete;

        /// Starts epoch `epoch` >= 0 (xgrad::invalid_argument otherwise); any epoch in progress
        /// is abandoned, including the batches the background threads are preparing for it.
        void start_epoch(std::int64_t epoch);
        /// The next batch of the current epoch, or nullopt at its end (and after). Errors while
        /// preparing a batch, on a background thread or not, are thrown here when next() reaches
        /// that batch (the batches before it come first), and again on each call until the next
        /// start_epoch: data_error for a label not below the dataset's classes (checked as
        /// batches are made, naming the example), std::bad_alloc. Throws std::logic_error when
        /// no epoch was started.
        std::optional<batch> next();
        /// Batches (steps) per epoch: ceil(size / (num_replicas * batch_size)), or floor with
        /// drop_last; the same on every rank.
        std::int64_t batches_per_epoch() const noexcept;
        /// Examples in step `step`'s global batch, summed over the ranks: num_replicas *
        /// batch_size except for a smaller last step (without drop_last). Throws
        /// xgrad::invalid_argument for a step outside [0, batches_per_epoch()).
        std::int64_t global_batch_size(std::int64_t step) const;
        /// Examples in the whole dataset (not this rank's share).
        std::int64_t size() const noexcept;
        /// The image_dataset the loader reads (shared, unchanged while the loader exists), or
        /// null for a loader over a data::dataset.
        const image_dataset* images() const noexcept;
        const loader_options& options() const noexcept;

    private:
        /// Sizes the epoch from the source's size and starts the workers (the last step of
        /// both constructors).
        void start(std::int64_t size, std::int64_t global);
        /// Stops and joins the workers (none left afterwards).
        void stop_workers() noexcept;

        struct impl;
        std::unique_ptr<impl> m_impl;
    };
}
