// data_loader: see xgrad/data/loader.hpp for the contract.
//
// Order. An epoch's order is a Fisher-Yates shuffle driven by an xgrad::generator whose seed
// mixes (seed, epoch) through the splitmix64 finaliser, so it depends on nothing else: not on
// the epochs run before, nor on how far an abandoned epoch got.
//
// Prefetch. num_workers worker threads per loader share a window of batches, all shared state
// under one mutex. A worker claims the next unclaimed batch index k while k is less than
// num_workers batches ahead of the one the caller takes next, builds it unlocked, and files it
// (or its exception) under k; next() waits for batch m_consumed. So preparing batches overlaps
// with training on the previous one, up to num_workers at once, and the caller receives them in
// order whatever order the workers finish in. Every epoch gets a new generation number; a
// worker copies (generation, order, k) under the lock, and on relocking drops the result if
// start_epoch moved to a new generation meanwhile. The order is held by shared_ptr, so an
// abandoned epoch's order stays alive for a batch still being built from it. An exception
// from building batch k is rethrown by next() when the caller reaches k, and by every later
// next() until the next start_epoch. The destructor sets a stop flag and joins: each worker
// finishes at most the batch in hand and exits.
//
// Sharding. A step's global batch is the slice [k*K*B, (k+1)*K*B) of the shared order and a
// rank's batch the part [r*B, (r+1)*B) of that slice, clipped: each rank computes its own
// range from (k, r) alone, so no communication is needed and every rank produces a (possibly
// empty) batch for each of the same number of steps.
//
// Without prefetch, next() builds the batch on the calling thread with the same function,
// so both modes give the same tensors and the same errors.
#include "xgrad/data/loader.hpp"

#include "loader_impl.hpp"

#include <cmath>
#include <condition_variable>
#include <exception>
#include <map>
#include <mutex>
#include <numeric>
#include <stdexcept>
#include <thread>
#include <utility>
#include <vector>

#include "xgrad/autograd.hpp"
#include "xgrad/checked.hpp"
#include "xgrad/errors.hpp"
#include "xgrad/factories.hpp"
#include "xgrad/half.hpp"
#include "xgrad/ops/shape.hpp"

namespace xgrad::data
{
    using namespace loader_detail;

    void data_loader::impl::worker_loop()
    {
        std::unique_lock<std::mutex> lock(m_mutex);
        for (;;)
        {
            m_work_cv.wait(lock, [this] { return m_stop || has_work(); });
            if (m_stop)
                return;
            const std::uint64_t generation = m_generation;
            const std::shared_ptr<const order_type> order = m_order;
            const std::int64_t epoch = m_epoch;
            const std::int64_t k = m_claimed++;
            lock.unlock();

            std::optional<batch> made;
            std::exception_ptr error;
            try
            {
                made = make_batch(*order, epoch, k);
            }
            catch (...)
            {
                error = std::current_exception();
            }

            lock.lock();
            if (generation != m_generation)
            {
                // start_epoch abandoned this epoch while the batch was being built. The batch is
                // released unlocked: its tensors' storage goes back to the allocator.
                lock.unlock();
                made.reset();
                lock.lock();
                continue;
            }
            if (error)
                m_failed.emplace(k, error);
            else
                m_ready.emplace(k, std::move(*made));
            m_ready_cv.notify_all();
        }
    }

    namespace
    {
        /// The options every source shares; returns num_replicas * batch_size.
        std::int64_t check_options(const loader_options& options)
        {
            if (options.batch_size < 1)
                reject("batch_size must be >= 1, got " + std::to_string(options.batch_size));
            if (options.data_format != "NCHW" && options.data_format != "NHWC")
                reject("data_format must be \"NCHW\" or \"NHWC\", got \"" + options.data_format + "\"");
            if (options.num_replicas < 1)
                reject("num_replicas must be >= 1, got " + std::to_string(options.num_replicas));
            if (options.rank < 0 || options.rank >= options.num_replicas)
                reject("rank must be in [0, num_replicas) = [0, " + std::to_string(options.num_replicas) + "), got " +
                       std::to_string(options.rank));
            const std::int64_t global = checked_mul(options.num_replicas, options.batch_size,
                                                    "data_loader: num_replicas * batch_size");
            if (!is_floating(options.dtype))
                reject("dtype must be floating (float32, float64, float16 or bfloat16), got " +
                       std::string(name(options.dtype)));
            if (options.num_workers < 1 || options.num_workers > loader_options::max_workers)
                reject("num_workers must be in [1, " + std::to_string(loader_options::max_workers) + "], got " +
                       std::to_string(options.num_workers));
            return global;
        }
    }

