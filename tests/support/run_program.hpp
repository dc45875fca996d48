#pragma once
// Runs a program as a child process for the tests that drive the example programs: its stdout
// and stderr into a file of a folder, killed by SIGALRM after a limit, environment variables
// added in the child only. Returns its exit status, output, wall time and peak resident set.
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

#include <doctest/doctest.h>

namespace test_support
{
    struct run_result
    {
        int status = -1;      // exit status; -1 when killed by a signal (the time limit included)
        std::string output;   // stdout and stderr
        double seconds = 0;   // wall time
        long peak_rss_kb = 0; // the program's peak resident set
    };

    /// Runs argv[0] with argv (argv[0] an absolute or relative path, not looked up on PATH),
    /// output into dir/output.txt, killed after `limit_s` seconds, with `env` set in the child.
    inline run_result run_program(const std::vector<std::string>& args, const std::filesystem::path& dir,
                                  const std::vector<std::pair<std::string, std::string>>& env = {},
                                  unsigned limit_s = 120)
    {
        REQUIRE(!args.empty());
        const std::filesystem::path log = dir / "output.txt";
        std::vector<char*> argv;
        for (const auto& a : args)
            argv.push_back(const_cast<char*>(a.c_str()));
        argv.push_back(nullptr);
        const auto start = std::chrono::steady_clock::now();
        std::fflush(nullptr);
        const pid_t pid = fork();
        REQUIRE(pid >= 0);
        if (pid == 0)
        {
            const int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
            if (fd < 0 || dup2(fd, 1) < 0 || dup2(fd, 2) < 0)
                _exit(126);
            for (const auto& [name, value] : env)
                setenv(name.c_str(), value.c_str(), 1);
            alarm(limit_s);
            execv(argv[0], argv.data());
            _exit(127);
        }
        int status = 0;
        rusage usage{};
        REQUIRE(wait4(pid, &status, 0, &usage) == pid);
        run_result r;
        r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        r.status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
        r.peak_rss_kb = usage.ru_maxrss;
        std::ifstream in(log);
        r.output.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
        return r;
    }
}
