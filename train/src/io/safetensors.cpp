// The safetensors file format: writing (atomically) and reading (validating every field before
// trusting it). The contract is in xgrad/io/safetensors.hpp.
//
// A file is read in the order its parts can be trusted: the 8-byte header length, checked
// against the file's size and a bound before anything is allocated for it; then exactly the
// header, parsed and validated as a whole (the layout included); and only then the tensor
// data, read straight into the storage of each new tensor. So a load needs the tensors'
// memory plus the header's, never a copy of the file, and nothing is allocated for a size
// the file merely announces.
#include "xgrad/io/safetensors.hpp"
#include "checksums.hpp"
#include "header_json.hpp"
#include "input_file.hpp"
#include "xgrad/io/atomic_file.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <map>
#include <string>
#include <string_view>
#include <tuple>
#include <unordered_set>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "xgrad/checked.hpp"
#include "xgrad/errors.hpp"
#include "xgrad/factories.hpp"

// Tensor data is copied between memory and the file as raw bytes, and the format stores it
// little-endian, so the raw copy is only right on a little-endian machine.
#if !defined(__BYTE_ORDER__) || !defined(__ORDER_LITTLE_ENDIAN__)
#error "xgrad's safetensors support needs __BYTE_ORDER__ to tell the machine's byte order"
#endif
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "safetensors data is little-endian and is copied as raw bytes; a big-endian machine needs byte swaps");

namespace xgrad::io
{
    namespace
    {
        namespace fs = std::filesystem;
        using json = nlohmann::json;

        /// Real headers are a few kB; a length above 100 MB marks a corrupt file, not a header
        /// worth allocating for.
        constexpr std::uint64_t max_header_bytes = 100'000'000;
        constexpr std::string_view metadata_key = "__metadata__";

        /// How a stored element becomes an element of an xgrad dtype. xgrad computes in five
        /// dtypes; the format has more, which PyTorch and other writers use (uint8 images, int32
        /// indices, bool masks, 8-bit floats). Those are widened on load to the xgrad dtype that
        /// holds every value exactly: integers and BOOL to int64, 8-bit floats to float32.
        enum class conversion
        {
            none, // the stored bytes are the xgrad dtype's own
            signed_int,
            unsigned_int,
            boolean,   // one byte, 0 or 1
            f8_e4m3fn, // 1 sign, 4 exponent (bias 7), 3 mantissa bits; no infinities, S.1111.111 is NaN
            f8_e5m2,   // 1 sign, 5 exponent (bias 15), 2 mantissa bits; IEEE infinities and NaNs
        };

        struct dtype_code
        {
            xgrad::dtype dt; // what the tensor is loaded as
            std::string_view code;
            std::size_t size; // bytes of one stored element
            conversion how;
        };

        // The first five are what xgrad writes, one code per dtype; the rest are only read.
        constexpr std::array<dtype_code, 15> dtype_codes{{{dtype::float64, "F64", 8, conversion::none},
                                                          {dtype::float32, "F32", 4, conversion::none},
                                                          {dtype::float16, "F16", 2, conversion::none},
                                                          {dtype::bfloat16, "BF16", 2, conversion::none},
                                                          {dtype::int64, "I64", 8, conversion::none},
                                                          {dtype::int64, "I32", 4, conversion::signed_int},
                                                          {dtype::int64, "I16", 2, conversion::signed_int},
                                                          {dtype::int64, "I8", 1, conversion::signed_int},
                                                          {dtype::int64, "U64", 8, conversion::unsigned_int},
                                                          {dtype::int64, "U32", 4, conversion::unsigned_int},
                                                          {dtype::int64, "U16", 2, conversion::unsigned_int},
                                                          {dtype::int64, "U8", 1, conversion::unsigned_int},
                                                          {dtype::int64, "BOOL", 1, conversion::boolean},
                                                          {dtype::float32, "F8_E4M3", 1, conversion::f8_e4m3fn},
                                                          {dtype::float32, "F8_E5M2", 1, conversion::f8_e5m2}}};

