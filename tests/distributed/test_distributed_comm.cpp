// The collectives of xgrad::distributed against local computations, on every rank of the job
// (2 under mpiexec; 1 when run alone, where each collective is the identity).
#include <doctest/doctest.h>

#include <cstdint>
#include <vector>

#include "xgrad/distributed/comm.hpp"
#include "xgrad/factories.hpp"

namespace dist = xgrad::distributed;

TEST_CASE("placeholder: the world is initialised")
{
    dist::init();
    CHECK(dist::world_size() >= 1);
}
