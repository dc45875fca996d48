#pragma once
// What the checkpoint reader and the weights reader share (train/src/io/checkpoint.cpp).
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "xgrad/io/safetensors.hpp"

namespace xgrad::io
{
    /// The prefix of the model's tensors in a checkpoint.
    inline constexpr std::string_view checkpoint_model_prefix = "model.";
    inline constexpr std::string_view checkpoint_optimizer_prefix = "optimizer.";

    /// "'s'", for messages.
    inline std::string in_quotes(std::string_view s) { return "'" + std::string(s) + "'"; }
    inline bool starts_with(std::string_view s, std::string_view prefix)
    {
        return s.substr(0, prefix.size()) == prefix;
    }
    /// The problems of a load, one message: "a; b; c".
    inline std::string join_problems(const std::vector<std::string>& parts)
    {
        std::string s;
        for (const auto& p : parts)
            s += (s.empty() ? "" : "; ") + p;
        return s;
    }

    /// Whether the metadata is an xgrad checkpoint's ("format": "xgrad-checkpoint").
    bool is_checkpoint(const metadata_map& metadata);
    /// Throws format_error naming the file unless the checkpoint's "version" is the one this
    /// build writes; a version-1 file gets a message saying what changed since.
    void check_checkpoint_version(const std::filesystem::path& path, const metadata_map& metadata);
}
