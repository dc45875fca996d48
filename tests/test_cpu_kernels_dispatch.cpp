// Tests of the CPU backend's instruction set selection (backends/cpu/simd_level.cpp): which
// SIMD level the dispatcher picks, that limit_simd_level caps it, and that at
// simd_level::scalar every fast kernel is its reference twin, bit for bit. Shared helpers:
// cpu_kernels_helpers.hpp.
#include <doctest/doctest.h>

#include <climits>
#include <cstdint>
#include <cstring>
#include <random>
#include <stdexcept>
#include <vector>

#include "tests/cpu_kernels_helpers.hpp"

using namespace cpu_kernels_test;

TEST_CASE("cpu kernels: the dispatcher picks a SIMD instruction set")
{
    if (cpu::simd_supported() == cpu::simd_level::scalar)
    {
        MESSAGE("XGRAD_SIMD=scalar build: the kernels are the reference loops");
        return;
    }
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    const bool avx2_fma = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    CHECK(cpu::simd_supported() == (avx2_fma ? cpu::simd_level::avx2_fma : cpu::simd_level::sse2));
#endif
    CHECK(cpu::simd_level_in_use() == cpu::simd_supported());
    settings_guard guard;
    cpu::limit_simd_level(cpu::simd_level::sse2);
    CHECK(cpu::simd_level_in_use() == cpu::simd_level::sse2);
    MESSAGE("SIMD level in use by default: ", level_name(cpu::simd_supported()));
}

TEST_CASE("cpu kernels: simd_level::scalar runs the reference kernels")
{
    settings_guard guard;
    cpu::limit_simd_level(cpu::simd_level::scalar);
    CHECK(cpu::simd_level_in_use() == cpu::simd_level::scalar);
    std::mt19937_64 gen(9);
    const shape_t shape = {33, 129};
    const auto x = random_input<float>(gen, shape, layout::permuted, false);
    const shape_t strides = contiguous_strides(shape);
    std::vector<float> fast(static_cast<std::size_t>(numel(shape))), ref(fast.size());
    for (const unary_op op : all_unary)
    {
        cpu::unary(fast.data(), strides.data(), x.data(), x.strides.data(), dtype::float32, 2, shape.data(), op);
        cpu::reference::unary(ref.data(), strides.data(), x.data(), x.strides.data(), dtype::float32, 2, shape.data(),
                              op);
        CHECK(std::memcmp(fast.data(), ref.data(), fast.size() * sizeof(float)) == 0);
    }
    auto same = [&] { return std::memcmp(fast.data(), ref.data(), fast.size() * sizeof(float)) == 0; };
    for (const binary_op op : all_binary)
    {
        cpu::binary(fast.data(), strides.data(), x.data(), x.strides.data(), x.data(), strides.data(), dtype::float32,
                    2, shape.data(), op);
        cpu::reference::binary(ref.data(), strides.data(), x.data(), x.strides.data(), x.data(), strides.data(),
                               dtype::float32, 2, shape.data(), op);
        CHECK(same());
    }
    cpu::where(fast.data(), strides.data(), x.data(), x.strides.data(), x.data(), strides.data(), x.data(),
               x.strides.data(), dtype::float32, 2, shape.data());
    cpu::reference::where(ref.data(), strides.data(), x.data(), x.strides.data(), x.data(), strides.data(), x.data(),
                          x.strides.data(), dtype::float32, 2, shape.data());
    CHECK(same());
    cpu::copy(fast.data(), strides.data(), dtype::float32, x.data(), x.strides.data(), dtype::float32, 2, shape.data());
    cpu::reference::copy(ref.data(), strides.data(), dtype::float32, x.data(), x.strides.data(), dtype::float32, 2,
                         shape.data());
    CHECK(same());
    cpu::fill(fast.data(), strides.data(), dtype::float32, 2, shape.data(), 0.1);
    cpu::reference::fill(ref.data(), strides.data(), dtype::float32, 2, shape.data(), 0.1);
    CHECK(same());
    const shape_t ma = {0, 129, 1}, mb = {0, 1, 129}; // x as [33, 129] and its transpose
    cpu::matmul(fast.data(), x.data(), ma.data(), x.data(), mb.data(), dtype::float32, 1, 33, 33, 129);
    cpu::reference::matmul(ref.data(), x.data(), ma.data(), x.data(), mb.data(), dtype::float32, 1, 33, 33, 129);
    CHECK(std::memcmp(fast.data(), ref.data(), 33 * 33 * sizeof(float)) == 0);
    const shape_t one = {1};
    cpu::reduce(fast.data(), one.data(), x.data(), x.strides.data(), dtype::float32, 2, 1, shape.data(), reduce_op::sum);
    cpu::reference::reduce(ref.data(), one.data(), x.data(), x.strides.data(), dtype::float32, 2, 1, shape.data(),
                           reduce_op::sum);
    CHECK(std::memcmp(fast.data(), ref.data(), 33 * sizeof(float)) == 0);
    // The BLAS dimension limit holds on this path too.
    const shape_t st = {0, 1, 1};
    CHECK_THROWS_AS(cpu::matmul(nullptr, nullptr, st.data(), nullptr, st.data(), dtype::float32, 1, 1,
                                std::int64_t{INT_MAX} + 1, 1),
                    std::invalid_argument);
}
