// Tests of the CPU backend's window kernels (backends/cpu/kernels/unfold.cpp): unfold2d and fold2d
// against their reference twins (backends/cpu/reference/unfold.cpp) over random window geometries, the
// NCHW and NHWC cols matrices and random strided layouts of both operands, every floating
// dtype, every SIMD level and two thread counts. Shared helpers: cpu_kernels_helpers.hpp.
//
// Tolerances, and why:
// - unfold2d: exact (it copies elements and the pad value).
// - fold2d: exact. Both kernels add the terms of each element in the order of (kh, kw), in
//   the same accumulator type, and round once, so the sums agree bit for bit whatever the
//   thread count (see the contract in backends/common/kernel_list.hpp).
// Outputs are pre-filled with NaN (fast) and -7.25 (reference) before each call: both kernels
// ASSIGN, so neither fill may survive, and storage outside the output view must keep it.
#include <doctest/doctest.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "tests/support/cpu_kernels_helpers.hpp"

using namespace cpu_kernels_test;

namespace
{
    using xgrad::kernels::window2d_dims;

    /// NaN in every dtype (the 16-bit ones have no std::numeric_limits).
    template <class T>
    T nan_fill()
    {
        if constexpr (std::is_same_v<T, float16_t>)
            return float16_t{0x7e01};
        else if constexpr (std::is_same_v<T, bfloat16_t>)
            return bfloat16_t{0x7fc1};
        else
            return std::numeric_limits<T>::quiet_NaN();
    }

    /// A random window whose output is not empty; `large` gives sizes that cross the thread
    /// grain (more than 64K elements of cols).
    window2d_dims random_window(std::mt19937_64& gen, bool large)
    {
        const window_ranges small{1, 3, {1, 2, 3, 5, 16, 17}, 1, 12, 4, 3, 2, 3};
        const window_ranges big{4, 8, {1, 2, 3, 5, 16, 17}, 14, 30, 4, 3, 2, 3};
        return cpu_kernels_test::random_window(gen, large ? big : small);
    }

    std::string describe(const window2d_dims& d)
    {
        return "n " + std::to_string(d.n) + " c " + std::to_string(d.c) + " h " + std::to_string(d.h) + " w " +
               std::to_string(d.w) + " kernel " + std::to_string(d.kh) + "x" + std::to_string(d.kw) + " stride " +
               std::to_string(d.sh) + "x" + std::to_string(d.sw) + " padding " + std::to_string(d.ph) + "x" +
               std::to_string(d.pw) + " dilation " + std::to_string(d.dh) + "x" + std::to_string(d.dw);
    }

    enum class cols_layout
    {
        nchw_matrix, // [C*KH*KW, N*OH*OW]
        nhwc_matrix, // [N*OH*OW, KH*KW*C]
        random       // a random permuted or padded layout of [n, c, kh, kw, oh, ow]
    };

    /// A cols view of shape [n, c, kh, kw, oh, ow] in the given layout, filled with `fill`.
    template <class T>
    view<T> make_cols(const window2d_dims& d, cols_layout kind, std::mt19937_64& gen, T fill)
    {
        const shape_t shape = {d.n, d.c, d.kh, d.kw, d.oh, d.ow};
        if (kind == cols_layout::random)
            return make_view<T>(shape, out_layouts[gen() % out_layouts.size()], gen, fill);
        view<T> v;
        v.shape = shape;
        const std::int64_t l = d.n * d.oh * d.ow, k = d.kh * d.kw;
        if (kind == cols_layout::nchw_matrix)
            v.strides = {d.oh * d.ow, k * l, d.kw * l, l, d.ow, 1};
        else
            v.strides = {d.oh * d.ow * k * d.c, 1, d.kw * d.c, d.c, d.ow * k * d.c, k * d.c};
        v.storage.assign(static_cast<std::size_t>(numel(shape)), fill);
        return v;
    }

    template <class T>
    void randomize(view<T>& v, std::mt19937_64& gen)
    {
        std::normal_distribution<double> dist(0, 1);
        for (auto& e : v.storage)
            e = from_double<T>(dist(gen));
    }

    template <class T>
    bool equal(T a, T b, std::size_t)
    {
        return same_value(a, b);
    }

