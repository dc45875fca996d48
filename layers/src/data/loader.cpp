// data_loader: see xgrad/data/loader.hpp for the contract.
//
// Order. An epoch's order is a Fisher-Yates shuffle driven by an xgrad::generator whose seed
// mixes (seed, epoch) through the splitmix64 finaliser, so it depends on nothing else: not on
// the epochs run before, nor on how far an abandoned epoch got.
//
// Prefetch. One worker thread per loader and a one-batch slot, all shared state under one
// mutex. The worker fills the slot with batch k + 1 as soon as the caller has taken batch k,
// so preparing a batch overlaps with training on the previous one. Every epoch gets a new
// generation number; the worker copies (generation, order, batch index) under the lock,
// builds the batch unlocked, and on relocking drops the result if start_epoch moved to a new
// generation meanwhile. The order is held by shared_ptr, so an abandoned epoch's order stays
// alive for a batch still being built from it. An exception from building a batch is kept in
// the slot's place and rethrown by every next() until the next start_epoch. The destructor
// sets a stop flag and joins: the worker finishes at most the batch in hand and exits.
//
// Sharding. A step's global batch is the slice [k*K*B, (k+1)*K*B) of the shared order and a
// rank's batch the part [r*B, (r+1)*B) of that slice, clipped: each rank computes its own
// range from (k, r) alone, so no communication is needed and every rank produces a (possibly
// empty) batch for each of the same number of steps.
//
// Without prefetch, next() builds the batch on the calling thread with the same function,
// so both modes give the same tensors and the same errors.
#include "xgrad/data/loader.hpp"

#include <cmath>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <numeric>
#include <stdexcept>
#include <thread>
#include <utility>
#include <vector>

#include "xgrad/checked.hpp"
#include "xgrad/errors.hpp"
#include "xgrad/factories.hpp"
#include "xgrad/half.hpp"

namespace xgrad::data
{
    namespace
    {
        std::uint64_t splitmix_finalize(std::uint64_t z) noexcept
        {
            z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
            z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
            return z ^ (z >> 31);
        }

        std::uint64_t epoch_seed(std::uint64_t seed, std::int64_t epoch) noexcept
        {
            return splitmix_finalize(seed ^
                                     splitmix_finalize(static_cast<std::uint64_t>(epoch) + 0x9E3779B97F4A7C15ULL));
        }

        [[noreturn]] void reject(const std::string& what) { throw xgrad::invalid_argument("data_loader: " + what); }

        /// The 256 possible pixel values, normalised and rounded once to the batch dtype.
        template <class T>
        std::vector<T> value_table(double mean, double std, T (*convert)(double))
        {
            std::vector<T> table(256);
            for (int b = 0; b < 256; ++b)
                table[static_cast<std::size_t>(b)] = convert((b / 255.0 - mean) / std);
            return table;
        }

        template <class T>
        void fill_pixels(T* out, const std::vector<T>& table, const std::uint8_t* pixels, std::int64_t count)
        {
            for (std::int64_t i = 0; i < count; ++i)
                out[i] = table[pixels[i]];
        }
    }

    struct data_loader::impl
    {
        using order_type = std::vector<std::int64_t>;

        std::shared_ptr<const image_dataset> m_dataset;
        loader_options m_options;
        std::int64_t m_batches = 0;
        std::int64_t m_global = 0; // num_replicas * batch_size: a step's global batch
        std::int64_t m_pixels = 0; // rows * cols
        // One of these holds the value table for m_options.dtype.
        std::vector<float> m_table_f32;
        std::vector<double> m_table_f64;
        std::vector<float16_t> m_table_f16;
        std::vector<bfloat16_t> m_table_bf16;

        // Shared with the worker; guarded by m_mutex.
        std::mutex m_mutex;
        std::condition_variable m_work_cv;  // the worker waits for work or stop
        std::condition_variable m_ready_cv; // next() waits for a batch or an error
        bool m_stop = false;
        bool m_started = false;
        std::uint64_t m_generation = 0;
        std::shared_ptr<const order_type> m_order;
        std::int64_t m_produced = 0; // batches of this generation built (or failed)
        std::int64_t m_consumed = 0; // batches handed out by next()
        std::optional<batch> m_ready;
        std::exception_ptr m_error;

        std::thread m_worker; // last: started after everything above is set up

        batch make_batch(const order_type& order, std::int64_t k) const;
        void worker_loop();
        bool has_work() const noexcept { return m_started && !m_ready && !m_error && m_produced < m_batches; }
    };

