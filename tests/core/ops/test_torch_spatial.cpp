// conv_transpose2d and upsample against PyTorch's values and gradients in float64
// (tests/data/torch/spatial.json, tools/torch_golden/spatial.py), in both layouts: the stored
// cases are NCHW, and each runs again on the channels-last copy of its inputs.
//
// Tolerance 1e-12 of the tensor's magnitude: both sides sum at most a few dozen float64
// products of O(1) values (a GEMM on each side, in different orders), ~1e-15 relative; upsample
// forms the same two-term blends as PyTorch. A wrong tap, offset or weight moves values by
// O(0.1).
#include <doctest/doctest.h>

#include <array>
#include <string>

#include "tests/support/check_error.hpp"
#include "tests/support/torch_golden.hpp"
#include "xgrad/xgrad.hpp"

using namespace xgrad;
using torch_golden::json;

namespace
{
    template <std::size_t N, class T>
    std::array<T, N> array_of(const json& j)
    {
        std::array<T, N> a{};
        for (std::size_t i = 0; i < N; ++i)
            a[i] = j.at(i).get<T>();
        return a;
    }

    /// NCHW -> the layout's copy (a contiguous channels-last tensor for "NHWC").
    tensor to_layout(const tensor& t, bool nhwc) { return nhwc ? contiguous(permute(t, {0, 2, 3, 1})) : t; }
    tensor from_layout(const tensor& t, bool nhwc) { return nhwc ? permute(t, {0, 3, 1, 2}) : t; }

    tensor run(const json& c, const tensor& x, const tensor& weight, const tensor& bias, const char* format)
    {
        const json& o = c.at("options");
        if (c.at("op") == "conv_transpose2d")
        {
            conv_transpose2d_params p;
            p.stride = array_of<2, std::int64_t>(o.at("stride"));
            p.padding = array_of<2, std::int64_t>(o.at("padding"));
            p.output_padding = array_of<2, std::int64_t>(o.at("output_padding"));
            p.dilation = array_of<2, std::int64_t>(o.at("dilation"));
            p.groups = o.at("groups").get<std::int64_t>();
            return conv_transpose2d(x, weight, bias, p, format);
        }
        upsample_params p;
        p.mode = o.at("mode").get<std::string>();
        p.align_corners = o.at("align_corners").get<bool>();
        if (o.contains("size"))
            p.size = array_of<2, std::int64_t>(o.at("size"));
        if (o.contains("scale_factor"))
            p.scale_factor = array_of<2, double>(o.at("scale_factor"));
        return upsample(x, p, format);
    }
}

TEST_CASE("conv_transpose2d and upsample: values and gradients equal PyTorch's in both layouts")
{
    const auto doc = torch_golden::load("spatial.json");
    for (const auto& c : doc.at("cases"))
        for (const bool nhwc : {false, true})
        {
            const std::string name = c.at("name").get<std::string>() + (nhwc ? " (NHWC)" : " (NCHW)");
            INFO(name);
            const json& in = c.at("inputs");
            const tensor x = to_layout(torch_golden::input(c, "x"), nhwc).requires_grad_(true);
            tensor weight, bias;
            std::vector<tensor> wrt{x};
            if (in.contains("weight"))
                wrt.push_back(weight = torch_golden::input(c, "weight").requires_grad_(true));
            if (in.contains("bias"))
                wrt.push_back(bias = torch_golden::input(c, "bias").requires_grad_(true));
            const tensor y = run(c, x, weight, bias, nhwc ? "NHWC" : "NCHW");
            torch_golden::check_close(from_layout(y, nhwc), c.at("outputs").at("y"), 1e-12, name + ": y");
            const tensor dy = to_layout(torch_golden::input(c, "grad_output"), nhwc);
            const std::vector<tensor> g = grad({sum(y * dy)}, wrt);
            torch_golden::check_close(from_layout(g[0], nhwc), c.at("grads").at("x"), 1e-12, name + ": dx");
            if (weight.defined())
                torch_golden::check_close(g[1], c.at("grads").at("weight"), 1e-12, name + ": dweight");
            if (bias.defined())
                torch_golden::check_close(g.back(), c.at("grads").at("bias"), 1e-12, name + ": dbias");
        }
}

