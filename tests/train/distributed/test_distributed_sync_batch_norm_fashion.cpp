// The Fashion-MNIST example's model (examples/common/fashion_model.hpp), converted with
// convert_sync_batch_norm and trained through distributed_data_parallel, against the same
// model unconverted in one process on the whole batch: one step's averaged gradients and the
// running statistics after it must be the whole batch's. This is the point of the local
// scale/offset gradients: distributed_data_parallel averages them like every other parameter.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "examples/common/fashion_model.hpp"
#include "sync_bn_test_helpers.hpp"
#include "xgrad/distributed/data_parallel.hpp"
#include "xgrad/distributed/sync_batch_norm.hpp"

using namespace sync_bn_test;

namespace
{
    /// max |got - want| over max |want|: the error relative to the tensor's scale (gradients are
    /// small numbers, for which max(1, |want|) would measure absolute differences).
    double worst_scaled(const tensor& got, const tensor& want)
    {
        const std::vector<double> g = to_vector(got), w = to_vector(want);
        double scale = 0, worst = 0;
        for (double v : w)
            scale = std::max(scale, std::abs(v));
        for (std::size_t i = 0; i < g.size() && i < w.size(); ++i)
            worst = std::max(worst, std::abs(g[i] - w[i]));
        return scale > 0 ? worst / scale : worst;
    }
}

TEST_CASE("the Fashion-MNIST model with sync batch norm under distributed_data_parallel takes the whole batch's step")
{
    const int rank = dist::rank(), K = dist::world_size();
    constexpr std::int64_t N = 8; // images in the global batch; K divides it for K = 1, 2, 4, 8
    generator gen_ref(5), gen(5);
    const auto reference = examples::make_fashion_model("NCHW", gen_ref);
    const auto model = examples::make_fashion_model("NCHW", gen);
    CHECK(nn::convert_sync_batch_norm(model) == model);
    dist::distributed_data_parallel ddp(model);

    // Every rank builds the global batch; the loss of the global batch is Σ out·w / N, and rank
    // r's loss is its part of that sum times K / N, so that the mean over the ranks that
    // distributed_data_parallel forms is the global loss's gradient (its contract for shards).
    const tensor x = seeded({N, 1, 28, 28}, 200, dtype::float32);
    const tensor w = seeded({N, 10}, 201, dtype::float32);
    const auto rows = rows_of(N, N / 2, rank, K);

    (sum(reference->forward(x) * w) / static_cast<double>(N)).backward();
    const tensor out = ddp.forward(shard(x, rows));
    (sum(out * shard(w, rows)) * (static_cast<double>(K) / static_cast<double>(N))).backward();
    ddp.synchronize();

    // float32 on both sides, summed in different orders (per rank, then across ranks), over
    // sums of up to 8·28·28 = 6272 terms (a batch norm's channel): at worst n·2^-24 ≈ 4e-4 of
    // the terms' size, typically sqrt(n)·2^-24 ≈ 5e-6; 1e-4 of each tensor's largest entry.
    // A batch norm's scale or offset gradient summed instead of averaged (K times the right
    // value) or the local statistics in place of the global ones are off by far more.
    const double tol = 1e-4;
    // The convolutions' biases feed batch norms, which remove any per-channel constant: their
    // exact gradient is 0 and both sides hold rounding noise there, measured against the
    // model's largest gradient entry instead.
    double largest = 0;
    for (const auto& [n, p] : reference->named_parameters())
        for (double v : to_vector(p.grad()))
            largest = std::max(largest, std::abs(v));
    for (const auto& entry : reference->named_parameters())
    {
        const auto& n = entry.first; // (not a binding: doctest's INFO captures it)
        const auto& p = entry.second;
        INFO(n << ", rank " << rank << " of " << K);
        const tensor got = model->parameter(n).grad();
        CHECK(got.defined());
        if (!got.defined())
            continue;
        if (n == "conv1.bias" || n == "conv2.bias")
        {
            const tensor zero = zeros(got.shape(), got.dtype());
            CHECK_MESSAGE(worst_scaled(got, zero) <= tol * largest, n << "'s gradient is not ~0");
        }
        else
            CHECK_MESSAGE(worst_scaled(got, p.grad()) <= tol, n << "'s gradient: " << worst_scaled(got, p.grad()));
    }
    // Running statistics: one update from the global batch (float32 statistics: 1e-5).
    for (const auto& entry : reference->named_buffers())
    {
        const auto& n = entry.first;
        const auto& b = entry.second;
        if (b.dtype() != dtype::int64)
        {
            INFO(n << ", rank " << rank << " of " << K);
            CHECK(worst_relative(to_vector(model->buffer(n)), to_vector(b)) <= 1e-5);
        }
    }
}
