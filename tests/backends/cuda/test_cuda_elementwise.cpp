// The CUDA backend's elementwise kernels (fill, copy, unary, binary, where) and its reduction
// (backends/cuda/elementwise.cpp, reduce.cpp) against the CPU backend.
//
// Two levels:
// - Kernels, through the dispatch table (xgrad::detail::backend_for(gpu)) on device buffers,
//   against the CPU's reference kernels (cpu::reference) on the same strided views: random
//   shapes (ndim 0..4, odd sizes, size-1 and size-0 dimensions), layouts (contiguous,
//   permuted, padded, broadcast inputs, strided outputs), every op code, special values. The
//   outputs are pre-filled with garbage (NaN on the device, another value on the CPU): the
//   kernels must assign every element of their view and touch nothing outside it.
// - Public ops on cuda:0 against the same ops on the CPU (the CPU's fast kernels): unary,
//   binary with broadcasting, where, sum / mean / max over axes, casts between all dtypes,
//   full / zeros, contiguous() of views, and gradients through a small expression.
// Shared helpers: cuda_test_helpers.hpp (op level) and cpu_kernels_helpers.hpp (views, shapes,
// layouts, ulp distances).
//
// Tolerances, and why:
// - copy, fill, contiguous(), casts: bit-identical. The device converts with the CPU's own
//   functions (backends/common/convert.hpp). One exception: a NaN converted between float and
//   double by the hardware (float32 <-> float64, 16-bit -> float64) may get another payload
//   on a GPU, so there any NaN matches any NaN; every other NaN must keep its bits.
// - neg, abs, relu, sqrt, rsqrt, add, sub, mul, div, comparisons, where, max: bit-identical
//   (IEEE-exact operations or selections on both backends), except that a NaN result matches
//   any NaN (a GPU's default NaN has another sign and payload than x86's).
// The op codes' tolerance classes and value ranges come from tests/support/op_cases.hpp:
// - exp, log, tanh, sigmoid, pow: 8 ulp. The device uses CUDA's math library (at most 1-2
//   ulp from the correctly rounded result for exp, log and tanh, 4 for powf), the CPU's
//   reference glibc (within 1 ulp) and the CPU's fast kernels xsimd (within 3 ulp of glibc);
//   sigmoid adds a division and an addition to exp's error. 8 ulp covers the sum of the
//   two sides' errors with a margin.
// - sum, mean: against a long double sum of the same elements. The device accumulates in
//   double, so a float32 sum is within half a float ulp of the exact sum plus 2^-30 * sum|x|
//   (the double rounding over at most 2^18 terms), and a float64 sum within 1e-13 * sum|x|
//   (at most ~266 roundings of 2^-53 on the longest lane-and-tree path of these shapes).
//   Against the CPU's fast kernels (float32 accumulation in blocks): 1e-5 * sum|x| for
//   float32 (the CPU's own bound is 85 * 2^-24 = 5.1e-6), 1e-13 * sum|x| for float64.
// - 16-bit ops (computed in float32, rounded once): bit-identical where the float32 op is
//   (add, mul, div, sqrt, comparisons, max); exp, sigmoid, sum and mean within tolerance()
#include "tests/backends/cuda/cuda_elementwise_helpers.hpp"

using namespace cuda_elementwise_test;

namespace
{
    // ---------------------------------------------------------------------------------------
    // copy

