#pragma once
// Views and copies that name storage directly (core/src/ops/storage.cpp): what code that
// manages buffers of its own needs -- a data-parallel wrapper's flat gradient buckets, an
// optimizer writing a step into a parameter's storage, a collective that reduces in place --
// without reaching below the ops.
//
// Only identity is recorded by autograd. The others work on data and nothing else: their
// results are never part of a graph, and copy_ writes into storage that other views may share,
// so it is for tensors no recorded graph reads (check with requires_grad, or use it under
// no_grad on detached values).
//
// Errors: xgrad::invalid_argument naming the function and what was wrong (undefined tensors,
// shapes, dtypes, devices, a view outside its storage), before anything is written.
#include <cstdint>

#include "xgrad/tensor.hpp"

namespace xgrad
{
    /// A recorded view of x with x's shape: its node passes the gradient unchanged to x, so
    /// grad(f(identity(x)), identity(x)) is the gradient through this one use of x (a backward
    /// that rebuilds a function of its inputs differentiates with respect to such uses).
    tensor identity(const tensor& x);

    /// A view of x's storage with the given shape, strides and offset (in elements, from the
    /// start of the storage), not recorded (requires_grad false). Every element it addresses
    /// must lie in the storage: strides >= 0, and offset + Σ (shape[d] - 1) stride[d] below the
    /// storage's element count; an empty shape addresses nothing. Throws otherwise.
    tensor as_strided(const tensor& x, const shape_type& shape, const strides_type& strides, std::int64_t offset);

    /// x's values in new contiguous storage (even when x is contiguous), not recorded.
    tensor clone(const tensor& x);

    /// Writes src's values into dst's storage, element by element through dst's strides,
    /// converting src's dtype to dst's; not recorded. dst and src: defined, the same shape and
    /// device. dst must not overlap src unless it is the identical view, and no two of dst's
    /// elements may share an address (an expanded view). Returns dst.
    const tensor& copy_(const tensor& dst, const tensor& src);
}
