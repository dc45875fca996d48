// See input_file.hpp.
#include "input_file.hpp"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <string>
#include <sys/stat.h>
#include <unistd.h>

namespace xgrad::io::detail
{
    namespace
    {
        [[noreturn]] void fail(const std::filesystem::path& path, const std::string& what)
        {
            throw file_error(path.string() + ": " + what);
        }
    }

    input_file::input_file(const std::filesystem::path& path) : m_path(path)
    {
        // O_NONBLOCK: open() on a FIFO without a writer would otherwise wait for one forever.
        m_fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
        if (m_fd < 0)
            fail(path, std::string("cannot open for reading: ") + std::strerror(errno));
        struct ::stat info
        {
        };
        if (::fstat(m_fd, &info) != 0)
        {
            const int err = errno;
            ::close(m_fd);
            fail(path, std::string("cannot read: ") + std::strerror(err));
        }
        if (!S_ISREG(info.st_mode))
        {
            ::close(m_fd);
            fail(path, S_ISDIR(info.st_mode) ? "not a regular file (a directory)" : "not a regular file");
        }
        // Regular files never block; clear the flag so reads behave as usual.
        const int flags = ::fcntl(m_fd, F_GETFL);
        if (flags >= 0)
            ::fcntl(m_fd, F_SETFL, flags & ~O_NONBLOCK);
        m_size = static_cast<std::uint64_t>(info.st_size);
    }

    input_file::~input_file()
    {
        if (m_fd >= 0)
            ::close(m_fd);
    }

    int input_file::release() noexcept
    {
        const int fd = m_fd;
        m_fd = -1;
        return fd;
    }

    std::size_t input_file::read_some(void* dst, std::size_t n)
    {
        for (;;)
        {
            const ::ssize_t got = ::read(m_fd, dst, n);
            if (got >= 0)
            {
                m_position += static_cast<std::uint64_t>(got);
                return static_cast<std::size_t>(got);
            }
            if (errno != EINTR)
                fail(m_path, std::string("cannot read: ") + std::strerror(errno));
        }
    }

    void input_file::read_exact(void* dst, std::size_t n, const char* what)
    {
        const std::uint64_t start = m_position;
        auto* p = static_cast<unsigned char*>(dst);
        std::size_t filled = 0;
        while (filled < n)
        {
            const std::size_t got = read_some(p + filled, n - filled);
            if (got == 0)
                fail(m_path, "truncated: expected " + std::to_string(n) + " bytes of " + what + " at offset " +
                                 std::to_string(start) + ", found " + std::to_string(filled));
            filled += got;
        }
    }
}