    template <class O, class X>
    void check_copy_pair(std::mt19937_64& gen)
    {
        for (int rep = 0; rep < 5; ++rep)
        {
            // rep 0: large and contiguous (the flat path); others random shapes and layouts.
            const shape_t shape = rep == 0 ? shape_t{70, 1031} : random_shape(gen, 4, 40000);
            auto x = ckt::make_view<X>(shape, rep == 0 ? layout::contiguous : random_in_layout(gen), gen, X{});
            random_values(x.storage, gen);
            auto got_want = output_views<O>(shape, gen, rep == 0 ? layout::contiguous : random_out_layout(gen));
            auto& got = got_want.first;
            auto& want = got_want.second;
            {
                const device_copy<X> dx(x.storage);
                const device_copy<O> dout(got.storage);
                dev().copy(dout.get(), got.strides.data(), xgrad::dtype_of<O>(), dx.get(), x.strides.data(),
                           xgrad::dtype_of<X>(), got.ndim(), shape.data());
                got.storage = dout.download();
            }
            cpu::reference::copy(want.data(), want.strides.data(), xgrad::dtype_of<O>(), x.data(), x.strides.data(),
                                 xgrad::dtype_of<X>(), want.ndim(), shape.data());
            const std::string err = compare_storage(got, want,
                                                    [](O g, O w, std::size_t) { return copy_matches<O, X>(g, w); });
            INFO("copy ", xgrad::name(xgrad::dtype_of<X>()), " -> ", xgrad::name(xgrad::dtype_of<O>()), " out ",
                 got.describe(), " x ", x.describe());
            CHECK_MESSAGE(err.empty(), err);
        }
    }

    template <class O>
    void check_copy_to(std::mt19937_64& gen)
    {
        check_copy_pair<O, float>(gen);
        check_copy_pair<O, double>(gen);
        check_copy_pair<O, xgrad::float16_t>(gen);
        check_copy_pair<O, xgrad::bfloat16_t>(gen);
        check_copy_pair<O, std::int64_t>(gen);
    }

    /// Every value of `values` (as X) copied to O on both backends, contiguous.
    template <class O, class X>
    void check_copy_values(const std::vector<X>& values)
    {
        const shape_t shape{static_cast<std::int64_t>(values.size())};
        const shape_t strides{1};
        std::vector<O> got(values.size(), garbage<O>()), want(values.size(), garbage_cpu<O>());
        {
            const device_copy<X> dx(values);
            const device_copy<O> dout(got);
            dev().copy(dout.get(), strides.data(), xgrad::dtype_of<O>(), dx.get(), strides.data(), xgrad::dtype_of<X>(),
                       1, shape.data());
            got = dout.download();
        }
        ckt::fast.copy(want.data(), strides.data(), xgrad::dtype_of<O>(), values.data(), strides.data(),
                       xgrad::dtype_of<X>(), 1, shape.data());
        for (std::size_t i = 0; i < values.size(); ++i)
        {
            INFO("copy ", xgrad::name(xgrad::dtype_of<X>()), " -> ", xgrad::name(xgrad::dtype_of<O>()), " of ",
                 ckt::as_double(values[i]), " (element ", i, "): device ", ckt::as_double(got[i]), ", cpu ",
                 ckt::as_double(want[i]));
            CHECK(copy_matches<O, X>(got[i], want[i]));
        }
    }

    template <class X>
    std::vector<X> special_values_of()
    {
        std::vector<X> v;
        if constexpr (std::is_same_v<X, std::int64_t>)
        {
            std::mt19937_64 gen(5);
            v.resize(64);
            random_values(v, gen);
            for (std::int64_t e = 0; e < 63; ++e) // every power of two and its neighbours
                for (const std::int64_t d : {-1, 0, 1})
                {
                    v.push_back((std::int64_t{1} << e) + d);
                    v.push_back(-((std::int64_t{1} << e) + d));
                }
        }
        else
        {
            for (const double d : special_doubles())
                v.push_back(from_double<X>(d));
            for (const X n : nan_patterns<X>())
                v.push_back(n);
        }
        return v;
    }

    template <class O>
    void check_special_copies_to()
    {
        check_copy_values<O>(special_values_of<float>());
        check_copy_values<O>(special_values_of<double>());
        check_copy_values<O>(special_values_of<xgrad::float16_t>());
        check_copy_values<O>(special_values_of<xgrad::bfloat16_t>());
        check_copy_values<O>(special_values_of<std::int64_t>());
    }

