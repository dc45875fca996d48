#pragma once
// Shared by the synchronised batch-norm tests (test_distributed_sync_batch_norm*.cpp): joining
// the MPI job for the program's lifetime, the global batch every rank can build from a seed,
// each rank's rows of it, and comparisons with a relative tolerance.
//
// Every rank runs the same test cases in the same order and makes the same collective calls
// (checks never change the control flow), so a failed check on one rank cannot leave another
// waiting in a collective.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "tests/train/distributed/mpi_job.hpp"
#include "xgrad/distributed/comm.hpp"
#include "xgrad/xgrad.hpp"

namespace sync_bn_test
{
    using namespace xgrad;
    namespace dist = xgrad::distributed;

    /// [begin, end) of the global batch's rows held by `rank` of `size` ranks: with two ranks
    /// the split {first, n - first}; with one rank everything; with more, even shares.
    inline std::pair<std::int64_t, std::int64_t> rows_of(std::int64_t n, std::int64_t first, int rank, int size)
    {
        if (size == 1)
            return {0, n};
        if (size == 2)
            return rank == 0 ? std::pair<std::int64_t, std::int64_t>{0, first}
                             : std::pair<std::int64_t, std::int64_t>{first, n};
        const std::int64_t share = (n + size - 1) / size;
        return {std::min(n, rank * share), std::min(n, (rank + 1) * share)};
    }

    /// This rank's rows of t (dimension 0, N in every layout), in their own contiguous storage.
    inline tensor shard(const tensor& t, std::pair<std::int64_t, std::int64_t> rows)
    {
        return t.detach().slice(0, rows.first, rows.second).contiguous();
    }

    /// A tensor of `shape` from `seed`, identical on every rank: mean + spread * N(0, 1), drawn
    /// in float64 and rounded once to dt (so every dtype sees the same values, up to rounding).
    inline tensor seeded(const shape_type& shape, std::uint64_t seed, dtype dt, double mean = 0.0, double spread = 1.0)
    {
        generator gen(seed);
        no_grad guard;
        return cast(randn(shape, gen, dtype::float64) * spread + mean, dt);
    }

    /// A new leaf sharing t's values, requiring grad.
    inline tensor leaf(const tensor& t)
    {
        tensor l = t.detach();
        l.requires_grad_(true);
        return l;
    }

    /// The largest |got - want| / max(1, |want|) over the elements.
    inline double worst_relative(const std::vector<double>& got, const std::vector<double>& want)
    {
        double worst = 0;
        for (std::size_t i = 0; i < got.size() && i < want.size(); ++i)
        {
            const double d = std::abs(got[i] - want[i]) / std::max(1.0, std::abs(want[i]));
            worst = std::max(worst, std::isnan(d) ? INFINITY : d);
        }
        return worst;
    }

    /// Elementwise |got - want| <= tol * max(1, |want|), with the same shape.
    inline void check_close(const tensor& got, const tensor& want, double tol, const std::string& what)
    {
        INFO(what);
        // CHECK, never REQUIRE: leaving the test case early would skip collectives that the
        // other ranks then wait in.
        CHECK(got.defined());
        CHECK(want.defined());
        if (!got.defined() || !want.defined())
            return;
        CHECK(got.shape() == want.shape());
        const double worst = worst_relative(to_vector(got), to_vector(want));
        CHECK_MESSAGE(worst <= tol, what << ": worst relative difference " << worst << " > " << tol);
    }

    /// Bit-for-bit equality of values (shape and every element).
    inline void check_same(const tensor& got, const tensor& want, const std::string& what)
    {
        INFO(what);
        CHECK(got.defined());
        CHECK(want.defined());
        if (!got.defined() || !want.defined())
            return;
        CHECK(got.shape() == want.shape());
        CHECK(got.dtype() == want.dtype());
        CHECK(to_vector(got) == to_vector(want));
    }

    /// The sum of t over the ranks (a copy; t is unchanged).
    /// An undefined t takes part as an empty tensor: the ranks then disagree on the shape, and
    /// every rank throws (no rank is left waiting).
    inline tensor summed(const tensor& t)
    {
        CHECK(t.defined());
        no_grad guard;
        // zeros + t: fresh storage for the in-place reduction.
        tensor s = t.defined() ? zeros(t.shape(), t.dtype()) + t.detach() : zeros({0});
        dist::all_reduce(s);
        return s;
    }
}
