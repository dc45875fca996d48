#pragma once
// Helpers shared by the ops' implementations: raw (unrecorded) tensor construction and
// copies, argument checks with clear messages.
#include <string>

#include "dispatch.hpp"
#include "xgrad/tensor.hpp"

namespace xgrad::detail
{
    /// A new contiguous tensor with uninitialised contents.
    tensor empty(const shape_type& shape, dtype dt, device dev);
    /// A view of x's storage with other shape/strides/offset; no autograd metadata.
    tensor alias(const tensor& x, const shape_type& shape, const strides_type& strides, std::int64_t offset);
    /// Copies x into the view `out` (same shape), converting the dtype. Not recorded.
    void copy_into(const tensor& out, const tensor& x);
    /// x converted to dt as a new contiguous tensor (x itself when already dt). Not recorded.
    tensor raw_cast(const tensor& x, dtype dt);
    /// x as a contiguous tensor (x itself when already contiguous). Not recorded.
    tensor raw_contiguous(const tensor& x);
    /// x copied into new contiguous storage (even when x is contiguous), for outputs that must
    /// not alias their inputs and for buffers written in place. Not recorded.
    tensor copy_of(const tensor& x);
    /// Resolves a possibly negative dim against ndim; throws naming `what` and the shape.
    std::int64_t normalize_dim(std::int64_t d, std::int64_t ndim, const char* what, const shape_type& shape);
    /// Throws std::invalid_argument unless x is defined and floating point.
    void check_floating(const tensor& x, const char* op);
    /// Throws unless a and b have the same dtype and device.
    void check_same(const tensor& a, const tensor& b, const char* op);
    /// Throws unless x is defined.
    void check_defined(const tensor& x, const char* op);
}
