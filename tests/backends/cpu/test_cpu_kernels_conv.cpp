// Tests of the CPU backend's convolution kernels (backends/cpu/kernels/conv.cpp, over
// backends/common/conv_blocks.hpp): conv2d_forward, conv2d_input_grad and conv2d_weight_grad
// against their reference twins (backends/cpu/reference/conv.cpp: the same products, unblocked
// and single-threaded, over the reference kernels) over random window geometries, both layouts,
// strided x and dx, with and without bias, float32 and float64, blocks of one image, of a few
// with a remainder and of the whole batch, one to all weight-gradient runs, at every SIMD level
// and 1 and 3 threads; channels-last convolutions with few taps (the direct path of
// kernels/conv.cpp) over tap and output channel counts around its limits and vector widths,
// and with many (its direct forward and input gradient) around theirs;
// and the fast kernels' bits at 1, 2 and 3 threads.
//
// Tolerance: each output element is a sum of at most T = K + O * KH * KW + N * L + 1 products
// of the inputs (and the bias), so two summation orders of it differ by at most 2 T u S in a
// format of unit roundoff u, S being the sum of the absolute values of its terms. Every map
// involved is multilinear with nonnegative coefficients, so S is the reference's result for the
// absolute values of the inputs.
// Outputs are pre-filled with NaN (fast) and -7.25 (reference): all three kernels ASSIGN, so
// neither fill may survive, and storage outside a strided dx must keep it.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "tests/support/cpu_kernels_helpers.hpp"

using namespace cpu_kernels_test;

namespace
{
    using xgrad::kernels::window2d_dims;

    window2d_dims random_conv_window(std::mt19937_64& gen)
    {
        return random_window(gen, window_ranges{1, 7, {1, 2, 3, 4, 5}, 1, 9, 3, 2, 2, 2});
    }

    std::string describe(const window2d_dims& d, std::int64_t o, bool cl)
    {
        return "n " + std::to_string(d.n) + " c " + std::to_string(d.c) + " h " + std::to_string(d.h) + " w " +
               std::to_string(d.w) + " o " + std::to_string(o) + " kernel " + std::to_string(d.kh) + "x" +
               std::to_string(d.kw) + " stride " + std::to_string(d.sh) + "x" + std::to_string(d.sw) + " padding " +
               std::to_string(d.ph) + "x" + std::to_string(d.pw) + " dilation " + std::to_string(d.dh) + "x" +
               std::to_string(d.dw) + (cl ? " NHWC" : " NCHW");
    }

    template <class T>
    std::vector<T> random_values(std::mt19937_64& gen, std::int64_t n)
    {
        std::uniform_real_distribution<double> dist(-1, 1);
        std::vector<T> v(static_cast<std::size_t>(n));
        for (auto& e : v)
            e = static_cast<T>(dist(gen));
        return v;
    }

    template <class T>
    std::vector<T> absolute(std::vector<T> v)
    {
        for (auto& e : v)
            e = std::abs(e);
        return v;
    }

    /// The kernels' (n, c, h, w) strides of an image view made in the layout's logical order.
    shape_t kernel_order(const shape_t& s, bool cl) { return cl ? shape_t{s[0], s[3], s[1], s[2]} : s; }

    /// One geometry's operands: x (a strided view, in the layout's logical order), w, bias, dy.
    template <class T>
    struct operands
    {
        window2d_dims d;
        std::int64_t o, l, k;
        bool cl;
        view<T> x;
        std::vector<T> w, bias, dy;

        shape_t image_shape() const { return cl ? shape_t{d.n, d.h, d.w, d.c} : shape_t{d.n, d.c, d.h, d.w}; }
        std::int64_t terms() const { return k + o * d.kh * d.kw + d.n * l + 1; }
    };

    template <class T>
    operands<T> random_operands(std::mt19937_64& gen, bool cl, const window2d_dims& d, std::int64_t o)
    {
        operands<T> p;
        p.d = d;
        p.o = o;
        p.l = p.d.oh * p.d.ow;
        p.k = p.d.c * p.d.kh * p.d.kw;
        p.cl = cl;
        p.x = make_view<T>(p.image_shape(), in_layouts[gen() % in_layouts.size()], gen, T(0));
        std::uniform_real_distribution<double> dist(-1, 1);
        for (auto& e : p.x.storage)
            e = static_cast<T>(dist(gen));
        p.w = random_values<T>(gen, p.k * p.o);
        p.bias = random_values<T>(gen, p.o);
        p.dy = random_values<T>(gen, p.d.n * p.l * p.o);
        return p;
    }

