// Tests of the CPU backend's instruction set selection (backends/cpu/simd/level.cpp): which
// SIMD level the dispatcher picks, that limit_simd_level caps it, and that at
// simd_level::scalar the dispatch (core/src/dispatch.cpp) serves the reference table; and of
// the kernel registry (backends/common/kernel_list.hpp): every table of the CPU backend is
// complete and the kernels' names are unique; and of cpu_kernels_description. Shared helpers:
// cpu_kernels_helpers.hpp.
#include <doctest/doctest.h>

#include <climits>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <random>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include <cblas.h>

#include "core/src/dispatch.hpp"
#include "tests/support/cpu_kernels_helpers.hpp"
#include "xgrad/cpu_info.hpp"

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
    // The compiler's own CPUID reading (it does not check the OS state, which every OS that
    // runs these tests saves).
    const bool avx2_fma = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    const bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512cd") &&
                        __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
                        __builtin_cpu_supports("avx512vl");
    CHECK(cpu::simd_supported() == (avx512     ? cpu::simd_level::avx512
                                    : avx2_fma ? cpu::simd_level::avx2_fma
                                               : cpu::simd_level::sse2));
#endif
    CHECK(cpu::simd_level_in_use() == cpu::simd_supported());
    settings_guard guard;
    cpu::limit_simd_level(cpu::simd_level::sse2);
    CHECK(cpu::simd_level_in_use() == cpu::simd_level::sse2);
    cpu::limit_simd_level(cpu::simd_level::avx2_fma);
    CHECK(cpu::simd_level_in_use() == std::min(cpu::simd_supported(), cpu::simd_level::avx2_fma));
    MESSAGE("SIMD level in use by default: ", level_name(cpu::simd_supported()));
}

TEST_CASE("cpu_kernels_description names the level in use and the BLAS; the hint follows the kernel set")
{
    settings_guard guard;
    for (const cpu::simd_level level : simd_levels())
    {
        cpu::limit_simd_level(level);
        const std::string d = xgrad::cpu_kernels_description();
        INFO(d);
        CHECK(d.rfind(std::string("simd ") + level_name(cpu::simd_level_in_use()) + ", OpenBLAS", 0) == 0);
        CHECK(d.find(std::string("(") + openblas_get_corename() + " kernels)") != std::string::npos);
    }
    // The hint is about OpenBLAS's choice on an AVX-512 processor, not about the level in use.
    const std::string core = openblas_get_corename();
    const bool avx512_kernels = core == "SkylakeX" || core == "Cooperlake" || core == "SapphireRapids";
    const std::string hint = xgrad::blas_performance_hint();
    INFO(core, ": '", hint, "'");
    CHECK(hint.empty() == (cpu::simd_supported() < cpu::simd_level::avx512 || avx512_kernels));
    if (!hint.empty())
    {
        CHECK(hint.find("OPENBLAS_CORETYPE=SkylakeX") != std::string::npos);
        // A kernel set the environment asked for is named as the cause.
        const char* set = std::getenv("OPENBLAS_CORETYPE");
        if (set != nullptr && *set != '\0')
            CHECK(hint.find(std::string("OPENBLAS_CORETYPE=") + set + " in the environment") == 0);
    }
}

