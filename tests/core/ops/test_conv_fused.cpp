// conv2d's fused products (core/src/ops/conv_gemm.cpp) against the composition they fuse,
// written here with unfold2d, matmul/matmul_add and the shape ops: the forward value, the
// first-order gradients, and the second-order gradients that run each fused op's own backward
// rules, in both layouts, with groups, stride, padding and dilation, at several blockings of
// the batch (one image per block, blocks with a remainder, the whole batch); and the bits of
// all of them at 1, 2 and 3 threads. Finite-difference checks of the first and second order
// are in test_conv_convolution.cpp; here they run again with one image per block.
//
// Tolerance: every quantity compared is, per element, a sum of products of the inputs'
// entries, with at most T = N * L * K * O terms (L output positions, K taps, O output
// channels per group), so any two summation orders of it in float64 differ by at most
// 2 T u S, where S is the sum of the absolute values of the terms (see conv_test_helpers.hpp).
// Every map involved (unfold, fold, GEMM, sums) is multilinear with nonnegative coefficients,
// so S is exactly the same quantity computed from the absolute values of the inputs; the
// oracle computes it that way.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "core/src/ops/conv_internal.hpp"
#include "tests/core/ops/conv_test_helpers.hpp"
#include "xgrad/xgrad.hpp"

using namespace xgrad;
using namespace conv_test;

namespace
{
    struct fused_case
    {
        std::int64_t n, c, h, w, o, kh, kw;
        pair stride, padding, dilation;
        std::int64_t groups;
        bool bias;
    };

    const std::vector<fused_case> fused_cases = {
        {5, 3, 7, 6, 4, 3, 3, {1, 1}, {1, 1}, {1, 1}, 1, true},
        {5, 4, 9, 8, 6, 3, 2, {2, 1}, {1, 2}, {2, 1}, 2, false},
        {3, 1, 6, 6, 2, 1, 1, {1, 1}, {0, 0}, {1, 1}, 1, true}, // 1x1 kernel, one channel
    };

    conv2d_params params_of(const fused_case& k)
    {
        conv2d_params p;
        p.stride = k.stride;
        p.padding = k.padding;
        p.dilation = k.dilation;
        p.groups = k.groups;
        return p;
    }

    /// The composition conv2d fuses, from the public ops.
    tensor composite_conv(const tensor& x, const tensor& wt, const tensor& b, const conv2d_params& p, bool cl)
    {
        const std::int64_t c_axis = cl ? 3 : 1, groups = p.groups;
        const std::int64_t o = wt.shape()[0], og = o / groups, cg = wt.shape()[1];
        const std::int64_t k = cg * wt.shape()[2] * wt.shape()[3], n = x.shape()[0];
        const window2d win{{wt.shape()[2], wt.shape()[3]}, p.stride, p.padding, p.dilation};
        std::vector<tensor> parts;
        for (std::int64_t g = 0; g < groups; ++g)
        {
            const tensor xg = slice(x, c_axis, g * cg, (g + 1) * cg);
            const tensor wg = slice(wt, 0, g * og, (g + 1) * og);
            const tensor cols = unfold2d(xg, win, fmt(cl));
            const auto out = window_output_size(win, x.shape()[cl ? 1 : 2], x.shape()[cl ? 2 : 3]);
            if (cl)
            {
                const tensor wm = reshape(permute(wg, {2, 3, 1, 0}), {k, og});
                const tensor y = b.defined() ? matmul_add(cols, wm, slice(b, 0, g * og, (g + 1) * og))
                                             : matmul(cols, wm);
                parts.push_back(reshape(y, {n, out[0], out[1], og}));
            }
            else
            {
                const tensor wm = reshape(wg, {og, k});
                const tensor y = b.defined() ? matmul_add(wm, cols, reshape(slice(b, 0, g * og, (g + 1) * og), {og, 1}))
                                             : matmul(wm, cols);
                parts.push_back(permute(reshape(y, {og, n, out[0], out[1]}), {1, 0, 2, 3}));
            }
        }
        return concat(parts, c_axis);
    }

    using conv_fn = tensor (*)(const tensor&, const tensor&, const tensor&, const conv2d_params&, bool);

    tensor fused_conv(const tensor& x, const tensor& wt, const tensor& b, const conv2d_params& p, bool cl)
    {
        return conv2d(x, wt, b, p, fmt(cl));
    }

    /// y, its first-order gradients for the loss sum(y * r), and the second-order gradients of
    /// sum(dx * s1) + sum(dw * s2) with respect to x, w and r. inputs: x, w, b, r, s1, s2.
    std::vector<tensor> quantities(conv_fn conv, const std::vector<tensor>& in, const conv2d_params& p, bool cl)
    {
        const tensor &x = in[0], &w = in[1], &b = in[2], &r = in[3], &s1 = in[4], &s2 = in[5];
        const tensor y = conv(x, w, b, p, cl);
        std::vector<tensor> first_inputs{x, w};
        if (b.defined())
            first_inputs.push_back(b);
        const auto g = grad({sum(y * r)}, first_inputs, {}, true, true);
        const tensor m = sum(g[0] * s1) + sum(g[1] * s2);
        const auto gg = grad({m}, {x, w, r}, {}, std::nullopt, false, true);
        std::vector<tensor> out{y.detach(), g[0].detach(), g[1].detach()};
        if (b.defined())
            out.push_back(g[2].detach());
        for (const tensor& t : gg)
            out.push_back(t.detach());
        return out;
    }

