// The MPI plugin (mpi_api.hpp): the one file of xgrad that includes mpi.h. A shared build makes
// it libxgrad_mpi.so, linked to MPI; a static build compiles it into libxgrad.
//
// Each entry is the MPI call of its name with xgrad's enums translated to MPI's datatypes and
// operators, and handles copied between MPI's types and the table's words. It holds no state:
// MPI's own is the state (comm.cpp keeps the duplicated world communicator).
#include <mpi.h>

#include <algorithm>
#include <cstring>
#include <type_traits>

#include "mpi_api.hpp"

namespace
{
    namespace api = xgrad::distributed::mpi_api;

    static_assert(MPI_SUCCESS == 0, "mpi_api.hpp promises 0 for success");
    // Handles are copied bit for bit into a 64-bit word and back: they must be plain values that
    // fit (pointers in Open MPI, ints in MPICH).
    static_assert(sizeof(MPI_Comm) <= sizeof(api::comm::bits) && std::is_trivially_copyable_v<MPI_Comm>);
    static_assert(sizeof(MPI_Request) <= sizeof(api::request::bits) && std::is_trivially_copyable_v<MPI_Request>);

    template <class Word, class Handle>
    Word to_word(Handle h)
    {
        Word w;
        std::memcpy(&w.bits, &h, sizeof(Handle));
        return w;
    }

    template <class Handle, class Word>
    Handle from_word(Word w)
    {
        Handle h;
        std::memcpy(&h, &w.bits, sizeof(Handle));
        return h;
    }

    MPI_Comm to_mpi(api::comm c) { return from_word<MPI_Comm>(c); }

    MPI_Datatype to_mpi(api::datatype t)
    {
        switch (t)
        {
        case api::datatype::float32: return MPI_FLOAT;
        case api::datatype::float64: return MPI_DOUBLE;
        case api::datatype::int64: return MPI_INT64_T;
        case api::datatype::byte: break;
        }
        return MPI_BYTE;
    }

    MPI_Op to_mpi(api::op o)
    {
        switch (o)
        {
        case api::op::max: return MPI_MAX;
        case api::op::min: return MPI_MIN;
        case api::op::sum: break;
        }
        return MPI_SUM;
    }

    int initialized(int* flag) { return MPI_Initialized(flag); }
    int finalized(int* flag) { return MPI_Finalized(flag); }

    int init_thread_funneled(int* argc, char*** argv, int* funneled)
    {
        int provided = 0;
        const int rc = MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided);
        *funneled = rc == MPI_SUCCESS && provided >= MPI_THREAD_FUNNELED ? 1 : 0;
        return rc;
    }

    int finalize() { return MPI_Finalize(); }
    int abort(api::comm c, int code) { return MPI_Abort(to_mpi(c), code); }

    void error_string(int code, char* text, int capacity)
    {
        if (capacity <= 0)
            return;
        char buffer[MPI_MAX_ERROR_STRING] = {};
        int length = 0;
        if (MPI_Error_string(code, buffer, &length) != MPI_SUCCESS)
            length = 0;
        length = std::clamp(length, 0, capacity - 1);
        std::memcpy(text, buffer, static_cast<std::size_t>(length));
        text[length] = '\0';
    }

    api::comm world() { return to_word<api::comm>(MPI_COMM_WORLD); }

    int comm_dup(api::comm c, api::comm* out)
    {
        MPI_Comm dup = MPI_COMM_NULL;
        const int rc = MPI_Comm_dup(to_mpi(c), &dup);
        *out = to_word<api::comm>(dup);
        return rc;
    }

    int set_errors_return(api::comm c) { return MPI_Comm_set_errhandler(to_mpi(c), MPI_ERRORS_RETURN); }
    int comm_rank(api::comm c, int* rank) { return MPI_Comm_rank(to_mpi(c), rank); }
    int comm_size(api::comm c, int* size) { return MPI_Comm_size(to_mpi(c), size); }

    int allreduce_in_place(void* data, int count, api::datatype type, api::op o, api::comm c)
    {
        return MPI_Allreduce(MPI_IN_PLACE, data, count, to_mpi(type), to_mpi(o), to_mpi(c));
    }

    int bcast(void* data, int count, api::datatype type, int root, api::comm c)
    {
        return MPI_Bcast(data, count, to_mpi(type), root, to_mpi(c));
    }

    int allgather(const void* data, int count, api::datatype type, void* out, api::comm c)
    {
        const MPI_Datatype t = to_mpi(type);
        return MPI_Allgather(data, count, t, out, count, t, to_mpi(c));
    }

    int barrier(api::comm c) { return MPI_Barrier(to_mpi(c)); }

    int iallreduce_in_place(void* data, int count, api::datatype type, api::op o, api::comm c, api::request* out)
    {
        MPI_Request r = MPI_REQUEST_NULL;
        const int rc = MPI_Iallreduce(MPI_IN_PLACE, data, count, to_mpi(type), to_mpi(o), to_mpi(c), &r);
        *out = to_word<api::request>(r);
        return rc;
    }

    int test(api::request* r, int* done)
    {
        auto h = from_word<MPI_Request>(*r);
        const int rc = MPI_Test(&h, done, MPI_STATUS_IGNORE);
        *r = to_word<api::request>(h); // MPI_REQUEST_NULL once complete
        return rc;
    }

    int wait(api::request* r)
    {
        auto h = from_word<MPI_Request>(*r);
        const int rc = MPI_Wait(&h, MPI_STATUS_IGNORE);
        *r = to_word<api::request>(h);
        return rc;
    }

    // Aggregate initialisation in the order of the declaration: a field added to the table
    // without an entry here leaves it null, which -Wmissing-field-initializers reports.
    const api::table the_table = {
        api::version,
        sizeof(api::table),
        initialized,
        finalized,
        init_thread_funneled,
        finalize,
        abort,
        error_string,
        world,
        comm_dup,
        set_errors_return,
        comm_rank,
        comm_size,
        allreduce_in_place,
        bcast,
        allgather,
        barrier,
        iallreduce_in_place,
        test,
        wait,
    };
}

// The library's one external symbol: everything above is in the unnamed namespace.
extern "C" const api::table* xgrad_mpi_api() noexcept { return &the_table; }
