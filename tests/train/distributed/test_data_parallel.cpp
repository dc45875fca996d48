// distributed_data_parallel against local computations, on every rank of the job (2 under
// mpiexec; 1 when run alone). Every rank builds its model from a seed of its own and draws its
// own batch from a seed of its own, so each rank can rebuild every rank's model and batch and
// compute what the wrapper must produce: rank 0's values after construction, and the mean over
// ranks of the gradients each rank's batch gives with those values.
//
// Tolerance: the models are float64. The wrapper's mean is MPI's sum of the K ranks' gradients
// divided by K; the reference sums the same K values in rank order. Both are sums of K terms, so
// they differ by at most about K rounding errors of the sum's magnitude: (K - 1) 2^-53 |sum|. A
// relative 1e-12 (plus 1e-12 absolute for entries near zero) covers any K up to thousands, and an
// actual mistake (a missing rank, a sum instead of the mean, the wrong slice) is off by O(1).
// With two ranks the results are exact (a + b is commutative in floating point).
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "tests/support/check_error.hpp"
#include "tests/train/distributed/mpi_job.hpp"
#include "xgrad/cuda.hpp"
#include "xgrad/distributed/comm.hpp"
#include "xgrad/distributed/data_parallel.hpp"
#include "xgrad/layers.hpp"
#include "xgrad/optim/optimizer.hpp"
#include "xgrad/xgrad.hpp"

namespace dist = xgrad::distributed;
namespace nn = xgrad::nn;
using xgrad::dtype;
using xgrad::tensor;

namespace
{

    std::uint64_t model_seed(int r) { return 100 + 17 * static_cast<std::uint64_t>(r); }

    /// conv -> batch norm -> relu -> linear -> relu -> linear, plus a parameter "side" added to
    /// the output only when use_side (so that a rank can leave it without gradient) and, when
    /// asked, a parameter "extra" that nothing uses.
    class small_net final : public nn::module
    {
    public:
        explicit small_net(std::uint64_t seed, bool with_extra = false, std::int64_t hidden = 5)
        {
            xgrad::generator gen(seed);
            m_side = register_parameter("side", xgrad::randn({3}, gen, dtype::float64));
            if (with_extra)
                register_parameter("extra", xgrad::randn({2}, gen, dtype::float64));
            nn::conv2d_options co(2, 3, 3);
            co.padding = {1, 1};
            co.dtype = dtype::float64;
            m_conv = register_module("conv", std::make_shared<nn::conv2d>(co, gen));
            nn::batch_norm_options bo(3);
            bo.dtype = dtype::float64;
            m_bn = register_module("bn", std::make_shared<nn::batch_norm2d>(bo));
            nn::linear_options fo(3 * 4 * 4, hidden);
            fo.dtype = dtype::float64;
            m_fc = register_module("fc", std::make_shared<nn::linear>(fo, gen));
            nn::linear_options ho(hidden, 3);
            ho.dtype = dtype::float64;
            m_head = register_module("head", std::make_shared<nn::linear>(ho, gen));
        }

        tensor forward(const tensor& x) override
        {
            tensor h = xgrad::relu((*m_bn)((*m_conv)(x)));
            h = h.reshape({h.size(0), -1});
            tensor y = (*m_head)(xgrad::relu((*m_fc)(h)));
            return use_side ? xgrad::add(y, parameter("side")) : y;
        }

        bool use_side = true;

    private:
        tensor m_side;
        std::shared_ptr<nn::conv2d> m_conv;
        std::shared_ptr<nn::batch_norm2d> m_bn;
        std::shared_ptr<nn::linear> m_fc, m_head;
    };

    struct batch
    {
        tensor x, target;
    };

    /// Rank r's batch of step `step`.
    batch batch_of(int r, int step = 0)
    {
        xgrad::generator gen(1000 + 31 * static_cast<std::uint64_t>(r) + 7 * static_cast<std::uint64_t>(step));
        batch b;
        b.x = xgrad::randn({4, 2, 4, 4}, gen, dtype::float64);
        b.target = xgrad::randn({4, 3}, gen, dtype::float64);
        return b;
    }

