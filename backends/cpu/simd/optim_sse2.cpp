// The optimizer functors (simd/optim_impl.hpp) compiled for SSE2, the x86-64 baseline, with
// -ffp-contract=off (CMakeLists.txt) like their AVX2 twin, simd/optim_avx2.cpp.
#include "backends/cpu/simd/optim_impl.hpp"

XGRAD_CPU_OPTIM_SIMD_INSTANTIATE(, xsimd::sse2)
