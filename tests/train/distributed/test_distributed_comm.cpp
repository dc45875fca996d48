// The collectives of xgrad::distributed against local computations, on every rank of the job
// (2 under mpiexec; 1 when run alone, where each collective is the identity). Every rank can
// compute every other rank's tensor (a function of the rank), so each check is exact: the
// values are small integers (or dyadic fractions), whose sums are exact in every dtype.
#include <doctest/doctest.h>

#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "tests/support/check_error.hpp"
#include "tests/train/distributed/mpi_job.hpp"
#include "xgrad/autograd.hpp"
#include "xgrad/cuda.hpp"
#include "xgrad/distributed/comm.hpp"
#include "xgrad/errors.hpp"
#include "xgrad/factories.hpp"
#include "xgrad/ops/elementwise.hpp"
#include "xgrad/ops/reduce.hpp"

namespace dist = xgrad::distributed;
using xgrad::dtype;
using xgrad::tensor;

namespace
{

    /// Rank r's value at element i: distinct per rank and element, exact in float32.
    double value(int r, std::int64_t i) { return static_cast<double>((i % 97) - 40) * 0.5 + 1000.0 * r; }

    tensor rank_tensor(int r, const xgrad::shape_type& shape, dtype dt)
    {
        const std::int64_t n = xgrad::numel_of(shape);
        std::vector<double> v(static_cast<std::size_t>(n));
        for (std::int64_t i = 0; i < n; ++i)
            v[static_cast<std::size_t>(i)] = dt == dtype::int64 ? static_cast<double>(i * 3 - 7 + 100 * r)
                                                                : value(r, i);
        return xgrad::from_host(v.data(), shape, dtype::float64).to(dt);
    }

    std::vector<double> values(const tensor& t)
    {
        std::vector<double> v(static_cast<std::size_t>(t.numel()));
        xgrad::to_host(t, v.data(), dtype::float64);
        return v;
    }

    const std::vector<xgrad::shape_type> shapes = {{}, {0}, {1}, {7}, {3, 5}, {2, 0, 3}, {4, 3, 2, 5}, {1031}};
}

TEST_CASE("all_reduce: sum, mean, max and min equal the local computation over every rank's tensor")
{
    const int k = dist::world_size();
    const int me = dist::rank();
    for (dtype dt : {dtype::float32, dtype::float64, dtype::int64})
        for (const auto& shape : shapes)
            for (auto op : {dist::reduce_op::sum, dist::reduce_op::mean, dist::reduce_op::max, dist::reduce_op::min})
            {
                if (op == dist::reduce_op::mean && dt == dtype::int64)
                    continue;
                CAPTURE(xgrad::name(dt));
                CAPTURE(xgrad::shape_to_string(shape));
                CAPTURE(static_cast<int>(op));
                tensor t = rank_tensor(me, shape, dt);
                dist::all_reduce(t, op);
                std::vector<double> expect = values(rank_tensor(0, shape, dt));
                for (int r = 1; r < k; ++r)
                {
                    const auto other = values(rank_tensor(r, shape, dt));
                    for (std::size_t i = 0; i < expect.size(); ++i)
                        if (op == dist::reduce_op::sum || op == dist::reduce_op::mean)
                            expect[i] += other[i];
                        else if (op == dist::reduce_op::max)
                            expect[i] = std::max(expect[i], other[i]);
                        else
                            expect[i] = std::min(expect[i], other[i]);
                }
                if (op == dist::reduce_op::mean)
                    for (auto& e : expect)
                        e /= k; // k is 1 or 2: exact
                CHECK(t.shape() == shape);
                CHECK(t.dtype() == dt);
                CHECK(values(t) == expect);
            }
}

TEST_CASE("all_reduce writes into the tensor's own storage")
{
    tensor t = rank_tensor(dist::rank(), {5}, dtype::float64);
    tensor alias = t.reshape({5});
    dist::all_reduce(t);
    CHECK(values(alias) == values(t));
}

TEST_CASE("broadcast gives every rank the root's tensor, for any dtype and root")
{
    const int k = dist::world_size();
    for (int root = 0; root < k; ++root)
        for (dtype dt : {dtype::float32, dtype::float64, dtype::int64, dtype::float16, dtype::bfloat16})
            for (const auto& shape : shapes)
            {
                CAPTURE(root);
                CAPTURE(xgrad::name(dt));
                CAPTURE(xgrad::shape_to_string(shape));
                tensor t = rank_tensor(dist::rank(), shape, dt);
                dist::broadcast(t, root);
                CHECK(values(t) == values(rank_tensor(root, shape, dt)));
            }
}

