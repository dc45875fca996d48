#pragma once
// The bytes of a file as a stream, as stored or inflated on the fly: the one way the IDX reader
// (idx.cpp) reads a file. Internal to train/src/data.
//
// The file is opened with io::detail::input_file (a FIFO or a folder is refused at once, the
// size is known before a byte is read). For a name ending in ".gz" the first bytes must be the
// gzip magic, and the stream is inflated with zlib's inflate() over the descriptor's reads
// rather than gzread: windowBits 16 + MAX_WBITS accepts only gzip framing, so a plain file named
// ".gz" is reported instead of being passed through, and bytes after the last gzip member are
// an error instead of being ignored. Concatenated members are one stream. Nothing is inflated
// beyond what read() is asked for, so a caller bounds the memory a stream can cost.
//
// Errors: data_error "<path>: <what>" (cannot open or read, not a regular file, not gzip,
// corrupt or truncated gzip stream).
#include <zlib.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <limits>
#include <string>
#include <vector>

#include "../io/input_file.hpp"
#include "xgrad/data/idx.hpp"

namespace xgrad::data::detail
{
    /// The compressed bytes read from the file at a time.
    constexpr std::size_t stream_chunk_size = std::size_t{256} << 10;

    [[noreturn]] inline void fail(const std::filesystem::path& path, const std::string& what)
    {
        throw data_error(path.string() + ": " + what);
    }

    inline bool has_gz_suffix(const std::filesystem::path& path) { return path.extension() == ".gz"; }

    inline std::string hex_byte(std::uint8_t b)
    {
        static const char digits[] = "0123456789abcdef";
        return std::string{'0', 'x', digits[b >> 4], digits[b & 15]};
    }

    struct inflate_stream
    {
        z_stream z{};
        bool live = false;
        inflate_stream() = default;
        inflate_stream(const inflate_stream&) = delete;
        inflate_stream& operator=(const inflate_stream&) = delete;
        ~inflate_stream()
        {
            if (live)
                inflateEnd(&z);
        }
    };

    /// The bytes of a file as a stream: as stored, or inflated when the name ends in ".gz".
    /// read() fills its destination completely unless the stream ends first; every error
    /// (cannot open or read, not gzip, corrupt or truncated gzip) is a data_error naming the
    /// file.
    class byte_stream
    {
    public:
        explicit byte_stream(const std::filesystem::path& path) : m_file(open(path)), m_gzip(has_gz_suffix(path))
        {
            if (m_gzip)
                start_gzip();
        }

        bool gzip() const noexcept { return m_gzip; }
        /// The size of the file on disk (compressed, for gzip).
        std::uint64_t file_size() const noexcept { return m_file.size(); }
        const std::filesystem::path& path() const noexcept { return m_file.path(); }

        std::size_t read(std::uint8_t* dst, std::size_t n)
        {
            try
            {
                return m_gzip ? read_gzip(dst, n) : read_plain(dst, n);
            }
            catch (const io::file_error& e)
            {
                throw data_error(e.what());
            }
        }

    private:
        static io::detail::input_file open(const std::filesystem::path& path)
        {
            try
            {
                return io::detail::input_file(path);
            }
            catch (const io::file_error& e)
            {
                throw data_error(e.what());
            }
        }

        std::size_t read_plain(std::uint8_t* dst, std::size_t n)
        {
            std::size_t filled = 0;
            while (filled < n)
            {
                const std::size_t got = m_file.read_some(dst + filled, n - filled);
                if (got == 0)
                    break;
                filled += got;
            }
            return filled;
        }

        void start_gzip()
        {
            m_in.resize(stream_chunk_size);
            const std::size_t got = refill();
            if (got == 0)
                fail(path(), "not a gzip file: the file is empty");
            if (got < 2 || m_in[0] != 0x1f || m_in[1] != 0x8b)
                fail(path(),
                     "not a gzip file: it starts with " +
                         (got < 2 ? std::string("a single byte") : hex_byte(m_in[0]) + " " + hex_byte(m_in[1])) +
                         " instead of 0x1f 0x8b (a file whose name ends in .gz must be gzip-compressed)");
            if (inflateInit2(&m_z.z, 16 + MAX_WBITS) != Z_OK)
                fail(path(), "cannot initialise zlib's inflate");
            m_z.live = true;
        }

        /// Reads the next compressed chunk; 0 at the end of the file.
        std::size_t refill()
        {
            std::size_t got = 0;
            try
            {
                got = m_file.read_some(m_in.data(), m_in.size());
            }
            catch (const io::file_error& e)
            {
                throw data_error(e.what());
            }
            m_z.z.next_in = m_in.data();
            m_z.z.avail_in = static_cast<uInt>(got);
            m_input_end = got == 0;
            return got;
        }

        std::size_t read_gzip(std::uint8_t* dst, std::size_t n)
        {
            z_stream& z = m_z.z;
            std::size_t filled = 0;
            while (filled < n)
            {
                if (z.avail_in == 0 && !m_input_end)
                    refill();
                if (z.avail_in == 0)
                {
                    if (!m_member_end)
                        fail(path(), "corrupt gzip stream: truncated (the compressed data ends before the gzip "
                                     "trailer, after " +
                                         std::to_string(m_produced) + " decompressed bytes)");
                    break;
                }
                if (m_member_end)
                {
                    // Concatenated gzip members are one valid stream; anything else is not.
                    if (z.next_in[0] != 0x1f)
                        fail(path(), "corrupt gzip stream: unexpected bytes after the end of the compressed "
                                     "data, at offset " +
                                         std::to_string(m_file.position() - z.avail_in));
                    if (inflateReset(&z) != Z_OK)
                        fail(path(), "cannot reset zlib's inflate");
                    m_member_end = false;
                }
                z.next_out = dst + filled;
                z.avail_out = static_cast<uInt>(std::min<std::size_t>(n - filled, std::numeric_limits<uInt>::max()));
                const uInt before = z.avail_out;
                const int rc = inflate(&z, Z_NO_FLUSH);
                filled += before - z.avail_out;
                m_produced += before - z.avail_out;
                if (rc == Z_STREAM_END)
                    m_member_end = true;
                else if (rc == Z_DATA_ERROR)
                    fail(path(), std::string("corrupt gzip stream (") + (z.msg ? z.msg : "invalid data") + ") after " +
                                     std::to_string(m_produced) + " decompressed bytes");
                else if (rc == Z_MEM_ERROR)
                    fail(path(), "out of memory while decompressing");
                else if (rc != Z_OK && rc != Z_BUF_ERROR)
                    fail(path(), "corrupt gzip stream (zlib error " + std::to_string(rc) + ")");
            }
            return filled;
        }

        io::detail::input_file m_file;
        bool m_gzip = false;
        inflate_stream m_z;
        std::vector<std::uint8_t> m_in;
        bool m_input_end = false;
        bool m_member_end = false; // the last gzip member seen ended cleanly
        std::uint64_t m_produced = 0;
    };
}
