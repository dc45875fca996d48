// The data loader's batches (see loader.cpp for the design): an epoch order's slice of
// examples, through the byte path or the transforms, stacked in the data format.
#include <cmath>
#include <vector>

#include "loader_impl.hpp"
#include "xgrad/autograd.hpp"
#include "xgrad/checked.hpp"
#include "xgrad/factories.hpp"
#include "xgrad/ops/shape.hpp"

namespace xgrad::data
{
    using namespace loader_detail;

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
}
