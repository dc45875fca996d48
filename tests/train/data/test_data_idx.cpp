// IDX files (xgrad/data/idx.hpp): written and read back, plain and gzip; every reading error,
// each file built byte by byte; write_idx's atomic rename; load_idx_dataset and MNIST folders.
// The data_loader is tested in test_data_loader.cpp (same executable, test_data).
#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <list>
#include <random>
#include <string>
#include <vector>

#include "data_test_helpers.hpp"
#include "tests/support/check_error.hpp"
#include "tests/support/scratch_folder.hpp"
#include "xgrad/data/idx.hpp"
#include "xgrad/errors.hpp"
#include "xgrad/factories.hpp"

namespace fs = std::filesystem;
using namespace xgrad;
using namespace xgrad::data;
using namespace data_test;

namespace
{
    /// A fresh temporary folder (tests/support/scratch_folder.hpp) that also keeps the text of
    /// the paths it hands out.
    struct temp_folder : test_support::scratch_folder
    {
        temp_folder() : test_support::scratch_folder("xgrad_test_data_") {}
        /// The full path of `name` as text that lives as long as the folder (for CHECK_ERROR).
        const char* text(const std::string& name = "")
        {
            m_texts.push_back(name.empty() ? path.string() : (path / name).string());
            return m_texts.back().c_str();
        }

    private:
        std::list<std::string> m_texts;
    };

    const char* error_text(int code) { return std::strerror(code); }

    void write_bytes(const fs::path& path, const bytes_type& bytes)
    {
        std::ofstream out(path, std::ios::binary);
        out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
        REQUIRE(out.good());
    }

