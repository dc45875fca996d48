// Tests of the CPU backend's elementwise kernels (backends/cpu/kernels/elementwise.cpp): unary, binary
// and where against their reference twins (see cpu_kernels_helpers.hpp for the random shapes,
// layouts and SIMD levels), special values, in-place calls, 0-d and empty tensors.
//
// Tolerances, and why:
// - neg, abs, relu, sqrt, rsqrt, add, sub, mul, div, pow, comparisons, where: exact. They are
//   IEEE-exact operations (sqrt; rsqrt is 1 / sqrt in both), the same std::pow, or
//   selections.
// - exp, log, tanh, sigmoid: 4 ulp. Measured over 7*10^7 float32 and 2*10^7 float64 inputs
//   spanning every exponent, the fast kernels differ from glibc's by at most 3 ulp (exp beyond
//   |x| > 80 resp. 700 and float32 sigmoid; 1-2 elsewhere, see simd/elementwise_impl.hpp), and
//   glibc is within 1 ulp of the true value; 4 leaves one ulp of margin.
#include <doctest/doctest.h>

#include <algorithm>
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
    bool exact_op(unary_op op) { return tests::case_of(op).tol == tests::tolerance::exact; }

    /// Random inputs suited to op: values in its row's range (tests/support/op_cases.hpp), plus
    /// special values.
    template <class T>
    void fill_inputs(std::vector<T>& v, std::mt19937_64& gen, unary_op op)
    {
        const auto& row = tests::case_of(op);
        const tests::value_range range = std::is_same_v<T, float> ? row.f32 : row.f64;
        std::uniform_real_distribution<double> dist(range.lo, range.hi);
        const T specials[] = {T(0),
                              -T(0),
                              std::numeric_limits<T>::infinity(),
                              -std::numeric_limits<T>::infinity(),
                              std::numeric_limits<T>::quiet_NaN(),
                              std::numeric_limits<T>::denorm_min(),
                              T(1),
                              T(-1),
                              T(1e-3),
                              T(1000)};
        for (auto& x : v)
        {
            const auto r = gen() % 64;
            x = r < 10 ? specials[r] : static_cast<T>(dist(gen));
        }
    }

    // -------------------------------------------------------------------------------------
    // unary

    template <class T>
    void check_unary_case(std::mt19937_64& gen, unary_op op, const shape_t& shape, layout out_kind, layout in_kind)
    {
        auto x = make_view<T>(shape, in_kind, gen, T(0));
        fill_inputs(x.storage, gen, op);
        auto got = make_view<T>(shape, out_kind, gen, garbage_fast<T>());
        auto want = got;
        std::fill(want.storage.begin(), want.storage.end(), garbage_reference<T>());
        constexpr dtype dt = dtype_of<T>();
        fast.unary(got.data(), got.strides.data(), x.data(), x.strides.data(), dt, got.ndim(), shape.data(), op);
        cpu::reference::unary(want.data(), want.strides.data(), x.data(), x.strides.data(), dt, want.ndim(),
                              shape.data(), op);
        const std::int64_t ulps = exact_op(op) ? 0 : 4;
        const std::string err = compare(got, want, garbage_fast<T>(), garbage_reference<T>(),
                                        [&](T g, T w, std::size_t) { return within_ulps(g, w, ulps); });
        INFO("unary op ", int(op), " out ", got.describe(), " (", layout_name(out_kind), "), x ", x.describe(), " (",
             layout_name(in_kind), ")");
        CHECK_MESSAGE(err.empty(), err);
    }

    template <class T>
    void unary_suite(std::mt19937_64& gen)
    {
        for (const unary_op op : all_unary)
            for (int rep = 0; rep < 10; ++rep)
                check_unary_case<T>(gen, op, random_shape(gen), out_layouts[gen() % out_layouts.size()],
                                    in_layouts[gen() % in_layouts.size()]);
    }

    // -------------------------------------------------------------------------------------
    // binary / where

    template <class T>
    void fill_binary_inputs(std::vector<T>& v, std::mt19937_64& gen, binary_op op, bool exponent)
    {
        std::uniform_real_distribution<double> dist(-10, 10);
        std::uniform_int_distribution<int> small(-3, 3);
        for (auto& x : v)
        {
            const auto r = gen() % 32;
            if (r == 0)
                x = std::numeric_limits<T>::quiet_NaN();
            else if (r == 1)
                x = std::numeric_limits<T>::infinity();
            else if (r == 2)
                x = T(0);
            else if (r < 12 || op == binary_op::eq || op == binary_op::ne)
                x = T(small(gen)); // integers: equal pairs happen, pow of negatives is defined
            else
                x = static_cast<T>(exponent ? dist(gen) / 3 : dist(gen));
        }
    }

    template <class T>
    void check_binary_case(std::mt19937_64& gen, binary_op op, const shape_t& shape, layout out_kind, layout a_kind,
                           layout b_kind)
    {
        auto a = make_view<T>(shape, a_kind, gen, T(0));
        auto b = make_view<T>(shape, b_kind, gen, T(0));
        fill_binary_inputs(a.storage, gen, op, false);
        fill_binary_inputs(b.storage, gen, op, op == binary_op::pow);
        auto got = make_view<T>(shape, out_kind, gen, garbage_fast<T>());
        auto want = got;
        std::fill(want.storage.begin(), want.storage.end(), garbage_reference<T>());
        constexpr dtype dt = dtype_of<T>();
        fast.binary(got.data(), got.strides.data(), a.data(), a.strides.data(), b.data(), b.strides.data(), dt,
                    got.ndim(), shape.data(), op);
        cpu::reference::binary(want.data(), want.strides.data(), a.data(), a.strides.data(), b.data(), b.strides.data(),
                               dt, want.ndim(), shape.data(), op);
        const std::string err = compare(got, want, garbage_fast<T>(), garbage_reference<T>(),
                                        [](T g, T w, std::size_t) { return same_value(g, w); });
        INFO("binary op ", int(op), " out ", got.describe(), " a ", a.describe(), " (", layout_name(a_kind), ") b ",
             b.describe(), " (", layout_name(b_kind), ")");
        CHECK_MESSAGE(err.empty(), err);
    }

    template <class T>
    void binary_suite(std::mt19937_64& gen)
    {
        for (const binary_op op : all_binary)
            for (int rep = 0; rep < 10; ++rep)
                check_binary_case<T>(gen, op, random_shape(gen), out_layouts[gen() % out_layouts.size()],
                                     in_layouts[gen() % in_layouts.size()], in_layouts[gen() % in_layouts.size()]);
    }

    template <class T>
    void check_where_case(std::mt19937_64& gen, const shape_t& shape, layout out_kind, layout c_kind, layout a_kind,
                          layout b_kind)
    {
        auto c = make_view<T>(shape, c_kind, gen, T(0));
        auto a = make_view<T>(shape, a_kind, gen, T(0));
        auto b = make_view<T>(shape, b_kind, gen, T(0));
        const T conds[] = {T(0), -T(0), T(1), T(-2), std::numeric_limits<T>::quiet_NaN()};
        for (auto& v : c.storage)
            v = conds[gen() % 5];
        std::normal_distribution<double> dist;
        for (auto& v : a.storage)
            v = static_cast<T>(dist(gen));
        for (auto& v : b.storage)
            v = static_cast<T>(dist(gen));
        auto got = make_view<T>(shape, out_kind, gen, garbage_fast<T>());
        auto want = got;
        std::fill(want.storage.begin(), want.storage.end(), garbage_reference<T>());
        constexpr dtype dt = dtype_of<T>();
        fast.where(got.data(), got.strides.data(), c.data(), c.strides.data(), a.data(), a.strides.data(), b.data(),
                   b.strides.data(), dt, got.ndim(), shape.data());
        cpu::reference::where(want.data(), want.strides.data(), c.data(), c.strides.data(), a.data(), a.strides.data(),
                              b.data(), b.strides.data(), dt, want.ndim(), shape.data());
        const std::string err = compare(got, want, garbage_fast<T>(), garbage_reference<T>(),
                                        [](T g, T w, std::size_t) { return same_value(g, w); });
        INFO("where out ", got.describe(), " cond ", c.describe(), " a ", a.describe(), " b ", b.describe());
        CHECK_MESSAGE(err.empty(), err);
    }

    template <class T>
    void where_suite(std::mt19937_64& gen)
    {
        for (int rep = 0; rep < 40; ++rep)
            check_where_case<T>(gen, random_shape(gen), out_layouts[gen() % out_layouts.size()],
                                in_layouts[gen() % in_layouts.size()], in_layouts[gen() % in_layouts.size()],
                                in_layouts[gen() % in_layouts.size()]);
    }
}

