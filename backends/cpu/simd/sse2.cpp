// The SIMD inner loops compiled for SSE2, the x86-64 baseline: the fallback xsimd::dispatch picks
// on processors without AVX2 + FMA. Built with the default flags (plus -O2 in every
// configuration; see CMakeLists.txt); this file only instantiates, for xsimd::sse2, the functors
// of the fast kernels (simd/kernels_impl.hpp) and of the batch-norm kernels
// (batch_norm/simd_impl.hpp).
#include "backends/cpu/batch_norm/simd_impl.hpp"
#include "backends/cpu/simd/kernels_impl.hpp"

XGRAD_CPU_SIMD_INSTANTIATE(, xsimd::sse2)
XGRAD_CPU_BN_SIMD_INSTANTIATE(, xsimd::sse2)
