#pragma once
// The Fashion-MNIST classifier of examples/train_fashion_mnist and examples/evaluate (the
// training loop, metrics and checkpoints are the library's: xgrad/train.hpp).
#include <memory>
#include <string>

#include "xgrad/layers.hpp"
#include "xgrad/xgrad.hpp"

namespace xgrad::examples
{
    /// conv3x3(1->32)+BN+ReLU+maxpool2, conv3x3(32->64)+BN+ReLU+maxpool2, flatten,
    /// linear(64*7*7 -> 128)+ReLU, linear(128 -> 10), for 28x28 single-channel images in
    /// `data_format` ("NCHW" or "NHWC"; the layers throw for another). Weights from `gen`.
    std::shared_ptr<nn::sequential> make_fashion_model(const std::string& data_format, generator& gen);

    /// The names of Fashion-MNIST's ten classes, by label.
    extern const char* const fashion_mnist_classes[10];
}
