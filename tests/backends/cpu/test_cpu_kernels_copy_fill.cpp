// Tests of the CPU backend's memory and conversion kernels: the allocator and host copies
// (backends/cpu/allocator.cpp), copy and fill (backends/cpu/kernels/copy_fill.cpp) for every dtype
// and pair of dtypes on strided views, their rounding and conversion rules, and one_hot
// (backends/cpu/kernels/one_hot.cpp). Shared helpers: cpu_kernels_helpers.hpp.
//
// Tolerances, and why:
// - copy, fill, one_hot: exact. Fast and reference kernels use the same conversion functions
//   (backends/common/convert.hpp); the F16C bulk conversions must agree with half.hpp bit for bit.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <limits>
#include <numeric>
#include <random>
#include <type_traits>
#include <vector>

#include "tests/support/cpu_kernels_helpers.hpp"

using namespace cpu_kernels_test;

TEST_CASE("cpu kernels: allocator and host copies")
{
    for (const std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{100}, std::size_t{1} << 20})
    {
        void* p = cpu::allocate(n);
        REQUIRE(p != nullptr);
        CHECK(reinterpret_cast<std::uintptr_t>(p) % 64 == 0);
        std::vector<unsigned char> src(n), back(n);
        for (std::size_t i = 0; i < n; ++i)
            src[i] = static_cast<unsigned char>(i * 7);
        cpu::copy_from_host(p, src.data(), n);
        cpu::copy_to_host(back.data(), p, n);
        CHECK(src == back);
        cpu::deallocate(p);
    }
    cpu::deallocate(nullptr);
}

namespace
{
    template <class T>
    void random_values(std::vector<T>& v, std::mt19937_64& gen)
    {
        std::normal_distribution<double> dist(0, 1000);
        const double specials[] = {0.0,
                                   -0.0,
                                   std::numeric_limits<double>::infinity(),
                                   -std::numeric_limits<double>::infinity(),
                                   std::nan(""),
                                   65504.0,
                                   65520.0,
                                   1e-6,
                                   1e20,
                                   -1e20,
                                   9.3e18,
                                   0.5,
                                   -2.5};
        for (auto& x : v)
        {
            const auto r = gen() % 40;
            const double d = r < std::size(specials) ? specials[r] : dist(gen);
            if constexpr (std::is_same_v<T, std::int64_t>)
                x = r < 3 ? std::numeric_limits<std::int64_t>::max() - std::int64_t(r)
                          : static_cast<std::int64_t>(std::trunc(dist(gen)));
            else if constexpr (std::is_same_v<T, float16_t>)
                x = xgrad::to_float16(d);
            else if constexpr (std::is_same_v<T, bfloat16_t>)
                x = xgrad::to_bfloat16(d);
            else
                x = static_cast<T>(d);
        }
    }

    template <class T>
    T garbage_of()
    {
        if constexpr (std::is_same_v<T, std::int64_t>)
            return std::int64_t{0x5a5a5a5a5a5a};
        else if constexpr (std::is_same_v<T, float16_t>)
            return float16_t{0x7e01};
        else if constexpr (std::is_same_v<T, bfloat16_t>)
            return bfloat16_t{0x7fc1};
        else
            return std::numeric_limits<T>::quiet_NaN();
    }

    template <class O, class X>
    void check_copy_pair(std::mt19937_64& gen)
    {
        for (int rep = 0; rep < 6; ++rep)
        {
            // rep 0: large contiguous (memcpy / F16C / bulk conversion, threaded).
            const shape_t shape = rep == 0 ? shape_t{100, 1031} : random_shape(gen, 4, 70000);
            auto x = make_view<X>(shape, rep == 0 ? layout::contiguous : in_layouts[gen() % in_layouts.size()], gen,
                                  X{});
            random_values(x.storage, gen);
            auto got = make_view<O>(shape, rep == 0 ? layout::contiguous : out_layouts[gen() % out_layouts.size()], gen,
                                    garbage_of<O>());
            auto want = got;
            fast.copy(got.data(), got.strides.data(), dtype_of<O>(), x.data(), x.strides.data(), dtype_of<X>(),
                      got.ndim(), shape.data());
            cpu::reference::copy(want.data(), want.strides.data(), dtype_of<O>(), x.data(), x.strides.data(),
                                 dtype_of<X>(), want.ndim(), shape.data());
            const auto err = compare(got, want, garbage_of<O>(), garbage_of<O>(),
                                     [](O g, O w, std::size_t) { return same_value(g, w); });
            INFO("copy ", xgrad::name(dtype_of<X>()), " -> ", xgrad::name(dtype_of<O>()), " out ", got.describe(),
                 " x ", x.describe());
            CHECK_MESSAGE(err.empty(), err);
        }
    }

