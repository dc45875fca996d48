// nn::sync_batch_norm2d against nn::batch_norm2d on the whole batch (every rank builds the
// global batch from a seed and takes its rows): outputs, running statistics over several steps
// (momentum and cumulative average), eval mode, the options without parameters or running
// statistics, the group of one; and convert_sync_batch_norm on a model with nested children
// (names, values and outputs kept), with module::replace_child, its checks and describe().
#include <doctest/doctest.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "sync_bn_test_helpers.hpp"
#include "tests/support/check_error.hpp"
#include "xgrad/distributed/sync_batch_norm.hpp"
#include "xgrad/layers.hpp"

using namespace sync_bn_test;

namespace
{
    constexpr std::int64_t N = 8, C = 4, H = 2, W = 3;

    // Tolerances relative to max(1, |want|), argued in test_distributed_sync_batch_norm.cpp:
    // float64 1e-12, float32 1e-5 for x-shaped outputs and the statistics. The running
    // statistics are affine in the batch statistics with coefficients <= R / (R - 1) ~ 1.02:
    // the same bounds.
    double tolerance(dtype dt) { return dt == dtype::float64 ? 1e-12 : 1e-5; }

    shape_type shape_for(const std::string& format)
    {
        return format == "NCHW" ? shape_type{N, C, H, W} : shape_type{N, H, W, C};
    }

    nn::batch_norm_options options_for(const std::string& format, dtype dt, std::optional<float> momentum)
    {
        nn::batch_norm_options o(C);
        o.data_format = format;
        o.dtype = dt;
        o.momentum = momentum;
        return o;
    }

    /// The same random scale and offset in both layers (an "optimizer step" before the test).
    void set_affine(nn::module& a, nn::module& b, dtype dt)
    {
        no_grad guard;
        const tensor scale = seeded({C}, 21, dt, 1.0, 0.5), offset = seeded({C}, 22, dt);
        for (nn::module* m : {&a, &b})
        {
            m->set_parameter("weight", scale.detach());
            m->set_parameter("bias", offset.detach());
        }
    }

    /// True when t has the same values on every rank.
    bool same_on_every_rank(const tensor& t)
    {
        const std::vector<tensor> all = dist::all_gather(t.contiguous());
        for (const tensor& other : all)
            if (to_vector(other) != to_vector(t))
                return false;
        return true;
    }
}

TEST_CASE("sync_batch_norm2d: outputs and running statistics are batch_norm2d's on the whole batch")
{
    const int rank = dist::rank(), K = dist::world_size();
    for (const std::string format : {"NCHW", "NHWC"})
        for (const dtype dt : {dtype::float64, dtype::float32})
            for (const std::optional<float> momentum : {std::optional<float>(0.1f), std::optional<float>()})
                for (const std::int64_t first : {std::int64_t{3}, std::int64_t{0}})
                {
                    INFO(format << " " << name(dt) << ", momentum " << (momentum ? *momentum : -1.0f) << ", rank "
                                << rank << " of " << K << ", first share " << first);
                    const double tol = tolerance(dt);
                    nn::batch_norm2d bn(options_for(format, dt, momentum));
                    nn::sync_batch_norm2d sbn(options_for(format, dt, momentum));
                    set_affine(bn, sbn, dt);
                    const auto rows = rows_of(N, first, rank, K);
                    for (std::uint64_t step = 0; step < 3; ++step)
                    {
                        INFO("step " << step);
                        const tensor x = seeded(shape_for(format), 30 + step, dt, 3.0, 2.0);
                        const tensor w = seeded(shape_for(format), 40 + step, dt);
                        const tensor y = bn(x);
                        const tensor ys = sbn(shard(x, rows));
                        check_close(ys, shard(y, rows), tol, "y");
                        for (const char* b : {"running_mean", "running_var"})
                        {
                            check_close(sbn.buffer(b), bn.buffer(b), tol, b);
                            CHECK_MESSAGE(same_on_every_rank(sbn.buffer(b)), b << " differs between the ranks");
                        }
                        CHECK(sbn.buffer("num_batches_tracked").item<std::int64_t>() ==
                              static_cast<std::int64_t>(step + 1));
                        // The parameters' gradients, summed over the ranks, are the whole batch's
                        // (per-channel sums: ten times the x-shaped bound, as in the op's test).
                        bn.zero_grad();
                        sbn.zero_grad();
                        sum(y * w).backward();
                        sum(ys * shard(w, rows)).backward();
                        check_close(summed(sbn.parameter("weight").grad()), bn.parameter("weight").grad(), 10 * tol,
                                    "scale's gradient summed");
                    }
                    bn.eval();
                    sbn.eval();
                    const tensor x = seeded(shape_for(format), 50, dt, 3.0, 2.0);
                    check_close(sbn(shard(x, rows)), shard(bn(x), rows), tol, "y in eval mode");
                }
}

