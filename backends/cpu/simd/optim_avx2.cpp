// The optimizer functors (simd/optim_impl.hpp) compiled for AVX2 + FMA, in a file of their own
// because it is built with -ffp-contract=off (CMakeLists.txt): the compiler must not fuse the
// rules' products and sums into fma instructions, so that the fast kernels give the reference
// kernels' bits. The same rules as simd/avx2.cpp apply: the fast kernels call this code only
// after checking the processor at run time, and it shares no inline function with others.
#include "backends/cpu/simd/optim_impl.hpp"

XGRAD_CPU_OPTIM_SIMD_INSTANTIATE(, xsimd::fma3<xsimd::avx2>)
