#pragma once
// Shape and layout ops (core/src/ops/shape.cpp). All are differentiable; the view ops share
// storage with their input. Methods of the same name on `tensor` call these.
//
// Errors: xgrad::invalid_argument naming the op and the shapes, also when a size computed from
// the arguments (reshape's product of extents, pad's extent plus widths, concat's sum of
// extents, a sliced stride times the step, the result's strides) does not fit int64.
#include <utility>
#include <vector>

#include "xgrad/tensor.hpp"

namespace xgrad
{
    /// One dimension may be -1 (inferred). A view when x is contiguous, else a copy. A shape with
    /// a 0 extent is empty whatever its other extents are.
    tensor reshape(const tensor& x, const shape_type& shape);
    /// dims is a permutation of 0..ndim-1 (negative allowed).
    tensor permute(const tensor& x, const std::vector<std::int64_t>& dims);
    tensor transpose(const tensor& x, std::int64_t d0, std::int64_t d1);
    /// Python's x[start:stop:step] along dim. step >= 1: elements start, start+step, ... < stop,
    /// a view; start and stop count from the end when negative and clamp to [0, n]. step <= -1:
    /// elements start, start+step, ... > stop, in that (reversed) order, a copy (flip of a
    /// view); start and stop count from the end when negative and clamp to [-1, n - 1], so
    /// slice(x, d, INT64_MAX, INT64_MIN, -1) is x reversed along d (Python's x[::-1]). step 0
    /// throws.
    tensor slice(const tensor& x, std::int64_t dim, std::int64_t start, std::int64_t stop, std::int64_t step = 1);
    /// x with the order of its elements reversed along each of dims (negative dims count from
    /// the end; a dimension named twice throws). A copy, through take (xgrad/ops/index.hpp),
    /// whose int64 index tensor of x's shape it builds on the host, so floating x only (take's
    /// error otherwise); x itself when no extent is reversed. Gradient: flip (put_add).
    tensor flip(const tensor& x, const std::vector<std::int64_t>& dims);
    /// Broadcasts x to `shape` (NumPy rules; leading dims may be added). A view with stride 0.
    tensor expand(const tensor& x, const shape_type& shape);
    /// Joins tensors of equal dtype, device and shape (except along dim) along dim.
    tensor concat(const std::vector<tensor>& xs, std::int64_t dim);
    /// Constant padding: widths[d] = {before, after} (both >= 0) for every dimension d.
    tensor pad(const tensor& x, const std::vector<std::pair<std::int64_t, std::int64_t>>& widths, double value = 0.0);
    tensor contiguous(const tensor& x);
    /// Converts the dtype; differentiable between floating dtypes (gradient cast back).
    tensor cast(const tensor& x, dtype dt);
    /// Copies to another device; differentiable (gradient copied back).
    tensor to_device(const tensor& x, device dev);
    /// The embedding of g into zeros of `shape` at the positions slice(dim, start, ., step)
    /// selects: the gradient of slice, itself differentiable (its gradient is slice).
    tensor slice_backward(const tensor& g, const shape_type& shape, std::int64_t dim, std::int64_t start,
                          std::int64_t step);
}
