// Checkpoint paths and the resume-compatibility check (see xgrad/train/checkpoints.hpp).
#include "xgrad/train/checkpoints.hpp"

#include <algorithm>
#include <charconv>
#include <string>
#include <system_error>

#include "xgrad/errors.hpp"

namespace xgrad::train
{
    std::filesystem::path checkpoint_path(const std::filesystem::path& out, std::int64_t epoch)
    {
        if (epoch < 0)
            throw xgrad::invalid_argument("checkpoint_path: epoch must be at least 0, got " + std::to_string(epoch));
        return out / ("checkpoint_epoch_" + std::to_string(epoch) + ".safetensors");
    }

    void check_resume_compatible(const std::filesystem::path& checkpoint, const io::metadata_map& found,
                                 const io::metadata_map& expected, const std::vector<std::string>& may_grow)
    {
        // A non-negative decimal count, or -1 for anything else.
        const auto count = [](const std::string& text) -> std::int64_t {
            std::int64_t v = 0;
            const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
            return text.empty() || ec != std::errc() || end != text.data() + text.size() || v < 0 ? -1 : v;
        };
        // Every difference is listed at once: fixing them one rerun at a time would be tedious.
        std::string differences;
        for (const auto& [key, value] : expected)
        {
            const auto it = found.find(key);
            const std::string have = it == found.end() ? "(absent)" : it->second;
            if (have == value)
                continue;
            const bool grows = std::find(may_grow.begin(), may_grow.end(), key) != may_grow.end() && count(have) >= 0 &&
                               count(value) > count(have);
            if (!grows)
                differences +=
                    "\n  " + key + ": checkpoint " + have + ", this run " + value +
                    (std::find(may_grow.begin(), may_grow.end(), key) != may_grow.end() ? " (it may only grow)" : "");
        }
        if (!differences.empty())
            throw xgrad::invalid_argument(checkpoint.string() +
                                          ": the checkpoint was written by a run with other settings; resuming "
                                          "would not continue it exactly:" +
                                          differences);
    }

    std::string checkpoint_data_format(const std::filesystem::path& checkpoint, const io::metadata_map& metadata)
    {
        // The layers take the layout as a constructor argument and reject another one in
        // their own terms; checked here, the message names the file and the field instead.
        static constexpr const char* accepted[] = {"NCHW", "NHWC"};
        const std::string choices = "'NCHW', 'NHWC'";
        const auto it = metadata.find("data_format");
        if (it == metadata.end())
            throw io::format_error(checkpoint.string() +
                                   ": metadata 'data_format' is missing (the checkpoint does not say which "
                                   "activation layout its model uses; accepted values: " +
                                   choices + ")");
        for (const char* value : accepted)
            if (it->second == value)
                return it->second;
        throw io::format_error(checkpoint.string() + ": metadata 'data_format' is '" + it->second +
                               "', not one of the accepted values " + choices);
    }

    std::string checkpoint_data_format(const std::filesystem::path& checkpoint)
    {
        return checkpoint_data_format(checkpoint, io::read_safetensors_metadata(checkpoint));
    }
}
