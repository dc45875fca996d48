#pragma once
// nn::fuse: the pass that gives runs of layers xgrad's fused ops (nn/src/fuse.cpp).
//
// Every nn::sequential in the module's tree (the module itself included) gets, for each run of
// children below, one fused forward (sequential::fuse_children), replacing any it had:
//
//   batch_norm2d, relu, max_pool2d   batch_norm2d::forward_relu_max_pool
//     (the pool of the batch norm's    (xgrad::fused_batch_norm_relu_max_pool2d): the values and
//     data_format)                     first-order gradients of the three children in turn, bit
//                                      for bit those of forward_relu then the pool, the higher
//                                      orders equal to rounding; the backward never reads the
//                                      full-size activation.
//   batch_norm2d or batch_norm3d,     batch_norm_base::forward_relu (xgrad::fused_batch_norm_relu):
//     relu                            the two children's outputs, gradients of every order and
//                                     running statistics, up to rounding, in one pass.
//
// Layers are matched by their exact class: a subclass with a forward of its own (such as
// nn::sync_batch_norm2d, whose statistics cover every rank) is never fused. Parameters, buffers,
// state_dict() and describe() are unchanged; errors in a fused run name all its children. Call
// it once the model is built (after convert_sync_batch_norm, or again after it: a replaced child
// leaves its group). Fusion is a choice of the program: an unfused model computes the same
// function, with an activation tensor more per run.
#include <cstddef>

#include "xgrad/nn/module.hpp"

namespace xgrad::nn
{
    /// Fuses every run above in every sequential of m's tree; returns the number of runs fused.
    std::size_t fuse(module& m);
}
