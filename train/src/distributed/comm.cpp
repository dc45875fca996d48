// xgrad::distributed's processes and collectives (see xgrad/distributed/comm.hpp).
//
// With XGRAD_WITH_MPI every group is an MPI communicator; without it (and before init()) the
// world is this process alone, where every collective is the identity (or, for mean, a division
// by one). Both paths share the argument checks, so a program that is wrong for K ranks is
// refused with the same message when it runs alone.
//
// MPI is spoken through the MPI plugin's table (mpi_api.hpp), never directly: libxgrad needs no
// MPI library, and the plugin (libxgrad_mpi.so in a shared build) is loaded by init(). Until a
// process has joined a job (or initialised MPI itself), mpi_api::loaded() is null, and every
// path below is the world of one without touching the plugin.
#include "xgrad/distributed/comm.hpp"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#ifdef XGRAD_WITH_MPI
#include "mpi_api.hpp"
#endif

#include "xgrad/autograd.hpp"
#include "xgrad/checked.hpp"
#include "xgrad/errors.hpp"
#include "xgrad/factories.hpp"
#include "xgrad/ops/elementwise.hpp"
#include "xgrad/ops/storage.hpp"

namespace xgrad::distributed
{
    struct process_group::impl
    {
#ifdef XGRAD_WITH_MPI
        mpi_api::comm m_comm{}; // unused in a group of one, which never communicates
#endif
        int m_rank = 0;
        int m_size = 1;
    };

    namespace
    {
        /// MPI counts are int: larger tensors go in pieces of at most 2^30 elements (or bytes).
        constexpr std::int64_t max_piece = std::int64_t{1} << 30;

#ifdef XGRAD_WITH_MPI
        /// The plugin's table when MPI is initialised and not yet finalised in this process;
        /// nullptr otherwise, without loading the plugin (a process that never joined a job
        /// never does).
        const mpi_api::table* active_mpi() noexcept
        {
            const mpi_api::table* mpi = mpi_api::loaded();
            if (!mpi)
                return nullptr;
            int init = 0, fin = 0;
            mpi->initialized(&init);
            mpi->finalized(&fin);
            return init && !fin ? mpi : nullptr;
        }
#endif

        bool mpi_initialized()
        {
#ifdef XGRAD_WITH_MPI
            return active_mpi() != nullptr;
#else
            return false;
#endif
        }

        const std::shared_ptr<const process_group::impl>& self_impl()
        {
            static const auto p = std::make_shared<const process_group::impl>();
            return p;
        }

        std::string describe(const tensor& t)
        {
            return shape_to_string(t.shape()) + " " + std::string(name(t.dtype()));
        }

        [[noreturn]] void fail(const char* what, const std::string& message)
        {
            throw xgrad::invalid_argument(std::string("distributed::") + what + ": " + message);
        }

        /// The local checks every collective makes (before any communication, so every rank that
        /// is wrong says so; the cross-rank check follows).
        void check_tensor(const tensor& t, const char* what, reduce_op op, bool any_dtype)
        {
            if (!t.defined())
                fail(what, "the tensor is undefined");
            if (!any_dtype)
            {
                const dtype dt = t.dtype();
                const bool floating = dt == dtype::float32 || dt == dtype::float64;
                if (!floating && dt != dtype::int64)
                    fail(what, "a tensor of " + describe(t) + " cannot be reduced (float32, float64 or int64)");
                if (op == reduce_op::mean && !floating)
                    fail(what, "reduce_op::mean needs a float32 or float64 tensor, got " + describe(t));
            }
            if (!t.is_contiguous())
                fail(what, "the tensor " + describe(t) +
                               " is not contiguous (collectives write into its storage in place; pass t.contiguous() "
                               "and use that)");
        }

#ifdef XGRAD_WITH_MPI
        /// The plugin's table, for a group of more than one process: only a process that has
        /// joined a job (init(), which loaded the plugin) has such a group.
        const mpi_api::table& plugin() { return mpi_api::load("distributed"); }

        mpi_api::comm comm_of(const process_group& g) { return g.handle() ? g.handle()->m_comm : mpi_api::comm{}; }

