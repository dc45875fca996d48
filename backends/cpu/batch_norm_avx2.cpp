// The batch-norm SIMD inner loops (batch_norm_simd_impl.hpp) compiled for AVX2 + FMA. Only this
// file and kernels_avx2.cpp are built with -mavx2 -mfma -mf16c (plus -O2 in every
// configuration; see CMakeLists.txt); batch_norm.cpp calls into it only after checking the
// processor at run time (simd_call, dispatch.hpp), so the library still runs on any x86-64.
//
// Keep this file free of inline functions shared with other translation units (standard
// library helpers included): the linker may keep this file's AVX2-encoded copy of such a
// function for the whole library. The functor helpers are all templates on the architecture.
// float16 <-> float32 conversion with F16C is not done here but by the existing bulk
// functions of kernels_avx2.cpp (simd::f16_to_f32_f16c, simd::f32_to_f16_f16c), which
// batch_norm_convert.cpp calls on the kernels' cache-resident pieces.
#include "backends/cpu/batch_norm_simd_impl.hpp"

XGRAD_CPU_BN_SIMD_INSTANTIATE(, xsimd::fma3<xsimd::avx2>)
