// IDX files (MNIST format), plain or gzip-compressed. See xgrad/data/idx.hpp for the contract.
//
// Reading: a plain file is read whole with one fread into a buffer of its size. A ".gz" file
// is read in 1 MiB chunks and inflated with zlib's inflate() as they arrive, into a buffer
// sized from the gzip trailer. windowBits 16 + MAX_WBITS accepts only gzip framing, so a
// plain file named ".gz" is reported instead of being passed through as gzread would do.
// The header is then parsed from the decoded bytes and erased in place, so a 47 MB training
// set is held once, not twice.
//
// Writing: the bytes (header + data, deflated for ".gz") are built in memory, written to a
// temporary file next to the target and renamed over it, so a reader never sees half a file.
#include "xgrad/data/idx.hpp"
#include "xgrad/io/atomic_file.hpp"

#include <zlib.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <system_error>
#include <thread>

#include "xgrad/errors.hpp"

namespace xgrad::data
{
    namespace
    {
        constexpr std::size_t chunk_size = std::size_t{1} << 20;
        constexpr std::uint8_t ubyte_type = 0x08;

        [[noreturn]] void fail(const std::filesystem::path& path, const std::string& what)
        {
            throw data_error(path.string() + ": " + what);
        }

        bool has_gz_suffix(const std::filesystem::path& path) { return path.extension() == ".gz"; }

        std::string hex_byte(std::uint8_t b)
        {
            static const char digits[] = "0123456789abcdef";
            return std::string{'0', 'x', digits[b >> 4], digits[b & 15]};
        }

        std::string shape_text(const std::vector<std::int64_t>& shape)
        {
            std::string s = "[";
            for (std::size_t i = 0; i < shape.size(); ++i)
                s += (i ? ", " : "") + std::to_string(shape[i]);
            return s + "]";
        }

        struct file_closer
        {
            void operator()(std::FILE* f) const noexcept { std::fclose(f); }
        };
        using file_ptr = std::unique_ptr<std::FILE, file_closer>;

        /// Reads up to `size` bytes; throws on a read error (e.g. the path is a folder).
        std::size_t read_chunk(std::FILE* f, const std::filesystem::path& path, std::uint8_t* out, std::size_t size)
        {
            errno = 0;
            const std::size_t got = std::fread(out, 1, size, f);
            if (got < size && std::ferror(f))
                fail(path, std::string("read error: ") + std::strerror(errno));
            return got;
        }

        std::vector<std::uint8_t> read_plain(std::FILE* f, const std::filesystem::path& path)
        {
            // One byte more than the file's size, so a single read meets the end of the file;
            // the loop only matters for files that grow or report no size.
            std::error_code ec;
            const auto size = std::filesystem::file_size(path, ec);
            std::vector<std::uint8_t> bytes(ec ? chunk_size : static_cast<std::size_t>(size) + 1);
            std::size_t used = 0;
            for (;;)
            {
                if (used == bytes.size())
                    bytes.resize(bytes.size() * 2);
                const std::size_t want = bytes.size() - used;
                const std::size_t got = read_chunk(f, path, bytes.data() + used, want);
                used += got;
                if (got < want)
                    break;
            }
            bytes.resize(used);
            return bytes;
        }

        /// The decompressed size recorded in the last 4 bytes of a gzip file (ISIZE, little-endian,
        /// modulo 2^32) plus one, so the trailer is consumed without growing the buffer; 0 when
        /// unknown. Only a hint: it is capped at 64 times the compressed size (MNIST files
        /// compress about 2:1) so a corrupt trailer cannot cause a huge allocation, and the
        /// buffer grows when it is too small (concatenated members, highly compressible data).
        std::size_t gzip_size_hint(std::FILE* f, const std::filesystem::path& path)
        {
            std::error_code ec;
            const auto compressed = std::filesystem::file_size(path, ec);
            if (ec || compressed < 18 || std::fseek(f, -4, SEEK_END) != 0)
                return 0;
            std::uint8_t t[4] = {};
            const bool got = std::fread(t, 1, 4, f) == 4;
            std::clearerr(f);
            if (std::fseek(f, 0, SEEK_SET) != 0)
                fail(path, std::string("cannot seek back to the start: ") + std::strerror(errno));
            if (!got)
                return 0;
            const std::size_t isize = std::size_t{t[0]} | (std::size_t{t[1]} << 8) | (std::size_t{t[2]} << 16) |
                                      (std::size_t{t[3]} << 24);
            return std::min<std::size_t>(isize, static_cast<std::size_t>(compressed) * 64) + 1;
        }

        struct inflate_stream
        {
            z_stream z{};
            bool live = false;
            ~inflate_stream()
            {
                if (live)
                    inflateEnd(&z);
            }
        };

