#pragma once
// Batch normalisation with statistics over every rank of a process group: the op
// distributed::sync_batch_norm (train/src/distributed/sync_batch_norm.cpp), then the layer on it,
// nn::sync_batch_norm2d.
//
// --- the op ---
//
// Forward (training): each rank computes, per channel, its count n_r, mean m_r and sum of
// squared deviations M2_r over its x (two passes); one all_gather of the [2C + 1] values gives
// every rank all of them, merged in rank order with Chan's formula (exact, unlike Σx² - n m²):
//   n = n_a + n_b, δ = m_b - m_a, m = m_a + δ n_b / n, M2 = M2_a + M2_b + δ² n_a n_b / n.
// Every rank normalises with the same global mean m and biased variance v = M2 / n:
//   y = (x - m) / sqrt(v + eps) * scale + offset,
// the values xgrad::fused_batch_norm gives for the whole batch. A rank with an empty x takes
// part (n_r = 0) and gets an empty y.
//
// Backward: batch_norm_grad_reduce on the local dy and x, one all-reduce of the 2·C sums,
// batch_norm_grad_apply with the global sums and count: x's gradient is that of the sum of
// every rank's loss. scale's and offset's gradients are the local ones (Σ over this rank's
// elements), which distributed_data_parallel then averages with the others', like every other
// parameter gradient. With K ranks of equal batches and each rank's loss the mean over its
// batch, the parameters' averaged gradients equal those of one process on the whole batch.
//
// Second order: the backward run with create_graph is the composite formula written with
// xgrad's ops and functional::all_reduce (whose gradient is an all-reduce), so gradients of
// every order are correct; every rank must take part in each backward.
//
// Communication per training step, with C channels and K ranks: forward, one all_gather of
// (2C + 1) float64 values per rank ((2C + 1)·8·K bytes received), after comm's small agreement
// check; backward, one all-reduce of 2C values of the statistics dtype (2C·4 bytes for float32)
// without a second check (the forward established that the ranks agree). A backward with
// create_graph runs the composite instead: two all-reduces of C values forward, two back.
//
// dtypes and layouts: those of xgrad::fused_batch_norm (x float16, bfloat16, float32 with
// float32 per-channel tensors, or float64 throughout; NCHW, NHWC, NCDHW, NDHWC). Errors:
// those of fused_batch_norm, plus ranks that disagree on C or dtypes (xgrad::invalid_argument
// on every rank), and a global count of at most one value per channel.
//
// --- the layer ---
// nn::sync_batch_norm2d: batch_norm2d whose training statistics cover every rank of a process
// group, built on distributed::sync_batch_norm
// (train/src/distributed/sync_batch_norm_layer.cpp).
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
#include "xgrad/nn/batch_norm.hpp"
#include "xgrad/nn/module.hpp"
#include "xgrad/ops/batch_norm.hpp"
#include "xgrad/tensor.hpp"

namespace xgrad::distributed
{
    struct sync_batch_norm_result
    {
        tensor y;
        /// The global batch mean and biased variance, [C] (not differentiable).
        tensor mean, variance;
        /// Values per channel over every rank.
        std::int64_t count = 0;
    };

    /// Training-mode batch norm of x with the group's global statistics (attrs.is_training must
    /// be true; attrs.exponential_avg_factor is not used: running statistics are the caller's).
    /// y is differentiable w.r.t. x, scale and offset.
    sync_batch_norm_result sync_batch_norm(const tensor& x, const tensor& scale, const tensor& offset,
                                           const batch_norm_attrs& attrs,
                                           const process_group& group = process_group::world());

    /// The composite formula of sync_batch_norm's y, written with differentiable ops and
    /// functional::all_reduce: the oracle of the fused op's gradients (and its second order).
    tensor sync_batch_norm_composite(const tensor& x, const tensor& scale, const tensor& offset,
                                     const batch_norm_attrs& attrs,
                                     const process_group& group = process_group::world());
}

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
