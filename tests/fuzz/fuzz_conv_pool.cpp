// Fuzz target: conv2d, unfold2d, fold2d and window_output_size (xgrad/ops/conv.hpp) and the
// pools max_pool2d, avg_pool2d and adaptive_avg_pool2d (xgrad/ops/pool.hpp), forward and
// backward, with random geometry: the input's extents are small (empty ones included), the
// window fields come from fuzz_input's table (0, negative, 2^31 - 1, 2^31, 2^40, INT64_MAX,
// ...), both layouts and a bad one, all dtypes.
//
// The output size is predicted with exact (128-bit) arithmetic from the formula in conv.hpp,
// out = (in + 2 padding - dilation (kernel - 1) - 1) / stride + 1. A request the headers say is
// rejected (a field below its minimum, a conv window field above 2^31 - 1, an empty output, a
// pool padding above half the kernel, output_size < 1) must throw; a valid one whose result
// (the unfolded columns for unfold2d/conv2d/the pools) would exceed fuzz::max_elements is
// skipped; any other must succeed with the predicted shape. An empty batch with a valid window
// has an empty result, whatever the kernel: it must not allocate for the kernel's size.
#include <array>
#include <limits>
#include <string>

#include "tests/fuzz/fuzz_input.hpp"
#include "xgrad/autograd.hpp"
#include "xgrad/ops/conv.hpp"
#include "xgrad/ops/pool.hpp"

namespace
{
    using namespace xgrad;
    using fuzz::fuzz_input;
    constexpr const char* target = "conv_pool";
    constexpr __int128 int31_max = (__int128{1} << 31) - 1;

    std::string pair(const std::array<std::int64_t, 2>& p)
    {
        return "{" + std::to_string(p[0]) + ", " + std::to_string(p[1]) + "}";
    }

    std::string window_text(const window2d& w)
    {
        return "kernel " + pair(w.kernel) + " stride " + pair(w.stride) + " padding " + pair(w.padding) + " dilation " +
               pair(w.dilation);
    }

    /// A window field: usually small and valid, sometimes from the hostile table.
    std::array<std::int64_t, 2> field(fuzz_input& in, std::int64_t base, std::int64_t small_max)
    {
        std::array<std::int64_t, 2> f{};
        for (auto& v : f)
            v = in.integer_in(base, base + small_max);
        return f;
    }

    struct prediction
    {
        bool reject = false;
        std::array<__int128, 2> out{0, 0};
    };

    /// The contract of conv.hpp: the fields' ranges, then a non-empty output.
    prediction predict(const window2d& w, std::int64_t h, std::int64_t wd, bool conv_limits)
    {
        prediction p;
        const std::array<std::int64_t, 2> in{h, wd};
        for (int a = 0; a < 2; ++a)
        {
            const __int128 k = w.kernel[a], s = w.stride[a], pd = w.padding[a], d = w.dilation[a];
            if (k < 1 || s < 1 || d < 1 || pd < 0)
            {
                p.reject = true;
                return p;
            }
            if (conv_limits && (k > int31_max || s > int31_max || pd > int31_max || d > int31_max))
            {
                p.reject = true;
                return p;
            }
            const __int128 span = in[a] + 2 * pd - d * (k - 1) - 1;
            if (span < 0)
            {
                p.reject = true; // the window does not fit: an empty output
                return p;
            }
            p.out[a] = span / s + 1;
        }
        return p;
    }

    bool small(__int128 n) { return n >= 0 && n <= fuzz::max_elements; }

    /// a * b for a, b >= 0, saturated at 2^100 (the predictions multiply up to six factors).
    __int128 mul(__int128 a, __int128 b)
    {
        constexpr __int128 cap = __int128{1} << 100;
        if (a == 0 || b == 0)
            return 0;
        if (a >= cap || b >= cap || a > cap / b)
            return cap;
        return a * b;
    }

    void backward_of(const tensor& y)
    {
        if (y.defined() && y.requires_grad() && y.numel() <= fuzz::max_elements)
            y.backward(ones_like(y));
    }