        std::vector<std::uint8_t> read_gzip(std::FILE* f, const std::filesystem::path& path)
        {
            inflate_stream s;
            if (inflateInit2(&s.z, 16 + MAX_WBITS) != Z_OK)
                fail(path, "cannot initialise zlib's inflate");
            s.live = true;

            std::vector<std::uint8_t> in(chunk_size);
            std::vector<std::uint8_t> out;
            out.resize(std::max<std::size_t>(chunk_size, gzip_size_hint(f, path)));
            std::size_t produced = 0;
            std::size_t consumed_total = 0;
            bool stream_end = false; // the last member seen ended cleanly
            bool any_input = false;

            for (;;)
            {
                const std::size_t got = read_chunk(f, path, in.data(), in.size());
                if (got == 0)
                    break;
                if (!any_input && (got < 2 || in[0] != 0x1f || in[1] != 0x8b))
                    fail(path, "not a gzip file: it starts with " +
                                   (got < 2 ? std::string("a single byte") : hex_byte(in[0]) + " " + hex_byte(in[1])) +
                                   " instead of 0x1f 0x8b (a file whose name ends in .gz must be gzip-compressed)");
                any_input = true;
                s.z.next_in = in.data();
                s.z.avail_in = static_cast<uInt>(got);
                while (s.z.avail_in > 0)
                {
                    if (stream_end)
                    {
                        // Concatenated gzip members are one valid stream; anything else is not.
                        if (s.z.next_in[0] != 0x1f)
                            fail(path, "corrupt gzip stream: unexpected bytes after the end of the compressed "
                                       "data, at offset " +
                                           std::to_string(consumed_total + (got - s.z.avail_in)));
                        if (inflateReset(&s.z) != Z_OK)
                            fail(path, "cannot reset zlib's inflate");
                        stream_end = false;
                    }
                    if (produced == out.size())
                        out.resize(out.size() * 2);
                    s.z.next_out = out.data() + produced;
                    s.z.avail_out = static_cast<uInt>(
                        std::min<std::size_t>(out.size() - produced, std::numeric_limits<uInt>::max()));
                    const uInt before = s.z.avail_out;
                    const int rc = inflate(&s.z, Z_NO_FLUSH);
                    produced += before - s.z.avail_out;
                    if (rc == Z_STREAM_END)
                        stream_end = true;
                    else if (rc == Z_DATA_ERROR)
                        fail(path, std::string("corrupt gzip stream (") + (s.z.msg ? s.z.msg : "invalid data") +
                                       ") after " + std::to_string(produced) + " decompressed bytes");
                    else if (rc == Z_MEM_ERROR)
                        fail(path, "out of memory while decompressing");
                    else if (rc != Z_OK && rc != Z_BUF_ERROR)
                        fail(path, "corrupt gzip stream (zlib error " + std::to_string(rc) + ")");
                }
                consumed_total += got;
            }
            if (!any_input)
                fail(path, "not a gzip file: the file is empty");
            if (!stream_end)
                fail(path, "corrupt gzip stream: truncated (the compressed data ends before the gzip trailer, after " +
                               std::to_string(produced) + " decompressed bytes)");
            out.resize(produced);
            if (out.capacity() - produced > produced / 8)
                out.shrink_to_fit();
            return out;
        }

        std::uint32_t read_be32(const std::uint8_t* p)
        {
            return (std::uint32_t{p[0]} << 24) | (std::uint32_t{p[1]} << 16) | (std::uint32_t{p[2]} << 8) |
                   std::uint32_t{p[3]};
        }

        /// The product of `shape`'s extents (0 if any is 0), or false when it exceeds 2^62,
        /// which keeps it representable as std::int64_t and as a 64-bit std::size_t.
        bool checked_count(const std::vector<std::int64_t>& shape, std::uint64_t& count)
        {
            count = 1;
            if (std::find(shape.begin(), shape.end(), 0) != shape.end())
            {
                count = 0;
                return true;
            }
            constexpr std::uint64_t max_count = std::uint64_t{1} << 62;
            for (const std::int64_t extent : shape)
            {
                const auto e = static_cast<std::uint64_t>(extent);
                if (count > max_count / e)
                    return false;
                count *= e;
            }
            return true;
        }

        const char* idx_type_name(std::uint8_t type)
        {
            switch (type)
            {
            case 0x08: return "unsigned byte";
            case 0x09: return "signed byte";
            case 0x0B: return "16-bit integer";
            case 0x0C: return "32-bit integer";
            case 0x0D: return "32-bit float";
            case 0x0E: return "64-bit float";
            default: return "not an IDX type";
            }
        }

