// IDX files (MNIST format), plain or gzip-compressed. See xgrad/data/idx.hpp for the contract.
//
// Reading validates before it allocates. The file is opened once, with io::detail::input_file
// (a FIFO or a folder is refused at once, and the size is known before a byte is read). The
// header is parsed from the first bytes of the stream (inflated on the fly for ".gz") and
// checked: magic, type, rank, and the extents' product with checked arithmetic. A plain
// file's size must then be exactly header + data, so a header announcing more (or less) than
// the file holds is refused before the data buffer exists. A gzip stream's inflated size is
// unknown until it has been inflated, so its data is inflated straight into the destination,
// which grows geometrically as bytes actually arrive (never past the announced size): a
// header announcing terabytes over a small stream costs only what the stream really holds.
// Once the announced bytes are in, at most a few more are inflated to tell the end of the
// stream (whose CRC zlib then checks) from trailing data; a small .gz that would inflate to
// gigabytes past a one-image header is refused after those few bytes.
//
// The stream (byte_stream.hpp) inflates only gzip framing and treats bytes after the last gzip
// member as an error.
//
// Writing: the bytes (header + data, deflated for ".gz") are built in memory, written to a
// temporary file next to the target and renamed over it, so a reader never sees half a file.
#include "xgrad/data/idx.hpp"

#include <zlib.h>

#include <algorithm>
#include <limits>
#include <string>
#include <system_error>

#include "byte_stream.hpp"
#include "xgrad/checked.hpp"
#include "xgrad/errors.hpp"
#include "xgrad/io/atomic_file.hpp"

namespace xgrad::data
{
    namespace
    {
        using detail::byte_stream;
        using detail::fail;
        using detail::has_gz_suffix;
        using detail::hex_byte;
        constexpr std::size_t chunk_size = detail::stream_chunk_size;
        constexpr std::uint8_t ubyte_type = 0x08;
        /// How many bytes past the announced size are inflated to tell trailing data from the end.
        constexpr std::size_t trailing_probe = 64;

        std::string shape_text(const std::vector<std::int64_t>& shape)
        {
            std::string s = "[";
            for (std::size_t i = 0; i < shape.size(); ++i)
                s += (i ? ", " : "") + std::to_string(shape[i]);
            return s + "]";
        }

