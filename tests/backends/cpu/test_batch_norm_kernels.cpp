// Tests of the fast CPU batch-norm kernels (backends/cpu/batch_norm/kernels.cpp) against their scalar
// reference twins (backends/cpu/batch_norm/reference.cpp): every kernel, random and edge shapes
// in both layouts (channels-last inner = 1, channels-first inner > 1; outer, C, inner including
// 0, 1, 3, 17, 67 and other odd sizes; the tile and run paths and their boundaries), the four
// x dtypes, every SIMD level this machine has (limit_simd_level; bfloat16 at avx512 also with
// AVX512-BF16's conversion where the processor has it, limit_avx512_bf16), outputs pre-filled with NaN
// (kernels assign), and results bitwise independent of the thread count. The references are
// called directly (cpu::reference); which of the two a level runs through the kernel table is
// the dispatch tests' concern.
//
// This file checks float32 and float64 tensors (and NaN propagation, and grad_grad_apply with
// one output); test_batch_norm_kernels_16bit.cpp checks float16 and bfloat16 tensors (and the
// rounding of bfloat16 outputs): two ctest executables, so that ctest runs the halves side by
// side. The code they share is in batch_norm_kernels_helpers.hpp and
// batch_norm_kernels_compare.hpp.
//
// Tolerances, and why (u = unit roundoff of the statistics type S: 2^-24 for float, which also
// serves float16/bfloat16 tensors, 2^-53 for double; all magnitudes below are computed here in
// double from the same inputs):
// - Sums of R terms t_i (bn_grad_reduce, bn_grad_inference, bn_grad_grad_reduce): the fast
//   kernel forms each term with relative error <= 2u and adds them along a fixed tree of depth
//   <= D = 1156 + ceil(log2 R) (backends/cpu/batch_norm/plan.hpp derives 645 + ceil(log2 R)
//   for float, 1156 for double, from its run_item; the larger is used for both, computed here
//   from the same constants), plus one rounding when a sum is scaled by r; the reference
//   accumulates in double left to right (error <= R 2^-53 sum|t|) and rounds once to S.
//   Allowed: ((D + 3) u + R 2^-53) sum|t_i| + u |want|. For float and R = 10^4 that is
//   1173 u ~ 7e-5 relative to sum|t_i|.
// - bn_moments (and the statistics of bn_forward_training): the kernel sums d = x - m and d^2
//   around a shift m (an exact S value) chosen so that sum d^2 / R = var + delta^2 with
//   delta = |m - mean| <= sqrt(var) (else it sums again around its first mean, where delta is
//   rounding-sized): sum d^2 / R <= 2 var. Mean = m + (sum d) / R: error <= u |mean| +
//   (D + 3) u sum|d| / R, with sum|d| <= R sqrt(sum d^2 / R) <= R sqrt(2 var) (Cauchy-Schwarz):
//   allowed (D + 3) u sqrt(2 var) + 2 u |want| (plus the reference's own error). Variance
//   (corrected formula): |error| * R <= (D + 4) u sum d^2 (the squares) + 2 (D + 1) u sum d^2
//   (the correction (sum d)^2 / R, via Cauchy-Schwarz), so (3D + 8) u 2 var + u var is allowed.
// - Elementwise outputs, f u M with M = the sum of the absolute values of the reference
//   formula's terms (a centred operand v - mean(v) counted as |v| + |mean(v)|), and f the
//   roundings of both sides, each weighing at most u M: the fast side rounds each per-channel
//   coefficient once to S, each centred operand once, each fma once (bn_normalize: 2 + 1;
//   bn_grad_apply: 5; the second-order outputs: up to 8); the reference evaluates the formula
//   in double (those roundings count fully when S is double: bn_normalize 3, bn_grad_apply 8,
//   the second-order d_x ~10) and rounds once to S. Allowed, rounded up: y 8 u M; dx 16 u M;
//   inference dx = dy scale r (2 + 3 roundings) 6 u M; training d_g 16 u M, d_x 20 u M;
//   inference d_g 12 u M, d_x 6 u M. 16-bit outputs: both sides round their float result once
//   to the I/O dtype, so they may differ by one ulp of that dtype plus the float difference:
//   allowed ulp_T(max(|got|, |want|)) + f u M.
// - NaN only where the reference has NaN.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "tests/backends/cpu/batch_norm_kernels_compare.hpp"
#include "tests/backends/cpu/batch_norm_kernels_helpers.hpp"

