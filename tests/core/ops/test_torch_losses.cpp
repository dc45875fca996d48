// The losses against PyTorch's values and gradients in float64 (tests/data/torch/losses.json,
// tools/torch_golden/losses.py): every loss, option and reduction, class weights, ignored labels
// (ignore_index -100 and a class), K-dimensional and one-sample layouts, probability targets;
// gradients w.r.t. the input and, where PyTorch differentiates it, the target.
//
// Tolerance 1e-12 of the tensor's magnitude: both sides evaluate the same formulas in float64
// with library exp/log/log1p (each within a few ulps), on at most 48 elements per sum, so the
// differences are summation order and rounding, ~1e-15 of the magnitude. The binary
// cross-entropy edge case's gradients are ~1e12 (PyTorch's 1e-12 floor), and the bound is
// relative to them: both divide the same difference by the same floor. A wrong normalisation,
// weight, smoothing term or branch moves values by 1e-3 or more.
#include <doctest/doctest.h>

#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "tests/support/torch_golden.hpp"
#include "xgrad/xgrad.hpp"

using namespace xgrad;

namespace
{
    using json = torch_golden::json;

    reduction reduction_of(const json& options)
    {
        const std::string r = options.at("reduction");
        if (r == "none")
            return reduction::none;
        if (r == "sum")
            return reduction::sum;
        if (r == "batchmean")
            return reduction::batchmean;
        REQUIRE(r == "mean");
        return reduction::mean;
    }

    /// The input NAME of a case, undefined when the case has none (an optional weight).
    tensor optional_input(const json& c, const char* name)
    {
        return c.at("inputs").contains(name) ? torch_golden::input(c, name) : tensor{};
    }

    using loss_fn = std::function<tensor(const tensor& x, const tensor& target, const json& c)>;

    const std::map<std::string, loss_fn>& losses()
    {
        static const std::map<std::string, loss_fn> table = {
            {"nll_loss",
             [](const tensor& x, const tensor& t, const json& c) {
                 nll_loss_options o;
                 o.red = reduction_of(c.at("options"));
                 o.weight = optional_input(c, "weight");
                 o.ignore_index = c.at("options").at("ignore_index");
                 return nll_loss(x, t, o);
             }},
            {"cross_entropy",
             [](const tensor& x, const tensor& t, const json& c) {
                 cross_entropy_options o;
                 o.red = reduction_of(c.at("options"));
                 o.weight = optional_input(c, "weight");
                 o.ignore_index = c.at("options").at("ignore_index");
                 o.label_smoothing = c.at("options").at("label_smoothing");
                 return cross_entropy(x, t, o);
             }},
            {"binary_cross_entropy",
             [](const tensor& x, const tensor& t, const json& c) {
                 return binary_cross_entropy(x, t, reduction_of(c.at("options")), optional_input(c, "weight"));
             }},
            {"binary_cross_entropy_with_logits",
             [](const tensor& x, const tensor& t, const json& c) {
                 return binary_cross_entropy_with_logits(x, t, reduction_of(c.at("options")),
                                                         optional_input(c, "weight"), optional_input(c, "pos_weight"));
             }},
            {"mse_loss", [](const tensor& x, const tensor& t,
                            const json& c) { return mse_loss(x, t, reduction_of(c.at("options"))); }},
            {"l1_loss", [](const tensor& x, const tensor& t,
                           const json& c) { return l1_loss(x, t, reduction_of(c.at("options"))); }},
            {"smooth_l1_loss",
             [](const tensor& x, const tensor& t, const json& c) {
                 return smooth_l1_loss(x, t, reduction_of(c.at("options")), c.at("options").at("beta"));
             }},
            {"huber_loss",
             [](const tensor& x, const tensor& t, const json& c) {
                 return huber_loss(x, t, reduction_of(c.at("options")), c.at("options").at("delta"));
             }},
            {"kl_div",
             [](const tensor& x, const tensor& t, const json& c) {
                 return kl_div(x, t, reduction_of(c.at("options")), c.at("options").at("log_target"));
             }},
        };
        return table;
    }
}

TEST_CASE("losses: values and gradients equal PyTorch's in float64")
{
    const auto doc = torch_golden::load("losses.json");
    std::set<std::string> seen;
    for (const auto& c : doc.at("cases"))
    {
        const std::string name = c.at("name");
        INFO(name);
        const auto loss = losses().find(c.at("op").get<std::string>());
        REQUIRE_MESSAGE(loss != losses().end(), "no xgrad loss for the case");
        seen.insert(loss->first);
        const json& grads = c.at("grads");
        const tensor x = torch_golden::input(c, "x").requires_grad_(true);
        tensor target = torch_golden::input(c, "target");
        std::vector<tensor> wrt = {x};
        if (grads.contains("target"))
            wrt.push_back(target.requires_grad_(true));
        const tensor y = loss->second(x, target, c);
        torch_golden::check_close(y, c.at("outputs").at("y"), 1e-12, name + ": y");
        const std::vector<tensor> g = grad({sum(y * torch_golden::input(c, "grad_output"))}, wrt);
        torch_golden::check_close(g[0], grads.at("x"), 1e-12, name + ": dx");
        if (wrt.size() == 2)
            torch_golden::check_close(g[1], grads.at("target"), 1e-12, name + ": dtarget");
    }
    CHECK(seen.size() == losses().size()); // every loss has cases
}
