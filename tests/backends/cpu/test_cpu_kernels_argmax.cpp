// Tests of the CPU argmax kernel (fast, backends/cpu/kernels/reduce.cpp, and reference,
// backends/cpu/reference/math.cpp) against a direct loop written here: random shapes and layouts,
// values from a small set so that ties are common, NaN in the floating dtypes, float32, float64
// and int64, one and several threads. Every answer is an index, so all three must agree
// exactly. Shared helpers: cpu_kernels_helpers.hpp.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <type_traits>
#include <vector>

#include "tests/support/cpu_kernels_helpers.hpp"

using namespace cpu_kernels_test;

namespace
{
    template <class T>
    bool is_nan(T v)
    {
        if constexpr (std::is_floating_point_v<T>)
            return std::isnan(v);
        else
            return false;
    }

    /// argmax over the last dimension of x, row by row in row-major order of the kept
    /// dimensions: the first NaN if there is one, else the first largest value.
    template <class T>
    std::vector<std::int64_t> direct_argmax(const view<T>& x)
    {
        const shape_t kept(x.shape.begin(), x.shape.end() - 1);
        const shape_t kept_strides(x.strides.begin(), x.strides.end() - 1);
        const std::int64_t n = x.shape.back(), stride = x.strides.back();
        std::vector<std::int64_t> out;
        for (const std::int64_t off : offsets_of(kept, kept_strides))
        {
            std::int64_t at = -1;
            for (std::int64_t r = 0; r < n && at < 0; ++r)
                if (is_nan(x.storage[static_cast<std::size_t>(off + r * stride)]))
                    at = r;
            if (at < 0)
            {
                at = 0;
                for (std::int64_t r = 1; r < n; ++r)
                    if (x.storage[static_cast<std::size_t>(off + r * stride)] >
                        x.storage[static_cast<std::size_t>(off + at * stride)])
                        at = r;
            }
            out.push_back(at);
        }
        return out;
    }

    template <class T>
    void check_argmax(std::mt19937_64& gen, bool with_nan)
    {
        constexpr dtype dt = std::is_same_v<T, std::int64_t> ? dtype::int64 : dtype_of<T>();
        for (int rep = 0; rep < 24; ++rep)
        {
            shape_t shape = random_shape(gen, 4, 100000);
            if (shape.empty() || numel(shape) == 0)
                shape = {3, 5};
            const layout in_kind = in_layouts[gen() % in_layouts.size()];
            auto x = make_view<T>(shape, in_kind, gen, T(0));
            for (auto& v : x.storage) // few distinct values: ties in most rows
                v = static_cast<T>(static_cast<int>(gen() % 5) - 2);
            if (with_nan)
                for (auto& v : x.storage)
                    if (gen() % 97 == 0)
                        v = std::numeric_limits<T>::quiet_NaN();
            const shape_t kept(shape.begin(), shape.end() - 1);
            const layout out_kind = out_layouts[gen() % out_layouts.size()];
            auto got = make_view<std::int64_t>(kept, out_kind, gen, -7);
            auto want = got;
            fast.argmax(got.data(), got.strides.data(), x.data(), x.strides.data(), dt, x.ndim(), x.shape.data());
            cpu::reference::argmax(want.data(), want.strides.data(), x.data(), x.strides.data(), dt, x.ndim(),
                                   x.shape.data());
            const auto direct = direct_argmax(x);
            const auto offs = offsets_of(kept, got.strides);
            INFO(xgrad::name(dt), " x ", x.describe(), " (", layout_name(in_kind), ") out ", got.describe());
            REQUIRE(offs.size() == direct.size());
            for (std::size_t i = 0; i < offs.size(); ++i)
            {
                INFO("row ", i);
                CHECK(got.storage[static_cast<std::size_t>(offs[i])] == direct[i]);
                CHECK(want.storage[static_cast<std::size_t>(offs[i])] == direct[i]);
            }
            // Storage outside the output view is left alone.
            std::vector<bool> inside(got.storage.size(), false);
            for (const auto o : offs)
                inside[static_cast<std::size_t>(o)] = true;
            for (std::size_t i = 0; i < got.storage.size(); ++i)
                if (!inside[i])
                    CHECK(got.storage[i] == -7);
        }
    }
}

TEST_CASE("cpu kernels: argmax matches a direct loop (ties keep the first index, NaN wins), fast and reference")
{
    settings_guard guard;
    std::mt19937_64 gen(211);
    for (const int threads : {1, 4})
    {
        xgrad::set_num_threads(threads);
        INFO(threads, " threads");
        check_argmax<float>(gen, false);
        check_argmax<float>(gen, true);
        check_argmax<double>(gen, true);
        check_argmax<std::int64_t>(gen, false);
    }
}

TEST_CASE("cpu kernels: argmax on hand-made rows")
{
    const float row[] = {1.f, 3.f, 3.f, -std::numeric_limits<float>::infinity(), 2.f};
    const float nan_row[] = {1.f, std::numeric_limits<float>::quiet_NaN(), 9.f,
                             std::numeric_limits<float>::quiet_NaN()};
    const shape_t s5 = {5}, s4 = {4}, unit = {1};
    std::int64_t got = -1;
    fast.argmax(&got, nullptr, row, unit.data(), dtype::float32, 1, s5.data());
    CHECK(got == 1); // the first of the two 3s
    cpu::reference::argmax(&got, nullptr, row, unit.data(), dtype::float32, 1, s5.data());
    CHECK(got == 1);
    fast.argmax(&got, nullptr, nan_row, unit.data(), dtype::float32, 1, s4.data());
    CHECK(got == 1); // the first NaN, not the larger 9
    cpu::reference::argmax(&got, nullptr, nan_row, unit.data(), dtype::float32, 1, s4.data());
    CHECK(got == 1);
    const std::int64_t big[] = {std::numeric_limits<std::int64_t>::max() - 1, std::numeric_limits<std::int64_t>::max()};
    const shape_t s2 = {2};
    fast.argmax(&got, nullptr, big, unit.data(), dtype::int64, 1, s2.data());
    CHECK(got == 1); // int64 compared exactly (as doubles the two would tie)
}