        void check_mpi(int rc, const char* what)
        {
            if (rc == 0)
                return;
            char text[1024] = {};
            plugin().error_string(rc, text, static_cast<int>(sizeof(text)));
            throw std::runtime_error(std::string("distributed::") + what + ": MPI error: " + text);
        }

        mpi_api::datatype mpi_type(dtype dt)
        {
            switch (dt)
            {
            case dtype::float32: return mpi_api::datatype::float32;
            case dtype::float64: return mpi_api::datatype::float64;
            case dtype::int64: return mpi_api::datatype::int64;
            default: return mpi_api::datatype::byte; // any dtype as bytes (all_gather, broadcast)
            }
        }

        mpi_api::op mpi_op(reduce_op op)
        {
            switch (op)
            {
            case reduce_op::max: return mpi_api::op::max;
            case reduce_op::min: return mpi_api::op::min;
            default: return mpi_api::op::sum; // sum, and mean before its division
            }
        }

        /// Checks that every rank passes a tensor of the same shape and dtype (and, for
        /// broadcast, the same root): one all-reduce of the values and their negations under
        /// MPI_MAX gives each value's maximum and minimum over the ranks, which are equal only
        /// when every rank agrees. Every rank then throws the same error, or none does.
        void check_agreement(const tensor& t, const char* what, const process_group& g, std::int64_t extra = 0)
        {
            std::vector<std::int64_t> v;
            v.push_back(static_cast<std::int64_t>(t.dim()));
            v.push_back(static_cast<std::int64_t>(t.dtype()));
            v.push_back(extra);
            // Ranks beyond 8 are folded into the element count: shapes of different rank already
            // differ in v[0].
            for (std::int64_t d = 0; d < 8; ++d)
                v.push_back(d < t.dim() ? t.size(d) : -1);
            v.push_back(t.numel());
            const std::size_t n = v.size();
            std::vector<std::int64_t> both(2 * n);
            for (std::size_t i = 0; i < n; ++i)
            {
                both[i] = v[i];
                both[n + i] = -v[i];
            }
            check_mpi(plugin().allreduce_in_place(both.data(), static_cast<int>(both.size()), mpi_api::datatype::int64,
                                                  mpi_api::op::max, comm_of(g)),
                      what);
            for (std::size_t i = 0; i < n; ++i)
                if (both[i] != -both[n + i])
                    fail(what, "the ranks disagree on the tensor (this rank has " + describe(t) +
                                   (extra != 0 || i == 2 ? ", root " + std::to_string(extra) : std::string()) +
                                   "): every rank must pass the same shape and dtype" +
                                   (i == 2 ? " and the same root" : ""));
        }

        /// Runs fn(host pointer) on t's data, through a host copy for a device tensor, writing
        /// the result back when `write`.
        template <class F>
        void on_host(const tensor& t, bool write, F&& fn)
        {
            if (t.device().type == device_type::cpu)
            {
                fn(t.data_ptr());
                return;
            }
            // A host copy (to() across devices always makes new storage), then back to the
            // device and into t's own storage, which copy_into writes within one device.
            tensor host = t.detach().to(cpu_device).contiguous();
            fn(host.data_ptr());
            if (write)
                copy_(t.detach(), host.to(t.device()));
        }
#endif
    }

    bool mpi_available() noexcept
    {
#ifdef XGRAD_WITH_MPI
        return true;
#else
        return false;
#endif
    }

