#pragma once
// xgrad::distributed: processes that train one model together, over MPI (train/src/distributed/).
//
// A job is K processes started by an MPI launcher (`mpirun -np K program ...`), each with a
// rank in [0, K). init() joins the job; process_group::world() is every process of it.
// Collectives are called by every rank of the group, in the same order, with tensors of the
// same shape and dtype on every rank; the public collectives check that first (one small
// all-reduce) and throw the same xgrad::invalid_argument on every rank when the ranks disagree,
// instead of hanging or corrupting memory.
//
// Builds without MPI (XGRAD_USE_MPI off) and processes that never call init() see a world of
// one process: rank 0, size 1, and collectives that leave their tensors unchanged (the sum, mean,
// max or min over one rank, a broadcast from oneself). Such a process never loads MPI: a shared
// libxgrad needs no MPI library, and init() loads the one that speaks MPI.
//
// Threads: MPI is initialised with MPI_THREAD_FUNNELED. Every collective must be called from
// the thread that called init() (xgrad's kernels may use other threads; they never call MPI).
//
// Devices: collectives on CUDA tensors copy through host memory (Debian's Open MPI is not
// CUDA-aware); the result lands in the tensor's own device storage.
//
// Failure: MPI has no way to cancel a collective that other ranks never join, so a rank that
// fails must stop the job. abort() prints the message with the rank and calls MPI_Abort, which
// ends every rank; an `environment` that is destroyed while an exception unwinds does the same.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "xgrad/tensor.hpp"

namespace xgrad::distributed
{
    /// True when this build of xgrad has MPI (XGRAD_USE_MPI).
    bool mpi_available() noexcept;
    /// True when an MPI launcher started this process (its environment names a rank and a
    /// world size: OMPI_COMM_WORLD_SIZE, PMI_SIZE or PMIX_RANK).
    bool launched_by_mpi() noexcept;
    /// How many processes of this job the launcher started on this machine (Open MPI's
    /// OMPI_COMM_WORLD_LOCAL_SIZE, MPICH's MPI_LOCALNRANKS); 1 without a launcher. They share
    /// the machine's cores: K processes that each use every core oversubscribe it K times.
    int local_process_count() noexcept;

    /// Joins the job (MPI_Init_thread, FUNNELED). Idempotent. Without MPI, does nothing (the
    /// world stays one process). Throws std::runtime_error when MPI cannot be initialised or
    /// has already been finalised, and, in a shared build, when the MPI plugin that it loads
    /// on first use (libxgrad_mpi.so, beside libxgrad) cannot be loaded: the message names it
    /// and why (MPI not installed, the plugin missing or from another version of xgrad).
    void init(int* argc = nullptr, char*** argv = nullptr);
    /// Leaves the job (MPI_Finalize) after a barrier; idempotent, a no-op without init().
    void finalize();
    bool is_initialized() noexcept;

    /// Prints "xgrad: rank R of K: <message>" to stderr and ends the whole job with `code`
    /// (MPI_Abort on the world when initialised; std::exit otherwise). Never returns.
    [[noreturn]] void abort(const std::string& message, int code = 1) noexcept;

    /// RAII: init() on construction; on destruction finalize(), or abort() when the destructor
    /// runs because an exception is unwinding the stack (the other ranks may be waiting in a
    /// collective that this rank will never join).
    class environment
    {
    public:
        explicit environment(int* argc = nullptr, char*** argv = nullptr);
        ~environment();
        environment(const environment&) = delete;
        environment& operator=(const environment&) = delete;

    private:
        int m_uncaught = 0;
    };

    enum class reduce_op
    {
        sum,
        mean, // the sum divided by the group's size (float dtypes only)
        max,
        min
    };

    /// A set of processes that run collectives together (an MPI communicator).
    class process_group
    {
    public:
        /// Every process of the job (after init()); a group of one before init() and without MPI.
        static process_group world();
        /// This process alone (collectives are identities): what a single-process reference uses.
        static process_group self();

        int rank() const noexcept;
        int size() const noexcept;

        struct impl;
        explicit process_group(std::shared_ptr<const impl> p) noexcept : m_impl(std::move(p)) {}
        const std::shared_ptr<const impl>& handle() const noexcept { return m_impl; }

    private:
        std::shared_ptr<const impl> m_impl;
    };

    /// The world's rank and size.
    int rank();
    int world_size();

    // --- collectives (in place: they write into the tensor's storage) -------------------------
    // Tensors: defined, contiguous, dtype float32, float64 or int64 (reduce_op::mean: float32 or
    // float64), any shape including zero elements, the same shape and dtype on every rank.
    // Anything else throws xgrad::invalid_argument naming the collective, the tensor's shape and
    // dtype (and, for a mismatch, that the ranks disagree) on every rank. The tensors are not
    // recorded by autograd (see functional::all_reduce for the differentiable one); every tensor
    // sharing the storage sees the new values.

    /// Every rank's t becomes op over the ranks' t, element by element. The result is identical
    /// on every rank.
    void all_reduce(const tensor& t, reduce_op op = reduce_op::sum,
                    const process_group& group = process_group::world());
    /// Every rank's t becomes root's t. root in [0, size) (else xgrad::invalid_argument).
    void broadcast(const tensor& t, int root = 0, const process_group& group = process_group::world());
    /// The ranks' t in rank order (new CPU-or-t's-device tensors; entry rank() equals t). Here
    /// t may be of any dtype; shapes must agree.
    std::vector<tensor> all_gather(const tensor& t, const process_group& group = process_group::world());
    /// Returns when every rank of the group has called it.
    void barrier(const process_group& group = process_group::world());

    /// A non-blocking all-reduce in flight (what distributed_data_parallel overlaps with the
    /// backward pass). The tensor must stay alive and untouched until wait() returns.
    class pending_all_reduce
    {
    public:
        pending_all_reduce() noexcept; // not valid(): nothing in flight
        ~pending_all_reduce();         // waits if still in flight
        pending_all_reduce(pending_all_reduce&&) noexcept;
        pending_all_reduce& operator=(pending_all_reduce&&) noexcept;
        pending_all_reduce(const pending_all_reduce&) = delete;
        pending_all_reduce& operator=(const pending_all_reduce&) = delete;

        /// True when the reduction is complete (drives MPI's progress; never blocks).
        bool test();
        /// Blocks until complete; then the tensor holds the result (divided by the group size
        /// for reduce_op::mean). Idempotent.
        void wait();
        bool valid() const noexcept { return static_cast<bool>(m_state); }

        struct state;
        explicit pending_all_reduce(std::unique_ptr<state> s) noexcept;

    private:
        std::unique_ptr<state> m_state;
    };
    /// Starts all_reduce(t, op, group) without the cross-rank shape check (the caller guarantees
    /// the ranks agree, as distributed_data_parallel does by checking its buckets once). t: a
    /// contiguous CPU tensor of float32, float64 or int64; op sum or mean.
    pending_all_reduce all_reduce_async(const tensor& t, reduce_op op = reduce_op::sum,
                                        const process_group& group = process_group::world());

    namespace functional
    {
        /// Differentiable all-reduce: a new tensor equal to op over the ranks' x (op: sum or mean;
        /// x float32 or float64, any layout). Its gradient is the same all-reduce of the
        /// incoming gradient (d/dx_r of Σ_s x_s, seen from every rank's output, is the sum of the
        /// ranks' cotangents), recorded too, so gradients of every order are correct. Every rank
        /// must call backward through it.
        tensor all_reduce(const tensor& x, reduce_op op = reduce_op::sum,
                          const process_group& group = process_group::world());
    }
}
