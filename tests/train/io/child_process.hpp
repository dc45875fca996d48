#pragma once
// Running a piece of a test in a forked child process: for code that may block forever (a
// reader opening a FIFO), that must be measured on its own (peak memory) or that must die in
// the middle of what it does (a writer killed mid-write). The child reports a string back
// through a pipe; doctest's checks run in the parent only.
#include <doctest/doctest.h>

#include <csignal>
#include <cstring>
#include <exception>
#include <string>

#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

namespace child_test
{
    struct child_result
    {
        bool exited = false; // exited normally (with `code`)
        int code = -1;
        int signal = 0;     // the signal that ended it, when it did not exit
        std::string report; // what the child wrote back
    };

    /// Runs fn() -> std::string in a forked child that SIGALRM ends after `seconds`; an
    /// exception leaving fn is reported as "exception: <what>". Returns how the child ended
    /// and its report.
    template <class F>
    child_result run_in_child(F fn, unsigned seconds = 10)
    {
        int fds[2];
        REQUIRE(::pipe(fds) == 0);
        const ::pid_t pid = ::fork();
        REQUIRE(pid >= 0);
        if (pid == 0)
        {
            ::close(fds[0]);
            ::alarm(seconds);
            std::string report;
            try
            {
                report = fn();
            }
            catch (const std::exception& e)
            {
                report = std::string("exception: ") + e.what();
            }
            catch (...)
            {
                report = "exception: (not a std::exception)";
            }
            const char* p = report.data();
            std::size_t left = report.size();
            while (left > 0)
            {
                const ::ssize_t n = ::write(fds[1], p, left);
                if (n <= 0)
                    break;
                p += n;
                left -= static_cast<std::size_t>(n);
            }
            ::_exit(0);
        }
        ::close(fds[1]);
        child_result r;
        char buffer[4096];
        for (;;)
        {
            const ::ssize_t n = ::read(fds[0], buffer, sizeof buffer);
            if (n <= 0)
                break;
            r.report.append(buffer, static_cast<std::size_t>(n));
        }
        ::close(fds[0]);
        int status = 0;
        REQUIRE(::waitpid(pid, &status, 0) == pid);
        r.exited = WIFEXITED(status);
        r.code = r.exited ? WEXITSTATUS(status) : -1;
        r.signal = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
        return r;
    }

    /// "exited 0", "killed by signal 14 (Alarm clock)", ...
    inline std::string describe(const child_result& r)
    {
        if (r.exited)
            return "exited " + std::to_string(r.code) + ", report '" + r.report + "'";
        return "killed by signal " + std::to_string(r.signal) + " (" + ::strsignal(r.signal) + "), report '" +
               r.report + "'";
    }
}