    tensor loss_of(const tensor& y, const batch& b) { return xgrad::mean(xgrad::square(xgrad::sub(y, b.target))); }

    using grads_type = std::map<std::string, std::vector<double>>; // empty vector: no gradient

    grads_type grads_of(const nn::module& m)
    {
        grads_type out;
        for (const auto& [n, p] : m.named_parameters())
            out[n] = p.grad().defined() ? xgrad::to_vector(p.grad()) : std::vector<double>{};
        return out;
    }

    /// What synchronize() must give: the mean over the ranks of the gradient each rank's batch
    /// gives with rank 0's values. `uses_side(r)`: whether rank r's forward uses "side".
    template <class UsesSide>
    grads_type expected_mean(int k, UsesSide uses_side, bool with_extra = false)
    {
        grads_type sum;
        std::map<std::string, bool> any;
        for (int r = 0; r < k; ++r)
        {
            small_net ref(model_seed(0), with_extra);
            ref.use_side = uses_side(r);
            loss_of(ref(batch_of(r).x), batch_of(r)).backward();
            for (const auto& [n, p] : ref.named_parameters())
            {
                auto& s = sum[n];
                s.resize(static_cast<std::size_t>(p.numel()), 0.0);
                if (!p.grad().defined())
                    continue; // contributes zeros
                any[n] = true;
                const auto g = xgrad::to_vector(p.grad());
                for (std::size_t i = 0; i < g.size(); ++i)
                    s[i] += g[i];
            }
        }
        for (auto& [n, s] : sum)
        {
            if (!any[n])
                s.clear(); // no rank's backward reached it
            for (double& v : s)
                v /= k;
        }
        return sum;
    }

    void check_close(const grads_type& actual, const grads_type& expected)
    {
        REQUIRE(actual.size() == expected.size());
        for (const auto& entry : expected)
        {
            const auto& n = entry.first;
            const auto& e = entry.second;
            const auto& a = actual.at(n);
            INFO("parameter " << n);
            REQUIRE(a.size() == e.size());
            for (std::size_t i = 0; i < e.size(); ++i)
                CHECK(std::abs(a[i] - e[i]) <= 1e-12 + 1e-12 * std::abs(e[i]));
        }
    }

    bool always(int) { return true; }

    /// One training step's forward and backward through the wrapper on this rank's batch.
    void forward_backward(dist::distributed_data_parallel& ddp, int step = 0)
    {
        const batch b = batch_of(dist::rank(), step);
        tensor loss = loss_of(ddp(b.x), b);
        ddp.module().zero_grad();
        loss.backward();
    }

    std::shared_ptr<small_net> rank_model(bool with_extra = false, std::int64_t hidden = 5)
    {
        return std::make_shared<small_net>(model_seed(dist::rank()), with_extra, hidden);
    }

    std::int64_t trained_count(const nn::module& m)
    {
        std::int64_t n = 0;
        for (const auto& p : m.parameters())
            n += p.requires_grad() ? 1 : 0;
        return n;
    }
}

TEST_CASE("construction gives every rank rank 0's parameters and buffers")
{
    const int r = dist::rank();
    auto model = rank_model();
    auto bn = std::dynamic_pointer_cast<nn::batch_norm2d>(model->named_children()[1].second);
    REQUIRE(bn);
    // A rank-dependent buffer, so that the broadcast of buffers is seen too.
    model->set_buffer("bn.running_mean", xgrad::full({3}, 1.0 + r, dtype::float64));
    dist::distributed_data_parallel ddp(model);

    small_net rank0(model_seed(0));
    for (const auto& entry : rank0.named_parameters())
    {
        const auto& n = entry.first;
        const auto& p = entry.second;
        INFO("parameter " << n);
        CHECK(xgrad::to_vector(model->parameter(n)) == xgrad::to_vector(p));
        CHECK(model->parameter(n).requires_grad());
    }
    CHECK(xgrad::to_vector(model->buffer("bn.running_mean")) == std::vector<double>{1.0, 1.0, 1.0});
    if (dist::world_size() > 1 && r > 0)
        CHECK(xgrad::to_vector(model->parameter("fc.weight")) !=
              xgrad::to_vector(small_net(model_seed(r)).parameter("fc.weight")));
}