TEST_CASE("sync_batch_norm2d: without parameters or running statistics")
{
    // Training normalises with the global batch's statistics; eval, without running statistics,
    // with this rank's own batch (batch_norm2d's eval on the shard, the very same call).
    const int rank = dist::rank(), K = dist::world_size();
    nn::batch_norm_options o = options_for("NCHW", dtype::float64, 0.1f);
    o.affine = false;
    o.track_running_stats = false;
    nn::batch_norm2d bn(o);
    nn::sync_batch_norm2d sbn(o);
    CHECK(sbn.named_parameters().empty());
    CHECK(sbn.named_buffers().empty());
    const auto rows = rows_of(N, 3, rank, K);
    const tensor x = seeded(shape_for("NCHW"), 60, dtype::float64, 3.0, 2.0);
    check_close(sbn(shard(x, rows)), shard(bn(x), rows), 1e-12, "y in training mode");
    bn.eval();
    sbn.eval();
    check_same(sbn(shard(x, rows)), bn(shard(x, rows)), "y in eval mode (local statistics)");
}

TEST_CASE("sync_batch_norm2d: in a group of one it is batch_norm2d")
{
    // The op's group-of-one forward is fused_batch_norm's own call and the running-statistics
    // update the same arithmetic: bit for bit.
    for (const std::optional<float> momentum : {std::optional<float>(0.1f), std::optional<float>()})
    {
        nn::batch_norm2d bn(options_for("NHWC", dtype::float32, momentum));
        nn::sync_batch_norm2d sbn(options_for("NHWC", dtype::float32, momentum), dist::process_group::self());
        set_affine(bn, sbn, dtype::float32);
        for (std::uint64_t step = 0; step < 3; ++step)
        {
            const tensor x = seeded(shape_for("NHWC"), 70 + step, dtype::float32, 3.0, 2.0);
            check_same(sbn(x), bn(x), "y");
            for (const char* b : {"running_mean", "running_var", "num_batches_tracked"})
                check_same(sbn.buffer(b), bn.buffer(b), b);
        }
    }
}

