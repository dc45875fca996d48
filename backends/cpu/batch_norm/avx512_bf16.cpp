// The batch-norm SIMD functors for bfloat16 tensors on processors with AVX512-BF16: the bodies
// of simd_impl.hpp for the avx512bw_bf16 tag, whose stores round with vcvtneps2bf16 (simd_io.hpp,
// pack_16). The one file built with -mavx512bf16 (see ../CMakeLists.txt); walk.hpp calls it
// only where avx512_bf16_in_use() (simd/level.cpp checks the CPUID bit).
//
// The rule of ../simd/avx512.cpp holds: no inline function shared with other translation units
// (every helper of simd_impl.hpp and simd_io.hpp is a template on the architecture tag).
#include "backends/cpu/batch_norm/simd_impl.hpp"

XGRAD_CPU_BN_SIMD_INSTANTIATE_TYPE(, xgrad::cpu::simd::avx512bw_bf16, float, xgrad::bfloat16_t)