    void data_loader::start(std::int64_t size, std::int64_t global)
    {
        impl& m = *m_impl;
        m.m_size = size;
        m.m_global = global;
        // n / g rounded up without forming n + g - 1, which overflows for a batch size near INT64_MAX.
        m.m_batches = size / global + (!m.m_options.drop_last && size % global != 0 ? 1 : 0);
        if (!m.m_options.prefetch)
            return;
        // Workers that fail to start leave the loader unusable: the ones started are stopped
        // and joined before the exception leaves the constructor.
        try
        {
            for (std::int64_t w = 0; w < m.m_options.num_workers; ++w)
                m.m_workers.emplace_back([&m] { m.worker_loop(); });
        }
        catch (...)
        {
            stop_workers();
            throw;
        }
    }

    data_loader::data_loader(std::shared_ptr<const image_dataset> dataset, const loader_options& options)
        : m_impl(std::make_unique<impl>())
    {
        if (!dataset)
            reject("the dataset is null");
        const image_dataset& ds = *dataset;
        const std::int64_t global = check_options(options);
        if (ds.size < 0 || ds.rows < 0 || ds.cols < 0 || ds.classes < 1 || ds.channels < 1)
            reject("the dataset has size " + std::to_string(ds.size) + ", channels " + std::to_string(ds.channels) +
                   ", rows " + std::to_string(ds.rows) + ", cols " + std::to_string(ds.cols) + ", classes " +
                   std::to_string(ds.classes) + "; sizes must be >= 0, channels and classes >= 1");
        const std::int64_t pixels = checked_mul(ds.rows, ds.cols, "data_loader: the dataset's rows * cols");
        const std::int64_t bytes =
            checked_mul(ds.size, checked_mul(ds.channels, pixels, "data_loader: the dataset's channels * rows * cols"),
                        "data_loader: the dataset's size * channels * rows * cols");
        if (ds.images.size() != static_cast<std::uint64_t>(bytes))
            reject("the dataset's images hold " + std::to_string(ds.images.size()) +
                   " bytes, expected size * channels * rows * cols = " + std::to_string(ds.size) + " * " +
                   std::to_string(ds.channels) + " * " + std::to_string(ds.rows) + " * " + std::to_string(ds.cols));
        if (ds.labels.size() != static_cast<std::uint64_t>(ds.size))
            reject("the dataset's labels hold " + std::to_string(ds.labels.size()) +
                   " bytes, expected size = " + std::to_string(ds.size));

        // The normalisation of each channel.
        if (!options.channel_mean.empty() || !options.channel_std.empty())
        {
            if (options.channel_mean.size() != static_cast<std::size_t>(ds.channels) ||
                options.channel_std.size() != static_cast<std::size_t>(ds.channels))
                reject("channel_mean and channel_std must hold one value per channel (" + std::to_string(ds.channels) +
                       "), got " + std::to_string(options.channel_mean.size()) + " and " +
                       std::to_string(options.channel_std.size()));
        }
        const auto channel_value = [&](const std::vector<double>& values, double all, std::size_t c) {
            return values.empty() ? all : values[c];
        };
        std::vector<double> mean, std;
        for (std::size_t c = 0; c < static_cast<std::size_t>(ds.channels); ++c)
        {
            mean.push_back(channel_value(options.channel_mean, options.mean, c));
            std.push_back(channel_value(options.channel_std, options.std, c));
            if (!(std.back() > 0) || !std::isfinite(std.back()))
                reject("std must be finite and > 0, got " + std::to_string(std.back()) +
                       (options.channel_std.empty() ? "" : " for channel " + std::to_string(c)));
            if (!std::isfinite(mean.back()))
                reject("mean must be finite, got " + std::to_string(mean.back()) +
                       (options.channel_mean.empty() ? "" : " for channel " + std::to_string(c)));
        }

        impl& m = *m_impl;
        m.m_images = std::move(dataset);
        m.m_options = options;
        m.m_pixels = pixels;
        // With a transform the examples go through float32 (float64 for float64 batches) as
        // byte / 255, and are normalised after it: a padding or fill of 0 is then a black pixel.
        const dtype table_dtype = options.transform
                                      ? (options.dtype == dtype::float64 ? dtype::float64 : dtype::float32)
                                      : options.dtype;
        if (options.transform)
        {
            m.m_normalize = normalize(mean, std);
            mean.assign(mean.size(), 0.0);
            std.assign(std.size(), 1.0);
        }
        switch (table_dtype)
        {
        case dtype::float32:
            m.m_table_f32 = value_tables<float>(mean, std, [](double v) { return static_cast<float>(v); });
            break;
        case dtype::float64: m.m_table_f64 = value_tables<double>(mean, std, [](double v) { return v; }); break;
        case dtype::float16:
            m.m_table_f16 = value_tables<float16_t>(mean, std, [](double v) { return to_float16(v); });
            break;
        case dtype::bfloat16:
            m.m_table_bf16 = value_tables<bfloat16_t>(mean, std, [](double v) { return to_bfloat16(v); });
            break;
        case dtype::int64: break; // rejected above
        }
        start(m.m_images->size, global);
    }

