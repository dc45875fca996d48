// The Fashion-MNIST model (examples/common/fashion_model.hpp) through distributed_data_parallel:
// what one training step communicates, and how much of it backward hides. Rank 0 prints, per
// configuration (bucket cap, overlap on or off), the buckets, the bytes all-reduced per step,
// and the medians over the measured steps of the backward time, communication_s and wait_s.
// Those times are printed, never asserted (they depend on the machine and its load). The
// assertions are the invariants: the bytes are the gradients' plus one flag per parameter, with
// overlap every bucket starts during backward (every parameter gets a gradient each step), and
// overlap on and off give the same gradients.
//
// Tolerance for "the same gradients": both runs all-reduce the same K float32 values per
// element; only the grouping into messages differs, which may change MPI's summation order, so
// the means may differ by about K rounding errors of float32 (2^-24 relative each). A relative
// 1e-5 (plus 1e-7 absolute) allows that for any K up to ~100 and still catches any real error.
#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <vector>

#include "examples/common/fashion_model.hpp"
#include "tests/train/distributed/mpi_job.hpp"
#include "xgrad/distributed/comm.hpp"
#include "xgrad/distributed/data_parallel.hpp"
#include "xgrad/xgrad.hpp"

namespace dist = xgrad::distributed;
using xgrad::dtype;
using xgrad::tensor;

namespace
{

    constexpr std::int64_t batch_per_rank = 32;
    constexpr int warmup_steps = 1;
    constexpr int measured_steps = 4;

    double median(std::vector<double> v)
    {
        std::sort(v.begin(), v.end());
        return v.empty() ? 0.0 : v[v.size() / 2];
    }

    struct run_result
    {
        dist::data_parallel_stats stats;
        double backward_s = 0.0, communication_s = 0.0, wait_s = 0.0;
        std::vector<std::vector<double>> grads; // of the last step
    };

    /// Steps of forward, backward and synchronize (no optimizer step, so every step sees the
    /// same parameters and the runs are comparable).
    run_result run(std::int64_t cap, bool overlap)
    {
        xgrad::generator gen(7);
        auto model = xgrad::examples::make_fashion_model("NCHW", gen);
        dist::data_parallel_options o;
        o.bucket_cap_bytes = cap;
        o.overlap = overlap;
        dist::distributed_data_parallel ddp(model, dist::process_group::world(), o);

        xgrad::generator data(1000 + static_cast<std::uint64_t>(dist::rank()));
        const tensor x = xgrad::randn({batch_per_rank, 1, 28, 28}, data);
        std::vector<double> labels(batch_per_rank);
        for (std::int64_t i = 0; i < batch_per_rank; ++i)
            labels[static_cast<std::size_t>(i)] = static_cast<double>((i * 7 + dist::rank() * 3) % 10);
        const tensor y = xgrad::from_host(labels.data(), {batch_per_rank}, dtype::float64).to(dtype::int64);

        run_result r;
        std::vector<double> backward_s, communication_s, wait_s;
        for (int step = 0; step < warmup_steps + measured_steps; ++step)
        {
            tensor loss = xgrad::cross_entropy(ddp(x), y);
            model->zero_grad();
            const auto t0 = std::chrono::steady_clock::now();
            loss.backward();
            const double b = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
            ddp.synchronize();
            if (step < warmup_steps)
                continue;
            backward_s.push_back(b);
            communication_s.push_back(ddp.last_stats().communication_s);
            wait_s.push_back(ddp.last_stats().wait_s);
        }
        r.stats = ddp.last_stats();
        r.backward_s = median(backward_s);
        r.communication_s = median(communication_s);
        r.wait_s = median(wait_s);
        for (const auto& p : model->parameters())
            r.grads.push_back(xgrad::to_vector(p.grad()));
        return r;
    }
}

TEST_CASE("the Fashion-MNIST model: bytes, buckets, and communication against wait with overlap on and off")
{
    xgrad::generator gen(7);
    auto reference = xgrad::examples::make_fashion_model("NCHW", gen);
    std::int64_t elements = 0, params = 0;
    for (const auto& p : reference->parameters())
    {
        elements += p.numel();
        ++params;
    }

    if (dist::rank() == 0)
        std::printf("fashion model, %d rank(s), batch %lld per rank, %lld parameters (%lld floats)\n",
                    dist::world_size(), static_cast<long long>(batch_per_rank), static_cast<long long>(params),
                    static_cast<long long>(elements));
    for (std::int64_t cap : {std::int64_t{1} << 20, std::int64_t{1} << 16})
    {
        const run_result on = run(cap, true);
        const run_result off = run(cap, false);
        for (const run_result* r : {&on, &off})
        {
            CHECK(r->stats.bytes == (elements + params) * 4);
            if (dist::rank() == 0)
                std::printf("  cap %7lld B, overlap %-3s: %lld buckets, %lld bytes/step, %lld started in backward; "
                            "backward %.2f ms, communication %.2f ms, wait %.2f ms (medians of %d steps)\n",
                            static_cast<long long>(cap), r == &on ? "on" : "off",
                            static_cast<long long>(r->stats.buckets), static_cast<long long>(r->stats.bytes),
                            static_cast<long long>(r->stats.buckets_overlapped), 1e3 * r->backward_s,
                            1e3 * r->communication_s, 1e3 * r->wait_s, measured_steps);
        }
        CHECK(on.stats.buckets == off.stats.buckets);
        CHECK(on.stats.buckets_overlapped == on.stats.buckets);
        CHECK(off.stats.buckets_overlapped == 0);
        REQUIRE(on.grads.size() == off.grads.size());
        std::int64_t outside = 0; // elements beyond the tolerance (one CHECK, not 400k)
        for (std::size_t i = 0; i < on.grads.size(); ++i)
        {
            REQUIRE(on.grads[i].size() == off.grads[i].size());
            for (std::size_t j = 0; j < on.grads[i].size(); ++j)
                outside += std::abs(on.grads[i][j] - off.grads[i][j]) <= 1e-7 + 1e-5 * std::abs(off.grads[i][j]) ? 0
                                                                                                                 : 1;
        }
        CHECK(outside == 0);
    }
    std::fflush(stdout);
}
