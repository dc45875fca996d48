// nn::sync_batch_norm2d and convert_sync_batch_norm (see xgrad/distributed/sync_batch_norm.hpp).
// The layer is a batch_norm_base (batch_norm2d's options, checks, parameters and buffers) whose
// training-mode run is distributed::sync_batch_norm, and whose eval mode is batch_norm_base's
// own. No backward is written here: the op's node differentiates y.
#include "xgrad/distributed/sync_batch_norm.hpp"

#include <algorithm>
#include <map>
#include <string>
#include <utility>

#include "xgrad/autograd.hpp"
#include "xgrad/factories.hpp"
#include "xgrad/ops/batch_norm.hpp"
#include "xgrad/ops/elementwise.hpp"

namespace xgrad::nn
{
    sync_batch_norm2d::sync_batch_norm2d(const options_type& options, distributed::process_group group)
        : batch_norm_base(options, 4, "sync_batch_norm2d"), m_group(std::move(group))
    {
    }

    sync_batch_norm2d::sync_batch_norm2d(const batch_norm2d& bn, distributed::process_group group)
        : sync_batch_norm2d(bn.options(), std::move(group))
    {
        // The values themselves (tensors are immutable, so sharing their storage is safe); a
        // parameter frozen in bn stays frozen.
        if (options().affine)
            for (const char* name : {"weight", "bias"})
            {
                const tensor value = bn.parameter(name);
                set_parameter(name, value.detach());
                parameter(name).requires_grad_(value.requires_grad());
            }
        if (options().track_running_stats)
            for (const char* name : {"running_mean", "running_var", "num_batches_tracked"})
                set_buffer(name, bn.buffer(name));
        train(bn.is_training());
    }

    std::string sync_batch_norm2d::describe() const { return describe_with("ranks=" + std::to_string(m_group.size())); }

    tensor sync_batch_norm2d::run(const tensor& x, bool relu)
    {
        if (!is_training())
            // batch_norm2d's eval: the running statistics, or without them this rank's batch
            // statistics (PyTorch's SyncBatchNorm does not synchronise in eval either).
            return batch_norm_base::run(x, relu);
        check_input(x);
        const options_type& o = options();
        const bool track = o.track_running_stats;
        batch_norm_attrs attrs;
        attrs.epsilon = o.eps;
        attrs.data_format = o.data_format;
        attrs.is_training = true;
        const distributed::sync_batch_norm_result r = distributed::sync_batch_norm(x, effective_scale(),
                                                                                   effective_offset(), attrs, m_group);
        if (track)
        {
            // The op's running-statistics rule (docs/batch_norm.md, 2.1) with the global batch:
            // Bessel's factor from the global count, the same arithmetic in the same dtype, so
            // the buffers are identical on every rank and, for a group of one, identical to
            // batch_norm2d's.
            no_grad guard;
            const std::int64_t batches = buffer("num_batches_tracked").item<std::int64_t>() + 1;
            const double f = update_factor(batches);
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
            set_buffer("num_batches_tracked", full({}, static_cast<double>(batches), xgrad::dtype::int64, o.device));
        }
        return relu ? xgrad::relu(r.y) : r.y;
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
