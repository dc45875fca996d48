// Atomic writes (xgrad/io/atomic_file.hpp) after a crash: the temporary file a killed writer
// left behind is removed by the next write of the same target, while a temporary that another
// writer is still writing, other targets' temporaries and other names are left alone.
#include <doctest/doctest.h>

#include <algorithm>
#include <csignal>
#include <filesystem>
#include <string>
#include <vector>

#include <sys/resource.h>
#include <unistd.h>

#include "checkpoint_test_helpers.hpp"
#include "child_process.hpp"
#include "xgrad/factories.hpp"
#include "xgrad/io/atomic_file.hpp"
#include "xgrad/io/safetensors.hpp"

namespace fs = std::filesystem;
using namespace checkpoint_test;

namespace
{
    /// The entries of `dir` named "<target>.tmp-...".
    std::vector<std::string> temporaries(const scratch_dir& dir, const std::string& target)
    {
        std::vector<std::string> out;
        for (const std::string& name : dir.entries())
            if (name.rfind(target + ".tmp-", 0) == 0)
                out.push_back(name);
        return out;
    }

    /// A child that starts an atomic write of `target`, writes part of it, tells the parent
    /// (one byte on `ready`) and then waits: until the parent closes the write end of the
    /// pipe whose read end is `release` (the child closes its copy, `release_other_end`), when
    /// it leaves without committing; or, for `release` < 0, until it is killed. Returns the
    /// child's pid.
    ::pid_t start_writer(const fs::path& target, int ready, int release, int release_other_end)
    {
        const ::pid_t pid = ::fork();
        REQUIRE(pid >= 0);
        if (pid == 0)
        {
            ::alarm(30);
            if (release_other_end >= 0)
                ::close(release_other_end);
            {
                xgrad::io::atomic_file file(target);
                file.write("partial", 7);
                (void)!::write(ready, "r", 1);
                if (release < 0)
                    for (;;)
                        ::pause();
                char c = 0;
                while (::read(release, &c, 1) > 0)
                {
                }
            }
            ::_exit(0);
        }
        return pid;
    }
}

TEST_CASE("atomic_file: the next write removes what a killed writer left, and nothing else")
{
    scratch_dir dir;
    const fs::path target = dir / "ckpt.safetensors";
    const auto new_temporary = [&](const std::vector<std::string>& before) {
        std::string found;
        for (const std::string& name : temporaries(dir, "ckpt.safetensors"))
            if (std::find(before.begin(), before.end(), name) == before.end())
                found = name;
        return found;
    };
    int ready[2], release[2];
    REQUIRE(::pipe(ready) == 0);
    REQUIRE(::pipe(release) == 0);
    char c = 0;
    int status = 0;

    // A writer at work on the target all along.
    const ::pid_t holder = start_writer(target, ready[1], release[0], release[1]);
    ::close(release[0]);
    REQUIRE(::read(ready[0], &c, 1) == 1);
    const std::string held = new_temporary({});
    REQUIRE_FALSE(held.empty());

    // A save killed mid-write: the file size limit stops the child with SIGXFSZ once 4 kB of
    // its 64 kB tensor are written, as abruptly as a SIGKILL would.
    const auto killed_save = child_test::run_in_child([&] {
        ::rlimit no_core{0, 0};
        ::setrlimit(RLIMIT_CORE, &no_core);
        ::rlimit small{4096, 4096};
        ::setrlimit(RLIMIT_FSIZE, &small);
        xgrad::io::save_safetensors(target, {{"x", xgrad::zeros({16384})}});
        return std::string("saved");
    });
    INFO(child_test::describe(killed_save));
    REQUIRE(killed_save.signal == SIGXFSZ);
    const std::string left_by_save = new_temporary({held});
    REQUIRE_FALSE(left_by_save.empty());
    CHECK(fs::file_size(dir / left_by_save) == 4096);
    CHECK(temporaries(dir, "ckpt.safetensors").size() == 2);

    // A writer killed with SIGKILL while it writes. Starting, it removed what the killed save
    // left, but not the holder's file.
    const ::pid_t victim = start_writer(target, ready[1], -1, -1);
    REQUIRE(::read(ready[0], &c, 1) == 1);
    REQUIRE(::kill(victim, SIGKILL) == 0);
    REQUIRE(::waitpid(victim, &status, 0) == victim);
    REQUIRE(WIFSIGNALED(status));
    const std::string left_by_victim = new_temporary({held, left_by_save});
    REQUIRE_FALSE(left_by_victim.empty());
    CHECK_FALSE(fs::exists(dir / left_by_save));
    CHECK(fs::exists(dir / held));
    const std::vector<std::string> stale = {left_by_victim};

    // Names the writer never makes, another target's temporary, and a link to a file elsewhere.
    write_bytes(dir / "ckpt.safetensors.tmp-0123456789abcdeg", "x"); // not hex
    write_bytes(dir / "ckpt.safetensors.tmp-0123456789abcde", "x");  // 15 digits
    write_bytes(dir / "ckpt.safetensors.tmp-0123456789ABCDEF", "x"); // upper case
    write_bytes(dir / "other.safetensors.tmp-0123456789abcdef", "x");
    write_bytes(dir / "elsewhere.txt", "keep me");
    fs::create_symlink(dir / "elsewhere.txt", dir / "ckpt.safetensors.tmp-00000000000000aa");
    // And a stale one of the writer's own naming made by hand (a crash of an older run).
    write_bytes(dir / "ckpt.safetensors.tmp-fedcba9876543210", "old");

    xgrad::io::save_safetensors(target, {{"x", xgrad::ones({2})}});
    CHECK(xgrad::to_vector(xgrad::io::load_safetensors(target).tensors.at("x")) == std::vector<double>{1, 1});

    const std::vector<std::string> after = dir.entries();
    const auto has = [&](const std::string& name) {
        return std::find(after.begin(), after.end(), name) != after.end();
    };
    for (const std::string& name : stale)
        CHECK_MESSAGE(!has(name), name << " (left by a killed writer) is still there");
    CHECK_FALSE(has("ckpt.safetensors.tmp-fedcba9876543210"));
    CHECK_MESSAGE(has(held), held << " (being written) was removed");
    CHECK(has("ckpt.safetensors.tmp-0123456789abcdeg"));
    CHECK(has("ckpt.safetensors.tmp-0123456789abcde"));
    CHECK(has("ckpt.safetensors.tmp-0123456789ABCDEF"));
    CHECK(has("other.safetensors.tmp-0123456789abcdef"));
    CHECK(has("ckpt.safetensors.tmp-00000000000000aa"));
    CHECK(read_bytes(dir / "elsewhere.txt") == bytes_type{'k', 'e', 'e', 'p', ' ', 'm', 'e'});

    // The holder finishes without committing: its own temporary goes with it.
    ::close(release[1]);
    REQUIRE(::waitpid(holder, &status, 0) == holder);
    CHECK(WIFEXITED(status));
    CHECK_FALSE(fs::exists(dir / held));
    ::close(ready[0]);
    ::close(ready[1]);
}
