// nn::sync_batch_norm2d and convert_sync_batch_norm (see sync_batch_norm.hpp). The layer is
// batch_norm2d's options, parameters and buffers (the checks are batch_norm2d's own,
// batch_norm_checks.hpp) around distributed::sync_batch_norm in training mode, and around
// batch_norm2d's single fused_batch_norm call in eval mode. No backward is written here: the
// op's node differentiates y.
#include "xgrad/layers/sync_batch_norm.hpp"

#include <algorithm>
#include <map>
#include <string>
#include <utility>

#include "batch_norm_checks.hpp"
#include "xgrad/autograd.hpp"
#include "xgrad/distributed/sync_batch_norm.hpp"
#include "xgrad/factories.hpp"
#include "xgrad/ops/batch_norm.hpp"
#include "xgrad/ops/elementwise.hpp"

namespace xgrad::nn
{
    sync_batch_norm2d::sync_batch_norm2d(const options_type& options, distributed::process_group group)
        : m_options(options), m_group(std::move(group))
    {
        const std::string problem = detail::check_batch_norm_options(m_options, 4);
        if (!problem.empty())
            fail(problem);
        m_channel_dim = detail::batch_norm_channel_dim(m_options, 4);
        // batch_norm2d's tensors, under its names, so that state dicts move between the two.
        const shape_type c{m_options.num_features};
        const xgrad::dtype dt = m_options.dtype;
        const xgrad::device dev = m_options.device;
        if (m_options.affine)
        {
            register_parameter("scale", ones(c, dt, dev));
            register_parameter("offset", zeros(c, dt, dev));
        }
        else
        {
            m_unit_scale = ones(c, dt, dev);
            m_zero_offset = zeros(c, dt, dev);
        }
        if (m_options.track_running_stats)
        {
            register_buffer("running_mean", zeros(c, dt, dev));
            register_buffer("running_var", ones(c, dt, dev));
            register_buffer("num_batches_tracked", zeros({}, xgrad::dtype::int64, dev));
        }
        m_no_stats = zeros({0}, dt, dev);
    }

    sync_batch_norm2d::sync_batch_norm2d(const batch_norm2d& bn, distributed::process_group group)
        : sync_batch_norm2d(bn.options(), std::move(group))
    {
        // The values themselves (tensors are immutable, so sharing their storage is safe); a
        // parameter frozen in bn stays frozen.
        if (m_options.affine)
            for (const char* name : {"scale", "offset"})
            {
                const tensor value = bn.parameter(name);
                set_parameter(name, value.detach());
                parameter(name).requires_grad_(value.requires_grad());
            }
        if (m_options.track_running_stats)
            for (const char* name : {"running_mean", "running_var", "num_batches_tracked"})
                set_buffer(name, bn.buffer(name));
        train(bn.is_training());
    }

    void sync_batch_norm2d::moved_to(xgrad::device dev)
    {
        m_options.device = dev;
        if (m_unit_scale.defined())
            m_unit_scale = m_unit_scale.to(dev);
        if (m_zero_offset.defined())
            m_zero_offset = m_zero_offset.to(dev);
        m_no_stats = m_no_stats.to(dev);
    }

    std::string sync_batch_norm2d::describe() const
    {
        return detail::describe_batch_norm(type_name(), m_options, "ranks=" + std::to_string(m_group.size()));
    }

    tensor sync_batch_norm2d::forward(const tensor& x)
    {
        const std::string problem = detail::check_batch_norm_input(x, m_options, 4, m_channel_dim);
        if (!problem.empty())
            fail(problem);
        const bool track = m_options.track_running_stats;
        const tensor sc = m_options.affine ? parameter("scale") : m_unit_scale;
        const tensor oc = m_options.affine ? parameter("offset") : m_zero_offset;
        batch_norm_attrs attrs;
        attrs.epsilon = m_options.eps;
        attrs.data_format = m_options.data_format;

        if (!is_training())
        {
            // batch_norm2d's eval: the running statistics, or without them this rank's batch
            // statistics (PyTorch's SyncBatchNorm does not synchronise in eval either).
            if (!track && x.numel() / m_options.num_features == 1)
                fail("expected more than 1 value per channel to compute batch statistics, got an input of shape " +
                     shape_to_string(x.shape()));
            attrs.is_training = !track;
            const tensor mean = track ? buffer("running_mean") : m_no_stats;
            const tensor variance = track ? buffer("running_var") : m_no_stats;
            return fused_batch_norm(x, sc, oc, mean, variance, attrs).y;
        }

        attrs.is_training = true;
        const distributed::sync_batch_norm_result r = distributed::sync_batch_norm(x, sc, oc, attrs, m_group);
        if (track)
        {
            // The op's running-statistics rule (docs/batch_norm.md, 2.1) with the global batch:
            // Bessel's factor from the global count, the same arithmetic in the same dtype, so
            // the buffers are identical on every rank and, for a group of one, identical to
            // batch_norm2d's.
            no_grad guard;
            const std::int64_t batches = buffer("num_batches_tracked").item<std::int64_t>() + 1;
            const double f = detail::batch_norm_update_factor(m_options, batches);
            const std::int64_t R = r.count;
            const double k = static_cast<double>(R) / static_cast<double>(std::max<std::int64_t>(R - 1, 1));
            if (f == 1.0)
            {
                set_buffer("running_mean", r.mean);
                set_buffer("running_var", r.variance * k);
            }
            else
            {
                set_buffer("running_mean", buffer("running_mean") * (1.0 - f) + r.mean * f);
                set_buffer("running_var", buffer("running_var") * (1.0 - f) + r.variance * (f * k));
            }
            set_buffer("num_batches_tracked",
                       full({}, static_cast<double>(batches), xgrad::dtype::int64, m_options.device));
        }
        return r.y;
    }

    namespace
    {
        /// The conversion below, remembering what it made so that a batch_norm2d registered in
        /// several places becomes one sync_batch_norm2d (its parameters stay shared).
        std::shared_ptr<module> convert(const std::shared_ptr<module>& m, const distributed::process_group& group,
                                        std::map<const module*, std::shared_ptr<module>>& made)
        {
            if (const auto it = made.find(m.get()); it != made.end())
                return it->second;
            std::shared_ptr<module> out = m;
            if (const auto bn = std::dynamic_pointer_cast<batch_norm2d>(m))
                out = std::make_shared<sync_batch_norm2d>(*bn, group);
            else
                for (const auto& [name, child] : m->named_children())
                {
                    const std::shared_ptr<module> converted = convert(child, group, made);
                    if (converted != child)
                        m->replace_child(name, converted);
                }
            made.emplace(m.get(), out);
            return out;
        }
    }

    std::shared_ptr<module> convert_sync_batch_norm(std::shared_ptr<module> model, distributed::process_group group)
    {
        if (!model)
            throw xgrad::invalid_argument("convert_sync_batch_norm: the model is null (expected a module to convert)");
        std::map<const module*, std::shared_ptr<module>> made;
        return convert(model, group, made);
    }
}