TEST_CASE("after backward and synchronize every gradient is the mean over ranks of the local gradients")
{
    const int k = dist::world_size();
    auto model = rank_model();
    dist::distributed_data_parallel ddp(model);
    forward_backward(ddp);
    ddp.synchronize();
    check_close(grads_of(*model), expected_mean(k, always));

    // Every parameter's gradient, plus one flag per parameter, in float64.
    std::int64_t elements = 0;
    for (const auto& p : model->parameters())
        elements += p.numel() + 1;
    const auto& s = ddp.last_stats();
    CHECK(s.bytes == elements * 8);
    CHECK(s.buckets == 1); // the default cap (1 MiB) holds this small model
    CHECK(s.communication_s >= 0.0);
    CHECK(s.wait_s >= 0.0);
}

TEST_CASE("one bucket per parameter and one bucket for all give the same gradients")
{
    const int k = dist::world_size();
    const grads_type expected = expected_mean(k, always);
    for (std::int64_t cap : {std::int64_t{1}, std::int64_t{200}, std::int64_t{1} << 30})
    {
        INFO("bucket_cap_bytes " << cap);
        auto model = rank_model();
        dist::data_parallel_options o;
        o.bucket_cap_bytes = cap;
        dist::distributed_data_parallel ddp(model, dist::process_group::world(), o);
        forward_backward(ddp);
        ddp.synchronize();
        check_close(grads_of(*model), expected);
        if (cap == 1)
            CHECK(ddp.last_stats().buckets == trained_count(*model));
        if (cap == (std::int64_t{1} << 30))
            CHECK(ddp.last_stats().buckets == 1);
        if (cap == 200) // fc.weight (5 x 48 float64) is larger than the cap: it is a bucket alone
            CHECK(ddp.last_stats().buckets > 1);
    }
}

TEST_CASE("overlap on and off give the same gradients; with overlap every bucket starts during backward")
{
    const int k = dist::world_size();
    const grads_type expected = expected_mean(k, always);
    for (bool overlap : {true, false})
    {
        INFO("overlap " << overlap);
        auto model = rank_model();
        dist::data_parallel_options o;
        o.bucket_cap_bytes = 1; // a bucket per parameter
        o.overlap = overlap;
        dist::distributed_data_parallel ddp(model, dist::process_group::world(), o);
        forward_backward(ddp);
        ddp.synchronize();
        check_close(grads_of(*model), expected);
        const auto& s = ddp.last_stats();
        CHECK(s.buckets == trained_count(*model));
        // Every parameter gets its gradient in this backward, so with overlap each bucket is
        // complete, and started, before backward returns.
        CHECK(s.buckets_overlapped == (overlap ? s.buckets : 0));
    }
}

TEST_CASE("a parameter without gradient on a rank contributes zeros; one without on every rank keeps none")
{
    const int k = dist::world_size();
    auto model = rank_model(true);
    model->use_side = dist::rank() == 0; // the other ranks' backward never reaches "side"
    dist::data_parallel_options o;
    o.bucket_cap_bytes = 1;
    dist::distributed_data_parallel ddp(model, dist::process_group::world(), o);
    forward_backward(ddp);
    ddp.synchronize();
    grads_type expected = expected_mean(
        k, [](int r) { return r == 0; }, true);
    CHECK(expected["extra"].empty()); // nothing uses it
    check_close(grads_of(*model), expected);
    CHECK_FALSE(model->parameter("extra").grad().defined());
}

