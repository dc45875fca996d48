// IDX reading validates before it allocates (xgrad/data/idx.hpp): peak memory while refusing
// a header that announces more or less than the file holds, plain and gzip; FIFOs and folders
// refused at once; the checks load_idx_dataset makes of both headers before reading any data
// (counts, image size, minimum size). Part of the test_data executable.
#include <doctest/doctest.h>

#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "data_test_helpers.hpp"
#include "tests/support/check_error.hpp"
#include "tests/support/gzip_file.hpp"
#include "tests/support/scratch_folder.hpp"
#include "xgrad/data/idx.hpp"
#include "xgrad/errors.hpp"

namespace fs = std::filesystem;
using namespace xgrad::data;
using data_test::bytes_type;

namespace
{
    /// A fresh temporary folder for one test case.
    struct scratch_folder : test_support::scratch_folder
    {
        scratch_folder() : test_support::scratch_folder("xgrad_test_idx_limits_") {}
    };

    bytes_type header(const std::vector<std::uint32_t>& extents)
    {
        bytes_type h = {0, 0, 0x08, static_cast<std::uint8_t>(extents.size())};
        for (const std::uint32_t e : extents)
            h.insert(h.end(), {static_cast<std::uint8_t>(e >> 24), static_cast<std::uint8_t>(e >> 16),
                               static_cast<std::uint8_t>(e >> 8), static_cast<std::uint8_t>(e)});
        return h;
    }

    void put(const fs::path& path, const bytes_type& bytes)
    {
        std::ofstream out(path, std::ios::binary);
        out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
        REQUIRE(out.good());
    }

    struct child_result
    {
        bool finished = false;   // exited normally (not killed by the alarm or a signal)
        long peak_growth_kb = 0; // growth of the peak resident set while `body` ran
        std::string message;     // the data_error's message, or "no error" / "other error: ..."
    };

    long peak_rss_kb()
    {
        rusage usage{};
        getrusage(RUSAGE_SELF, &usage);
        return usage.ru_maxrss;
    }

    /// Runs `body` in a forked child, killed after `seconds`; reports how far its peak resident
    /// set grew and what it threw. The child's peak starts at its size when forked.
    child_result run_in_child(const std::function<void()>& body, unsigned seconds = 20)
    {
        int fds[2];
        REQUIRE(pipe(fds) == 0);
        std::fflush(nullptr);
        const pid_t pid = fork();
        REQUIRE(pid >= 0);
        if (pid == 0)
        {
            close(fds[0]);
            alarm(seconds);
            const long before = peak_rss_kb();
            std::string message = "no error";
            try
            {
                body();
            }
            catch (const data_error& e)
            {
                message = e.what();
            }
            catch (const std::exception& e)
            {
                message = std::string("other error: ") + e.what();
            }
            const std::string report = std::to_string(peak_rss_kb() - before) + "\n" + message;
            const ssize_t written = write(fds[1], report.data(), report.size());
            _exit(written == static_cast<ssize_t>(report.size()) ? 0 : 3);
        }
        close(fds[1]);
        std::string report;
        char buf[4096];
        for (ssize_t got; (got = read(fds[0], buf, sizeof buf)) > 0;)
            report.append(buf, static_cast<std::size_t>(got));
        close(fds[0]);
        int status = 0;
        REQUIRE(waitpid(pid, &status, 0) == pid);
        child_result r;
        r.finished = WIFEXITED(status) && WEXITSTATUS(status) == 0;
        const auto newline = report.find('\n');
        if (r.finished && newline != std::string::npos)
        {
            r.peak_growth_kb = std::stol(report.substr(0, newline));
            r.message = report.substr(newline + 1);
        }
        return r;
    }

    bool contains(const std::string& s, const char* part) { return s.find(part) != std::string::npos; }

    constexpr long few_mb_kb = 16 * 1024; // what refusing a bad file may cost, at most
}

