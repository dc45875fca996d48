#pragma once
// What the two files of the loss family (core/src/ops/loss.cpp, loss_pointwise.cpp) share: the
// reduction and the argument checks, each naming the loss that calls it. Defined in
// loss_pointwise.cpp.
#include <cstdint>
#include <string>

#include "xgrad/ops/loss.hpp"

namespace xgrad::detail
{
    /// Throws unless red is mean, sum or none (or batchmean where allow_batchmean).
    void check_reduction(reduction red, const char* op, bool allow_batchmean = false);
    /// per_element reduced as red says (mean, sum or none; checked by check_reduction before).
    tensor reduce_loss(const tensor& per_element, reduction red);
    /// Throws unless input is floating and target has its dtype, device and shape.
    void check_input_target(const tensor& input, const tensor& target, const char* op);
    /// Throws unless weight (named `what` in messages) has input's dtype and device and every
    /// element is finite and >= 0 (naming the first that is not). Its shape is the caller's.
    void check_weight_values(const tensor& weight, const tensor& input, const char* what, const char* op);
    /// Throws unless weight broadcasts to input's shape (NumPy rules) and passes
    /// check_weight_values; an undefined weight passes.
    void check_broadcast_weight(const tensor& weight, const tensor& input, const char* what, const char* op);
    /// Element `flat` (row-major) of a tensor of `shape`, for messages: "3" for a 1-D tensor,
    /// "[1, 0, 2]" otherwise.
    std::string position_string(std::int64_t flat, const shape_type& shape);
}
