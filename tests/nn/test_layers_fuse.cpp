// The fusion pass and the sequential's fused groups (xgrad/nn/fuse.hpp, sequential.hpp): which
// runs the pass fuses, the groups' rules, and a replaced child leaving its group. The fused
// groups' values and gradients against their children's are checked in
// test_layers_batch_norm.cpp (batch norm + ReLU) and tests/core/ops/test_batch_norm_pool.cpp
// (+ max pooling).
#include <doctest/doctest.h>

#include <memory>
#include <string>

#include "tests/support/check_error.hpp"
#include "xgrad/distributed/sync_batch_norm.hpp"
#include "xgrad/nn.hpp"
#include "xgrad/xgrad.hpp"

using namespace xgrad;

namespace
{
    std::shared_ptr<nn::batch_norm2d> bn2(std::int64_t c, const char* format = "NCHW")
    {
        nn::batch_norm_options o(c);
        o.data_format = format;
        return std::make_shared<nn::batch_norm2d>(o);
    }
}

TEST_CASE("nn::fuse: the runs it fuses, nested sequentials included, and the ones it leaves")
{
    auto inner = std::make_shared<nn::sequential>();
    inner->add("bn", bn2(4));
    inner->add("relu", std::make_shared<nn::relu>());
    nn::sequential model;
    model.add("bn1", bn2(4));
    model.add("relu1", std::make_shared<nn::relu>());
    model.add("pool1", std::make_shared<nn::max_pool2d>(2));
    model.add("block", inner);
    nn::batch_norm_options o3(4);
    model.add("bn3d", std::make_shared<nn::batch_norm3d>(o3)); // followed by no relu
    model.add("pool3", std::make_shared<nn::max_pool2d>(2));   // a pool after a 3-d batch norm: not a run
    const std::string before = model.describe();
    const auto keys = model.state_dict();

    CHECK(nn::fuse(model) == 2);
    REQUIRE(model.fused_groups().size() == 1);
    CHECK(model.fused_groups()[0].first == 0);
    CHECK(model.fused_groups()[0].count == 3);
    REQUIRE(inner->fused_groups().size() == 1);
    CHECK(inner->fused_groups()[0].count == 2);
    CHECK(model.describe() == before);
    CHECK(model.state_dict().size() == keys.size());
    // Again: the same groups (the pass starts from none).
    CHECK(nn::fuse(model) == 2);
    CHECK(model.fused_groups().size() == 1);

    // A subclass with a forward of its own is not fused: a synchronised batch norm.
    nn::sequential sync;
    sync.add("bn", std::make_shared<nn::sync_batch_norm2d>(nn::batch_norm_options(4)));
    sync.add("relu", std::make_shared<nn::relu>());
    CHECK(nn::fuse(sync) == 0);
}

TEST_CASE("sequential::fuse_children: the group's forward runs in place of its children")
{
    nn::sequential s;
    s.add("a", std::make_shared<nn::relu>());
    s.add("b", std::make_shared<nn::relu>());
    s.add("c", std::make_shared<nn::relu>());
    int calls = 0;
    s.fuse_children(1, 2, [&](const tensor& x) {
        ++calls;
        return x * 2.0;
    });
    const tensor x = full({3}, -1.0);
    CHECK(to_vector(s(x)) == std::vector<double>{0, 0, 0}); // relu, then the group (2 * 0)
    CHECK(calls == 1);
    CHECK(to_vector(s(full({3}, 1.5))) == std::vector<double>{3, 3, 3});

    CHECK_ERROR(s.fuse_children(0, 1, [](const tensor& t) { return t; }), xgrad::invalid_argument, "sequential",
                "at least 2 children");
    CHECK_ERROR(s.fuse_children(2, 2, [](const tensor& t) { return t; }), xgrad::invalid_argument,
                "children [2, 4) go past the last child (3 children)");
    CHECK_ERROR(s.fuse_children(0, 2, [](const tensor& t) { return t; }), xgrad::invalid_argument,
                "overlap a group already fused");
    CHECK_ERROR(s.fuse_children(0, 2, nullptr), xgrad::invalid_argument, "is empty");
    // An error inside a group names its children.
    s.unfuse();
    s.fuse_children(0, 2, [](const tensor&) -> tensor { throw xgrad::invalid_argument("bad input"); });
    CHECK_ERROR(s(x), xgrad::invalid_argument, "sequential: in 'a' + 'b': bad input");
    s.unfuse();
    CHECK(s.fused_groups().empty());
    CHECK(to_vector(s(full({3}, 1.5))) == std::vector<double>{1.5, 1.5, 1.5});
}

TEST_CASE("sequential: a replaced child leaves its fused group, the others stay")
{
    nn::sequential s;
    s.add("bn1", bn2(2));
    s.add("relu1", std::make_shared<nn::relu>());
    s.add("bn2", bn2(2));
    s.add("relu2", std::make_shared<nn::relu>());
    REQUIRE(nn::fuse(s) == 2);
    s.replace_child("bn2", bn2(2));
    REQUIRE(s.fused_groups().size() == 1);
    CHECK(s.fused_groups()[0].first == 0);
    generator gen(3);
    const tensor y = s(randn({2, 2, 3, 3}, gen).requires_grad_());
    CHECK(y.grad_fn()->name() == "relu"); // bn2 and relu2 run one by one
    // Children appended after the pass are not fused until it runs again.
    s.add("bn3", bn2(2));
    s.add("relu3", std::make_shared<nn::relu>());
    CHECK(s.fused_groups().size() == 1);
    CHECK(nn::fuse(s) == 3);
}
