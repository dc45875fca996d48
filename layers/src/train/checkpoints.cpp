// Checkpoint paths and the resume-compatibility check (see xgrad/train/checkpoints.hpp).
#include "xgrad/train/checkpoints.hpp"

#include <string>

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
                                 const io::metadata_map& expected)
    {
        // Every difference is listed at once: fixing them one rerun at a time would be tedious.
        std::string differences;
        for (const auto& [key, value] : expected)
        {
            const auto it = found.find(key);
            const std::string have = it == found.end() ? "(absent)" : it->second;
            if (have != value)
                differences += "\n  " + key + ": checkpoint " + have + ", this run " + value;
        }
        if (!differences.empty())
            throw xgrad::invalid_argument(checkpoint.string() +
                                          ": the checkpoint was written by a run with other settings; resuming "
                                          "would not continue it exactly:" +
                                          differences);
    }
}
