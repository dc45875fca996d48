#pragma once
// Bodies of the SIMD functors declared in simd/kernels.hpp. Included ONLY by the
// per-instruction-set translation units (simd/sse2.cpp, simd/avx2.cpp, simd/avx512.cpp), each
// compiled with its own flags and explicitly instantiating the functors for its one
// architecture.
//
// Every helper of the parts below is a template on the architecture, so each translation unit
// emits only its own instantiations: no inline function compiled with -mavx2 can be merged by
// the linker into code that a pre-AVX2 processor runs. For the same reason they call no
// standard library math.
//
// The bodies, one file per concern:
//   batch_impl.hpp        impl::batch and impl::lanes, the vector types they all use
//   elementwise_impl.hpp  unary_fn, binary_fn, where_fn; the accuracy of exp, log, tanh, ...
//   reduce_impl.hpp       reduce_contiguous_fn, reduce_rows_fn
//   max_pool_impl.hpp     the max-pooling functors and their gradient's rows
//   conv_taps_impl.hpp    the direct convolution's forward and weight-gradient tiles
#include "backends/cpu/simd/batch_impl.hpp"
#include "backends/cpu/simd/conv_taps_impl.hpp"
#include "backends/cpu/simd/elementwise_impl.hpp"
#include "backends/cpu/simd/max_pool_impl.hpp"
#include "backends/cpu/simd/reduce_impl.hpp"