TEST_CASE("sync_batch_norm2d: names, describe, state dicts and errors are batch_norm2d's")
{
    const int K = dist::world_size();
    nn::batch_norm2d bn(options_for("", dtype::float32, 0.1f));
    nn::sync_batch_norm2d sbn(options_for("", dtype::float32, 0.1f));
    CHECK(sbn.type_name() == "sync_batch_norm2d");
    CHECK(sbn.describe() == "sync_batch_norm2d(4, eps=1e-05, momentum=0.1, NCHW, ranks=" + std::to_string(K) + ")");
    CHECK(sbn.options().data_format == "NCHW");
    CHECK(sbn.group().size() == K);
    const auto names = [](const nn::module::named_tensors_type& named) {
        std::vector<std::string> out;
        for (const auto& [n, t] : named)
            out.push_back(n);
        return out;
    };
    CHECK(names(sbn.named_parameters()) == names(bn.named_parameters()));
    CHECK(names(sbn.named_buffers()) == names(bn.named_buffers()));
    {
        no_grad guard;
        bn.set_buffer("running_mean", seeded({C}, 80, dtype::float32));
    }
    sbn.load_state_dict(bn.state_dict());
    check_same(sbn.buffer("running_mean"), bn.buffer("running_mean"), "running_mean loaded from batch_norm2d");
    bn.load_state_dict(sbn.state_dict());

    nn::batch_norm_options bad(0);
    CHECK_ERROR(nn::sync_batch_norm2d{bad}, xgrad::invalid_argument,
                "sync_batch_norm2d: num_features must be at least 1, got 0");
    bad = nn::batch_norm_options(C);
    bad.data_format = "NCDHW";
    CHECK_ERROR(nn::sync_batch_norm2d{bad}, xgrad::invalid_argument,
                "sync_batch_norm2d: data_format must be \"NCHW\" or \"NHWC\", got \"NCDHW\"");
    bad = nn::batch_norm_options(C);
    bad.momentum = 2.0f;
    CHECK_ERROR(nn::sync_batch_norm2d{bad}, xgrad::invalid_argument, "sync_batch_norm2d: momentum must be in [0, 1]");
    // Input errors are raised before any communication (every rank passes the same input here).
    CHECK_ERROR(sbn(ones({2, C + 1, 2, 2})), xgrad::invalid_argument,
                "sync_batch_norm2d: expected 4 channels in dimension 1");
    CHECK_ERROR(sbn(ones({2, C, 2, 2}, dtype::float64)), xgrad::invalid_argument,
                "sync_batch_norm2d: an input of dtype float64 needs float64 parameters");
    // One value per channel over the whole group (only rank 0 has a row).
    CHECK_ERROR(sbn(dist::rank() == 0 ? ones({1, C, 1, 1}) : zeros({0, C, 1, 1})), xgrad::invalid_argument,
                "expected more than 1 value per channel");
    sbn.eval();
    // batch_norm2d's eval: running statistics, so one value per channel is fine.
    CHECK(sbn(ones({1, C, 1, 1})).shape() == shape_type{1, C, 1, 1});
}

namespace
{
    /// A module with a child of its own (not a sequential), calling it through the registry,
    /// and counting the replacements it is told about.
    class holder final : public nn::module
    {
    public:
        explicit holder(std::shared_ptr<nn::module> inner) { register_module("inner", std::move(inner)); }
        tensor forward(const tensor& x) override { return named_children().front().second->forward(x); }
        std::string_view type_name() const noexcept override { return "holder"; }
        int replaced = 0;
        void attach(const std::string& n, std::shared_ptr<nn::module> m) { register_module(n, std::move(m)); }

    protected:
        void child_replaced(const std::string&, const std::shared_ptr<nn::module>&) override { ++replaced; }
    };

    /// A small model shaped like the Fashion-MNIST example's (conv, batch norm, ReLU, pooling,
    /// linear), with batch norms at several depths, in float64.
    std::shared_ptr<nn::sequential> make_model(const std::string& format, std::shared_ptr<holder>& held)
    {
        generator gen(90);
        const auto conv = [&](std::int64_t in, std::int64_t out) {
            nn::conv2d_options o(in, out, 3);
            o.padding = {1, 1};
            o.data_format = format;
            o.dtype = dtype::float64;
            return std::make_shared<nn::conv2d>(o, gen);
        };
        const auto bn = [&](std::int64_t c) {
            nn::batch_norm_options o(c);
            o.data_format = format;
            o.dtype = dtype::float64;
            return std::make_shared<nn::batch_norm2d>(o);
        };
        auto model = std::make_shared<nn::sequential>();
        model->add("conv1", conv(1, 3));
        model->add("bn1", bn(3));
        model->add("relu1", std::make_shared<nn::relu>());
        model->add("pool1", std::make_shared<nn::max_pool2d>(2, format));
        auto block = std::make_shared<nn::sequential>();
        block->add("conv", conv(3, 3));
        block->add("bn", bn(3));
        block->add("relu", std::make_shared<nn::relu>());
        model->add("block", block);
        held = std::make_shared<holder>(bn(3));
        model->add("held", held);
        model->add("flatten", std::make_shared<nn::flatten>());
        nn::linear_options lo(3 * 2 * 2, 2);
        lo.dtype = dtype::float64;
        model->add("fc", std::make_shared<nn::linear>(lo, gen));
        // Values a trained model would have: random scales, offsets and running statistics.
        no_grad guard;
        std::uint64_t seed = 100;
        for (const auto& [n, t] : model->named_parameters())
            if (n.find("bn") != std::string::npos || n.find("inner") != std::string::npos)
                model->set_parameter(n, seeded(t.shape(), seed++, dtype::float64, 1.0, 0.3));
        for (const auto& [n, t] : model->named_buffers())
            if (n.find("running") != std::string::npos)
                model->set_buffer(n, seeded(t.shape(), seed++, dtype::float64, 1.0, 0.2)); // variances > 0
        return model;
    }