    // ---------------------------------------------------------------------------------------
    // fill

    template <class T>
    void check_fill(std::mt19937_64& gen)
    {
        for (const double value : special_doubles())
        {
            const shape_t shape = random_shape(gen, 4, 5000);
            auto got_want = output_views<T>(shape, gen, random_out_layout(gen));
            auto& got = got_want.first;
            auto& want = got_want.second;
            {
                const device_copy<T> dout(got.storage);
                dev().fill(dout.get(), got.strides.data(), xgrad::dtype_of<T>(), got.ndim(), shape.data(), value);
                got.storage = dout.download();
            }
            cpu::reference::fill(want.data(), want.strides.data(), xgrad::dtype_of<T>(), want.ndim(), shape.data(),
                                 value);
            const std::string err = compare_storage(got, want, [](T g, T w, std::size_t) { return same_bits(g, w); });
            INFO("fill ", xgrad::name(xgrad::dtype_of<T>()), " with ", value, " out ", got.describe());
            CHECK_MESSAGE(err.empty(), err);
        }
    }

    // ---------------------------------------------------------------------------------------
    // unary / binary / where

    bool exact_unary(unary_op op) { return tests::case_of(op).tol == tests::tolerance::exact; }

    template <class T>
    std::vector<T> math_specials()
    {
        return {T(0),
                -T(0),
                std::numeric_limits<T>::infinity(),
                -std::numeric_limits<T>::infinity(),
                std::numeric_limits<T>::quiet_NaN(),
                std::numeric_limits<T>::denorm_min(),
                -std::numeric_limits<T>::denorm_min() * 5,
                std::numeric_limits<T>::min(),
                std::numeric_limits<T>::max(),
                -std::numeric_limits<T>::max(),
                T(1),
                T(-1),
                T(2),
                T(0.5),
                T(-3)};
    }

    /// Inputs for op: values in its interesting range, one in eight a special value.
    template <class T>
    void math_inputs(std::vector<T>& v, std::mt19937_64& gen, double lo, double hi)
    {
        std::uniform_real_distribution<double> dist(lo, hi);
        const auto specials = math_specials<T>();
        for (auto& x : v)
            x = gen() % 8 == 0 ? specials[gen() % specials.size()] : static_cast<T>(dist(gen));
    }

    /// The range op's values are drawn from: its row of tests/support/op_cases.hpp.
    template <class T>
    std::pair<double, double> unary_range(unary_op op)
    {
        const auto& row = tests::case_of(op);
        const tests::value_range r = std::is_same_v<T, float> ? row.f32 : row.f64;
        return {r.lo, r.hi};
    }

    template <class T>
    void check_unary(std::mt19937_64& gen, unary_op op)
    {
        const std::int64_t ulps = exact_unary(op) ? 0 : libm_ulps;
        for (int rep = 0; rep < 4; ++rep)
        {
            const shape_t shape = rep == 0 ? shape_t{300, 257} : random_shape(gen, 4, 40000);
            auto x = ckt::make_view<T>(shape, rep == 0 ? layout::contiguous : random_in_layout(gen), gen, T(0));
            const auto lo_hi = unary_range<T>(op);
            const auto& lo = lo_hi.first;
            const auto& hi = lo_hi.second;
            math_inputs(x.storage, gen, lo, hi);
            auto got_want = output_views<T>(shape, gen, rep == 0 ? layout::contiguous : random_out_layout(gen));
            auto& got = got_want.first;
            auto& want = got_want.second;
            constexpr xgrad::dtype dt = xgrad::dtype_of<T>();
            {
                const device_copy<T> dx(x.storage);
                const device_copy<T> dout(got.storage);
                dev().unary(dout.get(), got.strides.data(), dx.get(), x.strides.data(), dt, got.ndim(), shape.data(),
                            op);
                got.storage = dout.download();
            }
            cpu::reference::unary(want.data(), want.strides.data(), x.data(), x.strides.data(), dt, want.ndim(),
                                  shape.data(), op);
            const std::string err = compare_storage(got, want, [&](T g, T w, std::size_t) {
                return ulps == 0 ? same_or_nan(g, w) : ckt::within_ulps(g, w, ulps);
            });
            INFO("unary op ", static_cast<int>(op), " ", xgrad::name(dt), " out ", got.describe(), " x ", x.describe());
            CHECK_MESSAGE(err.empty(), err);
        }
    }

