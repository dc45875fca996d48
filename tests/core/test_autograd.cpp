// The autograd engine: accumulation, grad vs backward, higher orders, graph lifetime, modes.
#include <doctest/doctest.h>

#include "xgrad/xgrad.hpp"

using namespace xgrad;

namespace
{
    tensor scalar(double v) { return full({}, v, dtype::float64); }
}

TEST_CASE("derivatives of x^3 to the fourth order")
{
    const tensor x = scalar(1.5).requires_grad_();
    const tensor y = mul(x, mul(x, x));
    const tensor d1 = grad({y}, {x}, {}, true, true)[0];
    CHECK(d1.item() == doctest::Approx(3 * 1.5 * 1.5));
    const tensor d2 = grad({d1}, {x}, {}, true, true)[0];
    CHECK(d2.item() == doctest::Approx(6 * 1.5));
    const tensor d3 = grad({d2}, {x}, {}, true, true)[0];
    CHECK(d3.item() == doctest::Approx(6));
    // The fourth derivative is zero: d3 is a constant that no longer depends on x.
    if (d3.requires_grad())
    {
        const auto d4 = grad({d3}, {x}, {}, true, true, true);
        CHECK((!d4[0].defined() || d4[0].item() == 0.0));
    }
}

TEST_CASE("backward accumulates into leaves and zero_grad clears")
{
    tensor x = full({3}, 2.0, dtype::float64).requires_grad_();
    sum(mul(x, x)).backward();
    CHECK(to_vector(x.grad()) == std::vector<double>{4, 4, 4});
    sum(mul(x, x)).backward();
    CHECK(to_vector(x.grad()) == std::vector<double>{8, 8, 8});
    x.zero_grad();
    CHECK_FALSE(x.grad().defined());
}

TEST_CASE("gradients from several paths are summed (diamond graph)")
{
    const tensor x = scalar(3.0).requires_grad_();
    const tensor a = mul(x, x);              // 2x
    const tensor b = mul(a, x);              // 3x^2
    const tensor y = add(add(a, b), exp(x)); // 2x + 3x^2 + e^x
    const tensor g = grad({y}, {x})[0];
    CHECK(g.item() == doctest::Approx(6 + 27 + std::exp(3.0)));
}

TEST_CASE("grad with respect to an intermediate tensor and several outputs")
{
    const tensor x = full({2}, 2.0, dtype::float64).requires_grad_();
    const tensor h = mul(x, x);
    const tensor y1 = sum(h);
    const tensor y2 = sum(mul(h, scalar(3.0)));
    const auto g = grad({y1, y2}, {h, x});
    CHECK(to_vector(g[0]) == std::vector<double>{4, 4});
    CHECK(to_vector(g[1]) == std::vector<double>{16, 16}); // (1 + 3) * 2x
    CHECK_FALSE(x.grad().defined());                       // grad() does not touch .grad
}

TEST_CASE("grad_outputs weight a non-scalar output")
{
    const tensor x = arange(0, 4, 1, dtype::float64).requires_grad_();
    const tensor y = mul(x, x);
    const tensor v = from_host(std::vector<double>{1, 10, 100, 1000}.data(), {4}, dtype::float64);
    const auto g = grad({y}, {x}, {v});
    CHECK(to_vector(g[0]) == std::vector<double>{0, 20, 400, 6000});
}

TEST_CASE("running backward twice over freed buffers is an error unless retained")
{
    const tensor x = scalar(2.0).requires_grad_();
    const tensor y = exp(x);
    y.backward();
    try
    {
        y.backward();
        FAIL("second backward did not throw");
    }
    catch (const std::runtime_error& e)
    {
        CHECK(std::string(e.what()).find("second time") != std::string::npos);
        CHECK(std::string(e.what()).find("exp") != std::string::npos);
    }
    const tensor z = exp(x);
    z.backward({}, true);
    z.backward();
    CHECK(x.grad().item() == doctest::Approx(3 * std::exp(2.0)));
}

