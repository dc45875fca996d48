// Data-parallel training equals one process on the whole batch: K ranks with a per-rank batch B,
// distributed_data_parallel and sync_batch_norm2d, against one process (the group of itself)
// with batch K·B, the same seed and data, several SGD steps, in float64.
//
// The math of the two runs is the same: the sync batch norm normalises with the statistics of
// the global batch, each rank's loss is its share of the global mean (sum of its example losses
// times K / N), and the mean over ranks of the gradients is the gradient of that mean. Only
// the order of summation differs (per-rank partial sums, Chan's merge of the statistics, the
// all-reduce), so the parameters, running statistics and losses agree to a few ulps of float64
// per step; 1e-10 relative leaves a margin of about 10^5 ulps over the steps taken.
//
// The steps include a last batch that is split unevenly (6 = 4 + 2) and one where one rank's
// shard is empty (3 = 3 + 0). With the plain batch norm each rank normalises with its own
// statistics, and the test shows that the runs then differ (by far more than the tolerance).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tests/train/distributed/mpi_job.hpp"
#include "xgrad/distributed/comm.hpp"
#include "xgrad/distributed/data_parallel.hpp"
#include "xgrad/distributed/sync_batch_norm.hpp"
#include "xgrad/layers.hpp"
#include "xgrad/ops/loss.hpp"
#include "xgrad/ops/shape.hpp"
#include "xgrad/optim/optimizer.hpp"
#include "xgrad/xgrad.hpp"

namespace dist = xgrad::distributed;
namespace nn = xgrad::nn;
using xgrad::dtype;
using xgrad::tensor;

namespace
{

    constexpr std::int64_t per_rank_batch = 4;
    constexpr std::int64_t classes = 3;
    constexpr std::int64_t side = 6;

    std::shared_ptr<nn::sequential> make_model(const std::string& format)
    {
        xgrad::generator gen(11); // the same on every rank and in the reference
        auto model = std::make_shared<nn::sequential>();
        nn::conv2d_options c(1, 3, 3);
        c.padding = {1, 1};
        c.data_format = format;
        c.dtype = dtype::float64;
        model->add("conv", std::make_shared<nn::conv2d>(c, gen));
        nn::batch_norm_options b(3);
        b.data_format = format;
        b.dtype = dtype::float64;
        model->add("bn", std::make_shared<nn::batch_norm2d>(b));
        model->add("relu", std::make_shared<nn::relu>());
        model->add("flatten", std::make_shared<nn::flatten>());
        nn::linear_options l(3 * side * side, classes);
        l.dtype = dtype::float64;
        model->add("fc", std::make_shared<nn::linear>(l, gen));
        return model;
    }

    struct dataset
    {
        tensor images; // [n, 1, side, side] or [n, side, side, 1]
        tensor labels; // [n] int64
    };

    dataset make_data(std::int64_t n, const std::string& format)
    {
        xgrad::generator gen(5);
        tensor x = xgrad::randn({n, 1, side, side}, gen, dtype::float64);
        if (format == "NHWC")
            x = x.permute({0, 2, 3, 1}).contiguous();
        std::vector<std::int64_t> y(static_cast<std::size_t>(n));
        for (std::int64_t i = 0; i < n; ++i)
            y[static_cast<std::size_t>(i)] = (i * 7 + 2) % classes;
        return {x, xgrad::from_host(y.data(), {n}, dtype::int64)};
    }

    /// The global batches of the steps: sizes K·B, K·B, an uneven remainder and, with K = 2,
    /// one that leaves rank 1 without examples.
    std::vector<std::int64_t> step_sizes(std::int64_t k)
    {
        const std::int64_t full = k * per_rank_batch;
        return {full, full, full - 2, 3, full};
    }

    struct run_result
    {
        nn::module::state_dict_type state;
        std::vector<double> losses; // the global mean loss of each step
    };

