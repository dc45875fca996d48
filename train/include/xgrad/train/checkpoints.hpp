#pragma once
// Where a training run keeps its checkpoints, and whether a checkpoint may continue a run.
//
// A run that is to be resumed exactly must agree with the run that wrote the checkpoint on
// everything that shapes the computation (seed, batch size, schedule, total epochs, data, ...).
// The trainer (xgrad/train/trainer.hpp) stores such settings as checkpoint metadata and
// compares them with check_resume_compatible before it continues.
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "xgrad/io/safetensors.hpp"

namespace xgrad::train
{
    /// out / "checkpoint_epoch_<epoch>.safetensors". Throws xgrad::invalid_argument for epoch < 0.
    std::filesystem::path checkpoint_path(const std::filesystem::path& out, std::int64_t epoch);

    /// Throws xgrad::invalid_argument when `found` (a checkpoint's metadata) does not hold
    /// every entry of `expected` with the same value. The message names `checkpoint` and lists
    /// each differing key with both values ("(absent)" for a missing one). Keys of `found`
    /// that `expected` does not name are ignored (e.g. the checkpoint format's own entries).
    /// A key in `may_grow` may differ when both values are non-negative integers and the
    /// expected one is larger (a run extended by more epochs).
    void check_resume_compatible(const std::filesystem::path& checkpoint, const io::metadata_map& found,
                                 const io::metadata_map& expected, const std::vector<std::string>& may_grow = {});

    /// The activation layout a checkpoint's model was trained in: its "data_format" metadata
    /// (stored by a run that names it in trainer_options::run_metadata, as the training
    /// example does), "NCHW" or "NHWC". Throws io::format_error "<checkpoint>: metadata
    /// 'data_format' is 'bogus', not one of the accepted values 'NCHW', 'NHWC'", or "...
    /// 'data_format' is missing ..." when there is none, before a model is built with it.
    std::string checkpoint_data_format(const std::filesystem::path& checkpoint, const io::metadata_map& metadata);

    /// As above, with the metadata read from the file (its header only; the errors of
    /// io::read_safetensors_metadata for a file that is not a readable safetensors file).
    std::string checkpoint_data_format(const std::filesystem::path& checkpoint);
}
