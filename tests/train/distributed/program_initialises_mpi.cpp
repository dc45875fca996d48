// A program that links MPI and initialises it itself, without distributed::init: xgrad sees its
// job all the same (a shared libxgrad loads its MPI plugin then, train/src/distributed/mpi_loader.cpp),
// and its collectives run on it. Run by ctest as a 2-rank job; exits 1 with a message otherwise.
#include <mpi.h>

#include <cstdio>

#include "xgrad/distributed/comm.hpp"
#include "xgrad/factories.hpp"
#include "xgrad/ops/reduce.hpp"

int main(int argc, char** argv)
{
    MPI_Init(&argc, &argv);
    int rank = 0, size = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    namespace dist = xgrad::distributed;
    int failures = 0;
    if (!dist::is_initialized() || dist::world_size() != size || dist::rank() != rank)
    {
        std::fprintf(stderr, "rank %d of %d: xgrad sees initialised %d, rank %d of %d\n", rank, size,
                     static_cast<int>(dist::is_initialized()), dist::rank(), dist::world_size());
        ++failures;
    }
    else
    {
        // Every rank contributes its rank + 1: the sum over the job is size * (size + 1) / 2.
        const xgrad::tensor t = xgrad::full({3}, rank + 1.0, xgrad::dtype::float64);
        dist::all_reduce(t);
        const double want = 3.0 * size * (size + 1) / 2.0;
        if (xgrad::sum(t).item() != want)
        {
            std::fprintf(stderr, "rank %d: all_reduce gave a sum of %g, want %g\n", rank, xgrad::sum(t).item(), want);
            ++failures;
        }
    }
    MPI_Finalize();
    return failures == 0 ? 0 : 1;
}