    batch data_loader::impl::make_batch(const order_type& order, std::int64_t k) const
    {
        const image_dataset& ds = *m_dataset;
        const std::int64_t b = m_options.batch_size;
        const auto n = static_cast<std::int64_t>(order.size());
        // k < m_batches = ceil(n / m_global) or less, so k * m_global < n: no overflow. The
        // rank's offset in the global batch, rank * B < m_global (checked by the constructor),
        // is clipped to the examples left, which leaves an empty batch for a rank past them.
        const std::int64_t global_first = k * m_global;
        const std::int64_t first = global_first + std::min(m_options.rank * b, n - global_first);
        const std::int64_t count = std::max<std::int64_t>(0, std::min(b, n - first));
        const dtype dt = m_options.dtype;

        batch out;
        out.index = k;
        out.images = m_options.data_format == "NHWC" ? xgrad::empty({count, ds.rows, ds.cols, 1}, dt)
                                                     : xgrad::empty({count, 1, ds.rows, ds.cols}, dt);
        out.labels = xgrad::empty({count}, dtype::int64);
        auto* labels = out.labels.data<std::int64_t>();
        // With one channel, [b, 1, rows, cols] and [b, rows, cols, 1] have the same row-major
        // element order, so both formats are filled alike.
        for (std::int64_t i = 0; i < count; ++i)
        {
            const std::int64_t example = order[static_cast<std::size_t>(first + i)];
            const std::uint8_t label = ds.labels[static_cast<std::size_t>(example)];
            if (label >= ds.classes)
                throw data_error("data_loader: label " + std::to_string(label) + " of example " +
                                 std::to_string(example) + " is not below the dataset's classes, " +
                                 std::to_string(ds.classes));
            labels[i] = label;
            const std::uint8_t* pixels = ds.images.data() + example * m_pixels;
            const std::int64_t at = i * m_pixels;
            switch (dt)
            {
            case dtype::float32: fill_pixels(out.images.data<float>() + at, m_table_f32, pixels, m_pixels); break;
            case dtype::float64: fill_pixels(out.images.data<double>() + at, m_table_f64, pixels, m_pixels); break;
            case dtype::float16: fill_pixels(out.images.data<float16_t>() + at, m_table_f16, pixels, m_pixels); break;
            case dtype::bfloat16:
                fill_pixels(out.images.data<bfloat16_t>() + at, m_table_bf16, pixels, m_pixels);
                break;
            case dtype::int64: throw std::logic_error("data_loader: int64 images"); // rejected by the constructor
            }
        }
        return out;
    }

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
            const std::int64_t k = m_produced;
            lock.unlock();

            std::optional<batch> made;
            std::exception_ptr error;
            try
            {
                made = make_batch(*order, k);
            }
            catch (...)
            {
                error = std::current_exception();
            }

