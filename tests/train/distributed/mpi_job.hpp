#pragma once
// The job of a distributed test program: including this header joins MPI before the first test
// case runs and leaves it after the last (a process that ends without MPI_Finalize is reported
// as a failure by the launcher). Without a launcher, or without MPI, this is the world of one.
#include "xgrad/distributed/comm.hpp"

namespace xgrad::testing
{
    struct mpi_job
    {
        mpi_job() { xgrad::distributed::init(); }
        ~mpi_job() { xgrad::distributed::finalize(); }
        mpi_job(const mpi_job&) = delete;
        mpi_job& operator=(const mpi_job&) = delete;
    };
    /// One per program (an inline variable), constructed with the program's statics.
    inline const mpi_job the_mpi_job;
}