TEST_CASE("IDX limits: a small .gz that inflates far past its header is refused after a few bytes")
{
    scratch_folder dir;
    // One 28x28 image announced, 128 MiB of zeros inflated (a 130 kB file).
    bytes_type head = header({1, 28, 28});
    head.resize(head.size() + 28 * 28, 7);
    const fs::path bomb = dir / "bomb-images-idx3-ubyte.gz";
    test_support::write_gzip(bomb, head, std::size_t{128} << 20);
    REQUIRE(fs::file_size(bomb) < (std::size_t{1} << 20));

    const child_result r = run_in_child([&] { read_idx(bomb, 3); });
    REQUIRE(r.finished);
    CHECK_MESSAGE(contains(r.message, bomb.string().c_str()), r.message);
    CHECK_MESSAGE(contains(r.message, "trailing data"), r.message);
    CHECK_MESSAGE(contains(r.message, "[1, 28, 28] needs 800 decompressed bytes"), r.message);
    CHECK_MESSAGE(r.peak_growth_kb < few_mb_kb, "peak RSS grew by " << r.peak_growth_kb << " kB");

    // The same through load_mnist, as train_fashion_mnist --data-dir reads it.
    fs::rename(bomb, dir / "train-images-idx3-ubyte.gz");
    write_idx(dir / "train-labels-idx1-ubyte", idx_array{{1}, {3}});
    const child_result m = run_in_child([&] { load_mnist(dir.path, true); });
    REQUIRE(m.finished);
    CHECK_MESSAGE(contains(m.message, "train-images-idx3-ubyte.gz: trailing data"), m.message);
    CHECK_MESSAGE(m.peak_growth_kb < few_mb_kb, "peak RSS grew by " << m.peak_growth_kb << " kB");

    // read_file_bytes stops at its limit too.
    const child_result b = run_in_child([&] { read_file_bytes(dir / "train-images-idx3-ubyte.gz", 1 << 20); });
    REQUIRE(b.finished);
    CHECK_MESSAGE(contains(b.message, "holds more than 1048576 bytes decompressed"), b.message);
    CHECK_MESSAGE(b.peak_growth_kb < few_mb_kb, "peak RSS grew by " << b.peak_growth_kb << " kB");
}

TEST_CASE("IDX limits: a header announcing more or less than the file holds costs no allocation")
{
    scratch_folder dir;
    // Plain: 10^12 bytes announced in a 16-byte file, refused from the file's size.
    put(dir / "huge.idx", header({1000000, 1000, 1000}));
    child_result r = run_in_child([&] { read_idx(dir / "huge.idx", 3); });
    REQUIRE(r.finished);
    CHECK_MESSAGE(contains(r.message, "truncated IDX data: shape [1000000, 1000, 1000] needs 1000000000016 bytes"),
                  r.message);
    CHECK_MESSAGE(contains(r.message, "found 16"), r.message);
    CHECK_MESSAGE(r.peak_growth_kb < few_mb_kb, "peak RSS grew by " << r.peak_growth_kb << " kB");

    // Gzip: the same announcement, with 1 MiB of data behind it; memory follows what inflates.
    test_support::write_gzip(dir / "huge.idx.gz", header({1000000, 1000, 1000}), std::size_t{1} << 20);
    r = run_in_child([&] { read_idx(dir / "huge.idx.gz", 3); });
    REQUIRE(r.finished);
    CHECK_MESSAGE(contains(r.message, "truncated IDX data"), r.message);
    CHECK_MESSAGE(contains(r.message, "found 1048592 decompressed"), r.message);
    CHECK_MESSAGE(r.peak_growth_kb < few_mb_kb, "peak RSS grew by " << r.peak_growth_kb << " kB");

    // Plain: one image announced, 256 MiB in the file (sparse: no disk used), refused from the
    // file's size without reading it.
    bytes_type one = header({1, 28, 28});
    one.resize(one.size() + 28 * 28, 1);
    put(dir / "long.idx", one);
    fs::resize_file(dir / "long.idx", std::uintmax_t{256} << 20);
    r = run_in_child([&] { read_idx(dir / "long.idx", 3); });
    REQUIRE(r.finished);
    CHECK_MESSAGE(contains(r.message, "268434656 trailing bytes: shape [1, 28, 28] needs 800 bytes"), r.message);
    CHECK_MESSAGE(r.peak_growth_kb < few_mb_kb, "peak RSS grew by " << r.peak_growth_kb << " kB");
}