TEST_CASE("cpu kernels: the dispatch serves the reference table at simd_level::scalar, the fast one above")
{
    settings_guard guard;
    const auto& ref_table = cpu::reference_kernels();
    if (cpu::simd_supported() != cpu::simd_level::scalar)
    {
        cpu::limit_simd_level(cpu::simd_level::sse2);
        CHECK(&xgrad::detail::backend_for(xgrad::cpu_device) == &cpu::fast_kernels());
    }
    cpu::limit_simd_level(cpu::simd_level::scalar);
    CHECK(cpu::simd_level_in_use() == cpu::simd_level::scalar);
    const auto& k = xgrad::detail::backend_for(xgrad::cpu_device);
    CHECK(&k == &ref_table);
    // Entries with a twin are the twins; the others are the one function both tables share.
    CHECK((k.unary == &cpu::reference::unary));
    CHECK((k.argmax == &cpu::reference::argmax));
    CHECK((k.bn_moments == &cpu::reference::bn_moments));
    CHECK((k.take == &cpu::take));
    CHECK((k.allocate == &cpu::allocate));

    // What the dispatch hands out at simd_level::scalar computes the reference's bits.
    std::mt19937_64 gen(9);
    const shape_t shape = {33, 129};
    const auto x = random_input<float>(gen, shape, layout::permuted, false);
    const shape_t strides = contiguous_strides(shape);
    std::vector<float> got(static_cast<std::size_t>(numel(shape))), ref(got.size());
    auto same = [&] { return std::memcmp(got.data(), ref.data(), got.size() * sizeof(float)) == 0; };
    for (const unary_op op : all_unary)
    {
        k.unary(got.data(), strides.data(), x.data(), x.strides.data(), dtype::float32, 2, shape.data(), op);
        cpu::reference::unary(ref.data(), strides.data(), x.data(), x.strides.data(), dtype::float32, 2, shape.data(),
                              op);
        CHECK(same());
    }
    for (const binary_op op : all_binary)
    {
        k.binary(got.data(), strides.data(), x.data(), x.strides.data(), x.data(), strides.data(), dtype::float32, 2,
                 shape.data(), op);
        cpu::reference::binary(ref.data(), strides.data(), x.data(), x.strides.data(), x.data(), strides.data(),
                               dtype::float32, 2, shape.data(), op);
        CHECK(same());
    }
    const shape_t one = {1};
    k.reduce(got.data(), one.data(), x.data(), x.strides.data(), dtype::float32, 2, 1, shape.data(), reduce_op::sum);
    cpu::reference::reduce(ref.data(), one.data(), x.data(), x.strides.data(), dtype::float32, 2, 1, shape.data(),
                           reduce_op::sum);
    CHECK(std::memcmp(got.data(), ref.data(), 33 * sizeof(float)) == 0);
    // The BLAS dimension limit holds on this path too.
    const shape_t st = {0, 1, 1};
    CHECK_THROWS_AS(k.matmul(nullptr, nullptr, st.data(), nullptr, st.data(), dtype::float32, 1, 1,
                             std::int64_t{INT_MAX} + 1, 1, false),
                    std::invalid_argument);
}

TEST_CASE("kernel registry: every table of every backend built has every kernel of the list, names are unique")
{
    using xgrad::kernels::kernel_count;
    using xgrad::kernels::kernel_id;
    using xgrad::kernels::kernel_names;
    REQUIRE(kernel_count > 0);
    std::set<std::string> names;
    for (int i = 0; i < kernel_count; ++i)
    {
        INFO("kernel ", i, " (", kernel_names[i], ")");
        CHECK(std::string(kernel_names[i]).size() > 0);
        CHECK(names.insert(kernel_names[i]).second);
        CHECK(xgrad::kernels::is_set(cpu::fast_kernels(), static_cast<kernel_id>(i)));
        CHECK(xgrad::kernels::is_set(cpu::reference_kernels(), static_cast<kernel_id>(i)));
    }
    CHECK(names.size() == static_cast<std::size_t>(kernel_count));
    CHECK(xgrad::kernels::is_complete(cpu::fast_kernels()));
    CHECK(xgrad::kernels::is_complete(cpu::reference_kernels()));
    // The check itself notices a missing entry.
    xgrad::kernels::kernel_table partial = cpu::fast_kernels();
    partial.argmax = nullptr;
    CHECK_FALSE(xgrad::kernels::is_set(partial, kernel_id::argmax));
    CHECK_FALSE(xgrad::kernels::is_complete(partial));
    CHECK(std::string(kernel_names[static_cast<int>(kernel_id::argmax)]) == "argmax");
}
