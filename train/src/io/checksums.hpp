#pragma once
// The per-tensor checksums xgrad writes into a safetensors file's metadata, and checks on
// load (train/src/io/checksums.cpp; used by safetensors.cpp). The format has none of its own;
// TensorFlow's checkpoints store a CRC32C per tensor for the same reason: a flipped bit in the
// data must fail the load, naming the tensor, rather than train or evaluate silently.
//
// Each tensor's stored bytes (as in the file, row-major little-endian) get zlib's CRC-32, kept
// as metadata "xgrad.crc32.<tensor name>" = 8 lowercase hex digits. Readers that do not know
// the keys (Python's safetensors) see string metadata and ignore it.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "xgrad/tensor.hpp"

namespace xgrad::io::detail
{
    inline constexpr std::string_view checksum_prefix = "xgrad.crc32.";

    /// zlib's CRC-32 of n bytes, continuing from `crc` (0 to start).
    std::uint32_t crc32_of(const void* data, std::size_t n, std::uint32_t crc = 0);
    /// "0a1b2c3d"
    std::string crc_text(std::uint32_t crc);

    /// The checksums a file's metadata holds, by tensor name; they are removed from `metadata`
    /// (what the caller sees is the writer's own metadata). Throws format_error naming the
    /// file for a value that is not 8 hex digits.
    std::map<std::string, std::uint32_t> take_checksums(std::map<std::string, std::string>& metadata,
                                                        const std::filesystem::path& path);
    /// Whether the file carries checksums. If it carries any, every tensor (names: the file's)
    /// must have one and every one must name a tensor: else the file was edited by a tool that
    /// kept the metadata but not the tensors, and its data cannot be trusted (format_error).
    bool check_checksum_names(const std::filesystem::path& path, const std::map<std::string, std::uint32_t>& checksums,
                              const std::vector<std::string>& names);

    /// t's bytes as the file stores them (contiguous, row-major, on the host): its own storage
    /// where it already is so, else a copy into `buffer`. format_error naming the tensor when
    /// the copy fails.
    const unsigned char* stored_bytes(const std::filesystem::path& path, const std::string& name, const tensor& t,
                                      std::vector<unsigned char>& buffer);
    /// crc32_of(stored_bytes(...)).
    std::uint32_t stored_crc(const std::filesystem::path& path, const std::string& name, const tensor& t,
                             std::vector<unsigned char>& buffer);
}