            lock.lock();
            if (generation != m_generation)
                continue; // start_epoch abandoned this epoch while the batch was being built
            if (error)
                m_error = error;
            else
                m_ready = std::move(made);
            ++m_produced;
            m_ready_cv.notify_one();
        }
    }

    data_loader::data_loader(std::shared_ptr<const image_dataset> dataset, const loader_options& options)
        : m_impl(std::make_unique<impl>())
    {
        if (!dataset)
            reject("the dataset is null");
        const image_dataset& ds = *dataset;
        if (options.batch_size < 1)
            reject("batch_size must be >= 1, got " + std::to_string(options.batch_size));
        if (!(options.std > 0) || !std::isfinite(options.std))
            reject("std must be finite and > 0, got " + std::to_string(options.std));
        if (!std::isfinite(options.mean))
            reject("mean must be finite, got " + std::to_string(options.mean));
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
        if (ds.size < 0 || ds.rows < 0 || ds.cols < 0 || ds.classes < 1)
            reject("the dataset has size " + std::to_string(ds.size) + ", rows " + std::to_string(ds.rows) + ", cols " +
                   std::to_string(ds.cols) + ", classes " + std::to_string(ds.classes) +
                   "; sizes must be >= 0 and classes >= 1");
        const std::int64_t pixels = checked_mul(ds.rows, ds.cols, "data_loader: the dataset's rows * cols");
        const std::int64_t bytes = checked_mul(ds.size, pixels, "data_loader: the dataset's size * rows * cols");
        if (ds.images.size() != static_cast<std::uint64_t>(bytes))
            reject("the dataset's images hold " + std::to_string(ds.images.size()) +
                   " bytes, expected size * rows * cols = " + std::to_string(ds.size) + " * " +
                   std::to_string(ds.rows) + " * " + std::to_string(ds.cols));
        if (ds.labels.size() != static_cast<std::uint64_t>(ds.size))
            reject("the dataset's labels hold " + std::to_string(ds.labels.size()) +
                   " bytes, expected size = " + std::to_string(ds.size));

        impl& m = *m_impl;
        m.m_dataset = std::move(dataset);
        m.m_options = options;
        m.m_pixels = pixels;
        m.m_global = global;
        const std::int64_t n = m.m_dataset->size;
        // n / g rounded up without forming n + g - 1, which overflows for a batch size near INT64_MAX.
        m.m_batches = n / global + (!options.drop_last && n % global != 0 ? 1 : 0);
        switch (options.dtype)
        {
        case dtype::float32:
            m.m_table_f32 = value_table<float>(options.mean, options.std,
                                               [](double v) { return static_cast<float>(v); });
            break;
        case dtype::float64:
            m.m_table_f64 = value_table<double>(options.mean, options.std, [](double v) { return v; });
            break;
        case dtype::float16:
            m.m_table_f16 = value_table<float16_t>(options.mean, options.std, [](double v) { return to_float16(v); });
            break;
        case dtype::bfloat16:
            m.m_table_bf16 = value_table<bfloat16_t>(options.mean, options.std,
                                                     [](double v) { return to_bfloat16(v); });
            break;
        case dtype::int64: break; // rejected above
        }
        if (options.prefetch)
            m.m_worker = std::thread([&m] { m.worker_loop(); });
    }

    data_loader::~data_loader()
    {
        if (m_impl && m_impl->m_worker.joinable())
        {
            {
                std::lock_guard<std::mutex> lock(m_impl->m_mutex);
                m_impl->m_stop = true;
            }
            m_impl->m_work_cv.notify_one();
            m_impl->m_worker.join();
        }
    }

    void data_loader::start_epoch(std::int64_t epoch)
    {
        if (epoch < 0)
            reject("epoch must be >= 0, got " + std::to_string(epoch));
        impl& m = *m_impl;
        // Built before taking the lock, so the worker is not held up by the shuffle.
        auto order = std::make_shared<impl::order_type>(static_cast<std::size_t>(m.m_dataset->size));
        std::iota(order->begin(), order->end(), std::int64_t{0});
        if (m.m_options.shuffle)
        {
            generator gen(epoch_seed(m.m_options.seed, epoch));
            for (std::size_t i = order->size(); i > 1; --i)
                std::swap((*order)[i - 1], (*order)[static_cast<std::size_t>(gen.below(i))]);
        }
        std::optional<batch> dropped; // released after unlocking
        {
            std::lock_guard<std::mutex> lock(m.m_mutex);
            ++m.m_generation;
            m.m_started = true;
            m.m_order = std::move(order);
            m.m_produced = 0;
            m.m_consumed = 0;
            dropped = std::move(m.m_ready);
            m.m_ready.reset();
            m.m_error = nullptr;
        }
        m.m_work_cv.notify_one();
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
            batch out = m.make_batch(*m.m_order, m.m_consumed);
            ++m.m_consumed;
            return out;
        }

        std::unique_lock<std::mutex> lock(m.m_mutex);
        if (!m.m_started)
            throw std::logic_error("data_loader::next: no epoch started (call start_epoch first)");
        if (m.m_consumed == m.m_batches)
            return std::nullopt;
        m.m_ready_cv.wait(lock, [&m] { return m.m_ready.has_value() || m.m_error; });
        if (m.m_error)
            std::rethrow_exception(m.m_error);
        batch out = std::move(*m.m_ready);
        m.m_ready.reset();
        ++m.m_consumed;
        lock.unlock();
        m.m_work_cv.notify_one();
        return out;
    }

    std::int64_t data_loader::batches_per_epoch() const noexcept { return m_impl->m_batches; }
    std::int64_t data_loader::global_batch_size(std::int64_t step) const
    {
        const impl& m = *m_impl;
        if (step < 0 || step >= m.m_batches)
            reject("global_batch_size: step must be in [0, batches_per_epoch()) = [0, " + std::to_string(m.m_batches) +
                   "), got " + std::to_string(step));
        return std::min(m.m_global, m.m_dataset->size - step * m.m_global);
    }

    std::int64_t data_loader::size() const noexcept { return m_impl->m_dataset->size; }
    const image_dataset& data_loader::dataset() const noexcept { return *m_impl->m_dataset; }
    const loader_options& data_loader::options() const noexcept { return m_impl->m_options; }
}
