#pragma once
// The table of first- and second-order finite-difference checks of every differentiable op:
// one row per op, so adding an op to the checks costs one line. The unary op codes' rows come
// from the op table (tests/support/op_cases.hpp), so a unary op added there is checked here too.
// test_gradcheck.cpp runs it on the CPU, test_cuda_gradcheck.cpp on cuda:0 (make_inputs puts
// the inputs on a device; the rows' constants follow them with on()).
#include <doctest/doctest.h>

#include <cmath>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "tests/support/op_cases.hpp"
#include "xgrad/xgrad.hpp"

namespace gradcheck_cases
{
    using namespace xgrad;

    using args = std::vector<tensor>;

    /// Where an op's inputs are drawn (the op table's domains, tests/support/op_cases.hpp).
    using tests::domain;

    struct op_case
    {
        const char* name;
        std::vector<shape_type> shapes;
        domain dom;
        std::function<tensor(const args&)> f;
        /// When set, inputs are redrawn (from further seeds) until it accepts them: for kinks
        /// that depend on several inputs together, which a per-input domain cannot avoid.
        std::function<bool(const args&)> accept = nullptr;
    };

    // Positions into a [3, 4] tensor, with repeats (put_add adds them up; take's gradient too).
    /// t on the device of the op's inputs: the table's constants live on the CPU and follow
    /// the inputs, so the same rows run on every device.
    inline tensor on(const args& x, const tensor& t) { return t.to(x[0].device()); }

    inline const tensor positions = [] {
        const std::int64_t p[9] = {0, 5, 5, 11, 2, 7, 7, 7, 3};
        return from_host(p, {3, 3}, dtype::int64);
    }();

    inline const tensor labels = [] {
        const std::int64_t l[4] = {2, 0, 1, 2};
        return from_host(l, {4}, dtype::int64);
    }();

    // Batch norm + ReLU (NCHW [2, 3, 2, 2] or NHWC [2, 2, 2, 3], 3 channels, epsilon 1e-3): the
    // population statistics of inference, and the offset of the gradient rows.
    inline const double bn_constants[9] = {0.3, -0.2, 0.1, 0.8, 1.3, 0.6, 0.4, -0.5, 0.2};
    inline const tensor bn_mean = from_host(bn_constants, {3}, dtype::float64);
    inline const tensor bn_var = from_host(bn_constants + 3, {3}, dtype::float64);
    inline const tensor bn_offset = from_host(bn_constants + 6, {3}, dtype::float64);

    inline batch_norm_attrs bn_attrs(const char* format, bool training)
    {
        batch_norm_attrs at;
        at.data_format = format;
        at.is_training = training;
        at.epsilon = 1e-3f;
        return at;
    }

    /// (x, scale, offset) -> y of fused_batch_norm_relu.
    inline tensor bn_relu(const args& a, const char* format, bool training)
    {
        return fused_batch_norm_relu(a[0], a[1], a[2], on(a, bn_mean), on(a, bn_var), bn_attrs(format, training)).y;
    }

    /// (dy, x, scale) -> fused_batch_norm_relu_grad's three outputs, flattened and concatenated,
    /// with y and (in training) the saved statistics recomputed from x and scale as a network's
    /// forward would; offset bn_offset.
    inline tensor bn_relu_grad(const args& a, const char* format, bool training)
    {
        const batch_norm_attrs at = bn_attrs(format, training);
        const auto f = fused_batch_norm_relu(a[1].detach(), a[2].detach(), on(a, bn_offset), on(a, bn_mean),
                                             on(a, bn_var), at);
        const auto r = fused_batch_norm_relu_grad(a[0], a[1], f.y, a[2], training ? f.saved_mean : on(a, bn_mean),
                                                  training ? f.saved_var : on(a, bn_var), at);
        return concat({reshape(r.dx, {-1}), r.dscale, r.doffset}, 0);
    }

    /// The batch-norm output before the ReLU of a row's inputs, not recorded: x, scale, offset
    /// are a[0], a[1], a[2] (the forward rows) or a[1], a[2] and bn_offset (the gradient rows).
    inline tensor bn_before_relu(const args& a, const char* format, bool training, bool grad_row)
    {
        no_grad guard;
        const std::size_t i = grad_row ? 1 : 0;
        const tensor offset = grad_row ? on(a, bn_offset) : a[2];
        return fused_batch_norm(a[i], a[i + 1], offset, on(a, bn_mean), on(a, bn_var), bn_attrs(format, training)).y;
    }

