// The activation ops against PyTorch's values and gradients in float64 (tests/data/torch/
// activations.json, tools/torch_golden/activations.py), for every option xgrad's op takes.
//
// Tolerance 1e-12 of the tensor's magnitude: both sides evaluate the same formula in float64
// with library exp/log1p/erf/tanh, each within a few ulps (~1e-16 relative), on inputs of
// magnitude <= ~12; the composites chain at most five such steps, so the differences are
// ~1e-15. A wrong branch, slope or constant moves values by 1e-3 or more.
#include <doctest/doctest.h>

#include <cmath>
#include <functional>
#include <map>
#include <string>

#include "tests/support/check_error.hpp"
#include "tests/support/torch_golden.hpp"
#include "xgrad/xgrad.hpp"

using namespace xgrad;

namespace
{
    using op_fn = std::function<tensor(const tensor&, const torch_golden::json&)>;

    const std::map<std::string, op_fn>& ops()
    {
        static const std::map<std::string, op_fn> table = {
            {"relu", [](const tensor& x, const auto&) { return relu(x); }},
            {"sigmoid", [](const tensor& x, const auto&) { return sigmoid(x); }},
            {"tanh", [](const tensor& x, const auto&) { return xgrad::tanh(x); }},
            {"silu", [](const tensor& x, const auto&) { return silu(x); }},
            {"gelu",
             [](const tensor& x, const auto& o) { return gelu(x, o.at("approximate").template get<std::string>()); }},
            {"softplus",
             [](const tensor& x, const auto& o) { return softplus(x, o.at("beta").template get<double>()); }},
            {"leaky_relu", [](const tensor& x,
                              const auto& o) { return leaky_relu(x, o.at("negative_slope").template get<double>()); }},
            {"elu", [](const tensor& x, const auto& o) { return elu(x, o.at("alpha").template get<double>()); }},
            {"hardswish", [](const tensor& x, const auto&) { return hardswish(x); }},
            {"hardsigmoid", [](const tensor& x, const auto&) { return hardsigmoid(x); }},
            {"relu6", [](const tensor& x, const auto&) { return relu6(x); }},
            {"softmax",
             [](const tensor& x, const auto& o) { return softmax(x, o.at("dim").template get<std::int64_t>()); }},
            {"log_softmax",
             [](const tensor& x, const auto& o) { return log_softmax(x, o.at("dim").template get<std::int64_t>()); }},
        };
        return table;
    }
}

TEST_CASE("activations: values and gradients equal PyTorch's in float64")
{
    const auto doc = torch_golden::load("activations.json");
    REQUIRE(doc.at("cases").size() >= ops().size());
    for (const auto& c : doc.at("cases"))
    {
        const std::string name = c.at("name");
        INFO(name);
        const auto op = ops().find(c.at("op").get<std::string>());
        REQUIRE_MESSAGE(op != ops().end(), "no xgrad op for the case");
        const tensor x = torch_golden::input(c, "x").requires_grad_(true);
        const tensor y = op->second(x, c.at("options"));
        torch_golden::check_close(y, c.at("outputs").at("y"), 1e-12, name + ": y");
        const tensor dx = grad({sum(y * torch_golden::input(c, "grad_output"))}, {x})[0];
        torch_golden::check_close(dx, c.at("grads").at("x"), 1e-12, name + ": dx");
    }
}

TEST_CASE("activations: the derivative at each kink is PyTorch's")
{
    // PyTorch 1.13-2.x backward formulas at the points where the pieces meet.
    struct kink
    {
        const char* name;
        std::function<tensor(const tensor&)> f;
        double at, derivative;
    };
    const kink kinks[] = {
        {"leaky_relu at 0", [](const tensor& x) { return leaky_relu(x, 0.2); }, 0.0, 0.2},
        {"elu at 0", [](const tensor& x) { return elu(x, 0.5); }, 0.0, 0.5},
        {"relu6 at 0", [](const tensor& x) { return relu6(x); }, 0.0, 0.0},
        {"relu6 at 6", [](const tensor& x) { return relu6(x); }, 6.0, 0.0},
        {"hardsigmoid at -3", [](const tensor& x) { return hardsigmoid(x); }, -3.0, 0.0},
        {"hardsigmoid at 3", [](const tensor& x) { return hardsigmoid(x); }, 3.0, 0.0},
        {"hardswish at -3", [](const tensor& x) { return hardswish(x); }, -3.0, -0.5},
        {"hardswish at 3", [](const tensor& x) { return hardswish(x); }, 3.0, 1.5},
    };
    for (const kink& k : kinks)
    {
        INFO(k.name);
        const tensor x = from_host(&k.at, {1}, dtype::float64).requires_grad_(true);
        CHECK(to_vector(grad({sum(k.f(x))}, {x})[0])[0] == k.derivative);
    }
}

TEST_CASE("activations: NaN stays NaN and bad parameters are named")
{
    const double nan = std::nan("");
    const tensor x = from_host(&nan, {1}, dtype::float64);
    using unary = std::function<tensor(const tensor&)>;
    const unary fs[] = {[](const tensor& t) { return leaky_relu(t); }, [](const tensor& t) { return elu(t); },
                        [](const tensor& t) { return hardsigmoid(t); }, [](const tensor& t) { return hardswish(t); }};
    for (const unary& f : fs)
        CHECK(std::isnan(to_vector(f(x))[0]));
    const tensor ok = zeros({2}, dtype::float32);
    CHECK_ERROR(leaky_relu(ok, nan), std::invalid_argument, "leaky_relu: negative_slope must be finite");
    CHECK_ERROR(elu(ok, HUGE_VAL), std::invalid_argument, "elu: alpha must be finite");
    CHECK_ERROR(hardswish(zeros({2}, dtype::int64)), std::invalid_argument, "hardswish");
}