TEST_CASE("all_gather returns every rank's tensor in rank order")
{
    const int k = dist::world_size();
    for (dtype dt : {dtype::float32, dtype::float64, dtype::int64, dtype::float16})
        for (const auto& shape : shapes)
        {
            CAPTURE(xgrad::name(dt));
            CAPTURE(xgrad::shape_to_string(shape));
            const tensor t = rank_tensor(dist::rank(), shape, dt);
            const auto all = dist::all_gather(t);
            REQUIRE(all.size() == static_cast<std::size_t>(k));
            for (int r = 0; r < k; ++r)
            {
                CHECK(all[static_cast<std::size_t>(r)].shape() == shape);
                CHECK(all[static_cast<std::size_t>(r)].dtype() == dt);
                CHECK(values(all[static_cast<std::size_t>(r)]) == values(rank_tensor(r, shape, dt)));
            }
            // A copy: the input is not aliased by its own entry.
            CHECK_FALSE(all[static_cast<std::size_t>(dist::rank())].data_ptr() == t.data_ptr());
        }
}

TEST_CASE("all_reduce_async: the same result as all_reduce, several requests in flight")
{
    const int k = dist::world_size();
    std::vector<tensor> ts;
    std::vector<dist::pending_all_reduce> pending;
    for (std::int64_t n : {0, 1, 13, 4099})
    {
        ts.push_back(rank_tensor(dist::rank(), {n}, dtype::float32));
        pending.push_back(dist::all_reduce_async(ts.back(), dist::reduce_op::mean));
    }
    for (auto& p : pending)
    {
        CHECK(p.valid());
        p.wait();
        CHECK(p.test()); // complete after wait, and wait is idempotent
        p.wait();
    }
    std::size_t j = 0;
    for (std::int64_t n : {0, 1, 13, 4099})
    {
        std::vector<double> expect(static_cast<std::size_t>(n), 0.0);
        for (int r = 0; r < k; ++r)
        {
            const auto v = values(rank_tensor(r, {n}, dtype::float32));
            for (std::size_t i = 0; i < expect.size(); ++i)
                expect[i] += v[i];
        }
        for (auto& e : expect)
            e /= k;
        CHECK(values(ts[j++]) == expect);
    }
}

TEST_CASE("functional::all_reduce is differentiable, to second order")
{
    const int k = dist::world_size();
    const int me = dist::rank();
    // x_r = [r + 1, 2 (r + 1)]; s = Σ_r x_r; each rank's loss L_r = Σ_i s_i^2 (r + 1).
    // dL/dx_r summed over every rank's loss: Σ_s 2 s_i (s + 1) = 2 s_i Σ_s (s + 1), the same on
    // every rank; the second derivative w.r.t. x (through s) is 2 Σ_s (s + 1) · K per element
    // direction (each x_r moves s by the same amount).
    std::vector<double> xv = {me + 1.0, 2.0 * (me + 1)};
    tensor x = xgrad::from_host(xv.data(), {2}, dtype::float64).requires_grad_();
    tensor s = dist::functional::all_reduce(x);
    tensor loss = xgrad::sum(xgrad::mul(xgrad::mul(s, s), xgrad::full({}, me + 1.0, dtype::float64)));
    const auto g = xgrad::grad({loss}, {x}, {}, std::nullopt, /*create_graph=*/true);
    double sum_ranks = 0, weight = 0;
    for (int r = 0; r < k; ++r)
    {
        sum_ranks += r + 1.0;
        weight += r + 1.0;
    }
    const std::vector<double> s_expect = {sum_ranks, 2.0 * sum_ranks};
    CHECK(values(s) == s_expect);
    const auto gv = values(g[0]);
    CHECK(gv[0] == doctest::Approx(2 * s_expect[0] * weight));
    CHECK(gv[1] == doctest::Approx(2 * s_expect[1] * weight));
    // d/dx of Σ_i g_i: each x_r,i moves s_i by 1, so d g_i / d x_r,i = 2 weight, summed over the
    // ranks' graphs by the all-reduce in the gradient's own backward: 2 · weight · K... per rank the
    // recorded gradient g (identical everywhere) depends on every rank's x through s.
    const auto h = xgrad::grad({xgrad::sum(g[0])}, {x});
    const auto hv = values(h[0]);
    CHECK(hv[0] == doctest::Approx(2.0 * weight * k));
    CHECK(hv[1] == doctest::Approx(2.0 * weight * k));
}