TEST_CASE("models that differ between ranks are refused with the same clear error on every rank")
{
    const int k = dist::world_size();
    const bool last = dist::rank() == k - 1 && k > 1;
    const std::string last_rank = "rank " + std::to_string(k - 1) + " has ";
    // Named strings: CHECK_ERROR's parts are read after the expression that made them ends.
    const std::string extra_entry = last_rank + "parameter 'extra' [2] float64";
    const std::string shape_entry = last_rank + "parameter 'fc.weight' [6, 48] float64";
    const std::string cap_entry = last_rank + "options bucket_cap_bytes=100";
    SUBCASE("a rank with an extra parameter")
    {
        auto model = rank_model(last);
        if (k > 1)
            CHECK_ERROR(dist::distributed_data_parallel(model), xgrad::invalid_argument, "models differ at entry 2",
                        "rank 0 has parameter 'conv.weight' [3, 2, 3, 3] float64", extra_entry.c_str());
        else
            CHECK_NOTHROW(dist::distributed_data_parallel{model});
    }
    SUBCASE("a rank with a different shape")
    {
        auto model = rank_model(false, last ? 6 : 5);
        if (k > 1)
            CHECK_ERROR(dist::distributed_data_parallel(model), xgrad::invalid_argument,
                        "rank 0 has parameter 'fc.weight' [5, 48] float64", shape_entry.c_str());
        else
            CHECK_NOTHROW(dist::distributed_data_parallel{model});
    }
    SUBCASE("a rank with another bucket cap")
    {
        dist::data_parallel_options o;
        o.bucket_cap_bytes = last ? 100 : 200;
        if (k > 1)
            CHECK_ERROR(dist::distributed_data_parallel(rank_model(), dist::process_group::world(), o),
                        xgrad::invalid_argument, "bucket_cap_bytes=200", cap_entry.c_str());
    }
    // The wrapper still works after a refused construction: every rank left the check together.
    auto model = rank_model();
    dist::distributed_data_parallel ddp(model);
    forward_backward(ddp);
    ddp.synchronize();
    check_close(grads_of(*model), expected_mean(k, always));
}

TEST_CASE("synchronize is idempotent and a no-op before any backward")
{
    auto model = rank_model();
    dist::distributed_data_parallel ddp(model);
    ddp.synchronize(); // nothing yet
    CHECK_FALSE(model->parameter("fc.weight").grad().defined());
    CHECK(ddp.last_stats().buckets == 0);
    forward_backward(ddp);
    ddp.synchronize();
    const tensor g = model->parameter("fc.weight").grad();
    const auto stats = ddp.last_stats();
    ddp.synchronize();
    CHECK(model->parameter("fc.weight").grad().is_same(g));
    CHECK(ddp.last_stats().bytes == stats.bytes);
    CHECK(ddp.last_stats().communication_s == stats.communication_s);
}

TEST_CASE("training steps: the optimizer replaces the parameters and the next forward hooks the new ones")
{
    const int k = dist::world_size();
    auto model = rank_model();
    dist::distributed_data_parallel ddp(model);
    xgrad::optim::sgd_options so;
    so.lr = 0.1;
    so.momentum = 0.9;
    xgrad::optim::sgd opt(*model, so);

    // The same steps in one process: each step's gradient is the mean of the ranks' gradients.
    small_net ref(model_seed(0));
    xgrad::optim::sgd ref_opt(ref, so);
    for (int step = 0; step < 3; ++step)
    {
        forward_backward(ddp, step);
        ddp.synchronize();
        opt.step();

        grads_type mean;
        for (int r = 0; r < k; ++r)
        {
            ref.zero_grad();
            loss_of(ref(batch_of(r, step).x), batch_of(r, step)).backward();
            for (const auto& [n, g] : grads_of(ref))
            {
                auto& m = mean[n];
                m.resize(g.size(), 0.0);
                for (std::size_t i = 0; i < g.size(); ++i)
                    m[i] += g[i] / k;
            }
        }
        for (auto [n, p] : ref.named_parameters())
            p.set_grad(xgrad::from_host(mean[n].data(), p.shape(), dtype::float64));
        ref_opt.step();
    }
    for (const auto& entry : ref.named_parameters())
    {
        const auto& n = entry.first;
        const auto& p = entry.second;
        INFO("parameter " << n);
        const auto a = xgrad::to_vector(model->parameter(n));
        const auto e = xgrad::to_vector(p);
        REQUIRE(a.size() == e.size());
        for (std::size_t i = 0; i < e.size(); ++i)
            CHECK(std::abs(a[i] - e[i]) <= 1e-12 + 1e-12 * std::abs(e[i]));
    }
}