    /// What every op is given: the op selector, x (its layout, dtype and extents) and a window.
    struct request
    {
        std::size_t op = 0;
        bool nhwc = false;
        std::string format;
        dtype dt = dtype::float32;
        std::int64_t n = 0, c = 0, h = 0, wd = 0;
        shape_type x_shape;
        tensor x;
        bool grad = false;
        bool bad_format = false;
        window2d w;
    };

    /// Reads the request; false when x would be too large to make.
    bool read_request(fuzz_input& in, request& r)
    {
        r.op = in.choice(7);
        const bool nhwc = in.boolean();
        r.nhwc = nhwc;
        r.format = nhwc ? "NHWC" : "NCHW";
        if (in.byte() >= 250)
            r.format = "HWCN";
        const dtype dt = in.floating_dtype();
        r.dt = dt;
        const std::int64_t n = in.integer(2), c = in.integer_in(1, 4), h = in.integer(6), wd = in.integer(6);
        r.n = n, r.c = c, r.h = h, r.wd = wd;
        shape_type x_shape = nhwc ? shape_type{n, h, wd, c} : shape_type{n, c, h, wd};
        if (in.byte() >= 245)
            x_shape.resize(in.choice(6), 1); // another rank
        r.x_shape = x_shape;
        if (!fuzz::fits(x_shape))
            return false;
        r.x = fuzz::make_tensor(in, x_shape, dt);
        r.grad = is_floating(dt) && in.boolean();
        if (r.grad)
            r.x.requires_grad_();
        r.bad_format = r.format == "HWCN" || x_shape.size() != 4;

        r.w.kernel = field(in, 1, 3);
        r.w.stride = field(in, 1, 2);
        r.w.padding = field(in, 0, 2);
        r.w.dilation = field(in, 1, 2);
        return true;
    }

    /// The window ops' shared prediction: the output size, the kernel's area, the output rows
    /// (N OH OW) and the request's description.
    struct window_prediction
    {
        prediction p;
        __int128 kk = 0, rows = 0;
        std::string what;
    };

    /// Op 0: window_output_size.
    void run_window_output_size(const request& r, const window_prediction& wp)
    {
        const prediction& p = wp.p;
        const std::string& what = wp.what;
        const window2d& w = r.w;
        const bool bad_format = r.bad_format;
        const std::int64_t h = r.h, wd = r.wd;
        const bool ok = fuzz::attempt([&] {
            const auto o = window_output_size(w, h, wd);
            XGRAD_FUZZ_CHECK(target, !p.reject || bad_format, "window_output_size accepted " + what);
            if (!bad_format)
                XGRAD_FUZZ_CHECK(target, o[0] == p.out[0] && o[1] == p.out[1],
                                 "window_output_size " + what + " gave " + pair(o));
        });
        (void)ok;
    }

    /// Op 1: unfold2d: [C KH KW, N OH OW] or [N OH OW, KH KW C].
    void run_unfold(fuzz_input& in, const request& r, const window_prediction& wp)
    {
        const prediction& p = wp.p;
        const __int128 kk = wp.kk, rows = wp.rows;
        const std::string& what = wp.what;
        const std::int64_t c = r.c;
        if (!p.reject && !small(mul(mul(rows, kk), c)))
            return;
        shape_type expected;
        if (!p.reject)
            expected = r.nhwc ? shape_type{static_cast<std::int64_t>(rows), static_cast<std::int64_t>(kk * c)}
                              : shape_type{static_cast<std::int64_t>(kk * c), static_cast<std::int64_t>(rows)};
        const double pad_value = in.real();
        backward_of(fuzz::checked_op(target, "unfold2d " + what, p.reject, p.reject ? nullptr : &expected,
                                     [&] { return unfold2d(r.x, r.w, r.format, pad_value); }));
    }

