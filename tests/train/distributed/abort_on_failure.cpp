// A job in which rank 1 fails while rank 0 waits for it in a collective: run by
// expect_abort.sh under mpiexec, which checks that the whole job stops, with the message, in
// bounded time. Mode "catch": the program catches the error and calls distributed::abort with
// it (what the examples do). Mode "unwind": the exception leaves the environment's scope, whose
// destructor ends the job.
#include <cstdio>
#include <cstring>
#include <stdexcept>

#include "xgrad/distributed/comm.hpp"
#include "xgrad/factories.hpp"

namespace dist = xgrad::distributed;

namespace
{
    void step()
    {
        if (dist::rank() == 1)
            throw std::runtime_error("rank 1 could not read its shard (a deliberate failure)");
        xgrad::tensor t = xgrad::ones({4});
        dist::all_reduce(t); // rank 0 waits here for a rank that will never come
        std::printf("rank 0 finished the all-reduce: the failure did not stop the job\n");
    }
}

int main(int argc, char** argv)
{
    const bool unwind = argc > 1 && std::strcmp(argv[1], "unwind") == 0;
    if (unwind)
    {
        try
        {
            dist::environment env(&argc, &argv);
            step();
        }
        catch (const std::exception& e)
        {
            // Not reached on a failing rank of a job of several: the environment's destructor aborts.
            std::printf("caught after the environment ended: %s\n", e.what());
            return 3;
        }
        return 0;
    }
    dist::environment env(&argc, &argv);
    try
    {
        step();
    }
    catch (const std::exception& e)
    {
        dist::abort(e.what());
    }
    return 0;
}