    std::vector<tensor> inputs_of(const fused_case& k, bool cl, bool absolute)
    {
        const image xi{k.n, k.c, k.h, k.w, cl};
        const auto p = params_of(k);
        const auto out_h = out_size(k.h, k.kh, p.stride[0], p.padding[0], p.dilation[0]);
        const auto out_w = out_size(k.w, k.kw, p.stride[1], p.padding[1], p.dilation[1]);
        const shape_type w_shape{k.o, k.c / k.groups, k.kh, k.kw};
        const shape_type y_shape = image{k.n, k.o, out_h, out_w, cl}.shape();
        std::vector<tensor> in{
            random_tensor(xi.shape(), 1), random_tensor(w_shape, 2),    k.bias ? random_tensor({k.o}, 3) : tensor{},
            random_tensor(y_shape, 4),    random_tensor(xi.shape(), 5), random_tensor(w_shape, 6)};
        for (tensor& t : in)
            if (t.defined())
            {
                if (absolute)
                    t = abs(t);
                t.requires_grad_();
            }
        return in;
    }

    /// Blocks sized by their cols elements alone (no lower bound on their count).
    struct block_guard
    {
        std::int64_t m_old, m_old_min;
        explicit block_guard(std::int64_t elements)
            : m_old(detail::conv_set_block_elements(elements)), m_old_min(detail::conv_set_min_blocks(1))
        {
        }
        ~block_guard()
        {
            detail::conv_set_block_elements(m_old);
            detail::conv_set_min_blocks(m_old_min);
        }
        block_guard(const block_guard&) = delete;
        block_guard& operator=(const block_guard&) = delete;
    };

    std::int64_t cols_per_image(const fused_case& k)
    {
        const auto p = params_of(k);
        return out_size(k.h, k.kh, p.stride[0], p.padding[0], p.dilation[0]) *
               out_size(k.w, k.kw, p.stride[1], p.padding[1], p.dilation[1]) * (k.c / k.groups) * k.kh * k.kw;
    }
}

TEST_CASE("conv2d's fused products match their composition, first and second order, at every blocking")
{
    for (std::size_t i = 0; i < fused_cases.size(); ++i)
        for (const bool cl : {false, true})
        {
            const fused_case& k = fused_cases[i];
            const auto p = params_of(k);
            const auto want = quantities(composite_conv, inputs_of(k, cl, false), p, cl);
            const auto mag = quantities(composite_conv, inputs_of(k, cl, true), p, cl);
            const double terms = static_cast<double>(k.n * cols_per_image(k) * (k.o / k.groups));
            // One image per block, blocks of 2 with a remainder (N = 5 or 3), the whole batch.
            for (const std::int64_t block : {std::int64_t{1}, 2 * cols_per_image(k), std::int64_t{1} << 30})
            {
                INFO("case ", i, " ", fmt(cl), " block elements ", block);
                const block_guard guard(block);
                const auto got = quantities(fused_conv, inputs_of(k, cl, false), p, cl);
                REQUIRE(got.size() == want.size());
                for (std::size_t q = 0; q < got.size(); ++q)
                {
                    INFO("quantity ", q, " (y, dx, dw, [db,] d2x, d2w, d2r)");
                    REQUIRE(got[q].shape() == want[q].shape());
                    const auto m = to_vector(mag[q]);
                    std::vector<double> bound(m.size());
                    for (std::size_t e = 0; e < m.size(); ++e)
                        bound[e] = 2 * terms * 0x1p-53 * m[e] + 1e-300;
                    check_within(got[q], to_vector(want[q]), bound);
                }
            }
        }
}

namespace
{
    void check_same_bits_at_thread_counts(const fused_case& k)
    {
        const int saved = get_num_threads();
        for (const bool cl : {false, true})
            for (const dtype dt : {dtype::float32, dtype::float64})
            {
                INFO(fmt(cl), " ", name(dt));
                std::vector<std::vector<std::vector<double>>> runs;
                for (const int threads : {1, 2, 3})
                {
                    set_num_threads(threads);
                    std::vector<tensor> in = inputs_of(k, cl, false);
                    for (tensor& t : in)
                        if (t.defined())
                            t = t.detach().to(dt).requires_grad_();
                    std::vector<std::vector<double>> values;
                    for (const tensor& t : quantities(fused_conv, in, params_of(k), cl))
                        values.push_back(to_vector(t));
                    runs.push_back(values);
                }
                set_num_threads(saved);
                CHECK(runs[1] == runs[0]);
                CHECK(runs[2] == runs[0]);
            }
    }
}

TEST_CASE("conv2d's fused products give the same bits at every thread count")
{
    {
        const fused_case k{7, 6, 10, 9, 8, 3, 3, {1, 1}, {1, 1}, {1, 1}, 1, true};
        const block_guard guard(3 * cols_per_image(k)); // blocks of 3, 3 and 1 images
        check_same_bits_at_thread_counts(k);
    }
    // The default blocking of a first layer (one input channel, 9 taps: the direct path in
    // channels-last): 37 images' cols fit a block, and the lower bound on the count of blocks
    // cuts the batch of 40 into blocks of 3.
    check_same_bits_at_thread_counts(fused_case{40, 1, 12, 12, 32, 3, 3, {1, 1}, {1, 1}, {1, 1}, 1, true});
}

TEST_CASE("conv2d gradients of the first and second order with one image per block")
{
    conv2d_params p;
    p.stride = {1, 2};
    p.padding = {1, 1};
    p.groups = 2;
    const block_guard guard(1);
    for (const bool cl : {false, true})
    {
        INFO(fmt(cl));
        const image xi{3, 4, 5, 6, cl};
        check_grads(
            [&](const std::vector<tensor>& a) { return std::vector<tensor>{conv2d(a[0], a[1], a[2], p, fmt(cl))}; },
            leaves({xi.shape(), {4, 2, 3, 3}, {4}}, 120));
    }
}
