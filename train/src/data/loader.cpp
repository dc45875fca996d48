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

        /// The 256 possible pixel values of each channel, normalised and rounded once to T.
        template <class T>
        std::vector<std::vector<T>> value_tables(const std::vector<double>& mean, const std::vector<double>& std,
                                                 T (*convert)(double))
        {
            std::vector<std::vector<T>> tables(mean.size(), std::vector<T>(256));
            for (std::size_t c = 0; c < mean.size(); ++c)
                for (int b = 0; b < 256; ++b)
                    tables[c][static_cast<std::size_t>(b)] = convert((b / 255.0 - mean[c]) / std[c]);
            return tables;
        }

        /// One example's channel planes into a batch, at out (element 0 of the example) with
        /// the given strides of channel and pixel (1 and channels for NHWC, plane and 1 for NCHW).
        template <class T>
        void fill_example(T* out, const std::vector<std::vector<T>>& tables, const std::uint8_t* pixels,
                          std::int64_t plane, std::int64_t channel_stride, std::int64_t pixel_stride)
        {
            for (std::size_t c = 0; c < tables.size(); ++c)
            {
                const std::vector<T>& table = tables[c];
                const std::uint8_t* in = pixels + static_cast<std::int64_t>(c) * plane;
                T* o = out + static_cast<std::int64_t>(c) * channel_stride;
                for (std::int64_t p = 0; p < plane; ++p)
                    o[p * pixel_stride] = table[in[p]];
            }
        }

        /// The generator of one example's transforms: a function of (seed, epoch, example).
        std::uint64_t example_seed(std::uint64_t seed, std::int64_t epoch, std::int64_t example) noexcept
        {
            return splitmix_finalize(epoch_seed(seed, epoch) ^
                                     splitmix_finalize(static_cast<std::uint64_t>(example) + 0x632BE59BD9B4E019ULL));
        }
    }

    struct data_loader::impl
    {
        using order_type = std::vector<std::int64_t>;

        // One of the two sources.
        std::shared_ptr<const image_dataset> m_images;
        std::shared_ptr<const dataset> m_source;
        std::int64_t m_size = 0;
        loader_options m_options;
        std::int64_t m_batches = 0;
        std::int64_t m_global = 0; // num_replicas * batch_size: a step's global batch
        std::int64_t m_pixels = 0; // rows * cols, per channel
        // Per channel: one of these holds the value tables for m_options.dtype (without a
        // transform), or for the transform's dtype (with one: float32, or float64).
        std::vector<std::vector<float>> m_table_f32;
        std::vector<std::vector<double>> m_table_f64;
        std::vector<std::vector<float16_t>> m_table_f16;
        std::vector<std::vector<bfloat16_t>> m_table_bf16;
        transform m_normalize; // with a transform: the images' normalisation, after it

        // Shared with the worker; guarded by m_mutex.
        std::mutex m_mutex;
        std::condition_variable m_work_cv;  // the worker waits for work or stop
        std::condition_variable m_ready_cv; // next() waits for a batch or an error
        bool m_stop = false;
        bool m_started = false;
        std::uint64_t m_generation = 0;
        std::shared_ptr<const order_type> m_order;
        std::int64_t m_epoch = 0;                            // of m_order, for the transforms' generators
        std::int64_t m_claimed = 0;                          // batches of this generation a worker has started
        std::int64_t m_consumed = 0;                         // batches handed out by next()
        std::map<std::int64_t, batch> m_ready;               // built, not yet handed out
        std::map<std::int64_t, std::exception_ptr> m_failed; // failed, not yet reached
        std::exception_ptr m_error;                          // the failure next() reached: thrown until start_epoch

        std::vector<std::thread> m_workers; // last: started after everything above is set up

        batch make_batch(const order_type& order, std::int64_t epoch, std::int64_t k) const;
        /// The byte path without a transform: every example straight into the batch.
        void fill_images(batch& out, const order_type& order, std::int64_t first, std::int64_t count) const;
        /// One example's [C, rows, cols] input as byte / 255, for a transform.
        tensor image_example(std::int64_t example) const;
        /// Examples' inputs (transformed), stacked into the batch in the data format.
        tensor stack(const std::vector<tensor>& inputs, const order_type& order, std::int64_t first) const;
        std::int64_t label_of(std::int64_t example_index, const example* e) const;
        /// Calls f(tables, T{}) with the value tables of `dt` and their element type.
        template <class F>
        void visit_tables(dtype dt, F&& f) const
        {
            switch (dt)
            {
            case dtype::float32: return f(m_table_f32, float{});
            case dtype::float64: return f(m_table_f64, double{});
            case dtype::float16: return f(m_table_f16, float16_t{});
            case dtype::bfloat16: return f(m_table_bf16, bfloat16_t{});
            case dtype::int64: throw std::logic_error("data_loader: int64 images"); // rejected by the constructor
            }
        }
        void worker_loop();
        bool has_work() const noexcept
        {
            return m_started && !m_error && m_claimed < m_batches && m_claimed < m_consumed + m_options.num_workers;
        }
    };

    std::int64_t data_loader::impl::label_of(std::int64_t example_index, const example* e) const
    {
        if (m_images)
        {
            const std::uint8_t label = m_images->labels[static_cast<std::size_t>(example_index)];
            if (label >= m_images->classes)
                throw data_error("data_loader: label " + std::to_string(label) + " of example " +
                                 std::to_string(example_index) + " is not below the dataset's classes, " +
                                 std::to_string(m_images->classes));
            return label;
        }
        return e->label;
    }

    void data_loader::impl::fill_images(batch& out, const order_type& order, std::int64_t first,
                                        std::int64_t count) const
    {
        const image_dataset& ds = *m_images;
        const dtype dt = m_options.dtype;
        const std::int64_t c = ds.channels, example_size = c * m_pixels;
        const bool nhwc = m_options.data_format == "NHWC";
        out.images = nhwc ? xgrad::empty({count, ds.rows, ds.cols, c}, dt)
                          : xgrad::empty({count, c, ds.rows, ds.cols}, dt);
        // NCHW: a channel is a plane of consecutive pixels; NHWC: a pixel's channels are consecutive.
        const std::int64_t channel_stride = nhwc ? 1 : m_pixels, pixel_stride = nhwc ? c : 1;
        auto* labels = out.labels.data<std::int64_t>();
        visit_tables(dt, [&](const auto& tables, auto tag) {
            using T = decltype(tag);
            T* images = out.images.data<T>();
            for (std::int64_t i = 0; i < count; ++i)
            {
                const std::int64_t example_index = order[static_cast<std::size_t>(first + i)];
                labels[i] = label_of(example_index, nullptr);
                fill_example(images + i * example_size, tables, ds.images.data() + example_index * example_size,
                             m_pixels, channel_stride, pixel_stride);
            }
        });
    }

    tensor data_loader::impl::image_example(std::int64_t example_index) const
    {
        const image_dataset& ds = *m_images;
        const std::int64_t c = ds.channels;
        const std::uint8_t* pixels = ds.images.data() + example_index * c * m_pixels;
        // With a transform the tables are float64 for float64 batches and float32 otherwise.
        const dtype dt = m_options.dtype == dtype::float64 ? dtype::float64 : dtype::float32;
        tensor t = xgrad::empty({c, ds.rows, ds.cols}, dt);
        visit_tables(dt, [&](const auto& tables, auto tag) {
            fill_example(t.data<decltype(tag)>(), tables, pixels, m_pixels, m_pixels, 1);
        });
        return t;
    }

    tensor data_loader::impl::stack(const std::vector<tensor>& inputs, const order_type& order,
                                    std::int64_t first) const
    {
        // Checked one by one, so the message names the example that does not fit.
        const shape_type shape = inputs.empty() ? shape_type{} : inputs.front().shape();
        std::vector<tensor> rows;
        rows.reserve(inputs.size());
        for (std::size_t i = 0; i < inputs.size(); ++i)
        {
            const tensor& x = inputs[i];
            const std::int64_t example_index = order[static_cast<std::size_t>(first) + i];
            if (!x.defined() || !is_floating(x.dtype()) || x.device() != cpu_device || x.shape() != shape)
                throw xgrad::invalid_argument(
                    "data_loader: example " + std::to_string(example_index) + "'s input is " +
                    (x.defined() ? shape_to_string(x.shape()) + " " + std::string(name(x.dtype())) + " on " +
                                       to_string(x.device())
                                 : std::string("undefined")) +
                    "; every input of a batch must be a floating CPU tensor of one shape (the batch's first is " +
                    shape_to_string(shape) + ")");
            shape_type one{1};
            one.insert(one.end(), x.shape().begin(), x.shape().end());
            rows.push_back(x.to(m_options.dtype).reshape(one));
        }
        if (rows.empty())
        {
            // An empty batch keeps the layout of a full one where it is known (an image source).
            if (m_images)
            {
                const image_dataset& ds = *m_images;
                return m_options.data_format == "NHWC"
                           ? xgrad::empty({0, ds.rows, ds.cols, ds.channels}, m_options.dtype)
                           : xgrad::empty({0, ds.channels, ds.rows, ds.cols}, m_options.dtype);
            }
            return xgrad::empty({0}, m_options.dtype);
        }
        tensor images = concat(rows, 0);
        if (m_options.data_format == "NHWC" && images.dim() == 4)
            images = images.permute({0, 2, 3, 1}).contiguous();
        return images;
    }

    batch data_loader::impl::make_batch(const order_type& order, std::int64_t epoch, std::int64_t k) const
    {
        const std::int64_t b = m_options.batch_size;
        const auto n = static_cast<std::int64_t>(order.size());
        // k < m_batches = ceil(n / m_global) or less, so k * m_global < n: no overflow. The
        // rank's offset in the global batch, rank * B < m_global (checked by the constructor),
        // is clipped to the examples left, which leaves an empty batch for a rank past them.
        const std::int64_t global_first = k * m_global;
        const std::int64_t first = global_first + std::min(m_options.rank * b, n - global_first);
        const std::int64_t count = std::max<std::int64_t>(0, std::min(b, n - first));

        batch out;
        out.index = k;
        out.labels = xgrad::empty({count}, dtype::int64);
        if (m_images && !m_options.transform)
        {
            fill_images(out, order, first, count);
            return out;
        }
        // Example by example: the source's input (or the image's byte / 255, normalised after
        // the transform), transformed with the example's own generator, then stacked. No graph
        // is recorded on this thread.
        no_grad guard;
        auto* labels = out.labels.data<std::int64_t>();
        std::vector<tensor> inputs;
        inputs.reserve(static_cast<std::size_t>(count));
        for (std::int64_t i = 0; i < count; ++i)
        {
            const std::int64_t example_index = order[static_cast<std::size_t>(first + i)];
            tensor input;
            if (m_images)
            {
                labels[i] = label_of(example_index, nullptr);
                input = image_example(example_index);
            }
            else
            {
                const example e = m_source->get(example_index);
                labels[i] = label_of(example_index, &e);
                input = e.input;
            }
            if (m_options.transform)
            {
                generator gen(example_seed(m_options.seed, epoch, example_index));
                input = m_options.transform(input, gen);
                if (m_images)
                    input = m_normalize(input, gen);
            }
            inputs.push_back(std::move(input));
        }
        out.images = stack(inputs, order, first);
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
        if (size < 0)
            reject("the dataset's size is " + std::to_string(size));
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