TEST_CASE("conv_transpose2d is the adjoint of conv2d: <conv2d(u), v> = <u, conv_transpose2d(v)>")
{
    generator gen(3);
    conv2d_params cp;
    cp.stride = {2, 3};
    cp.padding = {1, 0};
    cp.dilation = {1, 2};
    cp.groups = 2;
    const tensor w = randn({4, 3, 3, 2}, gen, dtype::float64);
    const tensor u = randn({2, 6, 9, 11}, gen, dtype::float64);
    const tensor cu = conv2d(u, w, {}, cp);
    const tensor v = randn(cu.shape(), gen, dtype::float64);
    conv_transpose2d_params tp;
    tp.stride = cp.stride;
    tp.padding = cp.padding;
    tp.dilation = cp.dilation;
    tp.groups = cp.groups;
    // conv2d maps H = 9 to 5 and W = 11 to 3; the transpose maps 5 back to 9 and 3 to
    // 9 + output_padding, so W needs output_padding 2 (below max(stride 3, dilation 2)).
    tp.output_padding = {0, 2};
    const tensor tv = conv_transpose2d(v, w, {}, tp);
    REQUIRE(tv.shape() == u.shape());
    const double lhs = to_vector(sum(cu * v))[0], rhs = to_vector(sum(u * tv))[0];
    CHECK(std::abs(lhs - rhs) <= 1e-12 * std::abs(lhs));
}

TEST_CASE("upsample keeps a non-finite input to the outputs that read it, as PyTorch")
{
    std::vector<double> v(16, 1.0);
    v[5] = HUGE_VAL; // row 1, column 1 of a 4x4 image
    const tensor x = from_host(v.data(), {1, 1, 4, 4}, dtype::float64);
    upsample_params p;
    p.mode = "bilinear";
    p.size = std::array<std::int64_t, 2>{8, 8};
    const std::vector<double> y = to_vector(upsample(x, p));
    std::size_t finite = 0;
    for (double e : y)
        finite += std::isfinite(e) ? 1 : 0;
    // Source positions max((o + 0.5) / 2 - 0.5, 0): outputs 0..4 have input 1 as one of their
    // two neighbours (output 0 with weight 0, and 0 * inf is NaN in PyTorch's formula too), so
    // 5 x 5 of the 64 outputs are not finite. A dense interpolation matrix would spread the
    // infinity to all 64.
    CHECK(finite == 64 - 25);
}

TEST_CASE("conv_transpose2d and upsample name what is wrong")
{
    const tensor x = zeros({1, 4, 3, 3}, dtype::float32);
    const tensor w = zeros({4, 2, 3, 3}, dtype::float32);
    conv_transpose2d_params p;
    CHECK_ERROR(conv_transpose2d(x, zeros({3, 2, 3, 3}), {}, p), xgrad::invalid_argument, "conv_transpose2d",
                "expects 3 input channels", "[1, 4, 3, 3]");
    p.stride = {2, 2};
    p.output_padding = {2, 0};
    CHECK_ERROR(conv_transpose2d(x, w, {}, p), xgrad::invalid_argument, "conv_transpose2d", "output_padding", "{2, 0}");
    p = {};
    p.groups = 3;
    CHECK_ERROR(conv_transpose2d(x, w, {}, p), xgrad::invalid_argument, "conv_transpose2d", "groups = 3");
    p = {};
    CHECK_ERROR(conv_transpose2d(x, w, zeros({3}), p), xgrad::invalid_argument, "bias must have shape [2]");
    p.padding = {4, 4};
    CHECK_ERROR(conv_transpose2d(x, w, {}, p), xgrad::invalid_argument, "output would be empty");
    p = {};
    p.stride = {0, 1};
    CHECK_ERROR(conv_transpose2d(x, w, {}, p), xgrad::invalid_argument, "conv_transpose2d", "stride");
    p = {};
    p.stride = {std::int64_t{1} << 30, 1};
    CHECK_ERROR(conv_transpose2d(zeros({1, 4, 1, 1}).expand({1, 4, std::int64_t{1} << 34, 1}), w, {}, p),
                xgrad::invalid_argument, "conv_transpose2d", "overflows");

    upsample_params u;
    CHECK_ERROR(upsample(x, u), xgrad::invalid_argument, "upsample", "exactly one of size and scale_factor");
    u.scale_factor = std::array<double, 2>{2.0, 0.0};
    CHECK_ERROR(upsample(x, u), xgrad::invalid_argument, "upsample", "scale_factor must be positive");
    u.scale_factor = std::array<double, 2>{0.1, 1.0};
    CHECK_ERROR(upsample(x, u), xgrad::invalid_argument, "upsample", "gives 0");
    u.scale_factor = std::array<double, 2>{2.0, 2.0};
    u.align_corners = true;
    CHECK_ERROR(upsample(x, u), xgrad::invalid_argument, "align_corners", "bilinear");
    u.align_corners = false;
    u.mode = "bicubic";
    CHECK_ERROR(upsample(x, u), xgrad::invalid_argument, "upsample", "\"bicubic\"");
    u.mode = "nearest";
    CHECK_ERROR(upsample(zeros({4, 3, 3}), u), xgrad::invalid_argument, "upsample", "4 dimensions");
    CHECK_ERROR(upsample(x, u, "NDHWC"), xgrad::invalid_argument, "upsample", "data_format");
}