        std::string known_codes()
        {
            std::string s;
            for (const auto& c : dtype_codes)
                s += (s.empty() ? "" : ", ") + std::string(c.code);
            return s;
        }

        std::string_view code_of(xgrad::dtype dt)
        {
            for (const auto& c : dtype_codes)
                if (c.dt == dt && c.how == conversion::none)
                    return c.code;
            throw format_error("safetensors: dtype " + std::string(name(dt)) + " has no safetensors code");
        }

        const dtype_code* find_code(std::string_view code)
        {
            for (const auto& c : dtype_codes)
                if (c.code == code)
                    return &c;
            return nullptr;
        }

        /// An 8-bit float with `man` mantissa bits and exponent bias `bias`, exactly as a float.
        float decode_f8(unsigned char bits, int man, int bias, bool ieee_specials)
        {
            const int exp_bits = 7 - man;
            const int e = (bits >> man) & ((1 << exp_bits) - 1);
            const int m = bits & ((1 << man) - 1);
            const float sign = (bits & 0x80) ? -1.0f : 1.0f;
            const int e_max = (1 << exp_bits) - 1;
            if (ieee_specials && e == e_max)
                return m == 0 ? sign * std::numeric_limits<float>::infinity() : std::numeric_limits<float>::quiet_NaN();
            if (!ieee_specials && e == e_max && m == (1 << man) - 1)
                return std::numeric_limits<float>::quiet_NaN();
            const float fraction = static_cast<float>(m) / static_cast<float>(1 << man);
            if (e == 0) // subnormal
                return sign * std::ldexp(fraction, 1 - bias);
            return sign * std::ldexp(1.0f + fraction, e - bias);
        }

        /// Widens `count` stored elements of `from` in `in` into `out` (the tensor's storage).
        /// Returns the index of the first element that has no exact int64 value (a U64 above
        /// 2^63 - 1, a BOOL byte other than 0 or 1), or -1 when all are converted.
        std::int64_t widen(const dtype_code& from, const unsigned char* in, std::size_t count, void* out)
        {
            const auto load_unsigned = [&](std::size_t i) {
                std::uint64_t v = 0;
                for (std::size_t b = 0; b < from.size; ++b) // little-endian, whatever the width
                    v |= std::uint64_t{in[i * from.size + b]} << (8 * b);
                return v;
            };
            if (from.dt == dtype::float32)
            {
                float* o = static_cast<float*>(out);
                const bool e4m3 = from.how == conversion::f8_e4m3fn;
                for (std::size_t i = 0; i < count; ++i)
                    o[i] = e4m3 ? decode_f8(in[i], 3, 7, false) : decode_f8(in[i], 2, 15, true);
                return -1;
            }
            std::int64_t* o = static_cast<std::int64_t*>(out);
            const unsigned bits = static_cast<unsigned>(8 * from.size);
            for (std::size_t i = 0; i < count; ++i)
            {
                const std::uint64_t v = load_unsigned(i);
                switch (from.how)
                {
                case conversion::signed_int:
                    // Sign-extend from the stored width (bits < 64 here: I64 is read as it is).
                    o[i] = static_cast<std::int64_t>(v ^ (std::uint64_t{1} << (bits - 1))) -
                           static_cast<std::int64_t>(std::uint64_t{1} << (bits - 1));
                    break;
                case conversion::unsigned_int:
                    if (v > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))
                        return static_cast<std::int64_t>(i);
                    o[i] = static_cast<std::int64_t>(v);
                    break;
                case conversion::boolean:
                    if (v > 1)
                        return static_cast<std::int64_t>(i);
                    o[i] = static_cast<std::int64_t>(v);
                    break;
                default: return static_cast<std::int64_t>(i); // not reached: the other kinds are floats
                }
            }
            return -1;
        }

        [[noreturn]] void fail(const fs::path& path, const std::string& what)
        {
            throw format_error(path.string() + ": " + what);
        }

        std::string in_quotes(const std::string& s) { return "'" + s + "'"; }

        std::string hex_byte(unsigned char b)
        {
            const char* digits = "0123456789abcdef";
            return std::string("0x") + digits[b >> 4] + digits[b & 15];
        }