        std::uint32_t read_be32(const std::uint8_t* p)
        {
            return (std::uint32_t{p[0]} << 24) | (std::uint32_t{p[1]} << 16) | (std::uint32_t{p[2]} << 8) |
                   std::uint32_t{p[3]};
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

        /// An IDX file whose header has been read and validated; the data is read by
        /// read_data(). Holding only the header, it costs a few hundred KiB (the gzip buffers),
        /// so a dataset's two files can both be validated before either's data is read.
        class idx_reader
        {
        public:
            idx_reader(const std::filesystem::path& path, int expected_rank) : m_stream(path)
            {
                std::uint8_t h[4] = {};
                const std::size_t got = m_stream.read(h, 4);
                if (got < 4)
                    fail(path, "truncated IDX header: expected at least 4 bytes, found " + std::to_string(got));
                if (h[0] != 0 || h[1] != 0)
                {
                    std::string msg = "bad IDX magic number: found bytes " + hex_byte(h[0]) + " " + hex_byte(h[1]) +
                                      " " + hex_byte(h[2]) + " " + hex_byte(h[3]) +
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
                m_header = 4 + 4 * static_cast<std::size_t>(rank);
                std::uint8_t extents[4 * 255] = {};
                const std::size_t got_extents = m_stream.read(extents, m_header - 4);
                if (got_extents < m_header - 4)
                    fail(path, "truncated IDX header: rank " + std::to_string(rank) + " needs " +
                                   std::to_string(m_header) + " bytes, found " + std::to_string(4 + got_extents));
                m_shape.resize(static_cast<std::size_t>(rank));
                for (std::size_t d = 0; d < m_shape.size(); ++d)
                    m_shape[d] = read_be32(extents + 4 * d);

                // Each extent is below 2^32, so only the product can overflow.
                try
                {
                    const std::string what = "IDX extents " + shape_text(m_shape);
                    std::int64_t count = 1;
                    for (const std::int64_t extent : m_shape)
                        count = checked_mul(count, extent, what.c_str());
                    checked_add(count, static_cast<std::int64_t>(m_header), what.c_str());
                    m_count = checked_bytes(count, 1, what.c_str());
                }
                catch (const xgrad::invalid_argument& e)
                {
                    fail(path, std::string(e.what()) + " (the data would not fit in memory)");
                }

                // A plain file's size is known: it must be exactly header + data, checked before
                // any buffer is sized by the header.
                if (!m_stream.gzip())
                {
                    const std::uint64_t expected = std::uint64_t{m_header} + m_count;
                    const std::uint64_t size = m_stream.file_size();
                    if (size < expected)
                        fail(path, "truncated IDX data: shape " + shape_text(m_shape) + " needs " +
                                       std::to_string(expected) + " bytes (" + std::to_string(m_header) + " header + " +
                                       std::to_string(m_count) + " data), found " + std::to_string(size));
                    if (size > expected)
                        fail(path, std::to_string(size - expected) + " trailing bytes: shape " + shape_text(m_shape) +
                                       " needs " + std::to_string(expected) + " bytes, found " + std::to_string(size));
                }
            }

            const std::vector<std::int64_t>& shape() const noexcept { return m_shape; }
            const std::filesystem::path& path() const noexcept { return m_stream.path(); }

            /// The product(shape) data bytes, then a check that the stream ends there.
            std::vector<std::uint8_t> read_data()
            {
                std::vector<std::uint8_t> data;
                if (!m_stream.gzip())
                {
                    data.resize(m_count); // equal to the file's size less the header, checked above
                    const std::size_t got = m_stream.read(data.data(), m_count);
                    if (got < m_count)
                        truncated(got); // the file shrank since it was opened
                }
                else
                {
                    // Grown as the inflated bytes arrive, never beyond the announced size.
                    std::size_t filled = 0;
                    // The first guess, 4 times the compressed size (MNIST files compress about
                    // 2:1), is proportional to the input, not to what the header claims.
                    const std::uint64_t guess = std::max<std::uint64_t>(chunk_size * 4, m_stream.file_size() * 4);
                    std::size_t capacity = static_cast<std::size_t>(std::min<std::uint64_t>(m_count, guess));
                    while (filled < m_count)
                    {
                        data.reserve(capacity); // exactly: resize alone may allocate up to twice as much
                        data.resize(capacity);
                        const std::size_t got = m_stream.read(data.data() + filled, capacity - filled);
                        filled += got;
                        if (filled < capacity)
                            truncated(filled);
                        capacity = capacity > m_count / 2 ? m_count : capacity * 2;
                    }
                }
                std::uint8_t probe[trailing_probe];
                const std::size_t extra = m_stream.read(probe, sizeof probe);
                if (extra > 0)
                {
                    const std::uint64_t expected = std::uint64_t{m_header} + m_count;
                    if (m_stream.gzip())
                        fail(path(), "trailing data: shape " + shape_text(m_shape) + " needs " +
                                         std::to_string(expected) +
                                         " decompressed bytes, but the gzip stream holds more (at least " +
                                         std::to_string(expected + extra) + "; not decompressed further)");
                    fail(path(), "trailing bytes: shape " + shape_text(m_shape) + " needs " + std::to_string(expected) +
                                     " bytes, but the file grew past them while it was read");
                }
                return data;
            }

        private:
            [[noreturn]] void truncated(std::size_t got) const
            {
                const std::uint64_t expected = std::uint64_t{m_header} + m_count;
                fail(path(), "truncated IDX data: shape " + shape_text(m_shape) + " needs " + std::to_string(expected) +
                                 " bytes (" + std::to_string(m_header) + " header + " + std::to_string(m_count) +
                                 " data), found " + std::to_string(m_header + got) +
                                 (m_stream.gzip() ? " decompressed" : ""));
            }

            byte_stream m_stream;
            std::vector<std::int64_t> m_shape;
            std::size_t m_header = 0;
            std::size_t m_count = 0; // data bytes: product(shape)
        };

        void check_option(const char* what, std::int64_t value, std::int64_t low, std::int64_t high, const char* why)
        {
            if (value < low || value > high)
                throw xgrad::invalid_argument(std::string("load_idx_dataset: ") + what + " must be in [" +
                                              std::to_string(low) + ", " + std::to_string(high) + "]" + why + ", got " +
                                              std::to_string(value));
        }

        /// The dataset options' ranges, checked before any file is looked at.
        void check_options(const dataset_options& options)
        {
            constexpr std::int64_t any = std::numeric_limits<std::int64_t>::max();
            check_option("classes", options.classes, 1, 256, " (labels are bytes)");
            check_option("limit", options.limit, 0, any, " (0 keeps every example)");
            check_option("rows", options.rows, 0, any, " (0 accepts any)");
            check_option("cols", options.cols, 0, any, " (0 accepts any)");
            check_option("min_size", options.min_size, 0, any, "");
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

    std::vector<std::uint8_t> read_file_bytes(const std::filesystem::path& path, std::size_t max_bytes)
    {
        byte_stream stream(path);
        std::vector<std::uint8_t> bytes;
        std::size_t filled = 0;
        for (;;)
        {
            // Grown as bytes arrive; one byte past max_bytes is enough to know it is exceeded.
            const std::size_t limit = max_bytes == std::numeric_limits<std::size_t>::max() ? max_bytes : max_bytes + 1;
            const std::size_t capacity = std::min(limit, std::max(chunk_size, bytes.size() * 2));
            bytes.resize(capacity);
            filled += stream.read(bytes.data() + filled, capacity - filled);
            if (filled > max_bytes)
                fail(path, "holds more than " + std::to_string(max_bytes) + " bytes" +
                               (stream.gzip() ? " decompressed" : "") +
                               ", the most read_file_bytes was allowed to read");
            if (filled < capacity)
                break;
        }
        bytes.resize(filled);
        bytes.shrink_to_fit();
        return bytes;
    }

    idx_array read_idx(const std::filesystem::path& path, int expected_rank)
    {
        idx_reader reader(path, expected_rank);
        idx_array out;
        out.shape = reader.shape();
        out.data = reader.read_data();
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
        const std::string what = where + "shape " + shape_text(array.shape);
        std::int64_t count = 1;
        for (const std::int64_t extent : array.shape)
            count = checked_mul(count, extent, what.c_str());
        if (static_cast<std::uint64_t>(count) != array.data.size())
            throw xgrad::invalid_argument(what + " holds " + std::to_string(count) + " bytes but data has " +
                                          std::to_string(array.data.size()));

        std::vector<std::uint8_t> raw;
        raw.reserve(checked_bytes(
            checked_add(count, 4 + 4 * static_cast<std::int64_t>(array.shape.size()), what.c_str()), 1, what.c_str()));
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
                                   const dataset_options& options)
    {
        check_options(options);
        // Both headers are read and checked against each other and the options before the
        // data of either file is read.
        idx_reader img(images, 3);
        idx_reader lab(labels, 1);
        const std::int64_t n = img.shape()[0];
        const std::int64_t rows = img.shape()[1], cols = img.shape()[2];
        if (lab.shape()[0] != n)
            fail(images, "holds " + std::to_string(n) + " images but " + labels.string() + " holds " +
                             std::to_string(lab.shape()[0]) + " labels");
        if (n < options.min_size)
            fail(images, (n == 0 ? std::string("holds no images") : "holds only " + std::to_string(n) + " images") +
                             " (shape " + shape_text(img.shape()) + "), expected at least " +
                             std::to_string(options.min_size));
        if ((options.rows > 0 && rows != options.rows) || (options.cols > 0 && cols != options.cols))
            fail(images, "holds images of " + std::to_string(rows) + "x" + std::to_string(cols) +
                             " pixels (rows x cols), expected " +
                             (options.rows > 0 ? std::to_string(options.rows) : std::string("any")) + "x" +
                             (options.cols > 0 ? std::to_string(options.cols) : std::string("any")));

        image_dataset ds;
        ds.images = img.read_data();
        ds.labels = lab.read_data();
        for (std::size_t i = 0; i < ds.labels.size(); ++i)
            if (ds.labels[i] >= options.classes)
                fail(labels, "label " + std::to_string(ds.labels[i]) + " at index " + std::to_string(i) +
                                 " is not below the number of classes, " + std::to_string(options.classes));

        ds.size = options.limit > 0 ? std::min(options.limit, n) : n;
        ds.rows = rows;
        ds.cols = cols;
        ds.classes = options.classes;
        // size <= n, and n * rows * cols bytes were read, so the product cannot overflow.
        ds.images.resize(static_cast<std::size_t>(ds.size * rows * cols));
        ds.images.shrink_to_fit();
        ds.labels.resize(static_cast<std::size_t>(ds.size));
        ds.labels.shrink_to_fit();
        return ds;
    }

    image_dataset load_idx_dataset(const std::filesystem::path& images, const std::filesystem::path& labels,
                                   std::int64_t classes, std::int64_t limit)
    {
        dataset_options options;
        options.classes = classes;
        options.limit = limit;
        return load_idx_dataset(images, labels, options);
    }

    image_dataset load_mnist(const std::filesystem::path& dir, bool train, const dataset_options& options)
    {
        check_options(options);
        std::error_code ec;
        const std::string prefix = train ? "train" : "t10k";
        const std::string image_name = prefix + "-images-idx3-ubyte";
        const std::string label_name = prefix + "-labels-idx1-ubyte";
        const std::string tried = image_name + ".gz, " + image_name + ", " + label_name + ".gz, " + label_name;
        if (!std::filesystem::is_directory(dir, ec))
            fail(dir, std::string("no such folder") + (ec ? " (" + ec.message() + ")" : "") +
                          "; expected the MNIST-format files " + tried);

        const auto find = [&](const std::string& name) {
            // The first name that exists is taken; input_file then refuses it if it is not a
            // regular file, rather than silently falling back to the other name.
            for (const std::filesystem::path& candidate : {dir / (name + ".gz"), dir / name})
            {
                std::error_code e;
                if (std::filesystem::exists(candidate, e))
                    return candidate;
            }
            fail(dir, "found neither " + name + ".gz nor " + name + " (the " + (train ? "training" : "test") +
                          " set's files are " + tried + ")");
        };
        const std::filesystem::path images = find(image_name);
        const std::filesystem::path labels = find(label_name);
        return load_idx_dataset(images, labels, options);
    }

    image_dataset load_mnist(const std::filesystem::path& dir, bool train, std::int64_t limit)
    {
        dataset_options options;
        options.limit = limit;
        return load_mnist(dir, train, options);
    }
}