TEST_CASE("IDX limits: FIFOs and folders are refused at once, not waited on")
{
    scratch_folder dir;
    REQUIRE(mkfifo((dir / "fifo.idx").c_str(), 0600) == 0);
    REQUIRE(mkfifo((dir / "fifo.idx.gz").c_str(), 0600) == 0);
    for (const char* name : {"fifo.idx", "fifo.idx.gz"})
    {
        const child_result r = run_in_child([&] { read_idx(dir / name); }, 5);
        REQUIRE_MESSAGE(r.finished, "reading a FIFO without a writer did not return within 5 s");
        CHECK_MESSAGE(contains(r.message, (dir / name).string().c_str()), r.message);
        CHECK_MESSAGE(contains(r.message, "not a regular file"), r.message);
    }
    // An MNIST file name taken by a FIFO is refused, not skipped for the other name.
    REQUIRE(mkfifo((dir / "train-images-idx3-ubyte.gz").c_str(), 0600) == 0);
    write_idx(dir / "train-images-idx3-ubyte", idx_array{{1, 1, 1}, {0}});
    write_idx(dir / "train-labels-idx1-ubyte", idx_array{{1}, {0}});
    const child_result r = run_in_child([&] { load_mnist(dir.path, true); }, 5);
    REQUIRE(r.finished);
    CHECK_MESSAGE(contains(r.message, "train-images-idx3-ubyte.gz: not a regular file"), r.message);

    fs::create_directory(dir / "folder.idx");
    CHECK_ERROR(read_idx(dir / "folder.idx"), data_error, "folder.idx", "not a regular file (a directory)");
}

TEST_CASE("IDX limits: load_idx_dataset checks both headers and its options before reading data")
{
    scratch_folder dir;
    const auto text = [&](const char* name) { return (dir / name).string(); };
    // A labels file with another count than the images file: reported before the images'
    // data, which here is corrupt, is read.
    write_idx(dir / "img.idx.gz", idx_array{{3, 2, 2}, bytes_type(12, 1)});
    write_idx(dir / "lab2.idx", idx_array{{2}, {0, 1}});
    bytes_type gz;
    {
        std::ifstream in(dir / "img.idx.gz", std::ios::binary);
        gz.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    }
    gz[gz.size() - 6] ^= 0xff; // the CRC: corrupt, noticed only at the end of the data
    put(dir / "bad-crc.idx.gz", gz);
    const std::string images = text("bad-crc.idx.gz"), labels = text("lab2.idx");
    CHECK_ERROR(load_idx_dataset(dir / "bad-crc.idx.gz", dir / "lab2.idx"), data_error, images.c_str(), labels.c_str(),
                "holds 3 images", "holds 2 labels");

    // Image size: named with the file, the size found and the one required.
    write_idx(dir / "lab3.idx", idx_array{{3}, {0, 1, 2}});
    dataset_options o;
    o.rows = 28;
    o.cols = 28;
    const std::string good = text("img.idx.gz");
    CHECK_ERROR(load_idx_dataset(dir / "img.idx.gz", dir / "lab3.idx", o), data_error, good.c_str(),
                "images of 2x2 pixels", "expected 28x28");
    o.rows = 2;
    o.cols = 3;
    CHECK_ERROR(load_idx_dataset(dir / "img.idx.gz", dir / "lab3.idx", o), data_error, "expected 2x3");
    o.cols = 0;
    CHECK(load_idx_dataset(dir / "img.idx.gz", dir / "lab3.idx", o).rows == 2);

    // Minimum size, counted before the limit.
    o = dataset_options{};
    o.min_size = 4;
    CHECK_ERROR(load_idx_dataset(dir / "img.idx.gz", dir / "lab3.idx", o), data_error, good.c_str(),
                "holds only 3 images", "expected at least 4");
    write_idx(dir / "empty-img.idx", idx_array{{0, 28, 28}, {}});
    write_idx(dir / "empty-lab.idx", idx_array{{0}, {}});
    o.min_size = 1;
    const std::string empty = text("empty-img.idx");
    CHECK_ERROR(load_idx_dataset(dir / "empty-img.idx", dir / "empty-lab.idx", o), data_error, empty.c_str(),
                "holds no images (shape [0, 28, 28]), expected at least 1");
    o.min_size = 3;
    o.limit = 1;
    CHECK(load_idx_dataset(dir / "img.idx.gz", dir / "lab3.idx", o).size == 1);

    // Options out of range.
    o = dataset_options{};
    o.rows = -1;
    CHECK_ERROR(load_idx_dataset(dir / "img.idx.gz", dir / "lab3.idx", o), xgrad::invalid_argument, "rows", "got -1");
    o = dataset_options{};
    o.classes = 257;
    CHECK_ERROR(load_mnist(dir.path, true, o), xgrad::invalid_argument, "classes must be in [1, 256]", "got 257");
}