    /// Accepts inputs whose batch-norm outputs before the ReLU are all at least 0.05 from its
    /// kink at 0, far beyond the finite-difference steps, and of both signs (the mask is not
    /// trivial): x, scale, offset are a[0], a[1], a[2] (the forward rows) or a[1], a[2] and
    /// bn_offset (the gradient rows).
    inline std::function<bool(const args&)> bn_away_from_kink(const char* format, bool training, bool grad_row)
    {
        return [=](const args& a) {
            const tensor y = bn_before_relu(a, format, training, grad_row);
            bool positive = false, negative = false;
            for (double v : to_vector(y))
            {
                if (std::abs(v) < 0.05)
                    return false;
                (v > 0 ? positive : negative) = true;
            }
            return positive && negative;
        };
    }

    /// (x, scale, offset) -> y of fused_batch_norm_relu_max_pool2d over 2x2 windows.
    inline tensor bn_relu_pool(const args& a, const char* format, bool training)
    {
        return fused_batch_norm_relu_max_pool2d(a[0], a[1], a[2], on(a, bn_mean), on(a, bn_var),
                                                bn_attrs(format, training), pool2d_params{})
            .y;
    }

    /// (g, x, scale) -> the gradients of bn_relu_pool's y w.r.t. x and scale at the cotangent
    /// g (offset bn_offset), flattened and concatenated: the first-order backward as a
    /// function, so that its second-order check is the op's third order.
    inline tensor bn_relu_pool_grad(const args& a, const char* format, bool training)
    {
        const auto f = fused_batch_norm_relu_max_pool2d(a[1], a[2], on(a, bn_offset), on(a, bn_mean), on(a, bn_var),
                                                        bn_attrs(format, training), pool2d_params{});
        const std::vector<tensor> g = grad({f.y}, {a[1], a[2]}, {a[0]}, true, true);
        return concat({reshape(g[0], {-1}), g[1]}, 0);
    }

    /// Accepts inputs whose every 2x2 window (x [N, C, H, W] or [N, H, W, C]) has its largest
    /// batch-norm output before the ReLU at least 0.05 from the ReLU's kink, and, when that
    /// is positive, 0.05 above the window's next value (the pick stays put under the
    /// finite-difference steps); some windows positive, some not. x, scale, offset: as in
    /// bn_away_from_kink.
    inline std::function<bool(const args&)> bn_pool_away_from_kinks(const char* format, bool training, bool grad_row)
    {
        return [=](const args& a) {
            const tensor y = bn_before_relu(a, format, training, grad_row);
            const std::vector<double> v = to_vector(y);
            const shape_type& s = y.shape();
            const bool cl = std::string(format) == "NHWC";
            const std::int64_t C = cl ? s[3] : s[1], H = cl ? s[1] : s[2], W = cl ? s[2] : s[3];
            const auto at = [&](std::int64_t n, std::int64_t c, std::int64_t h, std::int64_t w) {
                return v[static_cast<std::size_t>(cl ? ((n * H + h) * W + w) * C + c : ((n * C + c) * H + h) * W + w)];
            };
            bool positive = false, negative = false;
            for (std::int64_t n = 0; n < s[0]; ++n)
                for (std::int64_t c = 0; c < C; ++c)
                    for (std::int64_t h = 0; h + 1 < H; h += 2)
                        for (std::int64_t w = 0; w + 1 < W; w += 2)
                        {
                            double top = -1e300, next = -1e300;
                            for (const double t :
                                 {at(n, c, h, w), at(n, c, h, w + 1), at(n, c, h + 1, w), at(n, c, h + 1, w + 1)})
                                if (t > top)
                                {
                                    next = top;
                                    top = t;
                                }
                                else if (t > next)
                                    next = t;
                            if (std::abs(top) < 0.05 || (top > 0 && top - next < 0.05))
                                return false;
                            (top > 0 ? positive : negative) = true;
                        }
            return positive && negative;
        };
    }

    /// Accepts inputs none of whose elements lies within 0.05 of a kink (clamp's bounds), far
    /// beyond the finite-difference steps.
    inline std::function<bool(const args&)> away_from(std::vector<double> kinks)
    {
        return [kinks](const args& a) {
            for (double v : to_vector(a[0]))
                for (double k : kinks)
                    if (std::abs(v - k) < 0.05)
                        return false;
            return true;
        };
    }

