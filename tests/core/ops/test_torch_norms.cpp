// Layer, group and instance normalisation against PyTorch's values and gradients in float64
// (tests/data/torch/norms.json, tools/torch_golden/norms.py), with and without the affine
// parameters; gradients with respect to the input and the parameters.
//
// Tolerance, of the tensor's magnitude: 1e-11, plus 100 |eps - float32(eps)|. Both sides
// compute a mean and a variance over a few dozen elements and divide by sqrt(var + eps), each
// ~1e-15 relative; the gradients of a normalisation divide by the standard deviation again
// (O(1) here, the inputs having a spread of 2), so 1e-11 keeps two orders above float64's
// rounding. And xgrad's norms run on the fused batch norm, whose epsilon is a float32
// attribute (as TensorFlow's): eps = 0.01 becomes 0.00999999977648, which moves y by about
// |y| (eps - float32(eps)) / (2 (var + eps)) and its gradients by a few times that; with
// variances of about 4 (and no group below 0.25), 100 times the rounding bounds both. A wrong
// statistic or axis moves values by 1e-2 or more.
#include <doctest/doctest.h>

#include <cmath>
#include <string>
#include <vector>

#include "tests/support/torch_golden.hpp"
#include "xgrad/xgrad.hpp"

using namespace xgrad;
using torch_golden::json;

TEST_CASE("layer_norm, group_norm, instance_norm: values and gradients equal PyTorch's in float64")
{
    const auto doc = torch_golden::load("norms.json");
    REQUIRE(doc.at("cases").size() == 8);
    for (const auto& c : doc.at("cases"))
    {
        const std::string name = c.at("name");
        INFO(name);
        const json& in = c.at("inputs");
        const json& o = c.at("options");
        const tensor x = torch_golden::input(c, "x").requires_grad_(true);
        tensor weight, bias;
        std::vector<tensor> wrt{x};
        if (in.contains("weight"))
        {
            wrt.push_back(weight = torch_golden::input(c, "weight").requires_grad_(true));
            wrt.push_back(bias = torch_golden::input(c, "bias").requires_grad_(true));
        }
        const double eps = o.at("eps").get<double>();
        const double tol = 1e-11 + 100.0 * std::abs(eps - static_cast<double>(static_cast<float>(eps)));
        const std::string op = c.at("op");
        const tensor y = op == "layer_norm"
                             ? layer_norm(x, o.at("normalized_shape").get<shape_type>(), weight, bias, eps)
                         : op == "group_norm" ? group_norm(x, o.at("num_groups").get<std::int64_t>(), weight, bias, eps)
                                              : instance_norm(x, weight, bias, eps);
        torch_golden::check_close(y, c.at("outputs").at("y"), tol, name + ": y");
        const std::vector<tensor> g = grad({sum(y * torch_golden::input(c, "grad_output"))}, wrt);
        torch_golden::check_close(g[0], c.at("grads").at("x"), tol, name + ": dx");
        if (weight.defined())
        {
            torch_golden::check_close(g[1], c.at("grads").at("weight"), tol, name + ": dweight");
            torch_golden::check_close(g[2], c.at("grads").at("bias"), tol, name + ": dbias");
        }
    }
}
