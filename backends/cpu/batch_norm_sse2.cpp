// The batch-norm SIMD inner loops (batch_norm_simd_impl.hpp) compiled for SSE2, the x86-64
// baseline: the fallback xsimd::dispatch picks on processors without AVX2 + FMA. Built with the
// default flags (plus -O2 in every configuration, as kernels_sse2.cpp; see CMakeLists.txt);
// this file only instantiates the functors for xsimd::sse2.
#include "backends/cpu/batch_norm_simd_impl.hpp"

XGRAD_CPU_BN_SIMD_INSTANTIATE(, xsimd::sse2)
