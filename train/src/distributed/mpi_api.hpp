#pragma once
// The MPI plugin's interface: the MPI that comm.cpp speaks, as a table of function pointers.
//
// libxgrad must not need an MPI library to load: most programs never train data-parallel, and
// a program that needs libmpi whenever it uses xgrad fails to start where MPI is not
// installed. So MPI lives in a plugin, mpi_plugin.cpp, which a shared build compiles into a
// library of its own, libxgrad_mpi.so (linked to MPI), and mpi_loader.cpp loads with dlopen when
// a program joins a job (distributed::init), as dispatch.cpp loads the CUDA backend. A static
// build compiles the plugin into libxgrad and takes its table directly.
//
// Nothing of mpi.h crosses this interface: in Open MPI, MPI_FLOAT, MPI_SUM and MPI_COMM_WORLD
// are the addresses of symbols of libmpi, so a use of them outside the plugin would make libxgrad
// need libmpi again. Datatypes and reduction operators are this header's own enums, translated in
// the plugin; communicators and requests are opaque words that hold the MPI handle's bits.
// The table covers exactly what comm.cpp needs; a new need is a new entry and a new version.
//
// Errors: every int-returning entry returns 0 on success (MPI_SUCCESS, which the standard
// fixes at 0) or MPI's error code, which error_string() describes. The entries never throw.
#include <cstdint>

namespace xgrad::distributed::mpi_api
{
    /// The version of this table. The loader refuses a plugin whose table has another version
    /// or size (a libxgrad_mpi.so from another build of xgrad), naming both.
    constexpr std::uint32_t version = 1;

    /// An element type of a collective's buffer.
    enum class datatype : std::int32_t
    {
        byte,
        float32,
        float64,
        int64
    };

    /// A reduction operator (reduce_op::mean is a sum here; comm.cpp divides).
    enum class op : std::int32_t
    {
        sum,
        max,
        min
    };

    /// A communicator (MPI_Comm) or a request (MPI_Request): the MPI handle's bits, copied into
    /// a word (Open MPI's handles are pointers, MPICH's are ints; the plugin checks at compile
    /// time that they fit). Distinct types, so one cannot be passed for the other.
    struct comm
    {
        std::uint64_t bits = 0;
    };
    struct request
    {
        std::uint64_t bits = 0;
    };

    struct table
    {
        std::uint32_t version;    // mpi_api::version of the plugin's build
        std::uint32_t table_size; // sizeof(table) of the plugin's build

        // --- the environment ---
        /// MPI_Initialized and MPI_Finalized (flags 0 or 1).
        int (*initialized)(int* flag);
        int (*finalized)(int* flag);
        /// MPI_Init_thread asking for MPI_THREAD_FUNNELED; *funneled = 1 when the level
        /// provided is at least that.
        int (*init_thread_funneled)(int* argc, char*** argv, int* funneled);
        int (*finalize)();
        /// MPI_Abort: ends every process of the communicator's job.
        int (*abort)(comm c, int code);
        /// The text of an MPI error code, cut to `capacity` bytes with its terminating zero.
        void (*error_string)(int code, char* text, int capacity);

        // --- communicators ---
        /// MPI_COMM_WORLD.
        comm (*world)();
        /// MPI_Comm_dup.
        int (*comm_dup)(comm c, comm* out);
        /// MPI_Comm_set_errhandler(c, MPI_ERRORS_RETURN): errors come back as codes (which
        /// comm.cpp turns into exceptions) instead of ending the job.
        int (*set_errors_return)(comm c);
        int (*comm_rank)(comm c, int* rank);
        int (*comm_size)(comm c, int* size);

        // --- collectives (counts in elements of `type`) ---
        /// MPI_Allreduce with MPI_IN_PLACE.
        int (*allreduce_in_place)(void* data, int count, datatype type, op o, comm c);
        int (*bcast)(void* data, int count, datatype type, int root, comm c);
        /// MPI_Allgather of `count` elements from each rank into `out` (count * size elements).
        int (*allgather)(const void* data, int count, datatype type, void* out, comm c);
        int (*barrier)(comm c);
        /// MPI_Iallreduce with MPI_IN_PLACE; *out is the request to test or wait on.
        int (*iallreduce_in_place)(void* data, int count, datatype type, op o, comm c, request* out);
        /// MPI_Test (status ignored): *done = 1 when the request completed (it is then freed).
        int (*test)(request* r, int* done);
        /// MPI_Wait (status ignored): returns when the request completed; it is then freed.
        int (*wait)(request* r);
    };
}

extern "C"
{
    /// The plugin's one entry point: its table, which lives until the process ends. A shared
    /// build finds it with dlsym in libxgrad_mpi.so; a static build calls it.
    const xgrad::distributed::mpi_api::table* xgrad_mpi_api() noexcept;
}

namespace xgrad::distributed::mpi_api
{
    /// The plugin's table, loaded on the first call: "libxgrad_mpi.so" from the folder of
    /// libxgrad first, then by name on the loader's search path (or the path in the environment
    /// variable XGRAD_MPI_LIBRARY when set). Throws std::runtime_error naming `what` (the
    /// caller, e.g. "distributed::init"), the library and why it could not be loaded (dlerror(),
    /// or a table of another version). Only a build with MPI (XGRAD_WITH_MPI) defines it.
    const table& load(const char* what);

    /// The table if the plugin is already loaded, without loading it; else nullptr. A program
    /// that brought MPI into the process itself (linked libmpi) gets the plugin loaded here, so
    /// that an MPI it initialised is seen (loading then adds no MPI library to the process).
    const table* loaded() noexcept;
}
