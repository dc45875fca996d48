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
    inline bool ends_with(std::string_view s, std::string_view suffix)
    {
        return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
    }
    /// The problems of a load, one message: "a; b; c", at most 8 of them, then "and N more
    /// problems" (a model of another architecture can differ in every tensor; the first few
    /// say what is wrong, and one line stays readable).
    inline std::string join_problems(const std::vector<std::string>& parts)
    {
        constexpr std::size_t shown = 8;
        std::string s;
        for (std::size_t i = 0; i < parts.size() && i < shown; ++i)
            s += (s.empty() ? "" : "; ") + parts[i];
        if (parts.size() > shown)
            s += "; and " + std::to_string(parts.size() - shown) + " more problems";
        return s;
    }

    /// The problems of names that do not match, for a load's message: each missing and
    /// unexpected name on its own while there are at most 6 in all; beyond that one line for
    /// each kind with the count, the first names, and the prefix they all share. Then, when
    /// one prefix explains the mismatch (the file's names are the model's with a prefix in
    /// front, as a wrapper module saves them, or the other way round), a line saying so and how
    /// to strip it. `missing` holds names as the file would spell them, `file_prefix` the part
    /// of that spelling the model's names lack ("model." in a checkpoint, "" otherwise).
    std::vector<std::string> name_problems(const std::vector<std::string>& missing,
                                           const std::vector<std::string>& unexpected, std::string_view file_prefix);

    /// Whether the metadata is an xgrad checkpoint's ("format": "xgrad-checkpoint").
    bool is_checkpoint(const metadata_map& metadata);
    /// Throws format_error naming the file unless the checkpoint's "version" is the one this
    /// build writes; a version-1 file gets a message saying what changed since.
    void check_checkpoint_version(const std::filesystem::path& path, const metadata_map& metadata);
}