    template <class O>
    void check_copy_to(std::mt19937_64& gen)
    {
        check_copy_pair<O, float>(gen);
        check_copy_pair<O, double>(gen);
        check_copy_pair<O, float16_t>(gen);
        check_copy_pair<O, bfloat16_t>(gen);
        check_copy_pair<O, std::int64_t>(gen);
    }

    /// One element converted by the fast copy.
    template <class O, class X>
    O convert_one(X x)
    {
        O out{};
        fast.copy(&out, nullptr, dtype_of<O>(), &x, nullptr, dtype_of<X>(), 0, nullptr);
        return out;
    }
}

TEST_CASE("cpu kernels: copy converts every dtype pair like the reference, on strided views")
{
    settings_guard guard;
    xgrad::set_num_threads(3);
    for (const auto level : simd_levels())
    {
        cpu::limit_simd_level(level);
        INFO("SIMD level ", level_name(level));
        std::mt19937_64 gen(4);
        check_copy_to<float>(gen);
        check_copy_to<double>(gen);
        check_copy_to<float16_t>(gen);
        check_copy_to<bfloat16_t>(gen);
        check_copy_to<std::int64_t>(gen);
    }
}

TEST_CASE("cpu kernels: copy rounding and conversion rules")
{
    settings_guard guard;
    for (const auto level : simd_levels())
    {
        cpu::limit_simd_level(level);
        INFO("SIMD level ", level_name(level));
        // float16: ties to even, overflow at the midpoint 65520.
        CHECK(convert_one<float16_t>(1.0f + 0x1p-11f).bits == 0x3c00);     // tie -> even (1.0)
        CHECK(convert_one<float16_t>(1.0f + 3 * 0x1p-11f).bits == 0x3c02); // tie -> even (up)
        CHECK(convert_one<float16_t>(65519.0f).bits == 0x7bff);
        CHECK(convert_one<float16_t>(65520.0f).bits == 0x7c00);
        CHECK(convert_one<float16_t>(0x1p-25f).bits == 0x0000); // half the smallest subnormal: even
        CHECK(convert_one<float16_t>(0x1.8p-25f).bits == 0x0001);
        // A float64 rounds in one step: through float32 this would tie and round down to 1.0.
        CHECK(convert_one<float16_t>(1.0 + 0x1p-11 + 0x1p-40).bits == 0x3c01);
        // bfloat16.
        CHECK(convert_one<bfloat16_t>(1.0f + 0x1p-8f).bits == 0x3f80);
        CHECK(convert_one<bfloat16_t>(1.0f + 3 * 0x1p-8f).bits == 0x3f82);
        CHECK(convert_one<bfloat16_t>(1.0 + 0x1p-8 + 0x1p-30).bits == 0x3f81);
        CHECK(convert_one<bfloat16_t>(std::int64_t{(std::int64_t{1} << 60) + (std::int64_t{1} << 52) + 1}).bits ==
              xgrad::to_bfloat16(0x1p60 + 0x1p53).bits);
        // To int64: truncation toward zero, saturating, NaN -> 0.
        CHECK(convert_one<std::int64_t>(2.7f) == 2);
        CHECK(convert_one<std::int64_t>(-2.7) == -2);
        CHECK(convert_one<std::int64_t>(std::nan("")) == 0);
        CHECK(convert_one<std::int64_t>(1e30) == std::numeric_limits<std::int64_t>::max());
        CHECK(convert_one<std::int64_t>(-1e30f) == std::numeric_limits<std::int64_t>::min());
        CHECK(convert_one<std::int64_t>(xgrad::to_float16(-3.5f)) == -3);
        CHECK(convert_one<double>(std::int64_t{-5}) == -5.0);
        CHECK(convert_one<float>(xgrad::bfloat16_t{0x3fc0}) == 1.5f);
    }
}

