#pragma once
// nn::sync_batch_norm2d: batch_norm2d whose training statistics cover every rank of a process
// group (layers/src/sync_batch_norm.cpp), built on distributed::sync_batch_norm.
//
// Parameters and buffers have batch_norm2d's names, shapes and dtypes ("weight", "bias",
// "running_mean", "running_var", "num_batches_tracked"), so checkpoints move between the two.
// Options and input checks are batch_norm2d's.
//
// Training mode: y from distributed::sync_batch_norm, a collective: every rank of the group
// calls forward (and later backward) together, a rank with an empty batch (N = 0) included.
// When track_running_stats, the running statistics are updated as batch_norm2d updates them,
// with the global mean and the global unbiased variance (Bessel's correction with the global
// count) in place of the local batch's, so they are identical on every rank. The global batch
// must have more than one value per channel (else xgrad::invalid_argument on every rank); one
// rank alone may have one, or none.
// Eval mode: exactly batch_norm2d's, local, no communication: the running statistics, or,
// without track_running_stats, this rank's own batch statistics (as PyTorch's SyncBatchNorm).
// The input checks run on each rank before any communication; inputs that pass them on every
// rank but disagree between ranks (channels, dtype) throw on every rank (the op's checks).
//
// convert_sync_batch_norm(model) replaces every batch_norm2d in the model's tree (children of
// any depth) by a sync_batch_norm2d with the same options, values, requires_grad flags and
// training mode, like PyTorch's convert_sync_batchnorm, through module::replace_child, so every
// name (and so the state dict's keys) stays the same; a batch_norm2d registered in several
// places becomes one sync_batch_norm2d. It returns the model itself (or, when the model is a
// batch_norm2d, its replacement). A custom module that calls a child through its own pointer
// member must update it in module::child_replaced (nn::sequential needs nothing).
// nn::sequential's batch-norm + ReLU fusion does not apply to the converted layers (they run
// batch norm, then ReLU); forward_relu(x), called directly, is relu(forward(x)).
//
// The layer is a batch_norm_base (batch_norm2d's constructor, checks, accessors, reset and
// eval path) whose training-mode forward is the collective one.
//
// Errors: those of batch_norm2d, and those of distributed::sync_batch_norm.
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "xgrad/distributed/comm.hpp"
#include "xgrad/layers/batch_norm.hpp"
#include "xgrad/layers/module.hpp"

namespace xgrad::nn
{
    class sync_batch_norm2d final : public batch_norm_base
    {
    public:
        explicit sync_batch_norm2d(const options_type& options,
                                   distributed::process_group group = distributed::process_group::world());
        /// The same options and current values as `bn`.
        explicit sync_batch_norm2d(const batch_norm2d& bn,
                                   distributed::process_group group = distributed::process_group::world());

        /// "sync_batch_norm2d(32, eps=1e-05, momentum=0.1, NCHW, ranks=2)"
        std::string describe() const override;
        const distributed::process_group& group() const noexcept { return m_group; }

    protected:
        /// Training mode: the collective forward above; eval mode: batch_norm_base's.
        tensor run(const tensor& x, bool relu) override;

    private:
        distributed::process_group m_group;
    };

    /// See above. model not null (else xgrad::invalid_argument).
    std::shared_ptr<module>
    convert_sync_batch_norm(std::shared_ptr<module> model,
                            distributed::process_group group = distributed::process_group::world());
}