    template <class T>
    void check_binary(std::mt19937_64& gen, binary_op op)
    {
        const std::int64_t ulps = tests::case_of(op).tol == tests::tolerance::exact ? 0 : libm_ulps;
        for (int rep = 0; rep < 4; ++rep)
        {
            const shape_t shape = rep == 0 ? shape_t{129, 1000} : random_shape(gen, 4, 40000);
            auto a = ckt::make_view<T>(shape, rep == 0 ? layout::contiguous : random_in_layout(gen), gen, T(0));
            auto b = ckt::make_view<T>(shape, rep == 0 ? layout::broadcast : random_in_layout(gen), gen, T(0));
            if (op == binary_op::pow)
            {
                math_inputs(a.storage, gen, 0.01, 20);
                math_inputs(b.storage, gen, -8, 8);
            }
            else
            {
                math_inputs(a.storage, gen, -3, 3);
                math_inputs(b.storage, gen, -3, 3);
                if (!a.storage.empty() && !b.storage.empty()) // some equal pairs for the comparisons
                    for (int k = 0; k < 20; ++k)
                        b.storage[gen() % b.storage.size()] = a.storage[gen() % a.storage.size()];
            }
            auto got_want = output_views<T>(shape, gen, rep == 0 ? layout::contiguous : random_out_layout(gen));
            auto& got = got_want.first;
            auto& want = got_want.second;
            constexpr xgrad::dtype dt = xgrad::dtype_of<T>();
            {
                const device_copy<T> da(a.storage), db(b.storage);
                const device_copy<T> dout(got.storage);
                dev().binary(dout.get(), got.strides.data(), da.get(), a.strides.data(), db.get(), b.strides.data(), dt,
                             got.ndim(), shape.data(), op);
                got.storage = dout.download();
            }
            cpu::reference::binary(want.data(), want.strides.data(), a.data(), a.strides.data(), b.data(),
                                   b.strides.data(), dt, want.ndim(), shape.data(), op);
            const std::string err = compare_storage(got, want, [&](T g, T w, std::size_t) {
                return ulps == 0 ? same_or_nan(g, w) : ckt::within_ulps(g, w, ulps);
            });
            INFO("binary op ", static_cast<int>(op), " ", xgrad::name(dt), " out ", got.describe(), " a ", a.describe(),
                 " b ", b.describe());
            CHECK_MESSAGE(err.empty(), err);
        }
    }