using namespace bn_kernels_test;

TEST_CASE("batch-norm kernels: fast vs reference, float32") { check_dtype<float>(1); }

TEST_CASE("batch-norm kernels: fast vs reference, float64") { check_dtype<double>(2); }

TEST_CASE("batch-norm kernels: results do not depend on the thread count, float32 and float64")
{
    check_thread_independence<float>(5);
    check_thread_independence<double>(6);
}

TEST_CASE("batch-norm kernels: results do not depend on the resident budget, float32 and float64")
{
    check_budget_independence<float>(17);
    check_budget_independence<double>(18);
}

TEST_CASE("batch-norm kernels: one-read kernels in channel blocks, with streamed outputs, float32 and float64")
{
    // With a resident budget of 4 KiB, bn_forward_training and bn_grad_training cut every tensor
    // above it into channel blocks (one channel each once a channel alone exceeds it; whole
    // cache lines of channels-last rows), and the elementwise outputs of float32/float64
    // tensors take the non-temporal stores. The same comparisons with the reference and the
    // same thread independence must hold.
    struct budget_guard
    {
        std::int64_t old = cpu::bn_set_resident_budget(4096);
        ~budget_guard() { cpu::bn_set_resident_budget(old); }
    } budget;
    check_dtype<float>(11);
    check_dtype<double>(12);
    check_thread_independence<float>(15);
}

TEST_CASE("batch-norm kernels: NaN propagates as in the reference")
{
    // A NaN in x, dy or A poisons its channel's sums and the outputs that depend on them, and
    // only those: the comparison requires NaN exactly where the reference has NaN.
    settings_guard guard;
    std::mt19937_64 gen(10);
    for (const shape s : {shape{67, 5, 1}, shape{300, 3, 1}, shape{3, 2, 67}, shape{17, 3, 3}, shape{2, 3, 1100}})
    {
        problem<float> p(s, gen);
        problem<bfloat16_t> q(s, gen);
        const auto n = static_cast<std::size_t>(p.n);
        p.x[gen() % n] = NAN;
        p.dy[gen() % n] = NAN;
        p.A[gen() % n] = NAN;
        q.x[gen() % n] = nan_of<bfloat16_t>();
        q.A[gen() % n] = nan_of<bfloat16_t>();
        check_problem(p);
        check_problem(q);
    }
}

TEST_CASE("batch-norm kernels: grad_grad_apply with one output")
{
    // Either output may be null; the other is then the same as when both are wanted: for the
    // fast kernel at every SIMD level and for the reference.
    settings_guard guard;
    std::mt19937_64 gen(9);
    struct variant
    {
        std::string name;
        decltype(&cpu::bn_grad_grad_apply) kernel;
        cpu::simd_level level;
    };
    std::vector<variant> variants{{"reference", &cpu::reference::bn_grad_grad_apply, cpu::simd_level_max}};
    for (const auto level : simd_levels())
        variants.push_back({std::string("level ") + level_name(level), fast_table.bn_grad_grad_apply, level});
    for (const shape s : {shape{67, 5, 1}, shape{3, 2, 67}, shape{17, 3, 3}})
        for (const auto& v : variants)
        {
            cpu::limit_simd_level(v.level);
            const problem<float> p(s, gen);
            std::vector<float> gs, ggs;
            reference_sums(p, gs, ggs);
            for (const bool training : {true, false})
            {
                const auto N = static_cast<std::size_t>(p.n);
                std::vector<float> dg(N), dx(N), dg_only(N, NAN), dx_only(N, NAN);
                auto call = [&](float* d_g, float* d_x) {
                    v.kernel(d_g, d_x, p.A.data(), p.dy.data(), p.x.data(), p.scale.data(), p.mean.data(), p.var.data(),
                             p.a.data(), p.b.data(), ggs.data(), p.eps, training, dtype::float32, s.outer, s.C,
                             s.inner);
                };
                call(dg.data(), dx.data());
                call(dg_only.data(), nullptr);
                call(nullptr, dx_only.data());
                call(nullptr, nullptr);
                INFO(str(s), " ", v.name, (training ? " training" : " inference"));
                CHECK(same_bits(dg, dg_only));
                CHECK(same_bits(dx, dx_only));
            }
        }
}
