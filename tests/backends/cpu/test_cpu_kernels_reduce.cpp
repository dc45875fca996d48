// Tests of the CPU backend's reduction kernel (backends/cpu/kernels/reduce.cpp): sum and max against
// the reference twin over random shapes and layouts and over layouts that exercise each fast
// path, and results that do not depend on the thread count. Shared helpers:
// cpu_kernels_helpers.hpp.
//
// Tolerances, and why:
// - max: exact (a selection).
// - sum: checked against a long double sum of the same elements. The fast kernel's bound is
//   (c + ceil(log2 R)) * u * sum|x| (R reduced elements, u the unit roundoff), where c is at
//   most 134: row blocks of 1024 over 4 accumulators of W lanes give 1024 / (4W) + 5 + log2 W,
//   largest for float64 with SSE2 (W = 2); the column path gives 63 (see
//   backends/cpu/kernels/reduce.cpp). The test allows c = 140. The reference sums left to right:
//   (R - 1) * u * sum|x|. For R = 10^5 float32 elements with sum|x| = |sum x|, that is
//   at most 5.2e-6 relative for the fast kernel (c = 71 with SSE2) against 6e-3 for the loop.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "tests/support/cpu_kernels_helpers.hpp"

using namespace cpu_kernels_test;

namespace
{
    /// Runs one reduction (fast and reference) and checks it; returns the fast result view.
    template <class T>
    view<T> check_reduce_case(std::mt19937_64& gen, const view<T>& x, int n_keep, layout out_kind, reduce_op op)
    {
        const shape_t kept(x.shape.begin(), x.shape.begin() + n_keep);
        auto got = make_view<T>(kept, out_kind, gen, garbage_fast<T>());
        auto want = got;
        std::fill(want.storage.begin(), want.storage.end(), garbage_reference<T>());
        constexpr dtype dt = dtype_of<T>();
        fast.reduce(got.data(), got.strides.data(), x.data(), x.strides.data(), dt, x.ndim(), n_keep, x.shape.data(),
                    op);
        cpu::reference::reduce(want.data(), want.strides.data(), x.data(), x.strides.data(), dt, x.ndim(), n_keep,
                               x.shape.data(), op);

        // Exact-ish sums (long double) and sum|x| per output, in the reference's index order.
        const shape_t reduced(x.shape.begin() + n_keep, x.shape.end());
        const shape_t kept_strides(x.strides.begin(), x.strides.begin() + n_keep);
        const shape_t red_strides(x.strides.begin() + n_keep, x.strides.end());
        const auto kept_offs = offsets_of(kept, kept_strides);
        const auto red_offs = offsets_of(reduced, red_strides);
        std::vector<long double> exact(kept_offs.size()), magnitude(kept_offs.size());
        for (std::size_t i = 0; i < kept_offs.size(); ++i)
            for (const auto r : red_offs)
            {
                const T v = x.storage[static_cast<std::size_t>(kept_offs[i] + r)];
                exact[i] += v;
                magnitude[i] += std::abs(static_cast<long double>(v));
            }
        const auto rn = static_cast<double>(red_offs.size());
        const double u = std::numeric_limits<T>::epsilon() / 2;
        const double ref_bound = rn * u / (1 - rn * u); // gamma_R
        // At simd_level::scalar (an XGRAD_SIMD=scalar build) the fast kernel is the reference.
        const double fast_bound = cpu::simd_level_in_use() == cpu::simd_level::scalar
                                      ? ref_bound
                                      : (140 + std::ceil(std::log2(rn + 1))) * u;
        const std::string err =
            compare(got, want, garbage_fast<T>(), garbage_reference<T>(), [&](T g, T w, std::size_t i) {
                if (op == reduce_op::max || std::isnan(w) || std::isinf(w))
                    return same_value(g, w);
                const auto m = static_cast<double>(magnitude[i]);
                const auto e = static_cast<double>(exact[i]);
                return std::abs(g - e) <= fast_bound * m + std::numeric_limits<T>::denorm_min() &&
                       std::abs(w - e) <= ref_bound * m + std::numeric_limits<T>::denorm_min();
            });
        INFO((op == reduce_op::sum ? "sum" : "max"), " x ", x.describe(), " n_keep ", n_keep, " out ", got.describe());
        CHECK_MESSAGE(err.empty(), err);
        return got;
    }

    /// Views of a contiguous tensor of `logical` shape with the dims in `order` first...: the
    /// permutation the ops layer applies to move the reduced dims last.
    template <class T>
    view<T> permuted_input(std::mt19937_64& gen, const shape_t& logical, const std::vector<std::size_t>& order)
    {
        auto base = random_input<T>(gen, logical, layout::contiguous, false);
        view<T> v;
        v.storage = std::move(base.storage);
        for (const auto d : order)
        {
            v.shape.push_back(logical[d]);
            v.strides.push_back(base.strides[d]);
        }
        return v;
    }

