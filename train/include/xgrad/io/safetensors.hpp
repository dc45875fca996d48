#pragma once
// Tensors on disk in the safetensors format, and training checkpoints built on it
// (train/src/io/safetensors.cpp, train/src/io/checkpoint.cpp).
//
// safetensors: an 8-byte little-endian header length L, L bytes of JSON (UTF-8, padded with
// spaces to a multiple of 8) mapping each tensor name to {"dtype", "shape", "data_offsets":
// [begin, end)} relative to the data that follows, plus an optional "__metadata__" object of
// string values; then the raw little-endian tensor data, in offset order, with no gaps.
// dtypes written: "F64", "F32", "F16", "BF16", "I64" (xgrad's five). Python's safetensors
// library reads these files. dtypes read: those, and every other one the format has, widened
// to the xgrad dtype that holds each value exactly: "I32", "I16", "I8", "U64", "U32", "U16",
// "U8" and "BOOL" to int64 (a U64 value above 2^63 - 1 or a BOOL byte other than 0 or 1 is
// refused, naming the tensor and the element), "F8_E4M3" and "F8_E5M2" to float32. So a file
// PyTorch wrote with any dtype loads; casting to a module's dtypes is load_weights' job.
//
// Writing: the header lists the tensors in name order with compact JSON, and their data
// follows in that same order. "__metadata__" holds the caller's metadata and, per tensor,
// "xgrad.crc32.<name>": the CRC-32 (zlib's) of its stored bytes as 8 hex digits; keys with that
// prefix are reserved. Reading verifies the checksums of a file that has them (every tensor
// must then have one) and fails naming the tensor whose data does not match; a file without
// them (written by another tool) loads unchecked, and safetensors_content::checksummed says
// which. The checksum keys are not part of the metadata a reader returns.
// Reading accepts any key order, whitespace and data order, as long as the entries tile the
// data region exactly. Headers above 100 MB are refused as corrupt.
//
// Reading validates before it allocates: the header length is checked against the file's size
// and the bound, then exactly the header is read (a MiB at a time, refusing a first byte other
// than '{' or a NUL byte as soon as it is read) and validated as a whole, and only then is
// the data read, straight into the new tensors. A load's peak memory is the tensors' size
// plus the header's (a few kB for real files), never a copy of the file. Only regular files
// are read: a FIFO, a directory or a device is refused when opened, without blocking.
//
// Files are written atomically: to "<path>.tmp-<16 hex digits>" in the same folder, flushed
// (fsync), then renamed over `path`, so a crash mid-save leaves the previous file intact. A
// failed save removes its temporary file and leaves `path` as it was; one left by a writer
// that was killed is removed by the next save of the same path (see atomic_file.hpp).
//
// Errors: xgrad::io::format_error (a std::runtime_error) whose message is "<path>: <what>",
// naming the tensor and the field where there is one: cannot open/write/rename, not a regular
// file, file shorter than 8 bytes, "not a safetensors file" (a header length beyond the file
// or below the 2 bytes of "{}", a header not starting with '{' or holding a NUL byte), a
// header length above the bound, header not valid JSON (numbers beyond any C++ type too) or not
// an object, a key twice in one object ("duplicate key 'w'", naming the entry it is in),
// a tensor entry missing a field or with a field of the wrong type, unknown dtype, negative
// extent, too many elements, data_offsets outside the data or not matching shape x dtype size,
// overlapping or gapped data, "__metadata__" not an object or a metadata value that is not a
// string, and a file that shrank while it was read ("truncated"). Saving refuses (before
// writing anything) an undefined tensor, a tensor named "__metadata__", and names or metadata
// that are not valid UTF-8.
#include <cstdint>
#include <filesystem>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "xgrad/nn/module.hpp"
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
        /// True when the file carried a checksum for every tensor (as xgrad writes them) and
        /// each matched; false for a file written by another tool, loaded unchecked.
        bool checksummed = false;
    };

    /// Writes `tensors` (any device; copied to the host) and `metadata` atomically.
    void save_safetensors(const std::filesystem::path& path, const tensor_map& tensors,
                          const metadata_map& metadata = {});
    safetensors_content load_safetensors(const std::filesystem::path& path);
    /// The metadata of a safetensors file, without reading its tensor data (the header is
    /// read and validated as load_safetensors does, its errors included).
    metadata_map read_safetensors_metadata(const std::filesystem::path& path);

    // --- training checkpoints -------------------------------------------------------------
    // A checkpoint is a safetensors file holding "model.<name>" for every parameter and buffer
    // of the module, "optimizer.<name>" for every entry of the optimizer's state_dict, and
    // metadata {"format": "xgrad-checkpoint", "version": "2", "epoch": "<n>", "optimizer":
    // "<type_name>"} plus the caller's own entries. Saved without an optimizer, the file has
    // neither "optimizer" metadata nor "optimizer.*" entries.
    //
    // The model's names are PyTorch's (batch norm's "weight", "bias", "running_mean",
    // "running_var", "num_batches_tracked"; nn::flatten gives a linear layer after it the same
    // (C, H, W) feature order in NCHW and NHWC), so the "model." entries, prefix stripped, are
    // the state_dict of the equivalent torch.nn model (docs/interop.md). Version 1 files
    // (batch norm's "scale"/"offset", and a channels-last flatten in (H, W, C) order) are
    // refused with a message that says so: their fully connected weights cannot be mapped
    // without knowing the model.

    /// The largest epoch a checkpoint records: the metrics log counts epochs in an int
    /// (train::epoch_metrics), and a count beyond it would wrap there.
    inline constexpr std::int64_t max_checkpoint_epoch = 2147483647;

    struct checkpoint_info
    {
        std::int64_t epoch = 0; // epochs completed
        metadata_map metadata;  // every metadata entry, the caller's included
    };

    /// Writes a checkpoint (atomically, as save_safetensors). Throws format_error naming the
    /// file for an epoch outside [0, max_checkpoint_epoch] or an `extra` key that is one of the
    /// four reserved ones.
    void save_checkpoint(const std::filesystem::path& path, const nn::module& model, const optim::optimizer* optimizer,
                         std::int64_t epoch, const metadata_map& extra = {});

    /// Loads a checkpoint into `model` (and `optimizer`, when given). Everything is checked
    /// before anything changes: a file that is not an xgrad checkpoint, a model tensor missing
    /// or unexpected, a shape or dtype differing from the model's, an optimizer of another
    /// type, or bad optimizer state throws format_error naming the file and listing the
    /// problems; the model and optimizer are then unchanged. Also refused: format or version
    /// metadata other than the above, an epoch that is not an integer in [0,
    /// max_checkpoint_epoch] (the message names the field, the value and the range), an
    /// optimizer step count outside [0, optim::optimizer::max_step_count], tensors outside
    /// "model." and "optimizer.", and, when `optimizer` is given, a checkpoint saved without
    /// one. Without `optimizer`, the file's optimizer entries are ignored. Bad optimizer state
    /// is what optimizer->load_state_dict rejects; its message is included. Tensors are moved
    /// to the device of the value they replace.
    checkpoint_info load_checkpoint(const std::filesystem::path& path, nn::module& model,
                                    optim::optimizer* optimizer = nullptr);

    // --- weights from any safetensors file ----------------------------------------------------
    struct load_weights_options
    {
        /// Every tensor of the model must be in the file, and every tensor of the file (after
        /// the prefix is stripped) must be the model's. When false, missing and unexpected
        /// names are returned instead.
        bool strict = true;
        /// Removed from the start of each name that has it ("module." for a file saved from
        /// torch.nn.parallel.DistributedDataParallel). An xgrad checkpoint's "model." prefix is
        /// always removed and its "optimizer." entries ignored, whatever this says.
        std::string strip_prefix;
    };

    struct load_weights_result
    {
        std::vector<std::string> missing_keys;    // model names the file lacks (only when !strict)
        std::vector<std::string> unexpected_keys; // file names the model lacks (only when !strict)
        /// "<name>: <from> -> <to>" for each tensor cast to the model's dtype.
        std::vector<std::string> converted;
        /// Model buffers the file lacks that keep their value: num_batches_tracked (a batch
        /// norm's step counter), which PyTorch's load_state_dict also lets a state dict omit.
        std::vector<std::string> kept;
        /// Whether the file carried per-tensor checksums, all verified (safetensors_content);
        /// false for a file another tool wrote, whose data loaded unchecked.
        bool checksummed = false;
        metadata_map metadata; // the file's
    };

    /// Loads a module's parameters and buffers from a safetensors file written by anything:
    /// an xgrad checkpoint (its model part), or a state_dict saved by PyTorch
    /// (safetensors.torch.save_file(model.state_dict(), path)) for the equivalent model. This is
    /// weights only: fine-tuning, evaluation, weights trained elsewhere; resuming a run is
    /// load_checkpoint's.
    ///
    /// Names are matched after stripping (options). Shapes must be equal. dtypes are cast to the
    /// model's: any floating or integer tensor to a floating parameter or buffer (as PyTorch's
    /// load_state_dict copies do; float64 -> float32 rounds), and to an int64 buffer any integer
    /// tensor, or a floating one whose every value is an integer in int64's range. Everything is
    /// checked before anything changes: a shape mismatch, a value that cannot be cast (naming
    /// the tensor, the element and the value), an xgrad checkpoint of version 1, and (when
    /// strict) missing or unexpected names throw format_error naming the file and the problems
    /// (many names are summarised: their count, the first few and their shared prefix, and a
    /// prefix that explains the mismatch is named with how to strip it); the model is then
    /// unchanged. A missing num_batches_tracked is not a problem: the buffer keeps its value
    /// and is listed in `kept`. Tensors go to the device of the value they replace.
    load_weights_result load_weights(const std::filesystem::path& path, nn::module& model,
                                     const load_weights_options& options = {});
}
