#pragma once
// What the data loader's two sources share (train/src/data/loader.cpp, which has the design
// notes, and loader_batches.cpp, which builds the batches): its state and its seeds.
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "xgrad/data/loader.hpp"
#include "xgrad/errors.hpp"
#include "xgrad/half.hpp"

namespace xgrad::data
{
    namespace loader_detail
    {
        inline std::uint64_t splitmix_finalize(std::uint64_t z) noexcept
        {
            z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
            z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
            return z ^ (z >> 31);
        }

        inline std::uint64_t epoch_seed(std::uint64_t seed, std::int64_t epoch) noexcept
        {
            return splitmix_finalize(seed ^
                                     splitmix_finalize(static_cast<std::uint64_t>(epoch) + 0x9E3779B97F4A7C15ULL));
        }

        [[noreturn]] inline void reject(const std::string& what)
        {
            throw xgrad::invalid_argument("data_loader: " + what);
        }

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
        inline std::uint64_t example_seed(std::uint64_t seed, std::int64_t epoch, std::int64_t example) noexcept
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
}