    std::vector<std::string> names_of(const nn::module::named_tensors_type& named)
    {
        std::vector<std::string> out;
        for (const auto& [n, t] : named)
            out.push_back(n);
        return out;
    }
}

TEST_CASE("convert_sync_batch_norm: every batch_norm2d of a nested model, names and values kept")
{
    const int rank = dist::rank(), K = dist::world_size();
    for (const std::string format : {"NCHW", "NHWC"})
    {
        INFO(format);
        std::shared_ptr<holder> held_ref, held;
        const auto original = make_model(format, held_ref);
        const auto model = make_model(format, held);
        const nn::module::state_dict_type before = model->state_dict();
        const std::string described = model->describe();

        const std::shared_ptr<nn::module> converted = nn::convert_sync_batch_norm(model);
        CHECK(converted == model);
        CHECK(names_of(model->named_parameters()) == names_of(original->named_parameters()));
        CHECK(names_of(model->named_buffers()) == names_of(original->named_buffers()));
        for (const auto& [n, t] : model->state_dict())
            check_same(t, before.at(n), n);
        const auto children = model->named_children();
        CHECK(children[1].second->type_name() == "sync_batch_norm2d");
        CHECK(children[4].second->named_children()[1].second->type_name() == "sync_batch_norm2d");
        CHECK(held->named_children()[0].second->type_name() == "sync_batch_norm2d");
        CHECK(held->replaced == 1);
        CHECK(children[0].second->type_name() == "conv2d");
        const std::string text = model->describe();
        CHECK(text != described);
        CHECK(text.find("(bn1): sync_batch_norm2d(3, eps=1e-05, momentum=0.1, " + format +
                        ", ranks=" + std::to_string(K) + ")") != std::string::npos);
        CHECK(text.find(" batch_norm2d(") == std::string::npos);

        // Training: each rank's rows of the whole batch through the converted model are the
        // rows of the original model's output on the whole batch (convolutions, ReLU and
        // pooling act per sample; the batch norms now see the whole batch). Then eval mode,
        // with the same running statistics on both. float64: a handful of layers, each within
        // 1e-12 of the other: 1e-11.
        const shape_type xs = format == "NCHW" ? shape_type{N, 1, 4, 4} : shape_type{N, 4, 4, 1};
        const tensor x = seeded(xs, 120, dtype::float64);
        const auto rows = rows_of(N, 3, rank, K);
        check_close(model->forward(shard(x, rows)), shard(original->forward(x), rows), 1e-11, "training output");
        for (const auto& [n, t] : original->named_buffers())
            check_close(model->buffer(n), t, 1e-11, n);
        original->eval();
        model->eval();
        check_close(model->forward(shard(x, rows)), shard(original->forward(x), rows), 1e-11, "eval output");
    }
}