    /// Op 2: fold2d: cols of the right shape (or a wrong one), back to x_shape.
    void run_fold(fuzz_input& in, const request& r, const window_prediction& wp)
    {
        const prediction& p = wp.p;
        const __int128 kk = wp.kk, rows = wp.rows;
        const std::string& what = wp.what;
        const std::int64_t c = r.c;
        const dtype dt = r.dt;
        if (p.reject || !small(mul(mul(rows, kk), c)))
        {
            // Still ask, with a tiny cols tensor: the window must be rejected first.
            const tensor cols = fuzz::make_tensor(in, {1, 1}, dt);
            fuzz::attempt([&] { fold2d(cols, r.x_shape, r.w, r.format); });
            return;
        }
        shape_type cols_shape = r.nhwc ? shape_type{static_cast<std::int64_t>(rows), static_cast<std::int64_t>(kk * c)}
                                       : shape_type{static_cast<std::int64_t>(kk * c), static_cast<std::int64_t>(rows)};
        const bool wrong = in.byte() >= 230;
        if (wrong)
            cols_shape[in.choice(2)] += 1;
        tensor cols = fuzz::make_tensor(in, cols_shape, dt);
        if (r.grad)
            cols.requires_grad_();
        backward_of(fuzz::checked_op(target, "fold2d " + what, wrong, &r.x_shape,
                                     [&] { return fold2d(cols, r.x_shape, r.w, r.format); }));
    }

    /// Op 3: conv2d, with a weight (of the right shape or a wrong one), a bias and groups.
    void run_conv(fuzz_input& in, const request& r, const window_prediction& wp)
    {
        const prediction& p = wp.p;
        const __int128 kk = wp.kk, rows = wp.rows;
        const std::string& what = wp.what;
        const window2d& w = r.w;
        const std::int64_t n = r.n, c = r.c;
        const dtype dt = r.dt;
        conv2d_params cp;
        cp.stride = w.stride;
        cp.padding = w.padding;
        cp.dilation = w.dilation;
        cp.groups = in.byte() >= 200 ? in.integer(3) : 1;
        const std::int64_t o = in.integer_in(1, 3);
        const bool groups_ok = cp.groups >= 1 && c % cp.groups == 0 && o % cp.groups == 0;
        const std::int64_t cin = groups_ok ? c / cp.groups : c;
        shape_type w_shape{o, cin, w.kernel[0], w.kernel[1]};
        if (in.byte() >= 235)
            w_shape[1] += 1; // C / groups no longer matches x (O is the weight's own)
        if (!fuzz::fits(w_shape))
            return; // a huge kernel needs a huge weight: not a request one can make
        // Both the columns and the output [N, O, OH, OW] must be small.
        if (!p.reject && (!small(mul(mul(rows, kk), c)) || !small(mul(rows, o))))
            return;
        tensor weight = fuzz::make_tensor(in, w_shape, dt);
        tensor bias = in.boolean() ? fuzz::make_tensor(in, {in.byte() >= 240 ? o + 1 : o}, dt) : tensor();
        if (r.grad)
            weight.requires_grad_();
        const bool weight_ok = w_shape == shape_type{o, cin, w.kernel[0], w.kernel[1]} &&
                               (!bias.defined() || bias.numel() == o);
        const bool reject = p.reject || !groups_ok || !weight_ok;
        shape_type expected;
        if (!reject)
        {
            const auto oh = static_cast<std::int64_t>(p.out[0]), ow = static_cast<std::int64_t>(p.out[1]);
            expected = r.nhwc ? shape_type{n, oh, ow, o} : shape_type{n, o, oh, ow};
        }
        const std::string bias_text = bias.defined() ? fuzz::shape_string(bias.shape()) : "none";
        backward_of(fuzz::checked_op(target,
                                     "conv2d " + what + " weight " + fuzz::shape_string(w_shape) + " bias " +
                                         bias_text + " groups " + std::to_string(cp.groups),
                                     reject, reject ? nullptr : &expected,
                                     [&] { return conv2d(r.x, weight, bias, cp, r.format); }));
    }