    template <class T>
    void check_window_case(std::mt19937_64& gen, const window2d_dims& d, cols_layout ck)
    {
        constexpr dtype dt = dtype_of<T>();
        const shape_t image = {d.n, d.c, d.h, d.w};
        INFO(describe(d), " cols layout ", int(ck), " dtype ", xgrad::name(dt));
        {
            // unfold2d: x in any input layout (including stride-0 broadcasts).
            auto x = make_view<T>(image, in_layouts[gen() % in_layouts.size()], gen, T{});
            randomize(x, gen);
            static constexpr std::array<double, 3> pads = {0.0, -std::numeric_limits<double>::infinity(), 2.5};
            const double pad = pads[gen() % pads.size()];
            auto got = make_cols<T>(d, ck, gen, nan_fill<T>());
            auto want = got;
            std::fill(want.storage.begin(), want.storage.end(), from_double<T>(-7.25));
            fast.unfold2d(got.data(), got.strides.data(), x.data(), x.strides.data(), dt, d, pad);
            cpu::reference::unfold2d(want.data(), want.strides.data(), x.data(), x.strides.data(), dt, d, pad);
            INFO("unfold2d, x ", x.describe(), " cols ", got.describe(), " pad ", pad);
            const auto err = compare(got, want, nan_fill<T>(), from_double<T>(-7.25), equal<T>);
            CHECK_MESSAGE(err.empty(), err);
        }
        {
            // fold2d: cols in that layout, x in a random output layout.
            auto cols = make_cols<T>(d, ck, gen, T{});
            randomize(cols, gen);
            auto got = make_view<T>(image, out_layouts[gen() % out_layouts.size()], gen, nan_fill<T>());
            auto want = got;
            std::fill(want.storage.begin(), want.storage.end(), from_double<T>(-7.25));
            fast.fold2d(got.data(), got.strides.data(), cols.data(), cols.strides.data(), dt, d);
            cpu::reference::fold2d(want.data(), want.strides.data(), cols.data(), cols.strides.data(), dt, d);
            INFO("fold2d, x ", got.describe(), " cols ", cols.describe());
            const auto err = compare(got, want, nan_fill<T>(), from_double<T>(-7.25), equal<T>);
            CHECK_MESSAGE(err.empty(), err);
        }
    }

    template <class T>
    void window_suite(std::mt19937_64& gen)
    {
        for (int rep = 0; rep < 24; ++rep)
        {
            const window2d_dims d = random_window(gen, rep % 8 == 0);
            for (const cols_layout ck : {cols_layout::nchw_matrix, cols_layout::nhwc_matrix, cols_layout::random})
                check_window_case<T>(gen, d, ck);
        }
    }
}

TEST_CASE("cpu kernels: unfold2d and fold2d match the reference")
{
    settings_guard guard;
    for (const int threads : {1, 3})
    {
        xgrad::set_num_threads(threads);
        for (const auto level : simd_levels())
        {
            cpu::limit_simd_level(level);
            INFO("SIMD level ", level_name(level), ", ", threads, " thread(s)");
            std::mt19937_64 gen(7);
            window_suite<float>(gen);
            window_suite<double>(gen);
            window_suite<float16_t>(gen);
            window_suite<bfloat16_t>(gen);
        }
    }
}

TEST_CASE("cpu kernels: fold2d sums overlapping windows, and the training shapes match the reference")
{
    settings_guard guard;
    xgrad::set_num_threads(3);
    // fold2d of all-ones cols counts, per input element, the taps that read it: with a 3x3
    // window, stride 1 and padding 1 over 4x5, interior elements are read 9 times, edges 6,
    // corners 4 (an independent check of the reference's sums).
    const window2d_dims d{1, 1, 4, 5, 3, 3, 1, 1, 1, 1, 1, 1, 4, 5};
    const std::vector<float> ones(9 * 20, 1.0f);
    const std::int64_t cs[6] = {20, 180, 60, 20, 5, 1}, xs[4] = {20, 20, 5, 1};
    for (const auto level : simd_levels())
    {
        cpu::limit_simd_level(level);
        std::vector<float> x(20, std::nanf(""));
        fast.fold2d(x.data(), xs, ones.data(), cs, dtype::float32, d);
        for (std::int64_t h = 0; h < 4; ++h)
            for (std::int64_t w = 0; w < 5; ++w)
            {
                const int rows = (h == 0 || h == 3) ? 2 : 3, cols = (w == 0 || w == 4) ? 2 : 3;
                CHECK(x[static_cast<std::size_t>(h * 5 + w)] == float(rows * cols));
            }
    }
    // The convolution and pooling shapes of the training model (batch 8 here), both layouts.
    std::mt19937_64 gen(8);
    for (const auto level : simd_levels())
    {
        cpu::limit_simd_level(level);
        INFO("SIMD level ", level_name(level));
        const window2d_dims conv1{8, 1, 28, 28, 3, 3, 1, 1, 1, 1, 1, 1, 28, 28};
        const window2d_dims conv2{8, 32, 14, 14, 3, 3, 1, 1, 1, 1, 1, 1, 14, 14};
        const window2d_dims pool{8, 32, 28, 28, 2, 2, 2, 2, 0, 0, 1, 1, 14, 14};
        for (const auto& d2 : {conv1, conv2, pool})
            for (const cols_layout ck : {cols_layout::nchw_matrix, cols_layout::nhwc_matrix})
                check_window_case<float>(gen, d2, ck);
    }
}
