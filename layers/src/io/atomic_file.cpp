// Atomic, durable file writes (see atomic_file.hpp).
#include "xgrad/io/atomic_file.hpp"

#include <fcntl.h>
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
    }

    atomic_file::atomic_file(std::filesystem::path target) : m_target(std::move(target))
    {
        if (m_target.filename().empty())
            fail(m_target, "the path names no file");
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
            if (m_fd >= 0)
                return;
            last_error = errno;
            if (last_error != EEXIST)
                break;
        }
        fail(m_target, "cannot create a temporary file next to it: " + reason(last_error));
    }

    atomic_file::~atomic_file()
    {
        if (m_fd >= 0)
            ::close(m_fd);
        if (!m_committed)
            ::unlink(m_name.c_str());
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
        const int fd = std::exchange(m_fd, -1);
        if (::close(fd) != 0)
            fail(m_target, "cannot close " + in_quotes(m_name) + ": " + reason(errno));
        if (::rename(m_name.c_str(), m_target.c_str()) != 0)
            fail(m_target, "cannot replace it with " + in_quotes(m_name) + ": " + reason(errno));
        m_committed = true;
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
