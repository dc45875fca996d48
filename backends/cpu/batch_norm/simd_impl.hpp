#pragma once
// Bodies of the batch-norm SIMD functors declared in simd.hpp. Included ONLY by the
// per-instruction-set translation units (../simd/sse2.cpp, avx2.cpp, avx512.cpp), each
// compiled with its own flags and explicitly instantiating the functors for its one
// architecture.
//
// As in simd/kernels_impl.hpp, every helper here is a template on the architecture (or a
// constant) and no standard-library function is called, so no inline function compiled with
// -mavx2 can be shared with (and picked by the linker for) code that a pre-AVX2 processor runs.
// A row or segment whose length is not a multiple of the lanes ends with a padded batch of its
// last elements (loaded in memory order, after the rest; reductions mask the padding off,
// outputs store only the real lanes), so the same vector code computes every element. (An
// earlier version ended with a whole batch overlapping the previous one, loaded first: on short
// channels-first segments, e.g. 14x14, that load jumped ahead of the hardware prefetcher and
// stalled on DRAM once per segment.)
//
// The bodies, one file per concern:
//   simd_terms.hpp   the operands of one batch and the terms it adds to a kind's sums (shared)
//   simd_tile.hpp    bn_tile_fn, the per-column sums of a tile
//   simd_run.hpp     bn_run_fn, the per-channel sums over runs of segments
//   simd_affine.hpp  bn_affine_fn, the elementwise affine outputs
#include "backends/cpu/batch_norm/simd_affine.hpp"
#include "backends/cpu/batch_norm/simd_run.hpp"
#include "backends/cpu/batch_norm/simd_terms.hpp"
#include "backends/cpu/batch_norm/simd_tile.hpp"
