#pragma once
// Writing a file atomically and durably (layers/src/io/atomic_file.cpp): the one way xgrad
// writes files (checkpoints, IDX files, the examples' metrics).
//
// The data goes to a uniquely named temporary file next to the target ("<path>.tmp-<16 hex>",
// created with O_EXCL), is flushed to the disk (fsync), and the file is renamed over the
// target; then the folder is synced so that the rename itself survives a crash. A reader
// sees the old file or the complete new one, never a part. Any failure removes the temporary
// file and throws file_error "<path>: <what>" (the system's reason included).
#include <cstddef>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <string_view>

namespace xgrad::io
{
    class file_error : public std::runtime_error
    {
    public:
        using std::runtime_error::runtime_error;
    };

    class atomic_file
    {
    public:
        /// Creates the temporary file. Throws file_error naming `target` when it cannot.
        explicit atomic_file(std::filesystem::path target);
        /// Removes the temporary file unless commit() put it in place.
        ~atomic_file();
        atomic_file(const atomic_file&) = delete;
        atomic_file& operator=(const atomic_file&) = delete;

        void write(const void* data, std::size_t n);
        /// fsync, close, rename over the target, sync the folder (best effort).
        void commit();
        const std::filesystem::path& target() const noexcept { return m_target; }

    private:
        std::filesystem::path m_target;
        std::string m_name;
        int m_fd = -1;
        bool m_committed = false;
    };

    /// atomic_file for a whole buffer at once.
    void write_file_atomically(const std::filesystem::path& path, std::string_view bytes);
}