TEST_CASE("cpu kernels: unary, binary, where match the reference")
{
    settings_guard guard;
    xgrad::set_num_threads(3);
    // Runs suite at every SIMD level, from the same random cases.
    auto at_each_level = [](auto suite) {
        for (const auto level : simd_levels())
        {
            cpu::limit_simd_level(level);
            INFO("SIMD level ", level_name(level));
            std::mt19937_64 gen(1);
            suite(gen);
        }
    };
    SUBCASE("unary")
    {
        at_each_level([](std::mt19937_64& gen) {
            unary_suite<float>(gen);
            unary_suite<double>(gen);
        });
    }
    SUBCASE("binary")
    {
        at_each_level([](std::mt19937_64& gen) {
            binary_suite<float>(gen);
            binary_suite<double>(gen);
        });
    }
    SUBCASE("where")
    {
        at_each_level([](std::mt19937_64& gen) {
            where_suite<float>(gen);
            where_suite<double>(gen);
        });
    }
}

TEST_CASE("cpu kernels: special values")
{
    settings_guard guard;
    for (const auto level : simd_levels())
    {
        cpu::limit_simd_level(level);
        INFO("SIMD level ", level_name(level));
        const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
        // 11 elements: one full AVX2 batch plus a tail.
        const std::vector<float> x = {nan, inf, -inf, 0.0f, -0.0f, 1000.0f, -1000.0f, 89.0f, -104.0f, 1e-40f, -3.0f};
        const shape_t shape = {static_cast<std::int64_t>(x.size())}, strides = {1};
        auto run = [&](unary_op op) {
            std::vector<float> out(x.size(), 123.0f);
            fast.unary(out.data(), strides.data(), x.data(), strides.data(), dtype::float32, 1, shape.data(), op);
            return out;
        };
        const auto relu = run(unary_op::relu);
        CHECK(std::isnan(relu[0]));
        CHECK(relu[1] == inf);
        CHECK(relu[2] == 0.0f);
        CHECK(relu[10] == 0.0f);
        const auto sig = run(unary_op::sigmoid);
        CHECK(std::isnan(sig[0]));
        CHECK(sig[1] == 1.0f);
        CHECK(sig[2] == 0.0f);
        CHECK(sig[3] == 0.5f);
        CHECK(sig[5] == 1.0f);
        CHECK(sig[6] == 0.0f);
        const auto ex = run(unary_op::exp);
        CHECK(ex[1] == inf);
        CHECK(ex[2] == 0.0f);
        CHECK(ex[7] == inf);
        const auto lg = run(unary_op::log);
        CHECK(lg[3] == -inf);
        CHECK(std::isnan(lg[10]));
        const auto th = run(unary_op::tanh);
        CHECK(th[5] == 1.0f);
        CHECK(th[6] == -1.0f);
        CHECK(std::isnan(th[0]));

        // Comparisons with NaN behave as in C++: only != is true.
        const std::vector<double> a = {std::nan(""), 1.0, 2.0}, b = {std::nan(""), std::nan(""), 2.0};
        const shape_t s3 = {3}, st = {1};
        auto cmp = [&](binary_op op) {
            std::vector<double> out(3, 99.0);
            fast.binary(out.data(), st.data(), a.data(), st.data(), b.data(), st.data(), dtype::float64, 1, s3.data(),
                        op);
            return out;
        };
        CHECK(cmp(binary_op::eq) == std::vector<double>{0, 0, 1});
        CHECK(cmp(binary_op::ne) == std::vector<double>{1, 1, 0});
        CHECK(cmp(binary_op::lt) == std::vector<double>{0, 0, 0});
        CHECK(cmp(binary_op::ge) == std::vector<double>{0, 0, 1});
        // where: a NaN condition is != 0, so it selects a; -0 selects b.
        const std::vector<double> c = {std::nan(""), -0.0, 3.0};
        std::vector<double> w(3, 99.0);
        fast.where(w.data(), st.data(), c.data(), st.data(), a.data(), st.data(), b.data(), st.data(), dtype::float64,
                   1, s3.data());
        CHECK(std::isnan(w[0]));
        CHECK(std::isnan(w[1]));
        CHECK(w[2] == 2.0);
    }
}

