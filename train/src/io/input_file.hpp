#pragma once
// Opening a file for reading, the one way xgrad's readers (safetensors, checkpoints, IDX,
// metrics) do it (train/src/io/input_file.cpp).
//
// The file is opened with O_NONBLOCK, so that opening a FIFO whose other end nobody holds
// returns at once instead of blocking forever, then checked with fstat: anything but a regular
// file (a FIFO, a directory, a device, a socket) is refused with "not a regular file". The
// size is known before a byte is read, so callers validate what the file announces against it
// before they allocate.
//
// Errors: xgrad::io::file_error "<path>: <what>" with the system's reason; callers that have an
// error type of their own catch and rethrow it with the same text.
#include <cstddef>
#include <cstdint>
#include <filesystem>

#include "xgrad/io/atomic_file.hpp" // file_error

namespace xgrad::io::detail
{
    class input_file
    {
    public:
        /// Opens `path`; throws file_error when it cannot be opened or is not a regular file.
        explicit input_file(const std::filesystem::path& path);
        ~input_file();
        input_file(const input_file&) = delete;
        input_file& operator=(const input_file&) = delete;

        /// The size fstat reported at open.
        std::uint64_t size() const noexcept { return m_size; }
        int fd() const noexcept { return m_fd; }
        /// Gives up ownership of the descriptor (for gzdopen, which closes it itself).
        int release() noexcept;
        const std::filesystem::path& path() const noexcept { return m_path; }

        /// Reads up to n bytes at the current position; returns how many (0 at the end).
        std::size_t read_some(void* dst, std::size_t n);
        /// Reads exactly n bytes at the current position, or throws file_error "truncated:
        /// expected <n> bytes of <what> at offset <o>, found <k>".
        void read_exact(void* dst, std::size_t n, const char* what);
        /// Bytes read so far.
        std::uint64_t position() const noexcept { return m_position; }

    private:
        std::filesystem::path m_path;
        int m_fd = -1;
        std::uint64_t m_size = 0;
        std::uint64_t m_position = 0;
    };
}
