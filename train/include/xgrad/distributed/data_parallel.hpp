#pragma once
// Data-parallel training of one nn::module over a process group (train/src/distributed/).
//
//   xgrad::distributed::environment env(&argc, &argv);
//   auto model = std::make_shared<my_model>();           // same construction on every rank
//   xgrad::distributed::distributed_data_parallel ddp(model);  // rank 0's values everywhere
//   xgrad::optim::sgd opt(*model, options);
//   for (...) {                                          // each rank on its own shard
//       tensor loss = cross_entropy(ddp.forward(x), y);
//       model->zero_grad(); loss.backward();
//       ddp.synchronize();                               // every grad() is now the mean over ranks
//       opt.step();                                      // the same step on every rank
//   }
//
// Construction checks that every rank has the same parameter and buffer names, shapes and
// dtypes, the same parameters requiring grad, and the same bucket_cap_bytes and
// broadcast_buffers (one all_gather of a digest, then, on a mismatch, of the listing, so the
// error names the first differing entry and the ranks), throwing the same
// xgrad::invalid_argument on every rank; then broadcasts every parameter and buffer from rank 0
// (one broadcast per dtype; the other ranks' tensors are replaced through set_parameter /
// set_buffer, rank 0 keeps its own). A group of one skips both.
//
// Gradients: the parameters that require grad are grouped in buckets of at most
// bucket_cap_bytes (in reverse registration order, the order backward tends to produce them;
// one dtype and device per bucket). forward() hooks each parameter's gradient accumulation
// (register_grad_accumulated_hook): when every parameter of a bucket has its gradient, the
// bucket's gradients are copied into one flat CPU buffer (device gradients through the host;
// float16/bfloat16 ones in float32) and its all-reduce starts (all_reduce_async, mean), while
// backward goes on with the rest of the graph. Buckets start in the same order on every rank
// (a complete bucket waits for the ones before it), as MPI's non-blocking collectives require.
// synchronize() starts the buckets still waiting (a parameter that got no gradient this step
// on this rank contributes zeros), waits for all, and sets each parameter's grad() to its
// slice of the averaged buffer (new storage each step; a view of it for CPU parameters). A
// parameter that no rank's backward reached keeps its grad() as it was (undefined after
// zero_grad), as in one process: each bucket carries a flag per parameter for that. The result
// equals the mean of the ranks' gradients up to the order of summation (exactly, for 2 ranks).
//
// A step begins at forward() in grad mode (or at the first hooked accumulation) and ends at
// synchronize(). With overlap, one backward per step: a second gradient into a parameter whose
// bucket has started throws std::logic_error out of that backward. With overlap false, several
// backward passes may accumulate into grad() before one synchronize() (gradient accumulation).
//
// Uneven batches: the mean over ranks weighs every rank equally. A rank whose batch is smaller
// (the last batch of an epoch) or empty must scale its loss so that the mean is the gradient of
// the global batch's loss: loss_r = (sum of rank r's example losses) * K / N, with N the number
// of examples in the step over all ranks (train::trainer does this).
//
// Buffers: with broadcast_buffers, forward() broadcasts the buffers (running statistics) from
// rank 0 first, so every rank evaluates with the same ones (as PyTorch's DDP does); with
// nn::sync_batch_norm2d the running statistics are identical on every rank anyway.
//
// Every rank must call forward(), backward and synchronize() the same number of times, in
// the same order, with the same parameters requiring grad. Call the model through forward():
// the hooks follow the parameters only there.
#include <cstdint>
#include <memory>

#include "xgrad/distributed/comm.hpp"
#include "xgrad/nn/module.hpp"
#include "xgrad/tensor.hpp"

namespace xgrad::distributed
{
    struct data_parallel_options
    {
        /// Largest bucket, in bytes of gradient (a parameter larger than this is a bucket alone).
        std::int64_t bucket_cap_bytes = std::int64_t{1} << 20;
        /// Start each bucket's all-reduce from the gradient-accumulation hooks during backward;
        /// false: every bucket starts in synchronize() (no overlap; for measuring it).
        bool overlap = true;
        /// Broadcast the buffers from rank 0 at the start of every forward().
        bool broadcast_buffers = true;
    };

    /// What the last synchronize() did, for measuring the cost and the overlap.
    struct data_parallel_stats
    {
        std::int64_t buckets = 0;
        /// Bytes all-reduced per step: the buckets' buffers, i.e. the gradients in their compute
        /// dtype plus one flag per parameter (each rank sends and receives about twice this in a
        /// ring all-reduce).
        std::int64_t bytes = 0;
        /// Buckets whose all-reduce started during backward (the rest started in synchronize()).
        std::int64_t buckets_overlapped = 0;
        /// Seconds from the first bucket's start to the last bucket's completion.
        double communication_s = 0.0;
        /// Seconds synchronize() spent blocked (the part of the communication not hidden).
        double wait_s = 0.0;
    };

    class distributed_data_parallel
    {
    public:
        using options_type = data_parallel_options;
        using stats_type = data_parallel_stats;

        /// model: not null, on the same device on every rank. Throws xgrad::invalid_argument
        /// for a null model, bucket_cap_bytes < 1, or ranks that disagree (see above).
        explicit distributed_data_parallel(std::shared_ptr<nn::module> model,
                                           process_group group = process_group::world(), options_type options = {});
        ~distributed_data_parallel();
        distributed_data_parallel(const distributed_data_parallel&) = delete;
        distributed_data_parallel& operator=(const distributed_data_parallel&) = delete;

        /// Broadcasts the buffers (broadcast_buffers), (re)attaches the hooks to the current
        /// parameters (an optimizer step replaces them), then returns model(x). Throws
        /// std::logic_error when the parameters that require grad are not those of construction
        /// (the buckets are fixed then), or when a parameter that this step's backward already
        /// reached was replaced before synchronize().
        tensor forward(const tensor& x);
        tensor operator()(const tensor& x) { return forward(x); }

        /// Completes this step's gradient all-reduce (see above) and fills last_stats().
        /// Idempotent; a no-op outside a step (before any forward or backward, or after the
        /// step's synchronize()). Throws std::logic_error, before starting the buckets still
        /// waiting, when the model's parameters are not the tensors forward() hooked (replaced
        /// in between); the step is then abandoned.
        void synchronize();

        /// Replaces every buffer of the model by rank 0's value (one broadcast per dtype into new
        /// storage, stored with set_buffer): what forward() does first with broadcast_buffers,
        /// for a caller that evaluates or saves the model outside forward() (train::trainer,
        /// after an epoch). A collective: every rank calls it. No-op in a group of one.
        void broadcast_buffers();

        nn::module& module() noexcept { return *m_model; }
        const std::shared_ptr<nn::module>& module_ptr() const noexcept { return m_model; }
        const process_group& group() const noexcept { return m_group; }
        const options_type& options() const noexcept { return m_options; }
        const stats_type& last_stats() const noexcept { return m_stats; }

        struct state;

    private:
        std::shared_ptr<nn::module> m_model;
        process_group m_group;
        options_type m_options;
        stats_type m_stats;
        std::shared_ptr<state> m_state;
    };
}
