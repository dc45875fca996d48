#pragma once
// A model summary like torchinfo's (nn/src/summary.cpp): one line per module in pre-order,
// with its output shape from a dry run and its own parameter count, then the totals.
//
//     std::cout << xgrad::nn::summary(*model, xgrad::zeros({1, 1, 28, 28})) << "\n";
//
//   Layer (type)       Output shape     Param #
//   ===========================================
//   conv (conv2d)      [1, 32, 26, 26]      320
//   bn (batch_norm2d)  [1, 32, 26, 26]       64
//   relu (relu)        [1, 32, 26, 26]        -
//   flatten (flatten)  [1, 21632]             -
//   fc (linear)        [1, 10]          216,330
//   ===========================================
//   Input shape: [1, 1, 28, 28], output shape: [1, 10]
//   Total params: 216,714
//   Trainable params: 216,714
//   Non-trainable params: 0
//
// The dry run calls the model once on example_input in evaluation mode under no_grad, so that
// it changes nothing (no running statistics are updated, no dropout draws are taken); the
// model's mode is restored afterwards, also when forward throws. Modules that the run does not
// call show "-" as their shape. Errors: whatever the model's forward throws on the input.
#include <string>

#include "xgrad/nn/module.hpp"

namespace xgrad::nn
{
    std::string summary(module& model, const tensor& example_input);
}