    template <class T>
    operands<T> random_operands(std::mt19937_64& gen, bool cl)
    {
        const window2d_dims d = random_conv_window(gen);
        return random_operands<T>(gen, cl, d, 1 + std::int64_t(gen() % 6));
    }

    /// A channels-last window with c input channels and a kh x kw kernel (random sizes,
    /// strides, padding and dilation otherwise): K = c * kh * kw taps, which decides whether
    /// the direct path (K <= 32) or the GEMM path runs.
    window2d_dims window_with_taps(std::mt19937_64& gen, std::int64_t c, std::int64_t kh, std::int64_t kw,
                                   bool stride_one = false)
    {
        for (;;)
        {
            window2d_dims d = random_window(gen, window_ranges{1, 4, {c}, 1, 12, 1, 3, 2, 2});
            if (stride_one)
                d.sh = d.sw = 1;
            d.kh = kh;
            d.kw = kw;
            d.oh = (d.h + 2 * d.ph - (kh - 1) * d.dh - 1) / d.sh + 1;
            d.ow = (d.w + 2 * d.pw - (kw - 1) * d.dw - 1) / d.sw + 1;
            if (d.h + 2 * d.ph - (kh - 1) * d.dh - 1 >= 0 && d.w + 2 * d.pw - (kw - 1) * d.dw - 1 >= 0)
                return d;
        }
    }

    /// The three outputs of one kernel table's run.
    template <class T>
    struct outputs
    {
        std::vector<T> y, dw;
        view<T> dx;
    };

    template <class T>
    outputs<T> run(const xgrad::kernels::kernel_table& t, const operands<T>& p, const view<T>& dx_layout,
                   bool with_bias, std::int64_t block, std::int64_t chains, T fill)
    {
        constexpr dtype dt = dtype_of<T>();
        outputs<T> r;
        r.y.assign(static_cast<std::size_t>(p.d.n * p.l * p.o), fill);
        r.dw.assign(static_cast<std::size_t>(p.k * p.o), fill);
        r.dx = dx_layout;
        std::fill(r.dx.storage.begin(), r.dx.storage.end(), fill);
        const shape_t xs = kernel_order(p.x.strides, p.cl), dxs = kernel_order(r.dx.strides, p.cl);
        t.conv2d_forward(r.y.data(), p.x.data(), xs.data(), p.w.data(), with_bias ? p.bias.data() : nullptr, dt, p.d,
                         p.o, p.cl, block);
        t.conv2d_input_grad(r.dx.data(), dxs.data(), p.dy.data(), p.w.data(), dt, p.d, p.o, p.cl, block);
        t.conv2d_weight_grad(r.dw.data(), p.x.data(), xs.data(), p.dy.data(), dt, p.d, p.o, p.cl, block, chains);
        return r;
    }

    template <class T>
    void check_close(const std::vector<T>& got, const std::vector<T>& want, const std::vector<T>& mag, double scale,
                     const char* what)
    {
        REQUIRE(got.size() == want.size());
        for (std::size_t i = 0; i < got.size(); ++i)
        {
            const double bound = scale * static_cast<double>(mag[i]) + 1e-300;
            if (!(std::abs(static_cast<double>(got[i]) - static_cast<double>(want[i])) <= bound))
            {
                INFO(what, " element ", i, ": got ", double(got[i]), ", want ", double(want[i]), ", bound ", bound);
                CHECK(false);
                return;
            }
        }
    }

