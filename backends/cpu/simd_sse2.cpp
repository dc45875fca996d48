// The SIMD inner loops (simd_kernels_impl.hpp) compiled for SSE2, the x86-64 baseline: the
// fallback xsimd::dispatch picks on processors without AVX2 + FMA. Built with the default
// flags; this file only instantiates the functors for xsimd::sse2.
#include "backends/cpu/simd_kernels_impl.hpp"

XGRAD_CPU_SIMD_INSTANTIATE(, xsimd::sse2)