    /// Layouts that exercise each reduce path: (input view, n_keep).
    template <class T>
    std::vector<std::pair<view<T>, int>> reduce_patterns(std::mt19937_64& gen)
    {
        std::vector<std::pair<view<T>, int>> cases;
        // sum(x, 0) of a contiguous [1000, 70]: columns path, 16 row blocks.
        cases.emplace_back(permuted_input<T>(gen, {1000, 70}, {1, 0}), 1);
        // sum over (0, 2, 3) of a contiguous [8, 16, 20, 20] (batch-norm statistics).
        cases.emplace_back(permuted_input<T>(gen, {8, 16, 20, 20}, {1, 0, 2, 3}), 1);
        // sum(x, 0) of [40, 300]: columns path, one row block.
        cases.emplace_back(permuted_input<T>(gen, {40, 300}, {1, 0}), 1);
        // sum(x, 0) of [3, 100000]: columns path, many column blocks, one row block.
        cases.emplace_back(permuted_input<T>(gen, {3, 100000}, {1, 0}), 1);
        // sum(x, 0) of [70000, 17]: columns path, 1094 row blocks, threads over blocks.
        cases.emplace_back(permuted_input<T>(gen, {70000, 17}, {1, 0}), 1);
        // sum(x, 0) of [70000, 5]: too narrow for the columns path, gathered row path.
        cases.emplace_back(permuted_input<T>(gen, {70000, 5}, {1, 0}), 1);
        // Full reduction of 300000 elements: 293 blocks, threads over blocks.
        cases.emplace_back(random_input<T>(gen, {300000}, layout::contiguous, false), 0);
        // Row reductions [300, 1031] and [100000, 3] (tiny rows).
        cases.emplace_back(random_input<T>(gen, {300, 1031}, layout::contiguous, false), 1);
        cases.emplace_back(random_input<T>(gen, {100000, 3}, layout::contiguous, false), 1);
        // Reduce a broadcast dim (stride 0) and a padded multi-dim reduction.
        cases.emplace_back(random_input<T>(gen, {129, 1000}, layout::broadcast, false), 1);
        cases.emplace_back(random_input<T>(gen, {33, 17, 129}, layout::padded, false), 1);
        return cases;
    }

    template <class T>
    void reduce_suite(std::mt19937_64& gen)
    {
        for (const reduce_op op : {reduce_op::sum, reduce_op::max})
        {
            for (int rep = 0; rep < 30; ++rep)
            {
                const shape_t shape = random_shape(gen);
                const int n_keep = static_cast<int>(gen() % (shape.size() + 1));
                const auto x = random_input<T>(gen, shape, in_layouts[gen() % in_layouts.size()], rep % 5 == 0);
                check_reduce_case(gen, x, n_keep, out_layouts[gen() % out_layouts.size()], op);
            }
            for (const auto& pattern : reduce_patterns<T>(gen))
                for (const layout out_kind : out_layouts)
                    check_reduce_case(gen, pattern.first, pattern.second, out_kind, op);
        }
    }
}

TEST_CASE("cpu kernels: reduce matches the reference")
{
    settings_guard guard;
    xgrad::set_num_threads(3);
    for (const auto level : simd_levels())
    {
        cpu::limit_simd_level(level);
        INFO("SIMD level ", level_name(level));
        std::mt19937_64 gen(2);
        reduce_suite<float>(gen);
        reduce_suite<double>(gen);
    }
}

TEST_CASE("cpu kernels: reduce results do not depend on the thread count")
{
    settings_guard guard;
    for (const auto level : simd_levels())
    {
        cpu::limit_simd_level(level);
        INFO("SIMD level ", level_name(level));
        std::mt19937_64 gen(3);
        for (const auto& pattern : reduce_patterns<float>(gen))
            for (const reduce_op op : {reduce_op::sum, reduce_op::max})
            {
                const auto& x = pattern.first;
                const int n_keep = pattern.second;
                const shape_t kept(x.shape.begin(), x.shape.begin() + n_keep);
                const shape_t strides = contiguous_strides(kept);
                std::vector<std::vector<float>> results;
                for (const int threads : {1, 2, 3})
                {
                    xgrad::set_num_threads(threads);
                    std::vector<float> out(static_cast<std::size_t>(numel(kept)), garbage_fast<float>());
                    fast.reduce(out.data(), strides.data(), x.data(), x.strides.data(), dtype::float32, x.ndim(),
                                n_keep, x.shape.data(), op);
                    results.push_back(std::move(out));
                }
                INFO("x ", x.describe(), " n_keep ", n_keep);
                CHECK(std::memcmp(results[0].data(), results[1].data(), results[0].size() * sizeof(float)) == 0);
                CHECK(std::memcmp(results[0].data(), results[2].data(), results[0].size() * sizeof(float)) == 0);
            }
    }
}