    /// dx_kind: dx's layout, random where it is out_layouts.size().
    template <class T>
    void check_conv_operands(std::mt19937_64& gen, const operands<T>& p, std::size_t dx_kind = out_layouts.size())
    {
        const bool cl = p.cl;
        const bool with_bias = gen() % 2 == 0;
        const layout dx_kind_used = dx_kind < out_layouts.size() ? out_layouts[dx_kind]
                                                                 : out_layouts[gen() % out_layouts.size()];
        const auto dx_layout = make_view<T>(p.image_shape(), dx_kind_used, gen, T(0));
        INFO(describe(p.d, p.o, cl), " bias ", with_bias, " x ", p.x.describe(), " dx ", dx_layout.describe());
        const auto& ref = cpu::reference_kernels();
        const outputs<T> want = run(ref, p, dx_layout, with_bias, p.d.n, 1, garbage_reference<T>());
        operands<T> a = p;
        a.x.storage = absolute(p.x.storage);
        a.w = absolute(p.w);
        a.bias = absolute(p.bias);
        a.dy = absolute(p.dy);
        const outputs<T> mag = run(ref, a, dx_layout, with_bias, p.d.n, 1, T(0));
        const double u = std::is_same_v<T, float> ? 0x1p-24 : 0x1p-53;
        const double scale = 2.0 * static_cast<double>(p.terms()) * u;
        // dx's magnitudes in the order compare() walks the view.
        std::vector<double> dx_mag;
        for (const auto off : offsets_of(mag.dx.shape, mag.dx.strides))
            dx_mag.push_back(static_cast<double>(mag.dx.storage[static_cast<std::size_t>(off)]));
        const auto dx_close = [&](T g, T w, std::size_t i) {
            return std::abs(static_cast<double>(g) - static_cast<double>(w)) <= scale * dx_mag[i] + 1e-300;
        };
        const std::int64_t three = std::min<std::int64_t>(3, p.d.n);
        for (const std::int64_t block : {std::int64_t{1}, three, p.d.n})
        {
            const std::int64_t blocks = (p.d.n + block - 1) / block;
            for (const std::int64_t chains : {std::int64_t{1}, std::min<std::int64_t>(2, blocks), blocks})
            {
                INFO("block ", block, " chains ", chains);
                const outputs<T> got = run(fast, p, dx_layout, with_bias, block, chains, garbage_fast<T>());
                check_close(got.y, want.y, mag.y, scale, "y");
                check_close(got.dw, want.dw, mag.dw, scale, "dw");
                // Within the bound inside the strided dx; storage outside it keeps its fill.
                const auto err = compare(got.dx, want.dx, garbage_fast<T>(), garbage_reference<T>(), dx_close);
                CHECK_MESSAGE(err.empty(), "dx: ", err);
            }
        }
    }

    template <class T>
    void check_conv_case(std::mt19937_64& gen, bool cl)
    {
        check_conv_operands(gen, random_operands<T>(gen, cl));
    }
}

TEST_CASE("cpu kernels: conv2d_forward, conv2d_input_grad and conv2d_weight_grad match the reference")
{
    settings_guard guard;
    for (const int threads : {1, 3})
    {
        xgrad::set_num_threads(threads);
        for (const auto level : simd_levels())
        {
            cpu::limit_simd_level(level);
            INFO("SIMD level ", level_name(level), ", ", threads, " thread(s)");
            std::mt19937_64 gen(11);
            for (int rep = 0; rep < 12; ++rep)
                for (const bool cl : {false, true})
                {
                    check_conv_case<float>(gen, cl);
                    check_conv_case<double>(gen, cl);
                }
        }
    }
}

TEST_CASE("cpu kernels: channels-last convolutions with few taps (the direct path) match the reference")
{
    // K = c * kh * kw from 1 to the direct path's limit (32) and one past it (the GEMM path),
    // with output channel counts below, at and past each level's vector width (4, 8 and 16
    // float32 lanes; a tail of o % lanes channels) and two batches of them (the weight
    // gradient's widest tile).
    struct taps_case
    {
        std::int64_t c, kh, kw;
    };
    const taps_case taps[] = {{1, 1, 1}, {1, 3, 3}, {3, 3, 3}, {2, 4, 4}, {32, 1, 1}, {1, 3, 11}, {33, 1, 1}};
    const std::int64_t outs[] = {1, 3, 4, 8, 16, 17, 32, 40, 64};
    settings_guard guard;
    for (const int threads : {1, 3})
    {
        xgrad::set_num_threads(threads);
        for (const auto level : simd_levels())
        {
            cpu::limit_simd_level(level);
            std::mt19937_64 gen(13);
            for (const auto& t : taps)
                for (const std::int64_t o : outs)
                {
                    INFO("SIMD level ", level_name(level), ", ", threads, " thread(s), K ", t.c * t.kh * t.kw);
                    const window2d_dims d = window_with_taps(gen, t.c, t.kh, t.kw);
                    check_conv_operands(gen, random_operands<float>(gen, true, d, o));
                    if (o % 4 == 1)
                        check_conv_operands(gen, random_operands<double>(gen, true, d, o));
                }
        }
    }
}