    bytes_type file_bytes(const fs::path& path)
    {
        std::ifstream in(path, std::ios::binary);
        REQUIRE(in.good());
        return bytes_type(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    }

    /// An IDX header built by hand: 00 00 type rank, then big-endian extents.
    bytes_type idx_header(const std::vector<std::uint32_t>& extents, std::uint8_t type = 0x08)
    {
        bytes_type h = {0, 0, type, static_cast<std::uint8_t>(extents.size())};
        for (const std::uint32_t e : extents)
            h.insert(h.end(), {static_cast<std::uint8_t>(e >> 24), static_cast<std::uint8_t>(e >> 16),
                               static_cast<std::uint8_t>(e >> 8), static_cast<std::uint8_t>(e)});
        return h;
    }

    bytes_type concat(bytes_type a, const bytes_type& b)
    {
        a.insert(a.end(), b.begin(), b.end());
        return a;
    }

    std::vector<std::string> folder_names(const fs::path& dir)
    {
        std::vector<std::string> names;
        for (const auto& entry : fs::directory_iterator(dir))
            names.push_back(entry.path().filename().string());
        std::sort(names.begin(), names.end());
        return names;
    }
}

TEST_CASE("IDX: write_idx and read_idx round trip, plain and gzip")
{
    temp_folder dir;
    idx_array a{{3, 2, 258}, {}};
    for (int i = 0; i < 3 * 2 * 258; ++i)
        a.data.push_back(static_cast<std::uint8_t>((i * 37) % 251));

    write_idx(dir / "a.idx", a);
    // The file is the hand-built header followed by the data.
    CHECK(file_bytes(dir / "a.idx") == concat(idx_header({3, 2, 258}), a.data));

    write_idx(dir / "a.idx.gz", a);
    const bytes_type gz = file_bytes(dir / "a.idx.gz");
    REQUIRE(gz.size() > 2);
    CHECK((gz[0] == 0x1f && gz[1] == 0x8b));
    CHECK(read_file_bytes(dir / "a.idx.gz") == file_bytes(dir / "a.idx"));

    for (const char* name : {"a.idx", "a.idx.gz"})
        CHECK((read_idx(dir / name, 3).shape == a.shape && read_idx(dir / name, 3).data == a.data));
    // Rank 1, and an empty array.
    write_idx(dir / "l.idx", idx_array{{4}, {9, 8, 7, 6}});
    CHECK(read_idx(dir / "l.idx", 1).data == bytes_type{9, 8, 7, 6});
    write_idx(dir / "e.idx.gz", idx_array{{0, 28, 28}, {}});
    CHECK(read_idx(dir / "e.idx.gz").shape == std::vector<std::int64_t>{0, 28, 28});

    // Concatenated gzip members decode as one stream.
    for (const char* name : {"b.idx", "b.idx.gz"})
        write_idx(dir / name, idx_array{{2}, {1, 2}});
    write_bytes(dir / "two.gz", concat(gz, file_bytes(dir / "b.idx.gz")));
    CHECK(read_file_bytes(dir / "two.gz") == concat(file_bytes(dir / "a.idx"), file_bytes(dir / "b.idx")));
    // A large file crosses the 1 MiB read chunks of both paths.
    idx_array big{{3000, 28, 28}, bytes_type(3000 * 28 * 28)};
    xgrad::generator gen(7);
    for (auto& v : big.data)
        v = static_cast<std::uint8_t>(gen.below(64)); // compressible, like images
    write_idx(dir / "big.idx", big);
    write_idx(dir / "big.idx.gz", big);
    CHECK(read_idx(dir / "big.idx", 3).data == big.data);
    CHECK(read_idx(dir / "big.idx.gz", 3).data == big.data);
}

TEST_CASE("IDX: write_idx writes atomically and checks its input")
{
    temp_folder dir;
    write_idx(dir / "x.idx", idx_array{{2, 1, 1}, {1, 2}});
    write_idx(dir / "x.idx", idx_array{{3, 1, 1}, {4, 5, 6}}); // replaces the file
    write_idx(dir / "y.idx.gz", idx_array{{1}, {3}});
    // No temporary file is left behind, and the second write replaced the first whole.
    CHECK(folder_names(dir.path) == std::vector<std::string>{"x.idx", "y.idx.gz"});
    CHECK(read_idx(dir / "x.idx").data == bytes_type{4, 5, 6});

    // Failing to create the temporary file, and failing to rename it (the target is a folder
    // with a file in it): errors naming the target, and no temporary file left behind.
    CHECK_ERROR(write_idx(dir / "no_such_folder" / "z.idx", idx_array{{1}, {0}}), data_error,
                dir.text("no_such_folder/z.idx"), "cannot create a temporary file", error_text(ENOENT));
    fs::create_directory(dir / "taken.idx");
    write_bytes(dir / "taken.idx" / "inside", {1});
    CHECK_ERROR(write_idx(dir / "taken.idx", idx_array{{1}, {0}}), data_error, dir.text("taken.idx"),
                "cannot replace it with", ".tmp-");
    CHECK(folder_names(dir.path) == std::vector<std::string>{"taken.idx", "x.idx", "y.idx.gz"});

    CHECK_ERROR(write_idx(dir / "bad.idx", idx_array{{2, 3}, {1, 2, 3}}), xgrad::invalid_argument, "bad.idx",
                "shape [2, 3] holds 6 bytes but data has 3");
    CHECK_ERROR(write_idx(dir / "bad.idx", idx_array{{-1}, {}}), xgrad::invalid_argument, "bad.idx", "[-1]");
    CHECK_ERROR(write_idx(dir / "bad.idx", idx_array{std::vector<std::int64_t>(256, 1), {0}}), xgrad::invalid_argument,
                "rank 256");
    CHECK(folder_names(dir.path) == std::vector<std::string>{"taken.idx", "x.idx", "y.idx.gz"});
}

TEST_CASE("IDX: every reading error names the file and the problem")
{
    temp_folder dir;
    const auto put = [&](const std::string& name, const bytes_type& bytes) {
        write_bytes(dir / name, bytes);
        return dir / name;
    };

    // Cannot open.
    CHECK_ERROR(read_idx(dir / "missing.idx"), data_error, dir.text("missing.idx"), "cannot open", error_text(ENOENT));
    CHECK_ERROR(read_file_bytes(dir.path), data_error, dir.text(), "not a regular file (a directory)");
    // Not gzip.
    const auto p = put("plain.idx.gz", concat(idx_header({2}), {1, 2}));
    CHECK_ERROR(read_idx(p), data_error, dir.text("plain.idx.gz"), "not a gzip file", "0x00 0x00");
    CHECK_ERROR(read_idx(put("empty.gz", {})), data_error, dir.text("empty.gz"), "not a gzip file");
    // Corrupt gzip.
    idx_array a{{400}, bytes_type(400)};
    for (int i = 0; i < 400; ++i)
        a.data[static_cast<std::size_t>(i)] = static_cast<std::uint8_t>(i * i);
    write_idx(dir / "good.gz", a);
    bytes_type gz = file_bytes(dir / "good.gz");
    bytes_type flipped = gz;
    flipped[flipped.size() / 2] ^= 0x55; // the CRC at the end catches any change that inflates
    CHECK_ERROR(read_idx(put("flipped.gz", flipped)), data_error, dir.text("flipped.gz"), "corrupt gzip stream");
    bytes_type cut(gz.begin(), gz.end() - 6);
    CHECK_ERROR(read_idx(put("cut.gz", cut)), data_error, dir.text("cut.gz"), "corrupt gzip stream", "truncated");
    CHECK_ERROR(read_idx(put("junk.gz", concat(gz, {'j', 'u', 'n', 'k'}))), data_error, dir.text("junk.gz"),
                "corrupt gzip stream", "after the end");
    // Bad magic.
    CHECK_ERROR(read_idx(put("magic.idx", {0x12, 0x34, 0x56, 0x78, 0, 0, 0, 0})), data_error, dir.text("magic.idx"),
                "bad IDX magic number", "0x12 0x34 0x56 0x78");
    // A gzip file not named .gz is pointed out.
    write_idx(dir / "g.gz", idx_array{{1}, {5}});
    fs::rename(dir / "g.gz", dir / "g.idx");
    CHECK_ERROR(read_idx(dir / "g.idx"), data_error, dir.text("g.idx"), "0x1f 0x8b", "*.gz");
    // Unsupported type byte.
    CHECK_ERROR(read_idx(put("float.idx", concat(idx_header({1}, 0x0D), {0, 0, 0, 0}))), data_error,
                dir.text("float.idx"), "unsupported IDX element type 0x0d", "32-bit float");
    // Wrong rank.
    write_idx(dir / "r2.idx", idx_array{{2, 2}, {1, 2, 3, 4}});
    CHECK_ERROR(read_idx(dir / "r2.idx", 3), data_error, dir.text("r2.idx"), "rank is 2, expected 3");
    CHECK_ERROR(read_idx(dir / "r2.idx", 1), data_error, dir.text("r2.idx"), "rank is 2, expected 1");
    // Truncated.
    CHECK_ERROR(read_idx(put("t0.idx", {0, 0})), data_error, dir.text("t0.idx"), "truncated",
                "at least 4 bytes, found 2");
    CHECK_ERROR(read_idx(put("t1.idx", {0, 0, 8, 3, 0, 0, 0, 1})), data_error, dir.text("t1.idx"),
                "truncated IDX header", "needs 16 bytes, found 8");
    CHECK_ERROR(read_idx(put("t2.idx", concat(idx_header({5}), {1, 2, 3}))), data_error, dir.text("t2.idx"),
                "truncated IDX data", "needs 13 bytes", "found 11");
    // Trailing bytes.
    CHECK_ERROR(read_idx(put("trail.idx", concat(idx_header({2}), {1, 2, 3, 4}))), data_error, dir.text("trail.idx"),
                "2 trailing bytes", "needs 10 bytes, found 12");
    // Extents overflow.
    CHECK_ERROR(read_idx(put("huge.idx", idx_header({0xFFFFFFFF, 0xFFFFFFFF, 0xFFFFFFFF}))), data_error,
                dir.text("huge.idx"), "overflow", "4294967295");
    // Label out of range.
    write_idx(dir / "img.idx", idx_array{{4, 1, 2}, bytes_type(8)});
    write_idx(dir / "lab.idx", idx_array{{4}, {1, 9, 0, 10}});
    CHECK_ERROR(load_idx_dataset(dir / "img.idx", dir / "lab.idx"), data_error, dir.text("lab.idx"),
                "label 10 at index 3", "classes, 10");
    // Nine classes: label 9 at index 1 is the first one out of range.
    CHECK_ERROR(load_idx_dataset(dir / "img.idx", dir / "lab.idx", 9), data_error, "label 9 at index 1");
    // Image and label counts differ.
    write_idx(dir / "img.idx", idx_array{{4, 1, 2}, bytes_type(8)});
    write_idx(dir / "lab.idx.gz", idx_array{{3}, {1, 2, 3}});
    CHECK_ERROR(load_idx_dataset(dir / "img.idx", dir / "lab.idx.gz"), data_error, dir.text("img.idx"),
                dir.text("lab.idx.gz"), "4 images", "3 labels");
    // load_mnist: missing folder or files.
    CHECK_ERROR(load_mnist(dir / "nowhere", true), data_error, dir.text("nowhere"), "no such folder",
                "train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte");
    write_idx(dir / "t10k-images-idx3-ubyte", idx_array{{1, 1, 1}, {0}});
    CHECK_ERROR(load_mnist(dir.path, false), data_error, dir.text(),
                "found neither t10k-labels-idx1-ubyte.gz nor t10k-labels-idx1-ubyte");
    CHECK_ERROR(load_mnist(dir.path, true), data_error,
                "found neither train-images-idx3-ubyte.gz nor train-images-idx3-ubyte");
    // Bad arguments.
    CHECK_ERROR(load_idx_dataset(dir / "a", dir / "b", 0), xgrad::invalid_argument, "classes");
    CHECK_ERROR(load_idx_dataset(dir / "a", dir / "b", 10, -1), xgrad::invalid_argument, "limit");
}

TEST_CASE("IDX: load_idx_dataset and load_mnist")
{
    temp_folder dir;
    const auto ds = make_dataset(7, 2, 3, 10);
    write_idx(dir / "train-images-idx3-ubyte.gz", idx_array{{7, 2, 3}, ds->images});
    write_idx(dir / "train-labels-idx1-ubyte.gz", idx_array{{7}, ds->labels});
    // Uncompressed files with other contents: the .gz names are tried first.
    write_idx(dir / "train-images-idx3-ubyte", idx_array{{1, 1, 1}, {0}});
    write_idx(dir / "train-labels-idx1-ubyte", idx_array{{1}, {0}});
    // The test set only uncompressed.
    write_idx(dir / "t10k-images-idx3-ubyte", idx_array{{2, 1, 2}, {1, 2, 3, 4}});
    write_idx(dir / "t10k-labels-idx1-ubyte", idx_array{{2}, {5, 6}});

    const image_dataset train = load_mnist(dir.path, true);
    CHECK(train.size == 7);
    CHECK(train.rows == 2);
    CHECK(train.cols == 3);
    CHECK(train.classes == 10);
    CHECK(train.images == ds->images);
    CHECK(train.labels == ds->labels);

    const image_dataset test = load_mnist(dir.path, false);
    CHECK(test.size == 2);
    CHECK(test.images == bytes_type{1, 2, 3, 4});
    CHECK(test.labels == bytes_type{5, 6});

    // limit keeps the first examples; a limit above the size keeps them all.
    const image_dataset first = load_mnist(dir.path, true, 3);
    CHECK(first.size == 3);
    CHECK(first.images == bytes_type(ds->images.begin(), ds->images.begin() + 18));
    CHECK(first.labels == bytes_type(ds->labels.begin(), ds->labels.begin() + 3));
    CHECK(load_mnist(dir.path, true, 100).size == 7);
}