TEST_CASE("cpu kernels: in-place (output is the input view) and 0-d / empty tensors")
{
    settings_guard guard;
    xgrad::set_num_threads(2);
    std::mt19937_64 gen(7);
    for (const auto level : simd_levels())
    {
        cpu::limit_simd_level(level);
        INFO("SIMD level ", level_name(level));
        for (const layout kind : out_layouts)
        {
            const shape_t shape = {70, 1031};
            auto x = random_input<double>(gen, shape, kind, false);
            auto expected = x;
            cpu::reference::unary(expected.data(), expected.strides.data(), x.data(), x.strides.data(), dtype::float64,
                                  2, shape.data(), unary_op::tanh);
            fast.unary(x.data(), x.strides.data(), x.data(), x.strides.data(), dtype::float64, 2, shape.data(),
                       unary_op::tanh);
            // Whole storages: inside the view within 4 ulp, outside it untouched (identical).
            std::size_t bad = 0;
            for (std::size_t i = 0; i < x.storage.size(); ++i)
                bad += !within_ulps(x.storage[i], expected.storage[i], 4);
            CHECK(bad == 0);

            auto b = random_input<double>(gen, shape, layout::broadcast, false);
            auto sum = x;
            cpu::reference::binary(sum.data(), sum.strides.data(), x.data(), x.strides.data(), b.data(),
                                   b.strides.data(), dtype::float64, 2, shape.data(), binary_op::add);
            fast.binary(x.data(), x.strides.data(), x.data(), x.strides.data(), b.data(), b.strides.data(),
                        dtype::float64, 2, shape.data(), binary_op::add);
            bad = 0;
            for (std::size_t i = 0; i < x.storage.size(); ++i)
                bad += !same_value(x.storage[i], sum.storage[i]);
            CHECK(bad == 0);
        }

        // ndim 0: one element.
        const float x0 = 2.0f;
        float y0 = std::nanf("");
        fast.unary(&y0, nullptr, &x0, nullptr, dtype::float32, 0, nullptr, unary_op::sqrt);
        CHECK(y0 == std::sqrt(2.0f));
        float s0 = std::nanf("");
        fast.reduce(&s0, nullptr, &x0, nullptr, dtype::float32, 0, 0, nullptr, reduce_op::sum);
        CHECK(s0 == 2.0f);

        // Empty tensors: nothing is written; the sum over an empty range is 0.
        const shape_t empty = {3, 0, 5}, strides = {5, 5, 1};
        float untouched = 42.0f;
        fast.unary(&untouched, strides.data(), &x0, strides.data(), dtype::float32, 3, empty.data(), unary_op::exp);
        fast.fill(&untouched, strides.data(), dtype::float32, 3, empty.data(), 1.0);
        CHECK(untouched == 42.0f);
        std::vector<float> sums(3, std::nanf(""));
        const shape_t out_strides = {1};
        fast.reduce(sums.data(), out_strides.data(), &x0, strides.data(), dtype::float32, 3, 1, empty.data(),
                    reduce_op::sum);
        CHECK(sums == std::vector<float>{0, 0, 0});
        // No outputs at all (a kept dim of size 0): nothing is written.
        const shape_t no_rows = {0, 5}, row_strides = {5, 1};
        fast.reduce(&untouched, out_strides.data(), &x0, row_strides.data(), dtype::float32, 2, 1, no_rows.data(),
                    reduce_op::max);
        CHECK(untouched == 42.0f);
    }
}
