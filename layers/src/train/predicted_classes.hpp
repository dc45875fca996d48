#pragma once
// The one place where xgrad::train turns logits into predicted classes.
#include "xgrad/tensor.hpp"

namespace xgrad::train::detail
{
    /// The index of the largest entry of each row of logits [b, classes] (float), lowest index
    /// on ties: an int64 tensor [b]. The caller has checked the shape.
    tensor predicted_classes(const tensor& logits);
}
