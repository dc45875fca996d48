#pragma once
// Writing a file atomically and durably (train/src/io/atomic_file.cpp): the one way xgrad
// writes files (checkpoints, IDX files, the examples' metrics).
//
// The data goes to a uniquely named temporary file next to the target ("<path>.tmp-<16 hex>",
// created with O_EXCL), is flushed to the disk (fsync), and the file is renamed over the
// target; then the folder is synced so that the rename itself survives a crash. A reader
// sees the old file or the complete new one, never a part. Any failure removes the temporary
// file and throws file_error "<path>: <what>" (the system's reason included).
//
// A writer that is killed (SIGKILL, a crash, a power cut) cannot remove its temporary file.
// So each writer holds an exclusive flock on its temporary from creation to rename, and
// before it creates its own, removes the temporaries of the same target whose lock it can
// take: regular files named "<path>.tmp-<16 lower-case hex digits>" that no live writer
// holds. Other names, other targets' temporaries, links and files being written are left
// alone; the cleanup is best effort and never fails the write. (A writer that does not lock,
// such as an older build of this code, is not protected from it.)
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
        /// Removes stale temporaries of `target` (see above) and creates, and locks, this
        /// writer's own. Throws file_error naming `target` when it cannot create it.
        explicit atomic_file(std::filesystem::path target);
        /// Removes the temporary file unless commit() put it in place.
        ~atomic_file();
        atomic_file(const atomic_file&) = delete;
        atomic_file& operator=(const atomic_file&) = delete;

        void write(const void* data, std::size_t n);
        /// fsync, rename over the target, close, sync the folder (best effort).
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