    template <class T>
    void check_where(std::mt19937_64& gen)
    {
        for (int rep = 0; rep < 8; ++rep)
        {
            const shape_t shape = rep == 0 ? shape_t{1000, 77} : random_shape(gen, 4, 40000);
            auto c = ckt::make_view<T>(shape, rep == 0 ? layout::contiguous : random_in_layout(gen), gen, T(0));
            auto a = ckt::make_view<T>(shape, rep == 0 ? layout::contiguous : random_in_layout(gen), gen, T(0));
            auto b = ckt::make_view<T>(shape, rep == 0 ? layout::broadcast : random_in_layout(gen), gen, T(0));
            const T conds[] = {
                T(0), -T(0), T(1), T(-2), std::numeric_limits<T>::quiet_NaN(), std::numeric_limits<T>::denorm_min()};
            for (auto& v : c.storage)
                v = conds[gen() % std::size(conds)];
            math_inputs(a.storage, gen, -5, 5);
            math_inputs(b.storage, gen, -5, 5);
            auto got_want = output_views<T>(shape, gen, rep == 0 ? layout::contiguous : random_out_layout(gen));
            auto& got = got_want.first;
            auto& want = got_want.second;
            constexpr xgrad::dtype dt = xgrad::dtype_of<T>();
            {
                const device_copy<T> dc(c.storage), da(a.storage), db(b.storage);
                const device_copy<T> dout(got.storage);
                dev().where(dout.get(), got.strides.data(), dc.get(), c.strides.data(), da.get(), a.strides.data(),
                            db.get(), b.strides.data(), dt, got.ndim(), shape.data());
                got.storage = dout.download();
            }
            cpu::reference::where(want.data(), want.strides.data(), c.data(), c.strides.data(), a.data(),
                                  a.strides.data(), b.data(), b.strides.data(), dt, want.ndim(), shape.data());
            // A selection copies its element: NaNs keep their bits too.
            const std::string err = compare_storage(got, want, [](T g, T w, std::size_t) { return same_bits(g, w); });
            INFO("where ", xgrad::name(dt), " out ", got.describe(), " cond ", c.describe(), " a ", a.describe(), " b ",
                 b.describe());
            CHECK_MESSAGE(err.empty(), err);
        }
    }

}

// =============================================================================================
// Kernel level, through the dispatch table

TEST_CASE("cuda kernels: copy converts every pair of dtypes as the CPU does, bit for bit, on strided views")
{
    std::mt19937_64 gen(101);
    check_copy_to<float>(gen);
    check_copy_to<double>(gen);
    check_copy_to<xgrad::float16_t>(gen);
    check_copy_to<xgrad::bfloat16_t>(gen);
    check_copy_to<std::int64_t>(gen);
}

TEST_CASE("cuda kernels: copy of special values gives the CPU's bits (NaN, inf, -0, subnormals, saturation)")
{
    check_special_copies_to<float>();
    check_special_copies_to<double>();
    check_special_copies_to<xgrad::float16_t>();
    check_special_copies_to<xgrad::bfloat16_t>();
    check_special_copies_to<std::int64_t>();

    // A few by value, so that the rules themselves are pinned (not only agreement).
    const auto one = [](double v, dtype to) {
        const std::vector<double> host{v};
        const shape_t shape{1}, strides{1};
        const device_copy<double> src(host);
        const std::vector<std::int64_t> none(1, 0);
        const device_copy<std::int64_t> out(none);
        dev().copy(out.get(), strides.data(), to, src.get(), strides.data(), dtype::float64, 1, shape.data());
        const auto bits = out.download()[0];
        return bits;
    };
    CHECK(one(1e20, dtype::int64) == std::numeric_limits<std::int64_t>::max());
    CHECK(one(-1e20, dtype::int64) == std::numeric_limits<std::int64_t>::min());
    CHECK(one(std::nan(""), dtype::int64) == 0);
    CHECK(one(-3.99, dtype::int64) == -3);
    CHECK((one(65520.0, dtype::float16) & 0xffff) == 0x7c00);  // float16 overflow: +inf
    CHECK((one(65519.99, dtype::float16) & 0xffff) == 0x7bff); // the largest finite, 65504
    CHECK((one(-0.0, dtype::float16) & 0xffff) == 0x8000);
    CHECK((one(0x1p-24, dtype::float16) & 0xffff) == 0x0001);       // the smallest subnormal
    CHECK((one(0x1p-25, dtype::float16) & 0xffff) == 0x0000);       // a tie rounds to even
    CHECK((one(1.0 + 0x1p-8, dtype::bfloat16) & 0xffff) == 0x3f80); // tie to even
}

