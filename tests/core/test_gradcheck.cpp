// First- and second-order finite-difference checks, in float64, of every differentiable op
// (the table in gradcheck_cases.hpp: adding an op to the checks costs one line), and of the
// checker itself.
#include <doctest/doctest.h>

#include <functional>
#include <string>
#include <vector>

#include "tests/support/gradcheck_cases.hpp"
#include "xgrad/xgrad.hpp"

using namespace xgrad;
using namespace gradcheck_cases;

TEST_CASE("first-order gradients of every op match finite differences")
{
    for (const auto& c : cases)
    {
        INFO("op: " << std::string(c.name));
        const gradcheck_result r = gradcheck(wrap(c), make_inputs(c, 1));
        CHECK_MESSAGE(r.ok, r.message);
    }
}

TEST_CASE("second-order gradients of every op match finite differences")
{
    for (const auto& c : cases)
    {
        INFO("op: " << std::string(c.name));
        const gradcheck_result r = gradgradcheck(wrap(c), make_inputs(c, 2));
        CHECK_MESSAGE(r.ok, r.message);
    }
}

TEST_CASE("gradcheck detects a wrong gradient and reports the worst element")
{
    // A deliberately wrong op: forward x^2, backward 3x (instead of 2x).
    auto wrong_square = [](const tensor& x) {
        tensor y = mul(x.detach(), x.detach());
        record("wrong_square", {x}, {y}, [x](function_node&, const std::vector<tensor>& g) {
            return std::vector<tensor>{mul(g[0], mul(x, scalar_like(x, 3.0)))};
        });
        return y;
    };
    generator gen(3);
    const tensor x = randn({4}, gen, dtype::float64).requires_grad_();
    const gradcheck_result r = gradcheck([&](const args& a) { return std::vector<tensor>{wrong_square(a[0])}; }, {x});
    REQUIRE_FALSE(r.ok);
    // The worst element is where |3x - 2x| = |x| is largest.
    const auto xv = to_vector(x);
    std::size_t worst = 0;
    for (std::size_t i = 1; i < xv.size(); ++i)
        if (std::abs(xv[i]) > std::abs(xv[worst]))
            worst = i;
    CHECK(r.input_element == static_cast<std::int64_t>(worst));
    CHECK(r.output_element == static_cast<std::int64_t>(worst));
    CHECK(r.analytic == doctest::Approx(3 * xv[worst]));
    CHECK(r.numeric == doctest::Approx(2 * xv[worst]).epsilon(1e-6));
    CHECK(r.message.find("analytic") != std::string::npos);
    gradcheck_options throwing;
    throwing.throw_on_failure = true;
    CHECK_THROWS_AS(gradcheck([&](const args& a) { return std::vector<tensor>{wrong_square(a[0])}; }, {x}, throwing),
                    std::runtime_error);
}

TEST_CASE("gradgradcheck detects a wrong second derivative")
{
    // Right first derivative (2x), but its own backward is wrong: d(2x g)/dx reported as 4 g.
    auto bad_double_backward = [](const tensor& x) {
        tensor y = mul(x.detach(), x.detach());
        record("square_bad_2nd", {x}, {y}, [x](function_node&, const std::vector<tensor>& g) {
            tensor first = mul(mul(g[0], x.detach()), scalar_like(x, 2.0));
            tensor gd = g[0];
            record("bad_2nd", {x, gd}, {first}, [x, gd](function_node&, const std::vector<tensor>& gg) {
                return std::vector<tensor>{mul(mul(gg[0], gd), scalar_like(x, 4.0)),
                                           mul(mul(gg[0], x), scalar_like(x, 2.0))};
            });
            return std::vector<tensor>{first};
        });
        return y;
    };
    generator gen(4);
    const tensor x = randn({3}, gen, dtype::float64).requires_grad_();
    auto f = [&](const args& a) { return std::vector<tensor>{bad_double_backward(a[0])}; };
    CHECK(gradcheck(f, {x}).ok);
    const gradcheck_result r = gradgradcheck(f, {x});
    CHECK_FALSE(r.ok);
    CHECK(r.message.find("second order") != std::string::npos);
}

TEST_CASE("third derivatives through composed ops")
{
    // f(x) = sum(tanh(x) * x); check the gradient of the Hessian-vector product by finite
    // differences: gradgradcheck of g(x) = grad(f, x, create_graph).
    auto g = [](const args& a) {
        const tensor y = sum(mul(tanh(a[0]), a[0]));
        return std::vector<tensor>{grad({y}, {a[0]}, {}, true, true)[0]};
    };
    generator gen(5);
    const tensor x = randn({4}, gen, dtype::float64).requires_grad_();
    const gradcheck_result r = gradgradcheck(g, {x});
    CHECK_MESSAGE(r.ok, r.message);
}
