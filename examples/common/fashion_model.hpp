#pragma once
// The Fashion-MNIST classifier of examples/train_fashion_mnist and examples/evaluate (the
// training loop, metrics and checkpoints are the library's: xgrad/train.hpp).
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>

#include "xgrad/data/idx.hpp"
#include "xgrad/layers.hpp"
#include "xgrad/xgrad.hpp"

namespace xgrad::examples
{
    /// conv3x3(1->32)+BN+ReLU+maxpool2, conv3x3(32->64)+BN+ReLU+maxpool2, flatten,
    /// linear(64*7*7 -> 128)+ReLU, linear(128 -> 10), for 28x28 single-channel images in
    /// `data_format` ("NCHW" or "NHWC"; the layers throw for another). Weights from `gen`.
    /// The names and shapes are those of the same model in torch.nn (an nn.Sequential of
    /// Conv2d, BatchNorm2d, ReLU, MaxPool2d, Flatten, Linear under these names), and the flatten
    /// orders features (C, H, W) in both layouts, so the weights are the same in either
    /// layout and in PyTorch (docs/interop.md).
    /// The model, in "NCHW" or "NHWC". precision "bf16" is mixed precision: the convolutions
    /// run with bfloat16 operands summed in float32 (conv2d_options::compute_dtype; AMX tiles
    /// where the processor has them) and give bfloat16 activations, which batch norm (float32
    /// statistics and parameters), ReLU and pooling keep; fc1 takes them back to float32. The
    /// parameters (the master weights) are float32 either way. "f32": float32 throughout.
    /// Each bn + relu + pool run is fused (nn::fuse).
    std::shared_ptr<nn::sequential> make_fashion_model(const std::string& data_format, generator& gen,
                                                       const std::string& precision = "f32");

    /// The image size the model takes (rows, cols).
    inline constexpr std::int64_t fashion_image_rows = 28;
    inline constexpr std::int64_t fashion_image_cols = 28;

    /// The training or test set of an MNIST-format folder, as the model needs it: images of
    /// fashion_image_rows x fashion_image_cols, at least one, labels below 10, checked when the
    /// files are read; `limit` > 0 keeps the first `limit` examples. Throws data::data_error
    /// "training set: <file>: <what>" (or "test set: ..."), xgrad::invalid_argument for
    /// limit < 0.
    data::image_dataset load_fashion_data(const std::filesystem::path& dir, bool train, std::int64_t limit);

    /// What a weights load did beyond loading, for the line that reports it: "" or
    /// " (3 tensors cast to the model's dtypes; bn1.num_batches_tracked, bn2.num_batches_tracked
    /// not in the file: kept; no checksums in the file (another tool wrote it): loaded
    /// unchecked)".
    std::string load_notes(const io::load_weights_result& loaded);

    /// The names of Fashion-MNIST's ten classes, by label.
    extern const char* const fashion_mnist_classes[10];
}