    // The losses' constants (their rows are together in the table below).
    inline const tensor labels_ignored = [] {
        const std::int64_t l[5] = {2, -100, 1, 0, 2};
        return from_host(l, {5}, dtype::int64);
    }();
    /// Labels of a [2, 3, 2, 3] input (3 classes), class 1 among them (ignored by the rows
    /// whose ignore_index is 1).
    inline const tensor labels_spatial = [] {
        const std::int64_t l[12] = {0, 1, 2, 2, 0, 1, 1, 2, 0, 0, 2, 1};
        return from_host(l, {2, 2, 3}, dtype::int64);
    }();
    inline const double loss_weights[4] = {0.5, 1.5, 1.0, 2.0};
    inline const tensor class_weights = from_host(loss_weights, {3}, dtype::float64);
    inline const tensor column_weights = from_host(loss_weights, {4}, dtype::float64);

    inline nll_loss_options nll_options(reduction red, const tensor& weight, std::int64_t ignore_index)
    {
        nll_loss_options o;
        o.red = red;
        o.weight = weight;
        o.ignore_index = ignore_index;
        return o;
    }

    inline cross_entropy_options ce_options(reduction red, const tensor& weight, std::int64_t ignore_index,
                                            double label_smoothing)
    {
        cross_entropy_options o;
        o.red = red;
        o.weight = weight;
        o.ignore_index = ignore_index;
        o.label_smoothing = label_smoothing;
        return o;
    }

