#pragma once
// The JSON of a safetensors header, parsed in time and memory linear in its length
// (train/src/io/header_json.cpp; used by safetensors.cpp).
#include <cstddef>
#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

namespace xgrad::io::detail
{
    /// Deepest nesting of objects and arrays a header may have. A real one has 3 (the header,
    /// a tensor's entry, its shape); a parser's memory grows with the depth it keeps open.
    inline constexpr std::size_t max_header_depth = 16;
    /// Most entries (tensors and __metadata__) a header may have: far above any model (a large
    /// language model has tens of thousands of tensors), and what bounds the parsed header's
    /// memory (about 0.5 kB an entry).
    inline constexpr std::size_t max_header_entries = std::size_t{1} << 20;

    /// Parses `text`, the header of the file at `path`, into JSON. A first pass over SAX events
    /// builds nothing and refuses, naming the file: a key that appears twice in one object
    /// (nlohmann::json would keep the last silently), nesting deeper than max_header_depth,
    /// more than max_header_entries entries, and invalid JSON; only then is the value built.
    /// Both passes are linear in the text. Throws io::format_error.
    nlohmann::json parse_header_json(const std::string& text, const std::filesystem::path& path);
}
