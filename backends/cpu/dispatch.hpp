#pragma once
// Internal to the CPU backend: what decides how a fast kernel (kernels/elementwise.cpp, reduce.cpp,
// copy_fill.cpp, matmul.cpp) runs: which compiled instruction set, which compute dtype, and
// how finely it is split over threads. Whether the fast kernel runs at all is decided once, in
// core/src/dispatch.cpp, which serves the reference table at simd_level::scalar.
//
// - The SIMD code is compiled per instruction set in simd/<arch>.cpp; xsimd::dispatch picks
//   one at run time (simd_call), capped by limit_simd_level (simd/level.hpp; simd/level.cpp
//   implements the choice).
// - Threads split the flat element range (parallel_for, >= `grain` elements a chunk, so small
//   tensors stay on the calling thread).
#include <cstdint>

#include "backends/common/op_math.hpp"
#include "backends/cpu/simd/kernels.hpp"
#include "backends/cpu/simd/level.hpp"
#include "xgrad/dtype.hpp"

namespace xgrad::cpu::detail
{
    /// Minimum elements per thread chunk: about 10-30 us of work for the cheapest kernels,
    /// well above the cost of waking a worker, so tensors below 64K elements run inline.
    constexpr std::int64_t grain = 32768;

    /// Whether copies may use the F16C float16 <-> float32 conversions (simd/kernels.hpp): the
    /// processor has F16C and the level in use is avx2_fma. Defined in simd/level.cpp.
    bool use_f16c() noexcept;

    /// F{}(arch, args...) for the instruction set in use. xsimd::dispatch is reached only
    /// when simd_supported() allows AVX2 (it would pick AVX2 from the CPUID bits alone).
    template <class F, class... Args>
    auto simd_call(Args... args) noexcept
    {
        if (simd_level_in_use() == simd_level::sse2)
            return F{}(xsimd::sse2{}, args...);
        static auto dispatched = xsimd::dispatch<simd::archs>(F{});
        return dispatched(args...);
    }

    using kernels::visit_compute; // backends/common/op_math.hpp
}