    /// Ops 0 to 3: the ops of conv.hpp, with the window's predicted output.
    void run_window_op(fuzz_input& in, const request& r)
    {
        const window2d& w = r.w;
        window_prediction wp;
        wp.p = r.bad_format ? prediction{true, {0, 0}} : predict(w, r.h, r.wd, true);
        const prediction& p = wp.p;
        wp.kk = p.reject ? 0 : mul(w.kernel[0], w.kernel[1]);
        wp.rows = mul(mul(p.out[0], p.out[1]), r.n);
        wp.what = window_text(w) + " over x " + fuzz::shape_string(r.x_shape) + " " + r.format;
        switch (r.op)
        {
        case 0: run_window_output_size(r, wp); break;
        case 1: run_unfold(in, r, wp); break;
        case 2: run_fold(in, r, wp); break;
        default: run_conv(in, r, wp); break;
        }
    }

    /// Op 6: adaptive_avg_pool2d.
    void run_adaptive_pool(fuzz_input& in, const request& r)
    {
        const std::int64_t n = r.n, c = r.c;
        const std::array<std::int64_t, 2> os{in.integer(4), in.integer(4)};
        const bool reject = r.bad_format || os[0] < 1 || os[1] < 1 || r.h == 0 || r.wd == 0;
        const __int128 out_n = reject ? 0 : mul(mul(mul(n, c), os[0]), os[1]);
        if (!reject && !small(out_n))
            return;
        shape_type expected = r.nhwc ? shape_type{n, os[0], os[1], c} : shape_type{n, c, os[0], os[1]};
        backward_of(fuzz::checked_op(
            target, "adaptive_avg_pool2d " + pair(os) + " over x " + fuzz::shape_string(r.x_shape), reject,
            reject ? nullptr : &expected, [&] { return adaptive_avg_pool2d(r.x, os, r.format); }));
    }

    /// Ops 4 and 5: max_pool2d / avg_pool2d.
    void run_pool(fuzz_input& in, const request& r)
    {
        const std::int64_t n = r.n, c = r.c;
        const window2d& w = r.w;
        pool2d_params pp;
        pp.kernel = w.kernel;
        if (in.boolean())
            pp.stride = w.stride;
        pp.padding = w.padding;
        pp.dilation = w.dilation;
        pp.count_include_pad = in.boolean();
        window2d pw = w;
        pw.stride = pp.stride ? *pp.stride : pp.kernel;
        prediction p = r.bad_format ? prediction{true, {0, 0}} : predict(pw, r.h, r.wd, false);
        for (int a = 0; a < 2; ++a)
            if (pp.padding[a] > pp.kernel[a] / 2)
                p.reject = true;
        const __int128 cols = p.reject ? 0
                                       : mul(mul(mul(mul(mul(n, c), p.out[0]), p.out[1]), pp.kernel[0]), pp.kernel[1]);
        const std::string what = std::string(r.op == 4 ? "max_pool2d " : "avg_pool2d ") + window_text(pw) + " over x " +
                                 fuzz::shape_string(r.x_shape) + " " + r.format;
        if (!p.reject && !small(cols))
            return;
        // Only the rejection is claimed: a window lying entirely in padding is rejected too.
        tensor y = fuzz::checked_op(target, what, p.reject, nullptr, [&] {
            return r.op == 4 ? max_pool2d(r.x, pp, r.format) : avg_pool2d(r.x, pp, r.format);
        });
        if (y.defined())
        {
            const auto oh = static_cast<std::int64_t>(p.out[0]), ow = static_cast<std::int64_t>(p.out[1]);
            const shape_type expected = r.nhwc ? shape_type{n, oh, ow, c} : shape_type{n, c, oh, ow};
            XGRAD_FUZZ_CHECK(target, y.shape() == expected,
                             what + " gave " + fuzz::shape_string(y.shape()) + ", expected " +
                                 fuzz::shape_string(expected));
        }
        backward_of(y);
    }

    void run(fuzz_input& in)
    {
        request r;
        if (!read_request(in, r))
            return;
        if (r.op <= 3)
            run_window_op(in, r);
        else if (r.op == 6)
            run_adaptive_pool(in, r);
        else
            run_pool(in, r);
    }
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size)
{
    fuzz_input in(data, size);
    run(in);
    return 0;
}