TEST_CASE("cuda kernels: fill assigns every dtype's rounding of the value into strided views")
{
    std::mt19937_64 gen(102);
    check_fill<float>(gen);
    check_fill<double>(gen);
    check_fill<xgrad::float16_t>(gen);
    check_fill<xgrad::bfloat16_t>(gen);
    check_fill<std::int64_t>(gen);
}

TEST_CASE("cuda kernels: unary ops match the CPU reference (exact ops bit for bit, libm ops within 8 ulp)")
{
    std::mt19937_64 gen(103);
    for (const unary_op op : ckt::all_unary)
    {
        check_unary<float>(gen, op);
        check_unary<double>(gen, op);
    }
}

TEST_CASE("cuda kernels: binary ops with broadcast strides match the CPU reference")
{
    std::mt19937_64 gen(104);
    for (const binary_op op : ckt::all_binary)
    {
        check_binary<float>(gen, op);
        check_binary<double>(gen, op);
    }
}

TEST_CASE("cuda kernels: where selects as the CPU reference does")
{
    std::mt19937_64 gen(105);
    check_where<float>(gen);
    check_where<double>(gen);
}

TEST_CASE("cuda kernels: elementwise special values give the CPU reference's bits")
{
    // Every pair of specials through every binary op, every special through every unary op.
    const auto run = [](auto tag) {
        using T = decltype(tag);
        constexpr dtype dt = xgrad::dtype_of<T>();
        std::vector<T> s = math_specials<T>();
        for (const T extra : {T(1e-30), T(-1e30), T(0.75), T(7)})
            s.push_back(extra);
        const auto n = static_cast<std::int64_t>(s.size());
        const shape_t shape{n, n}, a_strides{1, 0}, b_strides{0, 1}, out_strides{n, 1}; // all pairs
        const device_copy<T> ds(s);
        for (const binary_op op : ckt::all_binary)
        {
            std::vector<T> want(static_cast<std::size_t>(n * n), garbage_cpu<T>());
            const device_copy<T> dout(std::vector<T>(want.size(), garbage<T>()));
            dev().binary(dout.get(), out_strides.data(), ds.get(), a_strides.data(), ds.get(), b_strides.data(), dt, 2,
                         shape.data(), op);
            cpu::reference::binary(want.data(), out_strides.data(), s.data(), a_strides.data(), s.data(),
                                   b_strides.data(), dt, 2, shape.data(), op);
            const auto got = dout.download();
            for (std::size_t i = 0; i < want.size(); ++i)
            {
                INFO(xgrad::name(dt), " binary op ", static_cast<int>(op), " of ", s[i / s.size()], " and ",
                     s[i % s.size()], ": device ", got[i], ", cpu ", want[i]);
                const bool libm = tests::case_of(op).tol == tests::tolerance::libm;
                CHECK((libm ? ckt::within_ulps(got[i], want[i], libm_ulps) : same_or_nan(got[i], want[i])));
            }
        }
        const shape_t one_d{n}, unit{1};
        for (const unary_op op : ckt::all_unary)
        {
            std::vector<T> want(s.size(), garbage_cpu<T>());
            const device_copy<T> dout(std::vector<T>(s.size(), garbage<T>()));
            dev().unary(dout.get(), unit.data(), ds.get(), unit.data(), dt, 1, one_d.data(), op);
            cpu::reference::unary(want.data(), unit.data(), s.data(), unit.data(), dt, 1, one_d.data(), op);
            const auto got = dout.download();
            for (std::size_t i = 0; i < s.size(); ++i)
            {
                INFO(xgrad::name(dt), " unary op ", static_cast<int>(op), " of ", s[i], ": device ", got[i], ", cpu ",
                     want[i]);
                CHECK((exact_unary(op) ? same_or_nan(got[i], want[i]) : ckt::within_ulps(got[i], want[i], libm_ulps)));
            }
        }
    };
    run(float{});
    run(double{});
}

