// Gradient-accumulation hooks: when the engine runs them (once per backward per leaf, after
// the summed gradient is in grad()), removal, and the errors of registration.
#include <doctest/doctest.h>

#include <stdexcept>
#include <vector>

#include "tests/support/check_error.hpp"
#include "xgrad/xgrad.hpp"

using namespace xgrad;

namespace
{
    tensor vec(const std::vector<double>& v)
    {
        return from_host(v.data(), {static_cast<std::int64_t>(v.size())}, dtype::float64);
    }
}

TEST_CASE("a leaf used twice in the graph: the hook runs once, with the summed gradient")
{
    tensor x = vec({1.0, 2.0}).requires_grad_();
    int calls = 0;
    std::vector<double> seen;
    register_grad_accumulated_hook(x, [&](const tensor& leaf) {
        ++calls;
        seen = to_vector(leaf.grad());
    });
    // y = x*x + 3x reaches x along three edges (two from mul, one from the scaling): the
    // engine sums 2x + 3 before accumulating.
    const tensor y = sum(add(mul(x, x), mul(x, full({}, 3.0, dtype::float64))));
    y.backward();
    CHECK(calls == 1);
    CHECK(seen == std::vector<double>{5.0, 7.0});
    CHECK(to_vector(x.grad()) == seen);
}

TEST_CASE("the hook receives the leaf itself, after its grad() was updated")
{
    tensor x = vec({3.0}).requires_grad_();
    bool same = false, defined = false;
    register_grad_accumulated_hook(x, [&](const tensor& leaf) {
        same = leaf.is_same(x);
        defined = leaf.grad().defined();
    });
    sum(mul(x, x)).backward();
    CHECK(same);
    CHECK(defined);
}

TEST_CASE("a leaf given twice among the outputs, or reached from two outputs, accumulates once")
{
    tensor x = vec({1.0, 1.0}).requires_grad_();
    int calls = 0;
    register_grad_accumulated_hook(x, [&](const tensor&) { ++calls; });
    const tensor a = sum(x);
    const tensor b = sum(mul(x, x));
    backward({a, b, a});
    CHECK(calls == 1);
    CHECK(to_vector(x.grad()) == std::vector<double>{4.0, 4.0}); // 1 + 2x + 1
}

TEST_CASE("every backward runs the hook again, and grad() then holds both accumulations")
{
    tensor x = vec({2.0}).requires_grad_();
    std::vector<double> seen;
    register_grad_accumulated_hook(x, [&](const tensor& leaf) { seen.push_back(to_vector(leaf.grad())[0]); });
    sum(mul(x, x)).backward();
    sum(mul(x, x)).backward();
    CHECK(seen == std::vector<double>{4.0, 8.0});
}

TEST_CASE("hooks run in registration order, one per leaf that gets a gradient")
{
    tensor x = vec({1.0}).requires_grad_();
    tensor w = vec({2.0}).requires_grad_();
    tensor unused = vec({0.0}).requires_grad_();
    std::vector<int> order;
    register_grad_accumulated_hook(x, [&](const tensor&) { order.push_back(1); });
    register_grad_accumulated_hook(x, [&](const tensor&) { order.push_back(2); });
    register_grad_accumulated_hook(w, [&](const tensor&) { order.push_back(3); });
    register_grad_accumulated_hook(unused, [&](const tensor&) { order.push_back(4); });
    sum(mul(x, w)).backward();
    REQUIRE(order.size() == 3);
    // x's two hooks in order; w's anywhere (the engine's order between leaves is its own).
    std::vector<int> xs;
    for (int i : order)
        if (i != 3)
            xs.push_back(i);
    CHECK(xs == std::vector<int>{1, 2});
}

TEST_CASE("grad() accumulates nothing and runs no hook; backward with create_graph does")
{
    tensor x = vec({1.5}).requires_grad_();
    int calls = 0;
    bool differentiable = false;
    register_grad_accumulated_hook(x, [&](const tensor& leaf) {
        ++calls;
        differentiable = leaf.grad().requires_grad();
    });
    const tensor y = sum(mul(x, mul(x, x)));
    (void)grad({y}, {x}, {}, true);
    CHECK(calls == 0);
    CHECK_FALSE(x.grad().defined());
    backward({y}, {}, true, true);
    CHECK(calls == 1);
    CHECK(differentiable); // the stored 3x^2 keeps its graph
    CHECK(to_vector(x.grad())[0] == doctest::Approx(3 * 1.5 * 1.5));
    // The stored gradient's graph captures the leaf: a reference cycle (as in PyTorch), broken
    // by clearing the gradient.
    x.zero_grad();
}

TEST_CASE("remove() unregisters, is idempotent, and a hook removed by an earlier one does not run")
{
    tensor x = vec({1.0}).requires_grad_();
    int a = 0, b = 0;
    grad_hook_handle hb;
    grad_hook_handle ha = register_grad_accumulated_hook(x, [&](const tensor&) {
        ++a;
        hb.remove();
    });
    hb = register_grad_accumulated_hook(x, [&](const tensor&) { ++b; });
    CHECK(ha.active());
    CHECK(hb.active());
    sum(x).backward();
    CHECK(a == 1);
    CHECK(b == 0);
    CHECK_FALSE(hb.active());
    ha.remove();
    ha.remove();
    CHECK_FALSE(ha.active());
    sum(x).backward();
    CHECK(a == 1);
    CHECK(grad_hook_handle().active() == false);
    grad_hook_handle().remove(); // an empty handle: nothing to do
}

TEST_CASE("a handle outliving its leaf is inert, and the leaf is freed")
{
    grad_hook_handle h;
    std::weak_ptr<tensor_impl> weak;
    {
        tensor x = vec({1.0}).requires_grad_();
        weak = x.impl();
        h = register_grad_accumulated_hook(x, [](const tensor&) {});
        sum(x).backward();
    }
    CHECK(weak.expired());
    CHECK_FALSE(h.active());
    h.remove();
}

TEST_CASE("an exception thrown by a hook propagates out of backward")
{
    tensor x = vec({1.0}).requires_grad_();
    register_grad_accumulated_hook(x, [](const tensor&) { throw std::runtime_error("from the hook"); });
    CHECK_ERROR(sum(x).backward(), std::runtime_error, "from the hook");
    CHECK(x.grad().defined()); // accumulated before the hook ran
}

TEST_CASE("a new value stored in a leaf's place carries no hooks")
{
    tensor x = vec({1.0}).requires_grad_();
    int calls = 0;
    register_grad_accumulated_hook(x, [&](const tensor&) { ++calls; });
    tensor replacement;
    {
        no_grad guard;
        replacement = mul(x, full({}, 2.0, dtype::float64));
    }
    replacement.requires_grad_();
    sum(replacement).backward();
    CHECK(calls == 0);
}

TEST_CASE("registration errors name what was wrong")
{
    tensor x = vec({1.0}).requires_grad_();
    const tensor y = mul(x, x);
    CHECK_ERROR(register_grad_accumulated_hook(y, [](const tensor&) {}), xgrad::invalid_argument, "not a leaf",
                "'mul'");
    CHECK_ERROR(register_grad_accumulated_hook(vec({1.0}), [](const tensor&) {}), xgrad::invalid_argument,
                "does not require grad");
    CHECK_ERROR(register_grad_accumulated_hook(tensor(), [](const tensor&) {}), xgrad::invalid_argument, "undefined");
    CHECK_ERROR(register_grad_accumulated_hook(x, grad_accumulated_hook_type{}), xgrad::invalid_argument,
                "empty function");
}
