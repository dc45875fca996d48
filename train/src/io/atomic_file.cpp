// Atomic, durable file writes (see atomic_file.hpp).
#include "xgrad/io/atomic_file.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <utility>

namespace xgrad::io
{
    namespace
    {
        [[noreturn]] void fail(const std::filesystem::path& path, const std::string& what)
        {
            throw file_error(path.string() + ": " + what);
        }

        std::string in_quotes(const std::string& s) { return "'" + s + "'"; }
        std::string reason(int err) { return std::strerror(err); }

        constexpr std::size_t suffix_digits = 16;

        /// Whether `name` is "<prefix><16 lower-case hex digits>", the writer's own naming.
        bool is_temporary_name(const std::string& name, const std::string& prefix)
        {
            if (name.size() != prefix.size() + suffix_digits || name.compare(0, prefix.size(), prefix) != 0)
                return false;
            for (std::size_t i = prefix.size(); i < name.size(); ++i)
            {
                const char c = name[i];
                if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')))
                    return false;
            }
            return true;
        }

        bool same_file(const struct ::stat& a, const struct ::stat& b)
        {
            return a.st_dev == b.st_dev && a.st_ino == b.st_ino;
        }

        /// Removes the temporaries of `target` that writers killed before they could commit or
        /// clean up left behind. A writer holds an exclusive flock on its temporary from
        /// creation until it is renamed or removed, so one whose lock can be taken has no
        /// writer any more. Only regular files of the writer's own naming for this target are
        /// candidates (links are not followed), and a name is removed only while it still
        /// names the file whose lock was taken. Best effort: whatever cannot be listed,
        /// opened, locked or removed is left, and the write goes on.
        void remove_stale_temporaries(const std::filesystem::path& target)
        {
            const std::filesystem::path parent = target.has_parent_path() ? target.parent_path() : ".";
            const std::string prefix = target.filename().string() + ".tmp-";
            DIR* dir = ::opendir(parent.c_str());
            if (!dir)
                return;
            const int dir_fd = ::dirfd(dir);
            while (const ::dirent* e = ::readdir(dir))
            {
                const std::string name = e->d_name;
                if (!is_temporary_name(name, prefix))
                    continue;
                // O_NONBLOCK: a FIFO of that name must not block the writer.
                const int fd = ::openat(dir_fd, name.c_str(),
                                        O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY);
                if (fd < 0)
                    continue;
                struct ::stat opened
                {
                };
                struct ::stat named
                {
                };
                if (::fstat(fd, &opened) == 0 && S_ISREG(opened.st_mode) && ::flock(fd, LOCK_EX | LOCK_NB) == 0 &&
                    ::fstatat(dir_fd, name.c_str(), &named, AT_SYMLINK_NOFOLLOW) == 0 && same_file(opened, named))
                    (void)::unlinkat(dir_fd, name.c_str(), 0);
                ::close(fd); // releases the lock
            }
            ::closedir(dir);
        }
    }

    atomic_file::atomic_file(std::filesystem::path target) : m_target(std::move(target))
    {
        if (m_target.filename().empty())
            fail(m_target, "the path names no file");
        remove_stale_temporaries(m_target);
        // O_EXCL makes the name ours alone; a clash with another writer just retries with a
        // new random suffix.
        std::random_device device;
        std::mt19937_64 rng((std::uint64_t{device()} << 32) ^ device() ^
                            static_cast<std::uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count()));
        int last_error = 0;
        for (int attempt = 0; attempt < 16; ++attempt)
        {
            char suffix[17];
            std::snprintf(suffix, sizeof suffix, "%016llx", static_cast<unsigned long long>(rng()));
            m_name = m_target.string() + ".tmp-" + suffix;
            m_fd = ::open(m_name.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
            if (m_fd < 0)
            {
                last_error = errno;
                if (last_error != EEXIST)
                    break;
                continue;
            }
            // The lock marks the file as being written, so that no other writer's cleanup
            // takes it for stale. Between open() and flock() such a cleanup may lock the new
            // file first and remove it: then the name is no longer ours, and a new one is tried.
            // A file system without flock (the lock fails otherwise) leaves the file unlocked,
            // and cleanups there cannot lock, so remove, any temporary either.
            if (::flock(m_fd, LOCK_EX | LOCK_NB) != 0 && errno == EWOULDBLOCK)
            {
                ::close(std::exchange(m_fd, -1));
                last_error = EEXIST;
                continue;
            }
            struct ::stat opened
            {
            };
            struct ::stat named
            {
            };
            if (::fstat(m_fd, &opened) == 0 && ::lstat(m_name.c_str(), &named) == 0 && same_file(opened, named))
                return;
            ::close(std::exchange(m_fd, -1));
            last_error = EEXIST;
        }
        fail(m_target, "cannot create a temporary file next to it: " + reason(last_error));
    }

    atomic_file::~atomic_file()
    {
        // Removed while still locked, so that no cleanup of another writer races with it.
        if (!m_committed && m_fd >= 0)
            ::unlink(m_name.c_str());
        if (m_fd >= 0)
            ::close(m_fd);
    }

    void atomic_file::write(const void* data, std::size_t n)
    {
        const char* p = static_cast<const char*>(data);
        while (n > 0)
        {
            const ::ssize_t written = ::write(m_fd, p, n);
            if (written < 0)
            {
                if (errno == EINTR)
                    continue;
                fail(m_target, "cannot write " + in_quotes(m_name) + ": " + reason(errno));
            }
            p += written;
            n -= static_cast<std::size_t>(written);
        }
    }

    void atomic_file::commit()
    {
        if (::fsync(m_fd) != 0)
            fail(m_target, "cannot flush " + in_quotes(m_name) + ": " + reason(errno));
        // The file stays open, and so locked, until it has its final name: closed before the
        // rename, it would look stale to another writer's cleanup. Its data is on the disk
        // since the fsync, so the close after the rename has nothing left to report.
        if (::rename(m_name.c_str(), m_target.c_str()) != 0)
            fail(m_target, "cannot replace it with " + in_quotes(m_name) + ": " + reason(errno));
        m_committed = true;
        ::close(std::exchange(m_fd, -1));
        // Make the rename itself durable. Best effort: some file systems refuse to sync a
        // directory, and the data is already safely in place.
        const std::filesystem::path parent = m_target.has_parent_path() ? m_target.parent_path() : ".";
        const int dir = ::open(parent.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (dir >= 0)
        {
            (void)::fsync(dir);
            ::close(dir);
        }
    }

    void write_file_atomically(const std::filesystem::path& path, std::string_view bytes)
    {
        atomic_file file(path);
        file.write(bytes.data(), bytes.size());
        file.commit();
    }
}
