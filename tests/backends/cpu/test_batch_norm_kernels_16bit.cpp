// The fast CPU batch-norm kernels (backends/cpu/batch_norm/kernels.cpp) on float16 and bfloat16
// tensors: against the reference kernels, with the tolerances of test_batch_norm_kernels.cpp's
// file comment, also in channel blocks; results bitwise independent of the thread count and of
// the resident budget; bfloat16 outputs rounded to nearest even exactly as the reference. The
// same checks on float32 and float64 tensors are test_batch_norm_kernels.cpp's: two ctest
// executables, so that ctest runs the halves side by side (the code they share:
// batch_norm_kernels_helpers.hpp and batch_norm_kernels_compare.hpp).
#include <doctest/doctest.h>

#include <cstdint>
#include <iterator>
#include <random>
#include <vector>

#include "tests/backends/cpu/batch_norm_kernels_compare.hpp"
#include "tests/backends/cpu/batch_norm_kernels_helpers.hpp"
#include "xgrad/half.hpp"

using namespace bn_kernels_test;

TEST_CASE("batch-norm kernels: fast vs reference, float16") { check_dtype<float16_t>(3); }

TEST_CASE("batch-norm kernels: fast vs reference, bfloat16") { check_dtype<bfloat16_t>(4); }

TEST_CASE("batch-norm kernels: results do not depend on the thread count, float16 and bfloat16")
{
    check_thread_independence<float16_t>(7);
    check_thread_independence<bfloat16_t>(8);
}

TEST_CASE("batch-norm kernels: results do not depend on the resident budget, bfloat16 and float16")
{
    check_budget_independence<bfloat16_t>(19);
    check_budget_independence<float16_t>(20);
}

TEST_CASE("batch-norm kernels: one-read kernels in channel blocks, bfloat16 and float16")
{
    // As for float32 and float64 (test_batch_norm_kernels.cpp): with a resident budget of 4 KiB,
    // bn_forward_training and bn_grad_training cut every tensor above it into channel blocks. The
    // same comparisons with the reference and the same thread independence must hold.
    struct budget_guard
    {
        std::int64_t old = cpu::bn_set_resident_budget(4096);
        ~budget_guard() { cpu::bn_set_resident_budget(old); }
    } budget;
    check_dtype<bfloat16_t>(13);
    check_dtype<float16_t>(14);
    check_thread_independence<bfloat16_t>(16);
}

TEST_CASE("batch-norm kernels: bfloat16 outputs are rounded to nearest even, exactly as the reference")
{
    // With var = 1 and eps = 0 (r = 1 exactly), mean = 0 and offset = 0, y = x * scale and the
    // inference dx = dy * scale: one product of a bfloat16 and a float, exact in double and
    // correctly rounded in float by both sides, then rounded once to bfloat16. So the fast
    // kernels (which convert bfloat16 in registers) must give the reference's bits exactly,
    // at every SIMD level and through the partial batches of odd row lengths; a rounding other
    // than to nearest even would differ on about half the elements. A tenth of the inputs are
    // special: subnormal and smallest-normal values (products below 2^-126, which AVX512-BF16's
    // vcvtneps2bf16 would read as zero: the kernels must round them as the reference does),
    // NaNs with payloads (quieted, sign and top payload kept), infinities, and values near the
    // largest bfloat16 (products that overflow, or round up to infinity).
    settings_guard guard;
    const std::uint16_t special[] = {0x0001, 0x8001, 0x0035, 0x007f, 0x807f, 0x0080, 0x8080, 0x00ff,
                                     0x0100, 0x7fc1, 0xffa5, 0x7f81, 0x7f80, 0xff80, 0x7f7f, 0xff7e};
    std::mt19937_64 gen(21);
    std::uniform_real_distribution<double> U(-4, 4);
    constexpr dtype dt = dtype::bfloat16;
    for (const shape s : {shape{67, 5, 1}, shape{300, 3, 1}, shape{3, 2, 67}, shape{2, 3, 1100}, shape{17, 3, 3}})
    {
        const auto n = static_cast<std::size_t>(s.outer * s.C * s.inner), C = static_cast<std::size_t>(s.C);
        std::vector<bfloat16_t> x(n), dy(n);
        for (std::size_t i = 0; i < n; ++i)
        {
            x[i] = xgrad::to_bfloat16(static_cast<float>(U(gen)));
            dy[i] = xgrad::to_bfloat16(static_cast<float>(U(gen)));
            if (gen() % 10 == 0)
                x[i].bits = special[gen() % std::size(special)];
            if (gen() % 10 == 0)
                dy[i].bits = special[gen() % std::size(special)];
        }
        std::vector<float> scale(C), zero(C, 0.f), one(C, 1.f), s1(C), s2(C);
        for (auto& v : scale)
            v = static_cast<float>(U(gen)) * 1.0009765625f + 0.0001f; // many significant bits
        std::vector<bfloat16_t> y_want(n), y_got(n), dx_want(n), dx_got(n);
        cpu::reference::bn_normalize(y_want.data(), x.data(), scale.data(), zero.data(), zero.data(), one.data(), 0.0,
                                     false, dt, s.outer, s.C, s.inner);
        cpu::reference::bn_grad_inference(dx_want.data(), s1.data(), s2.data(), dy.data(), x.data(), nullptr,
                                          scale.data(), zero.data(), one.data(), 0.0, dt, s.outer, s.C, s.inner);
        for (const auto& w : ways<bfloat16_t>())
        {
            w.use();
            fast_table.bn_normalize(y_got.data(), x.data(), scale.data(), zero.data(), zero.data(), one.data(), 0.0,
                                    false, dt, s.outer, s.C, s.inner);
            fast_table.bn_grad_inference(dx_got.data(), s1.data(), s2.data(), dy.data(), x.data(), nullptr,
                                         scale.data(), zero.data(), one.data(), 0.0, dt, s.outer, s.C, s.inner);
            INFO(str(s), " level ", w.name());
            CHECK(same_bits(y_got, y_want));
            CHECK(same_bits(dx_got, dx_want));
        }
    }
}
