// The optimizer functors (simd/optim_impl.hpp) compiled for AVX-512, in a file of their own
// because it is built with -ffp-contract=off (CMakeLists.txt), for the reasons given in
// simd/optim_avx2.cpp. The fast kernels call this code only at simd_level::avx512.
#include "backends/cpu/simd/optim_impl.hpp"

XGRAD_CPU_OPTIM_SIMD_INSTANTIATE(, xsimd::avx512bw)
