// The instruction set queries of an XGRAD_SIMD=scalar build (simd/level.cpp stands in for this
// file in a dispatch build): the level is always simd_level::scalar, so core/src/dispatch.cpp
// serves the reference kernels. For debugging (it takes SIMD, threading and OpenBLAS out of the
// picture) and for targets other than x86-64, where the fast kernels are not built.
#include <atomic>

#include "backends/cpu/amx/amx.hpp"
#include "backends/cpu/cpu_kernels.hpp"
#include "backends/cpu/simd/level.hpp"

namespace xgrad::cpu
{
    simd_level simd_supported() noexcept { return simd_level::scalar; }
    simd_level simd_environment_cap() noexcept { return simd_level::scalar; }
    simd_level simd_level_in_use() noexcept { return simd_level::scalar; }
    void limit_simd_level(simd_level) noexcept {}
    bool avx512_bf16_supported() noexcept { return false; }
    bool avx512_bf16_in_use() noexcept { return false; }
    void limit_avx512_bf16(bool) noexcept {}
    bool amx_supported() noexcept { return false; }
    bool amx_in_use() noexcept { return false; }
    void limit_amx(bool) noexcept {}

    std::int64_t bn_set_resident_budget(std::int64_t bytes) noexcept
    {
        // The reference kernels do not block by channels; the value is only kept so that
        // callers that set and restore it behave as in a dispatch build.
        static std::atomic<std::int64_t> budget{std::int64_t{4} << 20};
        return budget.exchange(bytes);
    }
}