TEST_CASE("collectives refuse bad tensors with a message naming them")
{
    tensor bf = xgrad::zeros({3}, dtype::bfloat16);
    CHECK_ERROR(dist::all_reduce(bf), xgrad::invalid_argument, "distributed::all_reduce", "[3] bfloat16",
                "float32, float64 or int64");
    tensor i64 = xgrad::zeros({3}, dtype::int64);
    CHECK_ERROR(dist::all_reduce(i64, dist::reduce_op::mean), xgrad::invalid_argument, "reduce_op::mean", "[3] int64");
    tensor strided = xgrad::zeros({4, 4}, dtype::float32).transpose(0, 1);
    CHECK_ERROR(dist::all_reduce(strided), xgrad::invalid_argument, "not contiguous", "[4, 4] float32");
    CHECK_ERROR(dist::all_reduce(tensor()), xgrad::invalid_argument, "undefined");
    tensor f = xgrad::zeros({2});
    CHECK_ERROR(dist::broadcast(f, dist::world_size()), xgrad::invalid_argument, "distributed::broadcast", "root",
                "is not a rank");
    CHECK_ERROR(dist::broadcast(f, -1), xgrad::invalid_argument, "root -1");
    CHECK_ERROR(dist::all_reduce_async(f, dist::reduce_op::max), xgrad::invalid_argument, "all_reduce_async",
                "sum and reduce_op::mean");
    tensor i = xgrad::zeros({2}, dtype::int64);
    CHECK_ERROR(dist::functional::all_reduce(i), xgrad::invalid_argument, "functional::all_reduce",
                "float32 or float64");
}

TEST_CASE("ranks that disagree on the shape, dtype or root get the same error, not a hang")
{
    if (dist::world_size() < 2)
        return; // one rank always agrees with itself
    const int me = dist::rank();
    tensor t = xgrad::zeros({me == 0 ? 3 : 4});
    CHECK_ERROR(dist::all_reduce(t), xgrad::invalid_argument, "distributed::all_reduce", "the ranks disagree",
                "same shape and dtype");
    tensor d = xgrad::zeros({3}, me == 0 ? dtype::float32 : dtype::float64);
    CHECK_ERROR(dist::all_reduce(d), xgrad::invalid_argument, "the ranks disagree");
    tensor s = xgrad::zeros(me == 0 ? xgrad::shape_type{2, 3} : xgrad::shape_type{3, 2});
    CHECK_ERROR(dist::all_gather(s), xgrad::invalid_argument, "distributed::all_gather", "disagree");
    tensor b = xgrad::zeros({2});
    CHECK_ERROR(dist::broadcast(b, me == 0 ? 0 : 1), xgrad::invalid_argument, "distributed::broadcast", "same root");
    // The job is still usable afterwards: nothing was left half-sent.
    tensor ok = xgrad::ones({2});
    dist::all_reduce(ok);
    CHECK(values(ok) == std::vector<double>{2.0 * 1, 2.0 * 1});
}

TEST_CASE("process groups: world and self")
{
    // Under a launcher the world is the launcher's job (a build without MPI would run K
    // separate worlds of one and pass every other test vacuously).
    if (const char* k = std::getenv("OMPI_COMM_WORLD_SIZE"))
    {
        CHECK(dist::launched_by_mpi());
        CHECK(dist::mpi_available());
        CHECK(dist::world_size() == std::stoi(k));
    }
    const auto world = dist::process_group::world();
    CHECK(world.size() == dist::world_size());
    CHECK(world.rank() == dist::rank());
    CHECK(dist::is_initialized() == dist::mpi_available());
    const auto self = dist::process_group::self();
    CHECK(self.size() == 1);
    CHECK(self.rank() == 0);
    tensor t = rank_tensor(dist::rank(), {3}, dtype::float64);
    const auto before = values(t);
    dist::all_reduce(t, dist::reduce_op::sum, self);
    CHECK(values(t) == before);
    dist::barrier();
}

TEST_CASE("collectives on device tensors go through the host and land in device storage")
{
    if (xgrad::cuda_device_count() == 0)
        return; // a build without the CUDA backend, or no GPU: nothing to check here
    const xgrad::device gpu{xgrad::device_type::cuda, 0};
    const int k = dist::world_size();
    tensor t = rank_tensor(dist::rank(), {6}, dtype::float32).to(gpu);
    const void* storage = t.data_ptr();
    dist::all_reduce(t);
    CHECK(t.device() == gpu);
    CHECK(t.data_ptr() == storage);
    std::vector<double> expect(6, 0.0);
    for (int r = 0; r < k; ++r)
    {
        const auto v = values(rank_tensor(r, {6}, dtype::float32));
        for (std::size_t i = 0; i < 6; ++i)
            expect[i] += v[i];
    }
    CHECK(values(t) == expect);
    tensor b = rank_tensor(dist::rank(), {3}, dtype::float64).to(gpu);
    dist::broadcast(b, k - 1);
    CHECK(values(b) == values(rank_tensor(k - 1, {3}, dtype::float64)));
    const auto all = dist::all_gather(rank_tensor(dist::rank(), {2}, dtype::float32).to(gpu));
    for (int r = 0; r < k; ++r)
    {
        CHECK(all[static_cast<std::size_t>(r)].device() == gpu);
        CHECK(values(all[static_cast<std::size_t>(r)]) == values(rank_tensor(r, {2}, dtype::float32)));
    }
}
