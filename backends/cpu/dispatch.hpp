#pragma once
// Internal to the CPU backend: what decides how a fast kernel (kernels/elementwise.cpp, reduce.cpp,
// copy_fill.cpp, matmul.cpp) runs: which compiled instruction set, which compute dtype, and
// how finely it is split over threads. Whether the fast kernel runs at all is decided once, in
// core/src/dispatch.cpp, which serves the reference table at simd_level::scalar.
//
// - The SIMD code is compiled per instruction set in simd/<arch>.cpp; simd_call picks one at
//   run time, capped by limit_simd_level (simd/level.hpp; simd/level.cpp
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
    /// level in use is avx2_fma or above (which simd/level.cpp grants only with F16C).
    bool use_f16c() noexcept;

    /// Bulk float32 <-> float16 with the conversion instructions (call only when use_f16c()):
    /// simd::f32_to_f16_avx512 / f16_to_f32_avx512 at simd_level::avx512, else the F16C ones.
    /// Defined in simd/level.cpp.
    void f32_to_f16_hw(std::uint16_t* out, const float* x, std::int64_t n) noexcept;
    void f16_to_f32_hw(float* out, const std::uint16_t* x, std::int64_t n) noexcept;

    /// F{}(arch, args...) for the instruction set of the level in use (the best supported one
    /// when the level is scalar: the batch-norm kernels called directly, as their tests do).
    template <class F, class... Args>
    auto simd_call(Args... args) noexcept
    {
        simd_level level = simd_level_in_use();
        if (level == simd_level::scalar)
            level = simd_supported();
        switch (level)
        {
        case simd_level::avx512: return F{}(xsimd::avx512bw{}, args...);
        case simd_level::avx2_fma: return F{}(xsimd::fma3<xsimd::avx2>{}, args...);
        default: return F{}(xsimd::sse2{}, args...);
        }
    }

    using kernels::visit_compute; // backends/common/op_math.hpp
}