TEST_CASE("cuda kernels: in-place calls (the output is the input view) and 0-d operands")
{
    std::mt19937_64 gen(106);
    for (int rep = 0; rep < 6; ++rep)
    {
        const shape_t shape = ckt::random_shape(gen, 4, 20000);
        auto x = ckt::make_view<double>(shape, rep % 2 ? layout::padded : layout::permuted, gen, 0.5);
        auto y = ckt::make_view<double>(shape, layout::broadcast, gen, 0.0);
        math_inputs(x.storage, gen, -2, 2);
        math_inputs(y.storage, gen, -2, 2);
        const device_copy<double> dx(x.storage), dy(y.storage);
        // x = tanh(x), then x = x * y, on both sides
        dev().unary(dx.get(), x.strides.data(), dx.get(), x.strides.data(), dtype::float64, x.ndim(), shape.data(),
                    unary_op::tanh);
        dev().binary(dx.get(), x.strides.data(), dx.get(), x.strides.data(), dy.get(), y.strides.data(), dtype::float64,
                     x.ndim(), shape.data(), binary_op::mul);
        auto want = x;
        cpu::reference::unary(want.data(), want.strides.data(), want.data(), want.strides.data(), dtype::float64,
                              want.ndim(), shape.data(), unary_op::tanh);
        cpu::reference::binary(want.data(), want.strides.data(), want.data(), want.strides.data(), y.data(),
                               y.strides.data(), dtype::float64, want.ndim(), shape.data(), binary_op::mul);
        const auto got = dx.download();
        std::int64_t bad = 0;
        for (std::size_t i = 0; i < got.size(); ++i)
            bad += !ckt::within_ulps(got[i], want.storage[i], 2 * libm_ulps); // tanh's ulps, scaled by y
        INFO("in place over ", x.describe());
        CHECK(bad == 0);
    }
    // 0-d: ndim 0, no strides.
    const std::vector<float> a{2.5f}, b{-4.0f};
    const device_copy<float> da(a), db(b), dout(std::vector<float>{std::nanf("")});
    dev().binary(dout.get(), nullptr, da.get(), nullptr, db.get(), nullptr, dtype::float32, 0, nullptr, binary_op::mul);
    CHECK(dout.download()[0] == -10.0f);
    dev().where(dout.get(), nullptr, db.get(), nullptr, db.get(), nullptr, da.get(), nullptr, dtype::float32, 0,
                nullptr);
    CHECK(dout.download()[0] == -4.0f);
    dev().fill(dout.get(), nullptr, dtype::float32, 0, nullptr, 0.1);
    CHECK(dout.download()[0] == 0.1f);
}

TEST_CASE("cuda kernels: a layout of more than 8 dimensions after merging is refused")
{
    // 9 dims of 2: x's strides are the reverse of out's, so no two dimensions merge.
    const shape_t shape(9, 2);
    shape_t out_strides(9), x_strides(9);
    for (int d = 0; d < 9; ++d)
    {
        out_strides[static_cast<std::size_t>(d)] = std::int64_t{1} << (8 - d);
        x_strides[static_cast<std::size_t>(d)] = std::int64_t{1} << d;
    }
    const device_copy<float> x(std::vector<float>(512, 1.0f)), out(std::vector<float>(512, 0.0f));
    CHECK_THROWS_AS(dev().copy(out.get(), out_strides.data(), dtype::float32, x.get(), x_strides.data(), dtype::float32,
                               9, shape.data()),
                    std::invalid_argument);
    CHECK_THROWS_AS(dev().unary(out.get(), out_strides.data(), x.get(), x_strides.data(), dtype::float32, 9,
                                shape.data(), unary_op::neg),
                    std::invalid_argument);
    // The same 9 dims contiguous in both merge into one: fine.
    dev().copy(out.get(), out_strides.data(), dtype::float32, x.get(), out_strides.data(), dtype::float32, 9,
               shape.data());
    CHECK(out.download() == std::vector<float>(512, 1.0f));
}