TEST_CASE("cpu kernels: bulk float16 <-> float32 copies agree with half.hpp bit for bit")
{
    settings_guard guard;
    for (const auto level : simd_levels())
    {
        cpu::limit_simd_level(level);
        INFO("SIMD level ", level_name(level));
        // Every float16 bit pattern to float32 (contiguous: the F16C path at avx2_fma).
        std::vector<float16_t> h(65536 + 5);
        for (std::size_t i = 0; i < h.size(); ++i)
            h[i].bits = static_cast<std::uint16_t>(i);
        std::vector<float> f(h.size());
        const shape_t shape = {static_cast<std::int64_t>(h.size())}, strides = {1};
        fast.copy(f.data(), strides.data(), dtype::float32, h.data(), strides.data(), dtype::float16, 1, shape.data());
        std::size_t bad = 0;
        for (std::size_t i = 0; i < h.size(); ++i)
            bad += !same_value(f[i], xgrad::to_float(h[i]));
        CHECK(bad == 0);

        // Random float32 bit patterns, and exact halfway points between float16 values, back.
        std::mt19937_64 gen(5);
        std::vector<float> src(200003);
        for (std::size_t i = 0; i < src.size(); ++i)
        {
            const auto r = static_cast<std::uint32_t>(gen());
            if (i % 2 == 0)
                std::memcpy(&src[i], &r, sizeof r);
            else
            {
                const float lo = xgrad::to_float(float16_t{static_cast<std::uint16_t>(r & 0x7bfe)});
                const float hi = xgrad::to_float(float16_t{static_cast<std::uint16_t>((r & 0x7bfe) + 1)});
                src[i] = (r >> 31 ? -1.0f : 1.0f) * (lo + (hi - lo) / 2);
            }
        }
        std::vector<float16_t> back(src.size(), float16_t{0x1234});
        const shape_t s2 = {static_cast<std::int64_t>(src.size())};
        fast.copy(back.data(), strides.data(), dtype::float16, src.data(), strides.data(), dtype::float32, 1,
                  s2.data());
        bad = 0;
        for (std::size_t i = 0; i < src.size(); ++i)
            bad += back[i].bits != xgrad::to_float16(src[i]).bits;
        CHECK(bad == 0);
    }
}

TEST_CASE("cpu kernels: bulk bfloat16 <-> float32 copies agree with half.hpp bit for bit")
{
    // Contiguous runs take the bulk conversions (AVX-512 at that level, a branch-free loop
    // below it); every bfloat16 pattern up, and random float32 patterns (NaNs with payloads,
    // subnormals, infinities) and exact ties between bfloat16 neighbours down, with a length
    // that leaves a tail.
    settings_guard guard;
    for (const auto level : simd_levels())
    {
        cpu::limit_simd_level(level);
        INFO("SIMD level ", level_name(level));
        std::vector<bfloat16_t> h(65536 + 5);
        for (std::size_t i = 0; i < h.size(); ++i)
            h[i].bits = static_cast<std::uint16_t>(i);
        std::vector<float> f(h.size());
        const shape_t shape = {static_cast<std::int64_t>(h.size())}, strides = {1};
        fast.copy(f.data(), strides.data(), dtype::float32, h.data(), strides.data(), dtype::bfloat16, 1, shape.data());
        std::size_t bad = 0;
        for (std::size_t i = 0; i < h.size(); ++i)
        {
            std::uint32_t got;
            std::memcpy(&got, &f[i], 4);
            bad += got != std::uint32_t{h[i].bits} << 16;
        }
        CHECK(bad == 0);

        std::mt19937_64 gen(6);
        std::vector<float> src(200003);
        for (std::size_t i = 0; i < src.size(); ++i)
        {
            auto r = static_cast<std::uint32_t>(gen());
            if (i % 2 == 1)
                r = (r & 0xffff0000u) | 0x8000u; // halfway: ties to even
            std::memcpy(&src[i], &r, sizeof r);
        }
        std::vector<bfloat16_t> back(src.size(), bfloat16_t{0x1234});
        const shape_t s2 = {static_cast<std::int64_t>(src.size())};
        fast.copy(back.data(), strides.data(), dtype::bfloat16, src.data(), strides.data(), dtype::float32, 1,
                  s2.data());
        bad = 0;
        for (std::size_t i = 0; i < src.size(); ++i)
            bad += back[i].bits != xgrad::to_bfloat16(src[i]).bits;
        CHECK(bad == 0);
    }
}

