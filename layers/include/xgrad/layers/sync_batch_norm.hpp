#pragma once
// nn::sync_batch_norm2d: batch_norm2d whose training statistics cover every rank of a process
// group (layers/src/sync_batch_norm.cpp), built on distributed::sync_batch_norm.
//
// Parameters and buffers have batch_norm2d's names, shapes and dtypes ("scale", "offset",
// "running_mean", "running_var", "num_batches_tracked"), so checkpoints move between the two.
// Training mode: y from distributed::sync_batch_norm; the running statistics are updated with
// the global mean and the global unbiased variance (Bessel's correction with the global count),
// so they are identical on every rank. Eval mode, and training without track_running_stats'
// buffers being read: exactly batch_norm2d's (local, no communication in eval).
//
// convert_sync_batch_norm(model) replaces every batch_norm2d in the model's tree (children of
// any depth) by a sync_batch_norm2d with the same options and values, like PyTorch's
// convert_sync_batchnorm; it returns the model itself (or, when the model is a batch_norm2d,
// its replacement). nn::sequential's batch-norm + ReLU fusion does not apply to the converted
// layers (they run batch norm, then ReLU).
//
// Errors: those of batch_norm2d, and those of distributed::sync_batch_norm.
#include <memory>
#include <string>
#include <string_view>

#include "xgrad/distributed/comm.hpp"
#include "xgrad/layers/batch_norm.hpp"
#include "xgrad/layers/module.hpp"

namespace xgrad::nn
{
    class sync_batch_norm2d final : public module
    {
    public:
        using options_type = batch_norm_options;

        explicit sync_batch_norm2d(const options_type& options,
                                   distributed::process_group group = distributed::process_group::world());
        /// The same options and current values as `bn`.
        explicit sync_batch_norm2d(const batch_norm2d& bn,
                                   distributed::process_group group = distributed::process_group::world());

        tensor forward(const tensor& x) override;
        std::string_view type_name() const noexcept override { return "sync_batch_norm2d"; }
        /// "sync_batch_norm2d(32, eps=1e-05, momentum=0.1, NCHW, ranks=2)"
        std::string describe() const override;

        const options_type& options() const noexcept { return m_options; }
        const distributed::process_group& group() const noexcept { return m_group; }

    private:
        options_type m_options;
        distributed::process_group m_group;
        // private state as the implementation needs (constants for !affine, ...)
    };

    /// See above. model not null (else xgrad::invalid_argument).
    std::shared_ptr<module>
    convert_sync_batch_norm(std::shared_ptr<module> model,
                            distributed::process_group group = distributed::process_group::world());
}