    /// Accepts inputs whose elementwise distances |a[0] - a[1]| lie at least 0.05 from each of
    /// `seams` (a piecewise loss's), far beyond the finite-difference steps.
    inline std::function<bool(const args&)> differences_away_from(std::vector<double> seams)
    {
        return [seams](const args& a) {
            const std::vector<double> x = to_vector(a[0]), y = to_vector(a[1]);
            for (std::size_t i = 0; i < x.size(); ++i)
                for (double s : seams)
                    if (std::abs(std::abs(x[i] - y[i]) - s) < 0.05)
                        return false;
            return true;
        };
    }

#define F(expr)                                                                                                        \
    [](const args& x) {                                                                                                \
        (void)x;                                                                                                       \
        return expr;                                                                                                   \
    }
    // clang-format off
    inline const std::vector<op_case> cases = [] {
    std::vector<op_case> rows = {
        {"add (broadcast)",    {{3, 4}, {4}},           domain::any,      F(add(x[0], x[1]))},
        {"sub (broadcast)",    {{3, 1}, {1, 4}},        domain::any,      F(sub(x[0], x[1]))},
        {"mul (broadcast)",    {{2, 3, 4}, {3, 1}},     domain::any,      F(mul(x[0], x[1]))},
        {"div (broadcast)",    {{3, 4}, {4}},           domain::positive, F(div(x[0], x[1]))},
        {"pow (tensor)",       {{3, 4}, {3, 4}},        domain::positive, F(pow(x[0], x[1]))},
        {"pow (scalar)",       {{3, 4}},                domain::positive, F(pow(x[0], 2.5))},
        {"square",             {{3, 4}},                domain::any,      F(square(x[0]))},
        {"where",              {{3, 4}, {4}},           domain::any,      F(where(gt(x[0].detach(), scalar_like(x[0], 0.0)), x[0], x[1]))},
        {"sum (axes)",         {{2, 3, 4}},             domain::any,      F(sum(x[0], {0, 2}))},
        {"sum (keepdim)",      {{2, 3, 4}},             domain::any,      F(sum(x[0], {-1}, true))},
        {"sum (all)",          {{3, 4}},                domain::any,      F(sum(x[0]))},
        {"mean",               {{2, 3, 4}},             domain::any,      F(mean(x[0], {1}))},
        {"max (axis)",         {{3, 5}},                domain::any,      F(max(x[0], {1}))},
        {"max (all, keepdim)", {{3, 4}},                domain::any,      F(max(x[0], {}, true))},
        {"matmul",             {{3, 4}, {4, 2}},        domain::any,      F(matmul(x[0], x[1]))},
        {"matmul (batched)",   {{2, 1, 3, 4}, {3, 4, 2}}, domain::any,    F(matmul(x[0], x[1]))},
        {"matmul (vector)",    {{4}, {2, 4, 3}},        domain::any,      F(matmul(x[0], x[1]))},
        {"matmul (transposed view)", {{4, 3}, {4, 2}},  domain::any,      F(matmul(transpose(x[0], 0, 1), x[1]))},
        {"matmul (transposed right operand)", {{3, 4}, {2, 4}}, domain::any, F(matmul(x[0], transpose(x[1], 0, 1)))},
        {"matmul (both operands transposed)", {{4, 3}, {2, 4}}, domain::any,
         F(matmul(transpose(x[0], 0, 1), transpose(x[1], 0, 1)))},
        {"matmul_add (bias per column)", {{3, 4}, {4, 2}, {2}}, domain::any, F(matmul_add(x[0], x[1], x[2]))},
        {"matmul_add (batched, bias per row)", {{2, 3, 4}, {4, 2}, {3, 1}}, domain::any, F(matmul_add(x[0], x[1], x[2]))},
        {"matmul_add (full addend, transposed view)", {{4, 3}, {4, 2}, {3, 2}}, domain::any,
         F(matmul_add(transpose(x[0], 0, 1), x[1], x[2]))},
        {"matmul_add (linear: x w^T + b)", {{3, 4}, {2, 4}, {2}}, domain::any,
         F(matmul_add(x[0], transpose(x[1], 0, 1), x[2]))},
        {"reshape",            {{3, 4}},                domain::any,      F(mul(reshape(x[0], {2, -1}), reshape(x[0], {2, 6})))},
        {"permute",            {{2, 3, 4}},             domain::any,      F(mul(permute(x[0], {2, 0, 1}), permute(x[0], {2, 0, 1})))},
        {"transpose",          {{3, 4}, {4, 3}},        domain::any,      F(mul(transpose(x[0], 0, 1), x[1]))},
        {"slice",              {{5, 4}},                domain::any,      F(square(slice(x[0], 0, 1, 5, 2)))},
        {"slice (negative)",   {{5, 4}},                domain::any,      F(square(slice(x[0], 1, -3, -1)))},
        {"slice (negative step)", {{5, 4}},             domain::any,      F(mul(slice(x[0], 0, 4, 0, -2), slice(x[0], 0, 3, -6, -2)))},
        {"flip",               {{2, 3, 4}},             domain::any,      F(mul(flip(x[0], {0, 2}), x[0]))},
        {"clamp",              {{3, 4}},                domain::any,      F(square(clamp(x[0], -0.5, 0.7))), away_from({-0.5, 0.7})},
        {"clamp (min only)",   {{3, 4}},                domain::any,      F(square(clamp(x[0], 0.1, std::nullopt))), away_from({0.1})},
        {"softplus",           {{3, 4}},                domain::any,      F(softplus(x[0]))},
        {"softplus (beta 2.5)", {{3, 4}},               domain::any,      F(softplus(x[0], 2.5))},
        {"silu",               {{3, 4}},                domain::any,      F(silu(x[0]))},
        {"gelu",               {{3, 4}},                domain::any,      F(gelu(x[0]))},
        {"gelu (tanh)",        {{3, 4}},                domain::any,      F(gelu(x[0], "tanh"))},
        {"leaky_relu",         {{3, 4}},                domain::any,      F(square(leaky_relu(x[0], 0.2))), away_from({0.0})},
        {"elu",                {{3, 4}},                domain::any,      F(elu(x[0], 0.5)), away_from({0.0})},
        {"relu6",              {{3, 4}},                domain::any,      F(square(relu6(mul(x[0], scalar_like(x[0], 4.0))))), away_from({0.0, 1.5})},
        {"hardsigmoid",        {{3, 4}},                domain::any,      F(square(hardsigmoid(mul(x[0], scalar_like(x[0], 4.0))))), away_from({-0.75, 0.75})},
        {"hardswish",          {{3, 4}},                domain::any,      F(hardswish(mul(x[0], scalar_like(x[0], 4.0)))), away_from({-0.75, 0.75})},
        {"expand",             {{3, 1}},                domain::any,      F(square(expand(x[0], {2, 3, 4})))},
        {"sum_to",             {{2, 3, 4}},             domain::any,      F(square(sum_to(x[0], {3, 1})))},
        {"concat",             {{2, 3}, {4, 3}},        domain::any,      F(square(concat({x[0], x[1]}, 0)))},
        {"pad",                {{2, 3}},                domain::any,      F(square(pad(x[0], {{1, 0}, {2, 1}}, 0.5)))},
        {"contiguous",         {{3, 4}},                domain::any,      F(square(contiguous(transpose(x[0], 0, 1))))},
        {"identity",           {{3, 4}},                domain::any,      F(mul(identity(x[0]), x[0]))},
        {"layer_norm",         {{3, 4, 5}, {4, 5}, {4, 5}}, domain::any,  F(layer_norm(x[0], {4, 5}, x[1], x[2], 1e-3))},
        {"group_norm",         {{2, 6, 3, 2}, {6}, {6}}, domain::any,     F(group_norm(x[0], 3, x[1], x[2], 1e-3))},
        {"instance_norm (no affine)", {{2, 3, 4}},      domain::any,      F(instance_norm(x[0], {}, {}, 1e-3))},
        {"log_softmax",        {{3, 4}},                domain::any,      F(log_softmax(x[0], 1))},
        {"softmax",            {{3, 4}},                domain::any,      F(softmax(x[0], 0))},
        // Losses (xgrad/ops/loss.hpp): every loss and option; the piecewise ones drawn away
        // from their seams (differences_away_from).
        {"cross_entropy",      {{4, 3}},                domain::any,      F(cross_entropy(x[0], on(x, labels)))},
        {"cross_entropy (smoothing, sum)", {{4, 3}},    domain::any,      F(cross_entropy(x[0], on(x, labels), reduction::sum, 0.1))},
        {"cross_entropy (weight as input, ignored label, smoothing, mean)", {{5, 3}, {3}}, domain::positive,
         F(cross_entropy(x[0], on(x, labels_ignored), ce_options(reduction::mean, x[1], -100, 0.2)))},
        {"cross_entropy (K-dim, weight, ignore_index a class, smoothing, sum)", {{2, 3, 2, 3}}, domain::any,
         F(cross_entropy(x[0], on(x, labels_spatial), ce_options(reduction::sum, on(x, class_weights), 1, 0.3)))},
        {"cross_entropy (probabilities, weight, smoothing, none)", {{4, 3}, {4, 3}}, domain::any,
         F(cross_entropy(x[0], softmax(x[1], 1), ce_options(reduction::none, on(x, class_weights), -100, 0.1)))},
        {"cross_entropy (one sample)", {{3}},           domain::any,      F(cross_entropy(x[0], on(x, labels.slice(0, 0, 1).reshape({}))))},
        {"nll_loss (weight as input, ignored label, mean)", {{5, 3}, {3}}, domain::positive,
         F(nll_loss(x[0], on(x, labels_ignored), nll_options(reduction::mean, x[1], -100)))},
        {"nll_loss (K-dim, ignore_index a class, none)", {{2, 3, 2, 3}}, domain::any,
         F(nll_loss(x[0], on(x, labels_spatial), nll_options(reduction::none, {}, 1)))},
        {"binary_cross_entropy (weight, mean)", {{3, 4}, {3, 4}}, domain::any,
         F(binary_cross_entropy(sigmoid(x[0]), sigmoid(x[1]), reduction::mean, on(x, column_weights)))},
        {"binary_cross_entropy_with_logits (weight, pos_weight, sum)", {{3, 4}, {3, 4}}, domain::any,
         F(binary_cross_entropy_with_logits(x[0], sigmoid(x[1]), reduction::sum, on(x, column_weights), on(x, column_weights) * 2.0))},
        {"mse_loss",           {{3, 4}, {3, 4}},        domain::any,      F(mse_loss(x[0], x[1]))},
        {"l1_loss (sum)",      {{3, 4}, {3, 4}},        domain::any,      F(l1_loss(x[0], x[1], reduction::sum)), differences_away_from({0.0})},
        {"smooth_l1_loss (beta 0.5)", {{3, 4}, {3, 4}}, domain::any,      F(smooth_l1_loss(x[0], x[1], reduction::mean, 0.5)), differences_away_from({0.5})},
        {"smooth_l1_loss (beta 0, none)", {{3, 4}, {3, 4}}, domain::any,  F(smooth_l1_loss(x[0], x[1], reduction::none, 0.0)), differences_away_from({0.0})},
        {"huber_loss (delta 0.7, none)", {{3, 4}, {3, 4}}, domain::any,   F(huber_loss(x[0], x[1], reduction::none, 0.7)), differences_away_from({0.7})},
        {"kl_div (batchmean)", {{3, 4}, {3, 4}},        domain::positive, F(kl_div(x[0], x[1], reduction::batchmean))},
        {"kl_div (log_target, none)", {{3, 4}, {3, 4}}, domain::any,      F(kl_div(x[0], x[1], reduction::none, true))},
        {"take",               {{3, 4}},                domain::any,      F(square(take(x[0], on(x, positions))))},
        {"put_add",            {{2, 3}},                domain::any,      F(square(put_add(x[0], on(x, positions.slice(0, 0, 2)), {3, 4})))},
        {"unfold2d",           {{2, 2, 5, 4}},          domain::any,      F(square(unfold2d(x[0], window2d{{3, 2}, {2, 1}, {1, 1}, {1, 2}}, "NCHW", 0.5)))},
        {"fold2d",             {{24, 12}},              domain::any,      F(square(fold2d(x[0], {2, 5, 4, 2}, window2d{{3, 2}, {2, 1}, {1, 1}, {1, 2}}, "NHWC")))},
        {"conv2d (NCHW)",      {{2, 2, 5, 5}, {3, 2, 3, 3}, {3}}, domain::any, F(conv2d(x[0], x[1], x[2], conv2d_params{{2, 1}, {1, 1}, {1, 2}, 1}))},
        {"conv2d (NHWC, groups)", {{2, 5, 4, 4}, {4, 2, 2, 3}, {4}}, domain::any, F(conv2d(x[0], x[1], x[2], conv2d_params{{1, 2}, {1, 1}, {2, 1}, 2}, "NHWC"))},
        {"conv_transpose2d (NCHW, stride, output_padding)", {{2, 2, 3, 3}, {2, 3, 2, 3}, {3}}, domain::any,
         F(conv_transpose2d(x[0], x[1], x[2], conv_transpose2d_params{{2, 1}, {1, 0}, {1, 0}, {1, 2}, 1}))},
        {"conv_transpose2d (NHWC, groups)", {{1, 3, 2, 4}, {4, 1, 3, 2}, {2}}, domain::any,
         F(conv_transpose2d(x[0], x[1], x[2], conv_transpose2d_params{{1, 2}, {0, 1}, {0, 1}, {1, 1}, 2}, "NHWC"))},
        {"upsample (nearest, fractional)", {{1, 2, 3, 4}}, domain::any,
         F(square(upsample(x[0], upsample_params{std::array<std::int64_t, 2>{5, 7}, std::nullopt, "nearest", false})))},
        {"upsample (bilinear, NHWC)", {{1, 3, 4, 2}}, domain::any,
         F(square(upsample(x[0], upsample_params{std::nullopt, std::array<double, 2>{1.5, 0.8}, "bilinear", false}, "NHWC")))},
        {"upsample (bilinear, align_corners)", {{1, 2, 3, 3}}, domain::any,
         F(square(upsample(x[0], upsample_params{std::array<std::int64_t, 2>{5, 4}, std::nullopt, "bilinear", true})))},
        {"max_pool2d",         {{2, 2, 5, 6}},          domain::any,      F(max_pool2d(x[0], pool2d_params{{3, 3}, std::array<std::int64_t, 2>{2, 2}, {1, 1}, {1, 1}, true}))},
        {"max_pool2d (disjoint windows, NHWC)", {{2, 7, 6, 2}}, domain::any, F(max_pool2d(x[0], pool2d_params{{2, 3}, std::array<std::int64_t, 2>{3, 3}, {1, 1}, {1, 1}, true}, "NHWC"))},
        {"avg_pool2d",         {{2, 5, 6, 2}},          domain::any,      F(avg_pool2d(x[0], pool2d_params{{3, 2}, std::array<std::int64_t, 2>{1, 2}, {1, 1}, {1, 1}, false}, "NHWC"))},
        {"adaptive_avg_pool2d", {{2, 2, 7, 5}},         domain::any,      F(adaptive_avg_pool2d(x[0], {3, 2}))},
        {"fused_batch_norm_relu (training, NCHW)",  {{2, 3, 2, 2}, {3}, {3}}, domain::any, F(bn_relu(x, "NCHW", true)),  bn_away_from_kink("NCHW", true, false)},
        {"fused_batch_norm_relu (training, NHWC)",  {{2, 2, 2, 3}, {3}, {3}}, domain::any, F(bn_relu(x, "NHWC", true)),  bn_away_from_kink("NHWC", true, false)},
        {"fused_batch_norm_relu (inference, NCHW)", {{2, 3, 2, 2}, {3}, {3}}, domain::any, F(bn_relu(x, "NCHW", false)), bn_away_from_kink("NCHW", false, false)},
        {"fused_batch_norm_relu (inference, NHWC)", {{2, 2, 2, 3}, {3}, {3}}, domain::any, F(bn_relu(x, "NHWC", false)), bn_away_from_kink("NHWC", false, false)},
        {"fused_batch_norm_relu_grad (training, NCHW)",  {{2, 3, 2, 2}, {2, 3, 2, 2}, {3}}, domain::any, F(bn_relu_grad(x, "NCHW", true)),  bn_away_from_kink("NCHW", true, true)},
        {"fused_batch_norm_relu_grad (training, NHWC)",  {{2, 2, 2, 3}, {2, 2, 2, 3}, {3}}, domain::any, F(bn_relu_grad(x, "NHWC", true)),  bn_away_from_kink("NHWC", true, true)},
        {"fused_batch_norm_relu_grad (inference, NCHW)", {{2, 3, 2, 2}, {2, 3, 2, 2}, {3}}, domain::any, F(bn_relu_grad(x, "NCHW", false)), bn_away_from_kink("NCHW", false, true)},
        {"fused_batch_norm_relu_grad (inference, NHWC)", {{2, 2, 2, 3}, {2, 2, 2, 3}, {3}}, domain::any, F(bn_relu_grad(x, "NHWC", false)), bn_away_from_kink("NHWC", false, true)},
        {"fused_batch_norm_relu_max_pool2d (training, NCHW)",  {{2, 3, 2, 4}, {3}, {3}}, domain::any, F(bn_relu_pool(x, "NCHW", true)),  bn_pool_away_from_kinks("NCHW", true, false)},
        {"fused_batch_norm_relu_max_pool2d (training, NHWC)",  {{2, 2, 4, 3}, {3}, {3}}, domain::any, F(bn_relu_pool(x, "NHWC", true)),  bn_pool_away_from_kinks("NHWC", true, false)},
        {"fused_batch_norm_relu_max_pool2d (inference, NCHW)", {{2, 3, 2, 4}, {3}, {3}}, domain::any, F(bn_relu_pool(x, "NCHW", false)), bn_pool_away_from_kinks("NCHW", false, false)},
        {"fused_batch_norm_relu_max_pool2d (inference, NHWC)", {{2, 2, 4, 3}, {3}, {3}}, domain::any, F(bn_relu_pool(x, "NHWC", false)), bn_pool_away_from_kinks("NHWC", false, false)},
        {"fused_batch_norm_relu_max_pool2d backward (training, NCHW)", {{2, 3, 1, 2}, {2, 3, 2, 4}, {3}}, domain::any, F(bn_relu_pool_grad(x, "NCHW", true)), bn_pool_away_from_kinks("NCHW", true, true)},
        {"fused_batch_norm_relu_max_pool2d backward (training, NHWC)", {{2, 1, 2, 3}, {2, 2, 4, 3}, {3}}, domain::any, F(bn_relu_pool_grad(x, "NHWC", true)), bn_pool_away_from_kinks("NHWC", true, true)},
    };
    for (const tests::unary_case& u : tests::unary_cases) // one [3, 4] input in the op's domain
        rows.push_back({u.name, {{3, 4}}, u.dom, [f = u.apply](const args& x) { return f(x[0]); }});
    return rows;
    }();
    // clang-format on
#undef F

    inline std::vector<tensor> make_inputs(const op_case& c, std::uint64_t seed, device dev = cpu_device)
    {
        for (int attempt = 0; attempt < 100; ++attempt, seed += 1000)
        {
            generator gen(seed);
            std::vector<tensor> xs;
            for (const auto& s : c.shapes)
            {
                tensor z = randn(s, gen, dtype::float64);
                if (c.dom == domain::positive)
                    z = abs(z) + 0.5;
                else if (c.dom == domain::nonzero)
                    z = sign(z) * (abs(z) + 0.2);
                xs.push_back(z.to(dev).detach().requires_grad_());
            }
            if (!c.accept || c.accept(xs))
                return xs;
        }
        FAIL("no accepted inputs in 100 draws for " << c.name);
        return {};
    }

    inline gradcheck_function wrap(const op_case& c)
    {
        return [f = c.f](const args& x) { return std::vector<tensor>{f(x)}; };
    }
}