        // --- writing ----------------------------------------------------------------------

        // --- reading ----------------------------------------------------------------------

        /// One tensor entry of the header, validated on its own (the layout of all entries
        /// together is checked afterwards).
        struct entry
        {
            std::string name;
            xgrad::dtype dt = dtype::float32;   // the loaded tensor's
            const dtype_code* stored = nullptr; // the file's
            shape_type shape;
            std::uint64_t begin = 0;
            std::uint64_t end = 0;
        };

        std::vector<std::string> names_of(const std::vector<entry>& entries)
        {
            std::vector<std::string> names;
            for (const entry& e : entries)
                names.push_back(e.name);
            return names;
        }

        std::string json_type(const json& j) { return j.type_name(); }

        std::string offsets_text(std::uint64_t begin, std::uint64_t end)
        {
            return "[" + std::to_string(begin) + ", " + std::to_string(end) + "]";
        }

        entry parse_entry(const fs::path& path, const std::string& name, const json& value, std::uint64_t data_size)
        {
            const std::string who = "tensor " + in_quotes(name) + ": ";
            if (!value.is_object())
                fail(path, who + "entry is not an object (it is " + json_type(value) + ")");
            const auto field = [&](const char* key) -> const json& {
                const auto it = value.find(key);
                if (it == value.end())
                    fail(path, who + "missing field '" + key + "'");
                return *it;
            };

            entry e;
            e.name = name;

            const json& dt = field("dtype");
            if (!dt.is_string())
                fail(path, who + "field 'dtype' is not a string (it is " + json_type(dt) + ")");
            const std::string code = dt.get<std::string>();
            const dtype_code* known = find_code(code);
            if (!known)
                fail(path, who + "unknown dtype " + in_quotes(code) + " (known: " + known_codes() + ")");
            e.dt = known->dt;
            e.stored = known;

            const json& shape = field("shape");
            if (!shape.is_array())
                fail(path, who + "field 'shape' is not an array (it is " + json_type(shape) + ")");
            bool has_zero = false;
            for (const json& extent : shape)
            {
                if (!extent.is_number_integer())
                    fail(path, who + "field 'shape' holds " + extent.dump() + ", not an integer");
                if (extent.is_number_unsigned())
                {
                    const auto v = extent.get<std::uint64_t>();
                    if (v > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))
                        fail(path, who + "extent " + std::to_string(v) + " in field 'shape' is too large");
                    e.shape.push_back(static_cast<std::int64_t>(v));
                }
                else
                {
                    const auto v = extent.get<std::int64_t>();
                    if (v < 0)
                        fail(path, who + "negative extent " + std::to_string(v) + " in field 'shape'");
                    e.shape.push_back(v);
                }
                has_zero = has_zero || e.shape.back() == 0;
            }
            // Strides and byte counts are int64 products of the extents (a zero extent aside),
            // so that product must fit even when a zero extent makes the tensor empty.
            std::int64_t span = static_cast<std::int64_t>(known->size);
            try
            {
                for (const std::int64_t extent : e.shape)
                    span = checked_mul(span, std::max<std::int64_t>(extent, 1), "byte count");
            }
            catch (const xgrad::invalid_argument& error)
            {
                fail(path, who + "shape " + shape_to_string(e.shape) + " has too many elements (" + error.what() + ")");
            }
            const std::uint64_t nbytes = has_zero ? 0 : static_cast<std::uint64_t>(span);