TEST_CASE("broadcast_buffers: each forward starts from rank 0's running statistics")
{
    auto model = rank_model();
    dist::distributed_data_parallel ddp(model);
    const int r = dist::rank();
    (void)ddp(batch_of(r, 0).x);
    (void)ddp(batch_of(r, 1).x);
    // Rank 0's statistics after its first batch, then this rank's second batch.
    small_net ref(model_seed(0));
    (void)ref(batch_of(0, 0).x);
    (void)ref(batch_of(r, 1).x);
    CHECK(xgrad::to_vector(model->buffer("bn.running_mean")) == xgrad::to_vector(ref.buffer("bn.running_mean")));
    CHECK(xgrad::to_vector(model->buffer("bn.running_var")) == xgrad::to_vector(ref.buffer("bn.running_var")));
    ddp.synchronize(); // the step armed by forward: nothing reached a parameter, nothing changes
    CHECK_FALSE(model->parameter("fc.weight").grad().defined());
}

TEST_CASE("without overlap, several backward passes accumulate before one synchronize")
{
    const int k = dist::world_size();
    auto model = rank_model();
    dist::data_parallel_options o;
    o.overlap = false;
    dist::distributed_data_parallel ddp(model, dist::process_group::world(), o);
    model->zero_grad();
    const batch b = batch_of(dist::rank());
    loss_of(ddp(b.x), b).backward();
    loss_of(ddp(b.x), b).backward();
    ddp.synchronize();
    grads_type expected = expected_mean(k, always);
    for (auto& [n, g] : expected)
        for (double& v : g)
            v *= 2;
    check_close(grads_of(*model), expected);
}

TEST_CASE("misuse: a second backward after a bucket started, parameters replaced before synchronize")
{
    auto model = rank_model();
    dist::distributed_data_parallel ddp(model); // overlap: the one bucket starts in backward
    const batch b = batch_of(dist::rank());
    model->zero_grad();
    loss_of(ddp(b.x), b).backward();
    CHECK(ddp.last_stats().buckets == 0); // no synchronize yet
    CHECK_ERROR(loss_of(ddp(b.x), b).backward(), std::logic_error, "received a second gradient", "overlap");
    ddp.synchronize(); // completes the step that did start

    forward_backward(ddp);
    {
        xgrad::no_grad guard;
        model->set_parameter("head.bias", xgrad::sub(model->parameter("head.bias"), model->parameter("head.bias")));
    }
    CHECK_ERROR(ddp.synchronize(), std::logic_error, "'head.bias'", "before the optimizer step");
    // The next step works.
    forward_backward(ddp);
    ddp.synchronize();
    CHECK(model->parameter("head.bias").grad().defined());
}

TEST_CASE("argument errors")
{
    CHECK_ERROR(dist::distributed_data_parallel(nullptr), xgrad::invalid_argument, "the model is null");
    dist::data_parallel_options o;
    o.bucket_cap_bytes = 0;
    CHECK_ERROR(dist::distributed_data_parallel(rank_model(), dist::process_group::world(), o), xgrad::invalid_argument,
                "bucket_cap_bytes is 0", "at least 1");
}

TEST_CASE("a group of one leaves every gradient as backward computed it")
{
    auto model = rank_model();
    auto plain = rank_model(); // the same seed: the same values, no wrapper
    dist::distributed_data_parallel ddp(model, dist::process_group::self());
    forward_backward(ddp);
    const batch b = batch_of(dist::rank());
    loss_of((*plain)(b.x), b).backward();
    ddp.synchronize();
    CHECK(grads_of(*model) == grads_of(*plain));
    CHECK(ddp.last_stats().buckets == 1);
}