    bool launched_by_mpi() noexcept
    {
        for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "MPI_LOCALNRANKS"})
            if (std::getenv(name) != nullptr)
                return true;
        return false;
    }

    int local_process_count() noexcept
    {
        // Open MPI's, then MPICH's (Hydra) name for it; a value that is not a count reads as 1.
        for (const char* name : {"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS"})
            if (const char* v = std::getenv(name))
            {
                char* end = nullptr;
                const long n = std::strtol(v, &end, 10);
                return end != v && *end == '\0' && n >= 1 && n <= 1 << 20 ? static_cast<int>(n) : 1;
            }
        return 1;
    }

    void init(int* argc, char*** argv)
    {
#ifdef XGRAD_WITH_MPI
        // The first use of MPI in a process that joins a job: the plugin is loaded here (a
        // std::runtime_error naming it and why, when it cannot be).
        const mpi_api::table& mpi = mpi_api::load("distributed::init");
        int initialized = 0, finalized = 0;
        mpi.initialized(&initialized);
        mpi.finalized(&finalized);
        if (finalized)
            throw std::runtime_error("distributed::init: MPI has already been finalised in this process");
        if (initialized)
            return;
        int funneled = 0;
        const int rc = mpi.init_thread_funneled(argc, argv, &funneled);
        if (rc != 0)
            throw std::runtime_error("distributed::init: MPI_Init_thread failed");
        // Errors are returned, not fatal, so that they become exceptions with a message.
        mpi.set_errors_return(mpi.world());
        if (!funneled)
        {
            mpi.finalize();
            throw std::runtime_error("distributed::init: the MPI library does not support MPI_THREAD_FUNNELED");
        }
#else
        (void)argc;
        (void)argv;
#endif
    }

    void finalize()
    {
#ifdef XGRAD_WITH_MPI
        const mpi_api::table* mpi = active_mpi();
        if (!mpi)
            return;
        mpi->barrier(mpi->world());
        mpi->finalize();
#endif
    }

    bool is_initialized() noexcept { return mpi_initialized(); }

    void abort(const std::string& message, int code) noexcept
    {
        int r = 0, k = 1;
#ifdef XGRAD_WITH_MPI
        const mpi_api::table* mpi = active_mpi();
        if (mpi)
        {
            mpi->comm_rank(mpi->world(), &r);
            mpi->comm_size(mpi->world(), &k);
        }
#endif
        std::fprintf(stderr, "xgrad: rank %d of %d: %s\n", r, k, message.c_str());
        std::fflush(stderr);
#ifdef XGRAD_WITH_MPI
        if (mpi)
            mpi->abort(mpi->world(), code);
#endif
        std::exit(code);
    }

    environment::environment(int* argc, char*** argv) : m_uncaught(std::uncaught_exceptions()) { init(argc, argv); }

    environment::~environment()
    {
        if (std::uncaught_exceptions() > m_uncaught && world_size() > 1)
            // Finalising would wait in its barrier for ranks that may be waiting for this one
            // in a collective: the job could only hang.
            abort("stopping the job: an exception is propagating out of the distributed environment's scope");
        try
        {
            finalize();
        }
        catch (...)
        {
        }
    }

    // --- groups ---------------------------------------------------------------------------------
    process_group process_group::world()
    {
#ifdef XGRAD_WITH_MPI
        if (const mpi_api::table* mpi = active_mpi())
        {
            // A duplicate of MPI_COMM_WORLD, made once: xgrad's messages never match a program's
            // own MPI traffic on the world communicator. (Never freed: MPI_Finalize reclaims
            // it, and a group may be held until then.)
            static const std::shared_ptr<const impl> world = [mpi] {
                auto p = std::make_shared<impl>();
                check_mpi(mpi->comm_dup(mpi->world(), &p->m_comm), "process_group::world");
                mpi->set_errors_return(p->m_comm);
                mpi->comm_rank(p->m_comm, &p->m_rank);
                mpi->comm_size(p->m_comm, &p->m_size);
                return std::shared_ptr<const impl>(std::move(p));
            }();
            return process_group(world);
        }
#endif
        return process_group(self_impl());
    }

    process_group process_group::self() { return process_group(self_impl()); }

    int process_group::rank() const noexcept { return m_impl ? m_impl->m_rank : 0; }
    int process_group::size() const noexcept { return m_impl ? m_impl->m_size : 1; }

    int rank() { return process_group::world().rank(); }
    int world_size() { return process_group::world().size(); }

    // --- collectives ----------------------------------------------------------------------------
    namespace
    {
        /// mean: the sum divided by the group size, in the tensor's own dtype.
        void divide_by(const tensor& t, int size)
        {
            if (size == 1 || t.numel() == 0)
                return;
            copy_(t.detach(), div(t.detach(), full({}, static_cast<double>(size), t.dtype(), t.device())));
        }
    }

    void all_reduce(const tensor& t, reduce_op op, const process_group& group)
    {
        check_tensor(t, "all_reduce", op, false);
#ifdef XGRAD_WITH_MPI
        if (group.size() > 1)
        {
            check_agreement(t, "all_reduce", group);
            const std::int64_t n = t.numel();
            if (n > 0)
                on_host(t, true, [&](void* data) {
                    const std::size_t esize = itemsize(t.dtype());
                    for (std::int64_t at = 0; at < n; at += max_piece)
                    {
                        const std::int64_t count = std::min(max_piece, n - at);
                        check_mpi(plugin().allreduce_in_place(static_cast<char*>(data) + at * esize,
                                                              static_cast<int>(count), mpi_type(t.dtype()), mpi_op(op),
                                                              comm_of(group)),
                                  "all_reduce");
                    }
                });
            if (op == reduce_op::mean)
                divide_by(t, group.size());
        }
#else
        (void)group;
#endif
    }

    void broadcast(const tensor& t, int root, const process_group& group)
    {
        check_tensor(t, "broadcast", reduce_op::sum, true);
        if (root < 0 || root >= group.size())
            fail("broadcast", "root " + std::to_string(root) + " is not a rank of a group of " +
                                  std::to_string(group.size()) + " (expected 0 <= root < size)");
#ifdef XGRAD_WITH_MPI
        if (group.size() > 1)
        {
            check_agreement(t, "broadcast", group, root);
            const auto bytes =
                static_cast<std::int64_t>(checked_bytes(t.numel(), itemsize(t.dtype()), "distributed::broadcast"));
            if (bytes > 0)
                on_host(t, true, [&](void* data) {
                    for (std::int64_t at = 0; at < bytes; at += max_piece)
                        check_mpi(plugin().bcast(static_cast<char*>(data) + at,
                                                 static_cast<int>(std::min(max_piece, bytes - at)),
                                                 mpi_api::datatype::byte, root, comm_of(group)),
                                  "broadcast");
                });
        }
#endif
    }

    std::vector<tensor> all_gather(const tensor& t, const process_group& group)
    {
        check_tensor(t, "all_gather", reduce_op::sum, true);
        std::vector<tensor> out;
#ifdef XGRAD_WITH_MPI
        if (group.size() > 1)
        {
            check_agreement(t, "all_gather", group);
            const int k = group.size();
            const auto bytes =
                static_cast<std::int64_t>(checked_bytes(t.numel(), itemsize(t.dtype()), "distributed::all_gather"));
            const std::int64_t total = checked_mul(bytes, k, "distributed::all_gather");
            if (bytes > max_piece)
                fail("all_gather", "a tensor of " + describe(t) + " is larger than the 1 GiB one all_gather sends");
            std::vector<char> gathered(static_cast<std::size_t>(total));
            if (bytes > 0)
                on_host(t, false, [&](void* data) {
                    check_mpi(plugin().allgather(data, static_cast<int>(bytes), mpi_api::datatype::byte,
                                                 gathered.data(), comm_of(group)),
                              "all_gather");
                });
            for (int r = 0; r < k; ++r)
                out.push_back(from_host(gathered.data() + static_cast<std::size_t>(r) * static_cast<std::size_t>(bytes),
                                        t.shape(), t.dtype(), t.device()));
            return out;
        }
#endif
        (void)group;
        out.push_back(clone(t.detach()));
        return out;
    }

    void barrier(const process_group& group)
    {
#ifdef XGRAD_WITH_MPI
        if (group.size() > 1)
            check_mpi(plugin().barrier(comm_of(group)), "barrier");
#else
        (void)group;
#endif
    }

    // --- non-blocking all-reduce -------------------------------------------------------------------
    struct pending_all_reduce::state
    {
        tensor m_tensor;
        reduce_op m_op = reduce_op::sum;
        int m_size = 1;
        bool m_done = false;
#ifdef XGRAD_WITH_MPI
        mpi_api::request m_request{};
        bool m_in_flight = false; // m_request holds a request to test or wait on
#endif
        void finish()
        {
            m_done = true;
            if (m_op == reduce_op::mean)
                divide_by(m_tensor, m_size);
        }
    };

    // Defined here, where state is complete (a default in the header would need its destructor).
    pending_all_reduce::pending_all_reduce() noexcept = default;
    pending_all_reduce::pending_all_reduce(std::unique_ptr<state> s) noexcept : m_state(std::move(s)) {}
    pending_all_reduce::pending_all_reduce(pending_all_reduce&&) noexcept = default;
    pending_all_reduce& pending_all_reduce::operator=(pending_all_reduce&& other) noexcept
    {
        if (this != &other)
        {
            try
            {
                wait();
            }
            catch (...)
            {
            }
            m_state = std::move(other.m_state);
        }
        return *this;
    }
    pending_all_reduce::~pending_all_reduce()
    {
        try
        {
            wait();
        }
        catch (...)
        {
        }
    }

    bool pending_all_reduce::test()
    {
        if (!m_state || m_state->m_done)
            return true;
#ifdef XGRAD_WITH_MPI
        if (m_state->m_in_flight)
        {
            int flag = 0;
            check_mpi(plugin().test(&m_state->m_request, &flag), "all_reduce_async");
            if (!flag)
                return false;
            m_state->m_in_flight = false;
        }
#endif
        m_state->finish();
        return true;
    }

    void pending_all_reduce::wait()
    {
        if (!m_state || m_state->m_done)
            return;
#ifdef XGRAD_WITH_MPI
        if (m_state->m_in_flight)
        {
            check_mpi(plugin().wait(&m_state->m_request), "all_reduce_async");
            m_state->m_in_flight = false;
        }
#endif
        m_state->finish();
    }

    pending_all_reduce all_reduce_async(const tensor& t, reduce_op op, const process_group& group)
    {
        check_tensor(t, "all_reduce_async", op, false);
        if (op != reduce_op::sum && op != reduce_op::mean)
            fail("all_reduce_async", "only reduce_op::sum and reduce_op::mean are asynchronous");
        if (t.device().type != device_type::cpu)
            fail("all_reduce_async",
                 "the tensor " + describe(t) + " must be on the CPU (stage device tensors through one)");
        if (t.numel() > max_piece)
            fail("all_reduce_async",
                 "a tensor of " + describe(t) + " is larger than the 2^30 elements one request sends");
        auto s = std::make_unique<pending_all_reduce::state>();
        s->m_tensor = t.detach();
        s->m_op = op;
        s->m_size = group.size();
#ifdef XGRAD_WITH_MPI
        if (group.size() > 1 && t.numel() > 0)
        {
            check_mpi(plugin().iallreduce_in_place(t.data_ptr(), static_cast<int>(t.numel()), mpi_type(t.dtype()),
                                                   mpi_op(op), comm_of(group), &s->m_request),
                      "all_reduce_async");
            s->m_in_flight = true;
        }
#endif
        return pending_all_reduce(std::move(s));
    }

    // --- the differentiable all-reduce ------------------------------------------------------------
    namespace functional
    {
        tensor all_reduce(const tensor& x, reduce_op op, const process_group& group)
        {
            if (!x.defined())
                fail("functional::all_reduce", "the tensor is undefined");
            if (op != reduce_op::sum && op != reduce_op::mean)
                fail("functional::all_reduce", "only reduce_op::sum and reduce_op::mean are differentiable");
            if (x.dtype() != dtype::float32 && x.dtype() != dtype::float64)
                fail("functional::all_reduce", "a tensor of " + describe(x) + " (float32 or float64)");
            // A fresh copy: the reduction writes in place, and x's storage is x's.
            const tensor out = clone(x.detach());
            distributed::all_reduce(out, op, group);
            // d/dx_r of y_s = Σ_t x_t is the identity for every s: the gradient reaching x_r is
            // the sum over ranks of the cotangents of y_s, which is this same all-reduce of the
            // incoming gradient (mean: the mean of them). Written with this op, so it is recorded
            // under create_graph and higher orders follow.
            record("distributed_all_reduce", {x}, {out}, [op, group](function_node&, const std::vector<tensor>& g) {
                return std::vector<tensor>{functional::all_reduce(g.at(0), op, group)};
            });
            return out;
        }
    }
}