            const json& offsets = field("data_offsets");
            if (!offsets.is_array() || offsets.size() != 2)
                fail(path, who + "field 'data_offsets' is " + offsets.dump() + ", not [begin, end]");
            for (const json& o : offsets)
                if (!o.is_number_unsigned())
                    fail(path,
                         who + "field 'data_offsets' is " + offsets.dump() + ", not a pair of non-negative integers");
            e.begin = offsets[0].get<std::uint64_t>();
            e.end = offsets[1].get<std::uint64_t>();
            const std::string where = "field 'data_offsets' " + offsets_text(e.begin, e.end);
            if (e.end < e.begin)
                fail(path, who + where + " ends before it begins");
            if (e.end - e.begin != nbytes)
                fail(path, who + where + " spans " + std::to_string(e.end - e.begin) + " bytes, but shape " +
                               shape_to_string(e.shape) + " of " + code + " needs " + std::to_string(nbytes));
            if (e.end > data_size)
                fail(path, who + where + " reaches beyond the data region (" + std::to_string(data_size) + " bytes)");
            return e;
        }

        metadata_map parse_metadata(const fs::path& path, const json& value)
        {
            if (!value.is_object())
                fail(path, "'__metadata__' is not an object (it is " + json_type(value) + ")");
            metadata_map out;
            for (const auto& [key, v] : value.items())
            {
                if (!v.is_string())
                    fail(path, "metadata entry " + in_quotes(key) + " is not a string (it is " + json_type(v) + ")");
                out.emplace(key, v.get<std::string>());
            }
            return out;
        }

        /// The entries must tile the data region: sorted by offset, each starts where the
        /// previous one ended, and the last ends at the end of the region. This rejects
        /// overlapping tensors (two names aliasing bytes) and bytes that belong to no tensor.
        void check_layout(const fs::path& path, std::vector<entry>& entries, std::uint64_t data_size)
        {
            std::sort(entries.begin(), entries.end(), [](const entry& a, const entry& b) {
                return std::tie(a.begin, a.end, a.name) < std::tie(b.begin, b.end, b.name);
            });
            std::uint64_t position = 0;
            const entry* previous = nullptr;
            for (const entry& e : entries)
            {
                if (e.begin < position)
                    fail(path, "tensors " + in_quotes(previous->name) + " (data_offsets " +
                                   offsets_text(previous->begin, previous->end) + ") and " + in_quotes(e.name) +
                                   " (data_offsets " + offsets_text(e.begin, e.end) + ") overlap");
                if (e.begin > position)
                    fail(path, "gap in the data region: bytes [" + std::to_string(position) + ", " +
                                   std::to_string(e.begin) + ") before tensor " + in_quotes(e.name) +
                                   " belong to no tensor");
                position = e.end;
                previous = &e;
            }
            if (position != data_size)
                fail(path, "gap in the data region: bytes [" + std::to_string(position) + ", " +
                               std::to_string(data_size) + ") at its end belong to no tensor");
        }

        /// The header of a file, validated: the metadata, and the tensor entries sorted by
        /// offset and tiling the data region that follows the header.
        struct header_content
        {
            metadata_map metadata;
            std::vector<entry> entries;
        };

        /// Reads and validates the header; `in` is left at the start of the data region.
        header_content read_header(detail::input_file& in)
        {
            const fs::path& path = in.path();
            const std::uint64_t size = in.size();
            if (size < 8)
                fail(path, "file is " + std::to_string(size) + " bytes, shorter than the 8-byte header length");
            std::array<unsigned char, 8> length{};
            in.read_exact(length.data(), length.size(), "the header length");
            // torch.save writes a zip archive (since PyTorch 1.6) or, before, a pickle: the
            // commonest wrong file, said as such where the bytes are not a safetensors header
            // (those first bytes can also be a valid header length, so they decide nothing alone).
            const bool zip = length[0] == 'P' && length[1] == 'K' && length[2] == 3 && length[3] == 4;
            const bool pickle = length[0] == 0x80 && length[1] >= 2 && length[1] <= 5;
            const auto not_safetensors = [&](const std::string& why) {
                if (zip || pickle)
                    fail(path, std::string("not a safetensors file: this is a ") + (zip ? "zip archive" : "pickle") +
                                   ", as torch.save writes (a PyTorch checkpoint or state_dict); save the tensors "
                                   "as safetensors instead: safetensors.torch.save_file(model.state_dict(), path)");
                fail(path, "not a safetensors file: " + why);
            };
            std::uint64_t header_size = 0;
            for (std::size_t i = 0; i < 8; ++i)
                header_size |= std::uint64_t{length[i]} << (8 * i);
            // The smallest header is "{}". A length that leaves no room for it, or that the file
            // cannot hold, means the file is something else (text, zeros, another format).
            if (header_size < 2 || header_size > size - 8)
                not_safetensors("its first 8 bytes give a header length of " + std::to_string(header_size) +
                                " bytes but the file has " + std::to_string(size) + " bytes" +
                                (header_size < 2 ? " (a header is at least the 2 bytes '{}')" : ""));
            if (header_size > max_header_bytes)
                fail(path, "header length " + std::to_string(header_size) + " exceeds the limit of " +
                               std::to_string(max_header_bytes) + " bytes");

            // The header is read a MiB at a time, each piece checked before the next is read:
            // its first byte must open the JSON object, and JSON text holds no NUL byte. So a
            // file whose length field is plausible but whose "header" is zeros or binary data
            // (a sparse file, another format) costs a MiB, not the up to 100 MB the length
            // field may announce; a real header is only as large as the file says it is.
            std::string text;
            constexpr std::size_t piece = std::size_t{1} << 20;
            while (text.size() < header_size)
            {
                const std::size_t at = text.size();
                const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(piece, header_size - at));
                text.resize(at + n);
                in.read_exact(text.data() + at, n, "the header");
                if (at == 0 && text[0] != '{')
                    not_safetensors("its header does not start with '{' (found byte " +
                                    hex_byte(static_cast<unsigned char>(text[0])) + ")");
                const std::size_t nul = text.find('\0', at);
                if (nul != std::string::npos)
                    fail(path, "not a safetensors file: byte " + std::to_string(nul) + " of its " +
                                   std::to_string(header_size) + "-byte header is 0x00 (a JSON header holds none)");
            }
            const std::uint64_t data_size = size - 8 - header_size;

            json header = detail::parse_header_json(text, path);
            std::string().swap(text); // the header's text is no longer needed
            if (!header.is_object())
                fail(path, "header is not a JSON object (it is " + json_type(header) + ")");

            header_content content;
            for (const auto& [key, value] : header.items())
            {
                if (key == metadata_key)
                    content.metadata = parse_metadata(path, value);
                else
                    content.entries.push_back(parse_entry(path, key, value, data_size));
            }
            check_layout(path, content.entries, data_size);
            return content;
        }

        /// The input file's own errors (cannot open, not a regular file, truncated) as this
        /// format's error type, with the same "<path>: <what>" message.
        template <class F>
        auto with_format_errors(F&& f) -> decltype(f())
        {
            try
            {
                return f();
            }
            catch (const file_error& e)
            {
                throw format_error(e.what());
            }
        }
    }

    void save_safetensors(const std::filesystem::path& path, const tensor_map& tensors, const metadata_map& metadata)
    {
        // Every check comes before the temporary file exists, so bad input touches nothing.
        json header = json::object();
        metadata_map meta = metadata;
        for (const auto& [key, value] : metadata)
            if (key.compare(0, detail::checksum_prefix.size(), detail::checksum_prefix) == 0)
                fail(path, "metadata key " + in_quotes(key) + " is reserved: '" + std::string(detail::checksum_prefix) +
                               "<tensor>' holds the checksums this writer adds");
        std::vector<unsigned char> buffer;
        std::uint64_t offset = 0;
        for (const auto& [name, t] : tensors)
        {
            if (name == metadata_key)
                fail(path, "'__metadata__' is reserved for the metadata and cannot name a tensor");
            if (!t.defined())
                fail(path, "tensor " + in_quotes(name) + " is undefined");
            meta[std::string(detail::checksum_prefix) + name] =
                detail::crc_text(detail::stored_crc(path, name, t, buffer));
            const std::uint64_t nbytes = static_cast<std::uint64_t>(t.numel()) * itemsize(t.dtype());
            // std::map iterates in name order, so the data follows the sorted header entries.
            header[name] = {{"dtype", code_of(t.dtype())},
                            {"shape", t.shape()},
                            {"data_offsets", {offset, offset + nbytes}}};
            offset += nbytes;
        }
        if (!meta.empty())
            header[std::string(metadata_key)] = meta;

        std::string text;
        try
        {
            text = header.dump(-1, ' ', false, json::error_handler_t::strict);
        }
        catch (const json::exception& e)
        {
            fail(path, std::string("a tensor name or metadata string is not valid UTF-8: ") + e.what());
        }
        // Padding keeps the data region 8-byte aligned within the file; trailing spaces are
        // JSON whitespace, so every reader ignores them.
        text.append((8 - text.size() % 8) % 8, ' ');

        std::array<unsigned char, 8> length{};
        for (std::size_t i = 0; i < 8; ++i)
            length[i] = static_cast<unsigned char>(static_cast<std::uint64_t>(text.size()) >> (8 * i));

        // The file layer's errors (cannot create, write, flush or rename) become this
        // format's error type, with the same "<path>: <what>" message.
        try
        {
            atomic_file file(path);
            file.write(length.data(), length.size());
            file.write(text.data(), text.size());
            for (const auto& [name, t] : tensors)
            {
                const unsigned char* bytes = detail::stored_bytes(path, name, t, buffer);
                file.write(bytes, static_cast<std::size_t>(t.numel()) * itemsize(t.dtype()));
            }
            file.commit();
        }
        catch (const file_error& e)
        {
            throw format_error(e.what());
        }
    }

    safetensors_content load_safetensors(const std::filesystem::path& path)
    {
        return with_format_errors([&] {
            detail::input_file in(path);
            header_content header = read_header(in);
            safetensors_content content;
            content.metadata = std::move(header.metadata);
            const auto checksums = detail::take_checksums(content.metadata, path);
            content.checksummed = detail::check_checksum_names(path, checksums, names_of(header.entries));
            // The entries are sorted by offset and tile the data region, so the data is read
            // front to back, each tensor's bytes straight into its own storage. The sizes were
            // checked against the file's, so the tensors together need at most its size.
            for (const entry& e : header.entries)
            {
                tensor t = empty(e.shape, e.dt);
                const std::uint64_t nbytes = e.end - e.begin;
                const std::string what = "tensor " + in_quotes(e.name);
                const auto verify = [&](const void* bytes) {
                    const auto it = checksums.find(e.name);
                    if (it == checksums.end())
                        return;
                    const std::uint32_t crc = detail::crc32_of(bytes, static_cast<std::size_t>(nbytes));
                    if (crc != it->second)
                        fail(path, what + ": its data does not match the checksum it was saved with (CRC-32 " +
                                       detail::crc_text(crc) + ", saved " + detail::crc_text(it->second) +
                                       "): the file is corrupt");
                };
                if (nbytes == 0)
                    verify(nullptr);
                else if (e.stored->how == conversion::none)
                {
                    in.read_exact(t.data_ptr(), static_cast<std::size_t>(nbytes), what.c_str());
                    verify(t.data_ptr());
                }
                else
                {
                    // Read whole, then widened into the tensor, which is larger than the bytes.
                    std::vector<unsigned char> bytes(static_cast<std::size_t>(nbytes));
                    in.read_exact(bytes.data(), bytes.size(), what.c_str());
                    verify(bytes.data());
                    const std::int64_t bad = widen(*e.stored, bytes.data(), bytes.size() / e.stored->size,
                                                   t.data_ptr());
                    if (bad >= 0)
                        fail(path, what + ": element " + std::to_string(bad) + " of " + std::string(e.stored->code) +
                                       " data has no int64 value (" +
                                       (e.stored->how == conversion::boolean ? "a BOOL byte must be 0 or 1"
                                                                             : "it is above 2^63 - 1") +
                                       ")");
                }
                content.tensors.emplace(e.name, std::move(t));
            }
            return content;
        });
    }

    metadata_map read_safetensors_metadata(const std::filesystem::path& path)
    {
        return with_format_errors([&] {
            detail::input_file in(path);
            header_content header = read_header(in);
            detail::check_checksum_names(path, detail::take_checksums(header.metadata, path), names_of(header.entries));
            return header.metadata;
        });
    }
}
