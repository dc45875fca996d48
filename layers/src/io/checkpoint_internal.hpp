#pragma once
// What the checkpoint reader and the weights reader share (layers/src/io/checkpoint.cpp).
#include <filesystem>
#include <string_view>

#include "xgrad/io/safetensors.hpp"

namespace xgrad::io
{
    /// The prefix of the model's tensors in a checkpoint.
    inline constexpr std::string_view checkpoint_model_prefix = "model.";
    inline constexpr std::string_view checkpoint_optimizer_prefix = "optimizer.";

    /// Whether the metadata is an xgrad checkpoint's ("format": "xgrad-checkpoint").
    bool is_checkpoint(const metadata_map& metadata);
    /// Throws format_error naming the file unless the checkpoint's "version" is the one this
    /// build writes; a version-1 file gets a message saying what changed since.
    void check_checkpoint_version(const std::filesystem::path& path, const metadata_map& metadata);
}