        std::vector<std::uint8_t> deflate_gzip(const std::vector<std::uint8_t>& raw, const std::filesystem::path& path)
        {
            z_stream z{};
            if (deflateInit2(&z, Z_DEFAULT_COMPRESSION, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY) != Z_OK)
                fail(path, "cannot initialise zlib's deflate");
            std::vector<std::uint8_t> out(deflateBound(&z, static_cast<uLong>(raw.size())) + 64);
            z.next_in = const_cast<Bytef*>(raw.data()); // zlib's API is not const-correct; it only reads
            z.avail_in = static_cast<uInt>(raw.size());
            z.next_out = out.data();
            z.avail_out = static_cast<uInt>(out.size());
            const int rc = deflate(&z, Z_FINISH);
            const std::size_t size = z.total_out;
            deflateEnd(&z);
            if (rc != Z_STREAM_END)
                fail(path, "gzip compression failed (zlib error " + std::to_string(rc) + ")");
            out.resize(size);
            return out;
        }

        /// The bytes written atomically and durably (xgrad/io/atomic_file.hpp); its errors
        /// become data_error with the same "<path>: <what>" message.
        void write_atomically(const std::filesystem::path& path, const std::vector<std::uint8_t>& bytes)
        {
            try
            {
                io::write_file_atomically(path,
                                          std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()));
            }
            catch (const io::file_error& e)
            {
                throw data_error(e.what());
            }
        }
    }

    std::vector<std::uint8_t> read_file_bytes(const std::filesystem::path& path)
    {
        errno = 0;
        file_ptr f(std::fopen(path.string().c_str(), "rb"));
        if (!f)
            fail(path, std::string("cannot open: ") + std::strerror(errno));
        return has_gz_suffix(path) ? read_gzip(f.get(), path) : read_plain(f.get(), path);
    }

    idx_array read_idx(const std::filesystem::path& path, int expected_rank)
    {
        std::vector<std::uint8_t> bytes = read_file_bytes(path);
        if (bytes.size() < 4)
            fail(path, "truncated IDX header: expected at least 4 bytes, found " + std::to_string(bytes.size()));
        const std::uint8_t* h = bytes.data();
        if (h[0] != 0 || h[1] != 0)
        {
            std::string msg = "bad IDX magic number: found bytes " + hex_byte(h[0]) + " " + hex_byte(h[1]) + " " +
                              hex_byte(h[2]) + " " + hex_byte(h[3]) +
                              ", expected 0x00 0x00, the type byte and the rank";
            if (h[0] == 0x1f && h[1] == 0x8b)
                msg += " (the file is gzip-compressed: name it *.gz)";
            fail(path, msg);
        }
        if (h[2] != ubyte_type)
            fail(path, "unsupported IDX element type " + hex_byte(h[2]) + " (" + idx_type_name(h[2]) +
                           "); only 0x08 (unsigned byte) is supported");
        const int rank = h[3];
        if (expected_rank > 0 && rank != expected_rank)
            fail(path, "IDX rank is " + std::to_string(rank) + ", expected " + std::to_string(expected_rank) +
                           (expected_rank == 3   ? " (images: count, rows, cols)"
                            : expected_rank == 1 ? " (labels: count)"
                                                 : ""));
        const std::size_t header = 4 + 4 * static_cast<std::size_t>(rank);
        if (bytes.size() < header)
            fail(path, "truncated IDX header: rank " + std::to_string(rank) + " needs " + std::to_string(header) +
                           " bytes, found " + std::to_string(bytes.size()));

        idx_array out;
        out.shape.resize(static_cast<std::size_t>(rank));
        for (int d = 0; d < rank; ++d)
            out.shape[static_cast<std::size_t>(d)] = read_be32(h + 4 + 4 * d);
        std::uint64_t count = 0;
        if (!checked_count(out.shape, count) || count > std::numeric_limits<std::size_t>::max() - header)
            fail(path, "IDX extents " + shape_text(out.shape) + " overflow: their product exceeds 2^62 bytes");

        const std::size_t expected = header + static_cast<std::size_t>(count);
        if (bytes.size() < expected)
            fail(path, "truncated IDX data: shape " + shape_text(out.shape) + " needs " + std::to_string(expected) +
                           " bytes (" + std::to_string(header) + " header + " + std::to_string(count) +
                           " data), found " + std::to_string(bytes.size()));
        if (bytes.size() > expected)
            fail(path, std::to_string(bytes.size() - expected) + " trailing bytes: shape " + shape_text(out.shape) +
                           " needs " + std::to_string(expected) + " bytes, found " + std::to_string(bytes.size()));

        bytes.erase(bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(header));
        out.data = std::move(bytes);
        return out;
    }

    void write_idx(const std::filesystem::path& path, const idx_array& array)
    {
        const std::string where = "write_idx(" + path.string() + "): ";
        if (array.shape.size() > 255)
            throw xgrad::invalid_argument(where + "rank " + std::to_string(array.shape.size()) +
                                          " exceeds 255, the most an IDX header can hold");
        for (const std::int64_t extent : array.shape)
            if (extent < 0 || extent > std::int64_t{0xFFFFFFFF})
                throw xgrad::invalid_argument(where + "shape " + shape_text(array.shape) +
                                              " has an extent outside [0, 2^32 - 1]");
        std::uint64_t count = 0;
        if (!checked_count(array.shape, count))
            throw xgrad::invalid_argument(where + "shape " + shape_text(array.shape) + " is too large");
        if (count != array.data.size())
            throw xgrad::invalid_argument(where + "shape " + shape_text(array.shape) + " holds " +
                                          std::to_string(count) + " bytes but data has " +
                                          std::to_string(array.data.size()));

        std::vector<std::uint8_t> raw;
        raw.reserve(4 + 4 * array.shape.size() + array.data.size());
        raw.insert(raw.end(), {0, 0, ubyte_type, static_cast<std::uint8_t>(array.shape.size())});
        for (const std::int64_t extent : array.shape)
        {
            const auto e = static_cast<std::uint32_t>(extent);
            raw.insert(raw.end(), {static_cast<std::uint8_t>(e >> 24), static_cast<std::uint8_t>(e >> 16),
                                   static_cast<std::uint8_t>(e >> 8), static_cast<std::uint8_t>(e)});
        }
        raw.insert(raw.end(), array.data.begin(), array.data.end());
        if (has_gz_suffix(path))
        {
            if (raw.size() > std::numeric_limits<uInt>::max())
                throw xgrad::invalid_argument(where + "more than 4 GiB cannot be compressed in one call");
            write_atomically(path, deflate_gzip(raw, path));
        }
        else
            write_atomically(path, raw);
    }

    image_dataset load_idx_dataset(const std::filesystem::path& images, const std::filesystem::path& labels,
                                   std::int64_t classes, std::int64_t limit)
    {
        if (classes < 1 || classes > 256)
            throw xgrad::invalid_argument("load_idx_dataset: classes must be in [1, 256] (labels are bytes), got " +
                                          std::to_string(classes));
        if (limit < 0)
            throw xgrad::invalid_argument("load_idx_dataset: limit must be >= 0 (0 keeps every example), got " +
                                          std::to_string(limit));
        idx_array img = read_idx(images, 3);
        idx_array lab = read_idx(labels, 1);
        const std::int64_t n = img.shape[0];
        if (lab.shape[0] != n)
            fail(images, "holds " + std::to_string(n) + " images but " + labels.string() + " holds " +
                             std::to_string(lab.shape[0]) + " labels");
        for (std::size_t i = 0; i < lab.data.size(); ++i)
            if (lab.data[i] >= classes)
                fail(labels, "label " + std::to_string(lab.data[i]) + " at index " + std::to_string(i) +
                                 " is not below the number of classes, " + std::to_string(classes));

        image_dataset ds;
        ds.size = limit > 0 ? std::min(limit, n) : n;
        ds.rows = img.shape[1];
        ds.cols = img.shape[2];
        ds.classes = classes;
        ds.images = std::move(img.data);
        ds.images.resize(static_cast<std::size_t>(ds.size * ds.rows * ds.cols));
        ds.images.shrink_to_fit();
        ds.labels = std::move(lab.data);
        ds.labels.resize(static_cast<std::size_t>(ds.size));
        ds.labels.shrink_to_fit();
        return ds;
    }

    image_dataset load_mnist(const std::filesystem::path& dir, bool train, std::int64_t limit)
    {
        std::error_code ec;
        const std::string prefix = train ? "train" : "t10k";
        const std::string image_name = prefix + "-images-idx3-ubyte";
        const std::string label_name = prefix + "-labels-idx1-ubyte";
        const std::string tried = image_name + ".gz, " + image_name + ", " + label_name + ".gz, " + label_name;
        if (!std::filesystem::is_directory(dir, ec))
            fail(dir, std::string("no such folder") + (ec ? " (" + ec.message() + ")" : "") +
                          "; expected the MNIST-format files " + tried);

        const auto find = [&](const std::string& name) {
            for (const std::filesystem::path& candidate : {dir / (name + ".gz"), dir / name})
            {
                std::error_code e;
                if (std::filesystem::is_regular_file(candidate, e))
                    return candidate;
            }
            fail(dir, "found neither " + name + ".gz nor " + name + " (the " + (train ? "training" : "test") +
                          " set's files are " + tried + ")");
        };
        const std::filesystem::path images = find(image_name);
        const std::filesystem::path labels = find(label_name);
        return load_idx_dataset(images, labels, 10, limit);
    }
}