namespace
{
    /// A float16 and a float64 parameter, whose gradients are known in closed form.
    class mixed_net final : public nn::module
    {
    public:
        mixed_net()
        {
            register_parameter("half", xgrad::full({3}, 1.0, dtype::float16));
            register_parameter("wide", xgrad::full({2}, 2.0, dtype::float64));
        }
        /// c (sum(half) + sum(wide^2) / 4) for a float64 scalar c: the gradient is c for every
        /// element of half, and c wide / 2 = c for every element of wide.
        tensor forward(const tensor& c) override
        {
            const tensor h = xgrad::sum(parameter("half").to(dtype::float64));
            const tensor w = xgrad::sum(xgrad::square(parameter("wide")));
            return xgrad::mul(c, xgrad::add(h, xgrad::mul(w, xgrad::full({}, 0.25, dtype::float64))));
        }
    };
}

TEST_CASE("parameters of two dtypes: a bucket each; float16 gradients are averaged in float32 and rounded back")
{
    const int k = dist::world_size();
    auto model = std::make_shared<mixed_net>();
    dist::data_parallel_options o;
    o.bucket_cap_bytes = 1 << 20; // room for both: only the dtypes separate them
    dist::distributed_data_parallel ddp(model, dist::process_group::world(), o);
    // Rank r's c is r + 1, so the mean over ranks is (k + 1) / 2: 1.5 for two ranks, exact in
    // float16 (so are the halves of any k up to 2048).
    ddp(xgrad::full({}, dist::rank() + 1.0, dtype::float64)).backward();
    ddp.synchronize();
    const double mean = (k + 1) / 2.0;
    const tensor gh = model->parameter("half").grad();
    const tensor gw = model->parameter("wide").grad();
    CHECK(gh.dtype() == dtype::float16);
    CHECK(xgrad::to_vector(gh) == std::vector<double>(3, mean));
    CHECK(gw.dtype() == dtype::float64);
    CHECK(xgrad::to_vector(gw) == std::vector<double>(2, mean));
    CHECK(ddp.last_stats().buckets == 2);
    CHECK(ddp.last_stats().bytes == (3 + 1) * 4 + (2 + 1) * 8); // float16 travels as float32
}

TEST_CASE("a model on a CUDA device: gradients staged through the host land on the device")
{
    // Every rank runs the same build, so every rank takes the same branch.
    if (!xgrad::cuda_is_built() || xgrad::cuda_device_count() < 1)
        return;
    const xgrad::device cuda{xgrad::device_type::cuda, 0};
    const int k = dist::world_size();
    auto model = rank_model();
    model->to(cuda);
    dist::data_parallel_options o;
    o.bucket_cap_bytes = 1;
    dist::distributed_data_parallel ddp(model, dist::process_group::world(), o);
    CHECK(model->parameter("fc.weight").device() == cuda);
    const batch b = batch_of(dist::rank());
    tensor loss = xgrad::mean(xgrad::square(xgrad::sub(ddp(b.x.to(cuda)), b.target.to(cuda))));
    model->zero_grad();
    loss.backward();
    ddp.synchronize();
    // The device's kernels may sum in another order than the CPU reference's: float64 sums of
    // at most a few hundred terms, so differences stay near 1e-14 relative; 1e-10 leaves room
    // and still catches any real error (O(1)).
    const grads_type expected = expected_mean(k, always);
    for (const auto& entry : model->named_parameters())
    {
        const auto& n = entry.first;
        const auto& p = entry.second;
        INFO("parameter " << n);
        CHECK(p.grad().device() == cuda);
        const auto a = xgrad::to_vector(p.grad());
        const auto& e = expected.at(n);
        REQUIRE(a.size() == e.size());
        for (std::size_t i = 0; i < e.size(); ++i)
            CHECK(std::abs(a[i] - e[i]) <= 1e-10 + 1e-10 * std::abs(e[i]));
    }
}