TEST_CASE("no_grad, detach and requires_grad_ rules")
{
    const tensor x = scalar(2.0).requires_grad_();
    {
        no_grad guard;
        CHECK_FALSE(mul(x, x).requires_grad());
        {
            enable_grad inner;
            CHECK(mul(x, x).requires_grad());
        }
    }
    CHECK(is_grad_enabled());
    const tensor d = mul(x, x).detach();
    CHECK_FALSE(d.requires_grad());
    CHECK(d.is_leaf());
    tensor y = mul(x, x);
    CHECK_THROWS_AS(y.requires_grad_(false), std::runtime_error);
    tensor labels = zeros({2}, dtype::int64);
    CHECK_THROWS_AS(labels.requires_grad_(), std::invalid_argument);
    // Non-differentiable ops produce tensors that do not require grad.
    CHECK_FALSE(gt(x, scalar(0.0)).requires_grad());
    CHECK_FALSE(sign(x).requires_grad());
}

TEST_CASE("graphs are freed when their outputs die (no reference cycles)")
{
    std::weak_ptr<node> fn;
    std::weak_ptr<tensor_impl> saved_storage_owner;
    const tensor x = full({1000}, 0.5, dtype::float64).requires_grad_();
    {
        tensor y = tanh(sigmoid(exp(x))); // each saves its own output
        fn = y.grad_fn();
        saved_storage_owner = y.impl();
        CHECK_FALSE(fn.expired());
    }
    CHECK(fn.expired());
    CHECK(saved_storage_owner.expired());
}

TEST_CASE("create_graph gradients accumulate with graph into leaves")
{
    tensor x = scalar(2.0).requires_grad_();
    const tensor y = mul(x, mul(x, x));
    backward({y}, {}, true, true);
    const tensor g = x.grad(); // 3x^2, with a graph
    REQUIRE(g.requires_grad());
    const tensor h = grad({g}, {x})[0];
    CHECK(h.item() == doctest::Approx(12.0));
    // The leaf now holds a graph that captures the leaf: a reference cycle (as in PyTorch),
    // broken by clearing the gradient.
    x.zero_grad();
}

TEST_CASE("leaf gradients are dense even when the incoming gradient is a broadcast view")
{
    const tensor x = zeros({3, 4}, dtype::float64).requires_grad_();
    sum(x).backward();
    CHECK(x.grad().is_contiguous());
    CHECK(to_vector(x.grad()) == std::vector<double>(12, 1.0));
}

TEST_CASE("grad() w.r.t. an intermediate keeps the graph below it usable")
{
    const tensor x = scalar(1.0).requires_grad_();
    const tensor a = exp(x);
    const tensor y = mul(a, a);
    CHECK(grad({y}, {a})[0].item() == doctest::Approx(2 * std::exp(1.0)));
    mul(a, scalar(3.0)).backward(); // exp's node did not run above, so it still has its output
    CHECK(x.grad().item() == doctest::Approx(3 * std::exp(1.0)));
}

TEST_CASE("very deep graphs: backward and destruction without deep recursion")
{
    // 200000 chained ops; recursion over them would need far more than a default 8 MiB stack.
    const tensor x = scalar(1.0).requires_grad_();
    std::weak_ptr<node> first;
    {
        tensor y = x;
        for (int i = 0; i < 200000; ++i)
        {
            y = mul(y, scalar(1.0));
            if (i == 0)
                first = y.grad_fn();
        }
        y.backward({}, true);
        CHECK(x.grad().item() == 1.0);
    }
    CHECK(first.expired());
}

TEST_CASE("unused inputs")
{
    const tensor x = scalar(1.0).requires_grad_();
    const tensor z = scalar(1.0).requires_grad_();
    const tensor y = mul(x, x);
    CHECK_THROWS_WITH_AS(grad({y}, {z}, {}, true), doctest::Contains("not used"), std::runtime_error);
    const auto g = grad({y}, {x, z}, {}, true, false, true);
    CHECK(g[0].item() == 2.0);
    CHECK_FALSE(g[1].defined());
}

TEST_CASE("gradients flow through float32 and 16-bit tensors with matching dtypes")
{
    for (dtype dt : {dtype::float32, dtype::float16, dtype::bfloat16})
    {
        INFO(name(dt));
        const tensor x = full({4}, 1.5, dt).requires_grad_();
        sum(mul(x, x)).backward();
        REQUIRE(x.grad().dtype() == dt);
        for (double v : to_vector(x.grad()))
            CHECK(v == 3.0);
    }
    // A cast is differentiable: the gradient comes back in the source dtype.
    const tensor x = full({2}, 0.25, dtype::float64).requires_grad_();
    sum(mul(x.to(dtype::float32), full({2}, 2.0, dtype::float32))).backward();
    CHECK(x.grad().dtype() == dtype::float64);
    CHECK(to_vector(x.grad()) == std::vector<double>{2, 2});
}