TEST_CASE("convert_sync_batch_norm: the model itself, shared layers, frozen parameters, errors")
{
    CHECK_ERROR(nn::convert_sync_batch_norm(nullptr), xgrad::invalid_argument,
                "convert_sync_batch_norm: the model is null");

    auto bn = std::make_shared<nn::batch_norm2d>(C);
    bn->parameter("weight").requires_grad_(false);
    bn->eval();
    const std::shared_ptr<nn::module> replaced = nn::convert_sync_batch_norm(bn, dist::process_group::self());
    REQUIRE(replaced != nullptr);
    CHECK(replaced->type_name() == "sync_batch_norm2d");
    CHECK_FALSE(replaced->is_training());
    CHECK_FALSE(replaced->parameter("weight").requires_grad());
    CHECK(replaced->parameter("bias").requires_grad());
    CHECK(dynamic_cast<nn::sync_batch_norm2d&>(*replaced).group().size() == 1);

    // A batch_norm2d registered twice becomes one sync_batch_norm2d: its parameters stay tied.
    auto shared_bn = std::make_shared<nn::batch_norm2d>(C);
    auto model = std::make_shared<nn::sequential>();
    model->add("a", shared_bn);
    model->add("b", shared_bn);
    auto bn3d = std::make_shared<nn::batch_norm3d>(C);
    model->add("c", bn3d);
    nn::convert_sync_batch_norm(model);
    const auto children = model->named_children();
    CHECK(children[0].second == children[1].second);
    CHECK(children[0].second->type_name() == "sync_batch_norm2d");
    CHECK(children[2].second == bn3d); // only batch_norm2d is converted

    // A model without batch norm is returned unchanged.
    auto plain = std::make_shared<nn::sequential>();
    plain->add("relu", std::make_shared<nn::relu>());
    CHECK(nn::convert_sync_batch_norm(plain) == plain);
    CHECK(plain->named_children()[0].second->type_name() == "relu");
}

TEST_CASE("module::replace_child: in place, with checks")
{
    auto inner = std::make_shared<nn::relu>();
    auto h = std::make_shared<holder>(inner);
    h->attach("second", std::make_shared<nn::relu>());
    auto fresh = std::make_shared<nn::batch_norm2d>(C);
    h->replace_child("inner", fresh);
    CHECK(h->named_children()[0].first == "inner");
    CHECK(h->named_children()[0].second == fresh);
    CHECK(h->named_children()[1].first == "second");
    CHECK(h->replaced == 1);
    CHECK(names_of(h->named_parameters()) == std::vector<std::string>{"inner.weight", "inner.bias"});

    CHECK_ERROR(h->replace_child("missing", fresh), xgrad::invalid_argument,
                "holder: replace_child: no direct child module named 'missing'");
    CHECK_ERROR(h->replace_child("inner", nullptr), xgrad::invalid_argument,
                "holder: replace_child: the new child module 'inner' is null");
    auto outer = std::make_shared<holder>(h);
    CHECK_ERROR(h->replace_child("inner", outer), xgrad::invalid_argument,
                "holder: replace_child: the new child module 'inner' contains this module");
    CHECK(h->named_children()[0].second == fresh); // unchanged after the errors
    CHECK(h->replaced == 1);
}

TEST_CASE("sync_batch_norm2d: forward_relu is relu of the synchronised forward, not a local fused one")
{
    // Each rank's rows of one global batch; the local statistics differ from the global ones,
    // so a forward_relu that fell back to batch_norm2d's local fused path would differ.
    const int k = dist::world_size();
    const int me = dist::rank();
    xgrad::generator gen(3);
    const tensor global = xgrad::randn({4 * k, 3, 2, 2}, gen, dtype::float64);
    const tensor mine = xgrad::slice(global, 0, 4 * me, 4 * me + 4);
    const tensor shifted = xgrad::add(mine, xgrad::full({}, 0.5 * me, dtype::float64));
    nn::batch_norm_options o(3);
    o.dtype = dtype::float64;
    nn::sync_batch_norm2d a(o), b(o);
    const tensor y = xgrad::relu(a.forward(shifted));
    const tensor yr = b.forward_relu(shifted);
    std::vector<double> vy(static_cast<std::size_t>(y.numel())), vr(vy.size());
    xgrad::to_host(y, vy.data(), dtype::float64);
    xgrad::to_host(yr, vr.data(), dtype::float64);
    CHECK(vy == vr);
    std::vector<double> ma(3), mb(3);
    xgrad::to_host(a.running_mean(), ma.data(), dtype::float64);
    xgrad::to_host(b.running_mean(), mb.data(), dtype::float64);
    CHECK(ma == mb);
}
