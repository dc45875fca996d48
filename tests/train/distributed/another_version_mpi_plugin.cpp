// A stand-in for libxgrad_mpi.so built from another version of xgrad: its entry point answers a
// table whose version is 999 (and whose entries are all null). test_mpi_plugin points
// XGRAD_MPI_LIBRARY at it and expects init() to refuse it, naming both versions, before calling
// any entry.
#include "train/src/distributed/mpi_api.hpp"

namespace
{
    xgrad::distributed::mpi_api::table make_table() noexcept
    {
        xgrad::distributed::mpi_api::table t{};
        t.version = 999;
        t.table_size = sizeof(t);
        return t;
    }
    const xgrad::distributed::mpi_api::table the_table = make_table();
}

extern "C" const xgrad::distributed::mpi_api::table* xgrad_mpi_api() noexcept { return &the_table; }