    /// Trains on the global batches of step_sizes(k): this rank's rows [rank·B, (rank+1)·B) of
    /// each (clipped), through distributed_data_parallel over `group`.
    run_result train(const dataset& data, std::int64_t k, const dist::process_group& group, bool sync_bn,
                     const std::string& format)
    {
        std::shared_ptr<nn::module> model = make_model(format);
        if (sync_bn)
            model = nn::convert_sync_batch_norm(model, group);
        dist::data_parallel_options o;
        o.bucket_cap_bytes = 256; // several buckets
        dist::distributed_data_parallel ddp(model, group, o);
        xgrad::optim::sgd_options so;
        so.lr = 0.1;
        so.momentum = 0.9;
        xgrad::optim::sgd opt(*model, so);
        const std::int64_t rank = group.rank();
        const std::int64_t b = per_rank_batch * k / group.size(); // the per-rank batch of this run
        run_result out;
        std::int64_t start = 0;
        for (std::int64_t n : step_sizes(k))
        {
            const std::int64_t lo = std::min(n, rank * b), hi = std::min(n, (rank + 1) * b);
            const tensor x = xgrad::slice(data.images, 0, start + lo, start + hi);
            const tensor y = xgrad::slice(data.labels, 0, start + lo, start + hi);
            start += n;
            const tensor local_sum = xgrad::cross_entropy(ddp.forward(x), y, xgrad::reduction::sum);
            const tensor loss = xgrad::mul(local_sum,
                                           xgrad::full({}, static_cast<double>(group.size()) / n, dtype::float64));
            model->zero_grad();
            loss.backward();
            ddp.synchronize();
            opt.step();
            tensor total = local_sum.detach().contiguous();
            total = xgrad::mul(total, xgrad::full({}, 1.0, dtype::float64)); // a copy of its own to reduce in place
            dist::all_reduce(total, dist::reduce_op::sum, group);
            out.losses.push_back(total.item() / static_cast<double>(n));
        }
        out.state = model->state_dict();
        return out;
    }

    /// max |a - b| / max |b| over every entry of every floating tensor (both dicts hold the same
    /// names); the int64 counters are compared on their own.
    double relative_difference(const nn::module::state_dict_type& a, const nn::module::state_dict_type& b)
    {
        double worst = 0;
        for (const auto& [name, tb] : b)
        {
            const tensor ta = a.at(name);
            REQUIRE(ta.shape() == tb.shape());
            if (tb.dtype() == dtype::int64)
                continue;
            std::vector<double> va(static_cast<std::size_t>(ta.numel())), vb(va.size());
            xgrad::to_host(ta, va.data(), dtype::float64);
            xgrad::to_host(tb, vb.data(), dtype::float64);
            double scale = 1e-300, diff = 0;
            for (std::size_t i = 0; i < va.size(); ++i)
            {
                scale = std::max(scale, std::abs(vb[i]));
                diff = std::max(diff, std::abs(va[i] - vb[i]));
            }
            worst = std::max(worst, diff / scale);
        }
        return worst;
    }
}

TEST_CASE("K ranks at batch B with sync batch norm train exactly as one process at batch K*B")
{
    const std::int64_t k = dist::world_size();
    for (const std::string format : {"NCHW", "NHWC"})
    {
        CAPTURE(format);
        std::int64_t total = 0;
        for (auto n : step_sizes(k))
            total += n;
        const dataset data = make_data(total, format);
        const run_result reference = train(data, k, dist::process_group::self(), false, format);
        const run_result parallel = train(data, k, dist::process_group::world(), true, format);

        const double difference = relative_difference(parallel.state, reference.state);
        MESSAGE(format << ": " << k << " ranks against one process, largest relative difference " << difference);
        CHECK(difference < 1e-10);
        REQUIRE(parallel.losses.size() == reference.losses.size());
        for (std::size_t s = 0; s < reference.losses.size(); ++s)
            CHECK(parallel.losses[s] == doctest::Approx(reference.losses[s]).epsilon(1e-10));
        // The running statistics moved (a vacuous comparison of untouched buffers would pass).
        CHECK(reference.state.at("bn.num_batches_tracked").item() == static_cast<double>(step_sizes(k).size()));
        CHECK(parallel.state.at("bn.num_batches_tracked").item() == static_cast<double>(step_sizes(k).size()));
        CHECK(relative_difference(reference.state, make_model(format)->state_dict()) > 1e-3);

        if (k > 1)
        {
            // Unsynchronised batch norm: each rank's own statistics, so a different function.
            const run_result plain = train(data, k, dist::process_group::world(), false, format);
            const double unsynchronised = relative_difference(plain.state, reference.state);
            MESSAGE(format << ": with the plain batch norm, relative difference " << unsynchronised);
            CHECK(unsynchronised > 1e-6);
        }
    }
}
