#pragma once
// Tensors on disk in the safetensors format, and training checkpoints built on it
// (layers/src/io/safetensors.cpp, layers/src/io/checkpoint.cpp).
//
// safetensors: an 8-byte little-endian header length L, L bytes of JSON (UTF-8, padded with
// spaces to a multiple of 8) mapping each tensor name to {"dtype", "shape", "data_offsets":
// [begin, end)} relative to the data that follows, plus an optional "__metadata__" object of
// string values; then the raw little-endian tensor data, in offset order, with no gaps.
// dtypes: "F64", "F32", "F16", "BF16", "I64". Python's safetensors library reads these files.
//
// Writing: the header lists the tensors in name order with compact JSON, and their data
// follows in that same order; "__metadata__" is written only when there is metadata.
// Reading accepts any key order, whitespace and data order, as long as the entries tile the
// data region exactly. Headers above 100 MB are refused as corrupt.
//
// Files are written atomically: to "<path>.tmp-<random>" in the same folder, flushed (fsync),
// then renamed over `path`, so a crash mid-save leaves the previous file intact. A failed save
// removes its temporary file and leaves `path` as it was.
//
// Errors: xgrad::io::format_error (a std::runtime_error) whose message is "<path>: <what>",
// naming the tensor and the field where there is one: cannot open/write/rename, not a regular
// file, file shorter than 8 bytes, header length beyond the file or above the bound, header
// not valid JSON or not an object, a tensor entry missing a field or with a field of the wrong
// type, unknown dtype, negative extent, too many elements, data_offsets outside the data or not
// matching shape x dtype size, overlapping or gapped data, "__metadata__" not an object or a
// metadata value that is not a string. Saving refuses (before writing anything) an undefined
// tensor, a tensor named "__metadata__", and names or metadata that are not valid UTF-8.
#include <cstdint>
#include <filesystem>
#include <map>
#include <stdexcept>
#include <string>

#include "xgrad/layers/module.hpp"
#include "xgrad/optim/optimizer.hpp"
#include "xgrad/tensor.hpp"

namespace xgrad::io
{
    class format_error : public std::runtime_error
    {
    public:
        using std::runtime_error::runtime_error;
    };

    using tensor_map = std::map<std::string, tensor>;
    using metadata_map = std::map<std::string, std::string>;

    struct safetensors_content
    {
        tensor_map tensors; // CPU tensors
        metadata_map metadata;
    };

    /// Writes `tensors` (any device; copied to the host) and `metadata` atomically.
    void save_safetensors(const std::filesystem::path& path, const tensor_map& tensors,
                          const metadata_map& metadata = {});
    safetensors_content load_safetensors(const std::filesystem::path& path);

    // --- training checkpoints -------------------------------------------------------------
    // A checkpoint is a safetensors file holding "model.<name>" for every parameter and buffer
    // of the module, "optimizer.<name>" for every entry of the optimizer's state_dict, and
    // metadata {"format": "xgrad-checkpoint", "version": "1", "epoch": "<n>", "optimizer":
    // "<type_name>"} plus the caller's own entries. Saved without an optimizer, the file has
    // neither "optimizer" metadata nor "optimizer.*" entries.

    struct checkpoint_info
    {
        std::int64_t epoch = 0; // epochs completed
        metadata_map metadata;  // every metadata entry, the caller's included
    };

    /// Writes a checkpoint (atomically, as save_safetensors). Throws format_error naming the
    /// file for a negative epoch or an `extra` key that is one of the four reserved ones.
    void save_checkpoint(const std::filesystem::path& path, const nn::module& model, const optim::optimizer* optimizer,
                         std::int64_t epoch, const metadata_map& extra = {});

    /// Loads a checkpoint into `model` (and `optimizer`, when given). Everything is checked
    /// before anything changes: a file that is not an xgrad checkpoint, a model tensor missing
    /// or unexpected, a shape or dtype differing from the model's, an optimizer of another
    /// type, or bad optimizer state throws format_error naming the file and listing the
    /// problems; the model and optimizer are then unchanged. Also refused: format or version
    /// metadata other than the above, an epoch that is not an integer >= 0, tensors outside
    /// "model." and "optimizer.", and, when `optimizer` is given, a checkpoint saved without
    /// one. Without `optimizer`, the file's optimizer entries are ignored. Bad optimizer state
    /// is what optimizer->load_state_dict rejects; its message is included. Tensors are moved
    /// to the device of the value they replace.
    checkpoint_info load_checkpoint(const std::filesystem::path& path, nn::module& model,
                                    optim::optimizer* optimizer = nullptr);
}