    data_loader::data_loader(std::shared_ptr<const dataset> source, const loader_options& options)
        : m_impl(std::make_unique<impl>())
    {
        if (!source)
            reject("the dataset is null");
        const std::int64_t global = check_options(options);
        const std::int64_t size = source->size();
        // (Beyond max_examples, a broken size(): said here, not as an allocation failure later.)
        if (size < 0 || size > loader_options::max_examples)
            reject("the dataset's size() is " + std::to_string(size) + ", outside [0, " +
                   std::to_string(loader_options::max_examples) + "] (the loader keeps an 8-byte index per example)");
        impl& m = *m_impl;
        m.m_source = std::move(source);
        m.m_options = options;
        start(size, global);
    }

    void data_loader::stop_workers() noexcept
    {
        if (!m_impl || m_impl->m_workers.empty())
            return;
        {
            std::lock_guard<std::mutex> lock(m_impl->m_mutex);
            m_impl->m_stop = true;
        }
        m_impl->m_work_cv.notify_all();
        for (std::thread& t : m_impl->m_workers)
            t.join();
        m_impl->m_workers.clear();
    }

    data_loader::~data_loader() { stop_workers(); }

    void data_loader::start_epoch(std::int64_t epoch)
    {
        if (epoch < 0)
            reject("epoch must be >= 0, got " + std::to_string(epoch));
        impl& m = *m_impl;
        // Built before taking the lock, so the worker is not held up by the shuffle.
        auto order = std::make_shared<impl::order_type>(static_cast<std::size_t>(m.m_size));
        std::iota(order->begin(), order->end(), std::int64_t{0});
        if (m.m_options.shuffle)
        {
            generator gen(epoch_seed(m.m_options.seed, epoch));
            for (std::size_t i = order->size(); i > 1; --i)
                std::swap((*order)[i - 1], (*order)[static_cast<std::size_t>(gen.below(i))]);
        }
        std::map<std::int64_t, batch> dropped; // released after unlocking
        {
            std::lock_guard<std::mutex> lock(m.m_mutex);
            ++m.m_generation;
            m.m_started = true;
            m.m_order = std::move(order);
            m.m_epoch = epoch;
            m.m_claimed = 0;
            m.m_consumed = 0;
            dropped.swap(m.m_ready);
            m.m_failed.clear();
            m.m_error = nullptr;
        }
        m.m_work_cv.notify_all();
    }

    std::optional<batch> data_loader::next()
    {
        impl& m = *m_impl;
        if (!m.m_options.prefetch)
        {
            if (!m.m_started)
                throw std::logic_error("data_loader::next: no epoch started (call start_epoch first)");
            if (m.m_consumed == m.m_batches)
                return std::nullopt;
            batch out = m.make_batch(*m.m_order, m.m_epoch, m.m_consumed);
            ++m.m_consumed;
            return out;
        }

        std::unique_lock<std::mutex> lock(m.m_mutex);
        if (!m.m_started)
            throw std::logic_error("data_loader::next: no epoch started (call start_epoch first)");
        if (m.m_consumed == m.m_batches)
            return std::nullopt;
        if (m.m_error)
            std::rethrow_exception(m.m_error);
        const std::int64_t k = m.m_consumed;
        m.m_ready_cv.wait(lock, [&m, k] { return m.m_ready.count(k) != 0 || m.m_failed.count(k) != 0; });
        if (const auto failed = m.m_failed.find(k); failed != m.m_failed.end())
        {
            m.m_error = failed->second;
            m.m_failed.erase(failed);
            std::rethrow_exception(m.m_error);
        }
        const auto ready = m.m_ready.find(k);
        batch out = std::move(ready->second);
        m.m_ready.erase(ready);
        ++m.m_consumed;
        lock.unlock();
        m.m_work_cv.notify_all(); // the window moved: a worker may claim one more
        return out;
    }

    std::int64_t data_loader::batches_per_epoch() const noexcept { return m_impl->m_batches; }
    std::int64_t data_loader::global_batch_size(std::int64_t step) const
    {
        const impl& m = *m_impl;
        if (step < 0 || step >= m.m_batches)
            reject("global_batch_size: step must be in [0, batches_per_epoch()) = [0, " + std::to_string(m.m_batches) +
                   "), got " + std::to_string(step));
        return std::min(m.m_global, m.m_size - step * m.m_global);
    }

    std::int64_t data_loader::size() const noexcept { return m_impl->m_size; }
    const image_dataset* data_loader::images() const noexcept { return m_impl->m_images.get(); }
    const loader_options& data_loader::options() const noexcept { return m_impl->m_options; }
}