TEST_CASE("cpu kernels: channels-last convolutions with many taps (the direct forward and input gradient) match "
          "the reference")
{
    // Past conv_taps_max the forward runs direct where there are at least 8 output channels
    // (1 and 7 take the GEMM path), in register tiles of 4 (AVX-512) or 2 batches of channels
    // by up to 12 positions and in slices of taps: K from 72 to 576 (more than one slice at
    // every level), output channel counts at 8, a 17 with a tail, the widest tile (64 float32
    // at AVX-512) and one past it. Stride 1 with a contiguous dx: the input gradient runs
    // direct too, as the forward convolution of dy with the flipped window, where the padding
    // is at most the window's span (a 1 x 3 kernel with padding takes the GEMM path) and there
    // are at least 8 input channels (3 takes the GEMM path). A quarter of the cases have random
    // strides and a random layout of dx, so their input gradient takes the GEMM path.
    struct taps_case
    {
        std::int64_t c, kh, kw;
    };
    const taps_case taps[] = {{8, 3, 3}, {32, 3, 3}, {3, 5, 5}, {16, 1, 3}, {64, 3, 3}};
    const std::int64_t outs[] = {1, 7, 8, 17, 64, 65};
    settings_guard guard;
    for (const int threads : {1, 3})
    {
        xgrad::set_num_threads(threads);
        for (const auto level : simd_levels())
        {
            cpu::limit_simd_level(level);
            std::mt19937_64 gen(17);
            for (const auto& t : taps)
                for (const std::int64_t o : outs)
                {
                    INFO("SIMD level ", level_name(level), ", ", threads, " thread(s), K ", t.c * t.kh * t.kw);
                    const bool stride_one = gen() % 4 != 0;
                    const window2d_dims d = window_with_taps(gen, t.c, t.kh, t.kw, stride_one);
                    check_conv_operands(gen, random_operands<float>(gen, true, d, o), stride_one ? 0 : 3);
                    if (o % 8 == 1)
                        check_conv_operands(gen, random_operands<double>(gen, true, d, o), 0);
                }
        }
    }
}

TEST_CASE("cpu kernels: the convolution kernels give the same bits at every thread count")
{
    settings_guard guard;
    std::mt19937_64 gen(12);
    for (int rep = 0; rep < 8; ++rep)
        for (const bool cl : {false, true})
        {
            // The last rounds: the example's first and second layers (the direct paths in
            // channels-last).
            const operands<float> p =
                rep < 6 ? random_operands<float>(gen, cl)
                : rep == 6
                    ? random_operands<float>(gen, cl, window2d_dims{9, 1, 28, 28, 3, 3, 1, 1, 1, 1, 1, 1, 28, 28}, 32)
                    : random_operands<float>(gen, cl, window2d_dims{5, 32, 14, 14, 3, 3, 1, 1, 1, 1, 1, 1, 14, 14}, 64);
            const auto dx_layout = make_view<float>(p.image_shape(), layout::contiguous, gen, 0.0f);
            INFO(describe(p.d, p.o, cl));
            const std::int64_t block = std::max<std::int64_t>(1, p.d.n / 3);
            const std::int64_t blocks = (p.d.n + block - 1) / block;
            std::vector<outputs<float>> runs;
            for (const int threads : {1, 2, 3})
            {
                xgrad::set_num_threads(threads);
                runs.push_back(run(fast, p, dx_layout, true, block, blocks, garbage_fast<float>()));
            }
            for (std::size_t i = 1; i < runs.size(); ++i)
            {
                CHECK(std::memcmp(runs[i].y.data(), runs[0].y.data(), runs[0].y.size() * sizeof(float)) == 0);
                CHECK(std::memcmp(runs[i].dw.data(), runs[0].dw.data(), runs[0].dw.size() * sizeof(float)) == 0);
                CHECK(std::memcmp(runs[i].dx.data(), runs[0].dx.data(), runs[0].dx.storage.size() * sizeof(float)) ==
                      0);
            }
        }
}