TEST_CASE("cpu kernels: fill every dtype")
{
    settings_guard guard;
    std::mt19937_64 gen(6);
    auto check = [&](auto tag, double value) {
        using T = decltype(tag);
        for (const layout kind : out_layouts)
        {
            const shape_t shape = random_shape(gen, 4, 100000);
            auto got = make_view<T>(shape, kind, gen, garbage_of<T>());
            auto want = got;
            fast.fill(got.data(), got.strides.data(), dtype_of<T>(), got.ndim(), shape.data(), value);
            cpu::reference::fill(want.data(), want.strides.data(), dtype_of<T>(), want.ndim(), shape.data(), value);
            const auto err = compare(got, want, garbage_of<T>(), garbage_of<T>(),
                                     [](T g, T w, std::size_t) { return same_value(g, w); });
            INFO("fill ", xgrad::name(dtype_of<T>()), " ", got.describe());
            CHECK_MESSAGE(err.empty(), err);
        }
    };
    for (const double value : {0.0, 1.0, -2.5, 1.0 + 0x1p-11 + 0x1p-40, 1e30})
    {
        check(float{}, value);
        check(double{}, value);
        check(float16_t{}, value);
        check(bfloat16_t{}, value);
        check(std::int64_t{}, value);
    }
    std::int64_t i = 0;
    fast.fill(&i, nullptr, dtype::int64, 0, nullptr, -3.9);
    CHECK(i == -3);
    float16_t h{};
    fast.fill(&h, nullptr, dtype::float16, 0, nullptr, 1.0 + 0x1p-11 + 0x1p-40);
    CHECK(h.bits == 0x3c01);
}

TEST_CASE("cpu kernels: one_hot")
{
    auto check = [](auto tag) {
        using T = decltype(tag);
        const std::vector<std::int64_t> labels = {2, 0, 1, 2};
        std::vector<T> out(labels.size() * 3, garbage_of<T>());
        CHECK(cpu::one_hot(out.data(), labels.data(), dtype_of<T>(), 4, 3) == -1);
        for (std::size_t i = 0; i < labels.size(); ++i)
            for (std::int64_t c = 0; c < 3; ++c)
                CHECK(as_double(out[i * 3 + static_cast<std::size_t>(c)]) == (c == labels[i] ? 1.0 : 0.0));
        const std::vector<std::int64_t> bad = {0, 1, 3, -1};
        CHECK(cpu::one_hot(out.data(), bad.data(), dtype_of<T>(), 4, 3) == 2);
        const std::vector<std::int64_t> negative = {0, -1};
        CHECK(cpu::one_hot(out.data(), negative.data(), dtype_of<T>(), 2, 3) == 1);
    };
    check(float{});
    check(double{});
    check(float16_t{});
    check(bfloat16_t{});
    check(std::int64_t{});

    // Large enough to be split over threads.
    settings_guard guard;
    xgrad::set_num_threads(3);
    std::vector<std::int64_t> labels(50000);
    for (std::size_t i = 0; i < labels.size(); ++i)
        labels[i] = static_cast<std::int64_t>(i % 10);
    std::vector<float> out(labels.size() * 10, std::nanf(""));
    CHECK(cpu::one_hot(out.data(), labels.data(), dtype::float32, 50000, 10) == -1);
    CHECK(std::accumulate(out.begin(), out.end(), 0.0) == 50000.0);
}
