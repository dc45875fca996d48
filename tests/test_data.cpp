// Datasets (xgrad::data): IDX files written and read back, plain and gzip; every reading
// error, each file built byte by byte; write_idx's atomic rename; MNIST folders; and the
// data_loader: epoch orders, batch sizes, normalisation, layouts, dtypes, prefetching on a
// background thread against computing in place, abandoning epochs, errors from the worker.
// When Debian's Fashion-MNIST files are installed, their known counts and statistics.
#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <list>
#include <memory>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "check_error.hpp"
#include "xgrad/data/idx.hpp"
#include "xgrad/data/loader.hpp"
#include "xgrad/errors.hpp"
#include "xgrad/factories.hpp"

namespace fs = std::filesystem;
using namespace xgrad;
using namespace xgrad::data;
using bytes_type = std::vector<std::uint8_t>;

namespace
{
    /// A fresh folder under the system's temporary directory, removed with its contents.
    struct temp_folder
    {
        fs::path path;
        temp_folder()
        {
            static std::atomic<int> counter{0};
            std::random_device rd;
            path = fs::temp_directory_path() /
                   ("xgrad_test_data_" + std::to_string(rd()) + "_" + std::to_string(counter.fetch_add(1)));
            fs::create_directories(path);
        }
        ~temp_folder()
        {
            std::error_code ec;
            fs::remove_all(path, ec);
        }
        fs::path operator/(const std::string& name) const { return path / name; }
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

    /// n examples of rows x cols; example i has label i % classes and pixel p = (i + 3p) % 256,
    /// so pixel 0 names the example (n <= 256).
    std::shared_ptr<image_dataset> make_dataset(std::int64_t n, std::int64_t rows = 2, std::int64_t cols = 3,
                                                std::int64_t classes = 256)
    {
        auto ds = std::make_shared<image_dataset>(image_dataset{n, rows, cols, classes, {}, {}});
        for (std::int64_t i = 0; i < n; ++i)
        {
            ds->labels.push_back(static_cast<std::uint8_t>(i % classes));
            for (std::int64_t p = 0; p < rows * cols; ++p)
                ds->images.push_back(static_cast<std::uint8_t>((i + 3 * p) % 256));
        }
        return ds;
    }

    loader_options plain_options(std::int64_t batch_size)
    {
        loader_options o;
        o.batch_size = batch_size;
        o.mean = 0.5;
        o.std = 0.25;
        return o;
    }

    /// Every batch of one epoch.
    std::vector<batch> run_epoch(data_loader& loader, std::int64_t epoch)
    {
        loader.start_epoch(epoch);
        std::vector<batch> out;
        while (auto b = loader.next())
            out.push_back(std::move(*b));
        return out;
    }

    /// The examples of an epoch in visiting order, read from the int64 labels (label = example
    /// when classes >= size).
    std::vector<std::int64_t> order_of(const std::vector<batch>& batches)
    {
        std::vector<std::int64_t> order;
        for (const batch& b : batches)
            for (const double v : to_vector(b.labels))
                order.push_back(static_cast<std::int64_t>(v));
        return order;
    }

    bool same_batches(const std::vector<batch>& a, const std::vector<batch>& b)
    {
        const auto same = [](const batch& x, const batch& y) {
            return x.index == y.index && x.images.shape() == y.images.shape() &&
                   x.images.dtype() == y.images.dtype() && to_vector(x.images) == to_vector(y.images) &&
                   to_vector(x.labels) == to_vector(y.labels);
        };
        return std::equal(a.begin(), a.end(), b.begin(), b.end(), same);
    }

    std::vector<std::int64_t> iota_vector(std::int64_t n)
    {
        std::vector<std::int64_t> v(static_cast<std::size_t>(n));
        std::iota(v.begin(), v.end(), std::int64_t{0});
        return v;
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
                dir.text("no_such_folder/z.idx"), "cannot create the temporary file", error_text(ENOENT));
    fs::create_directory(dir / "taken.idx");
    write_bytes(dir / "taken.idx" / "inside", {1});
    CHECK_ERROR(write_idx(dir / "taken.idx", idx_array{{1}, {0}}), data_error, dir.text("taken.idx"),
                "cannot rename the temporary file");
    CHECK(folder_names(dir.path) == std::vector<std::string>{"taken.idx", "x.idx", "y.idx.gz"});

    CHECK_ERROR(write_idx(dir / "bad.idx", idx_array{{2, 3}, {1, 2, 3}}), xgrad::invalid_argument, "bad.idx",
                "shape [2, 3] holds 6 bytes but data has 3");
    CHECK_ERROR(write_idx(dir / "bad.idx", idx_array{{-1}, {}}), xgrad::invalid_argument, "bad.idx", "[-1]");
    CHECK_ERROR(write_idx(dir / "bad.idx", idx_array{std::vector<std::int64_t>(256, 1), {0}}),
                xgrad::invalid_argument, "rank 256");
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
    CHECK_ERROR(read_idx(dir / "missing.idx"), data_error, dir.text("missing.idx"), "cannot open",
                error_text(ENOENT));
    CHECK_ERROR(read_file_bytes(dir.path), data_error, dir.text(), error_text(EISDIR));
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
    CHECK_ERROR(read_idx(put("flipped.gz", flipped)), data_error, dir.text("flipped.gz"),
                "corrupt gzip stream");
    bytes_type cut(gz.begin(), gz.end() - 6);
    CHECK_ERROR(read_idx(put("cut.gz", cut)), data_error, dir.text("cut.gz"), "corrupt gzip stream",
                "truncated");
    CHECK_ERROR(read_idx(put("junk.gz", concat(gz, {'j', 'u', 'n', 'k'}))), data_error,
                dir.text("junk.gz"), "corrupt gzip stream", "after the end");
    // Bad magic.
    CHECK_ERROR(read_idx(put("magic.idx", {0x12, 0x34, 0x56, 0x78, 0, 0, 0, 0})), data_error,
                dir.text("magic.idx"), "bad IDX magic number", "0x12 0x34 0x56 0x78");
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
    CHECK_ERROR(read_idx(put("t2.idx", concat(idx_header({5}), {1, 2, 3}))), data_error,
                dir.text("t2.idx"), "truncated IDX data", "needs 13 bytes", "found 11");
    // Trailing bytes.
    CHECK_ERROR(read_idx(put("trail.idx", concat(idx_header({2}), {1, 2, 3, 4}))), data_error,
                dir.text("trail.idx"), "2 trailing bytes", "needs 10 bytes, found 12");
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

TEST_CASE("data_loader: every example once per epoch, batch sizes, drop_last")
{
    const auto ds = make_dataset(103);
    for (const bool prefetch : {true, false})
    {
        CAPTURE(prefetch);
        loader_options o = plain_options(10);
        o.prefetch = prefetch;
        data_loader loader(ds, o);
        CHECK(loader.size() == 103);
        CHECK(loader.batches_per_epoch() == 11);
        CHECK(loader.options().batch_size == 10);
        for (std::int64_t epoch : {0, 1, 5})
        {
            const std::vector<batch> batches = run_epoch(loader, epoch);
            REQUIRE(batches.size() == 11);
            for (std::size_t k = 0; k < batches.size(); ++k)
            {
                CHECK(batches[k].index == static_cast<std::int64_t>(k));
                const std::int64_t b = k < 10 ? 10 : 3;
                CHECK(batches[k].images.shape() == shape_type{b, 1, 2, 3});
                CHECK(batches[k].labels.shape() == shape_type{b});
            }
            std::vector<std::int64_t> order = order_of(batches);
            std::sort(order.begin(), order.end());
            CHECK(order == iota_vector(103));
            // After the end, next() keeps answering nullopt.
            CHECK_FALSE(loader.next().has_value());
            CHECK_FALSE(loader.next().has_value());
        }

        o.drop_last = true;
        data_loader dropping(ds, o);
        CHECK(dropping.batches_per_epoch() == 10);
        const std::vector<batch> batches = run_epoch(dropping, 3);
        REQUIRE(batches.size() == 10);
        for (const batch& b : batches)
            CHECK(b.labels.numel() == 10);
        const std::vector<std::int64_t> order = order_of(batches);
        CHECK(std::set<std::int64_t>(order.begin(), order.end()).size() == 100);
        // The examples kept are the first 100 of the same shuffled order.
        o.drop_last = false;
        data_loader keeping(ds, o);
        const std::vector<std::int64_t> full = order_of(run_epoch(keeping, 3));
        CHECK(order == std::vector<std::int64_t>(full.begin(), full.begin() + 100));
    }
    // A batch larger than the dataset, and an empty dataset.
    data_loader one(ds, plain_options(1000));
    CHECK(one.batches_per_epoch() == 1);
    CHECK(run_epoch(one, 0).at(0).labels.numel() == 103);
    loader_options o = plain_options(1000);
    o.drop_last = true;
    data_loader none(ds, o);
    CHECK(none.batches_per_epoch() == 0);
    CHECK(run_epoch(none, 0).empty());
    data_loader empty(make_dataset(0), plain_options(4));
    CHECK(run_epoch(empty, 0).empty());
}

TEST_CASE("data_loader: the order depends on (seed, epoch) alone")
{
    const auto ds = make_dataset(50);
    loader_options o = plain_options(8);
    o.seed = 42;
    data_loader a(ds, o);
    data_loader b(ds, o);
    const auto a0 = order_of(run_epoch(a, 0));
    const auto a1 = order_of(run_epoch(a, 1));
    const auto a2 = order_of(run_epoch(a, 2));
    // b resumes at epoch 2 directly, then goes back to 0: the same orders.
    CHECK(order_of(run_epoch(b, 2)) == a2);
    CHECK(order_of(run_epoch(b, 0)) == a0);
    CHECK(a0 != a1);
    CHECK(a1 != a2);
    const std::vector<std::int64_t> identity = iota_vector(50);
    CHECK(a0 != identity);

    o.seed = 43;
    data_loader c(ds, o);
    CHECK(order_of(run_epoch(c, 0)) != a0);

    o.shuffle = false;
    data_loader d(ds, o);
    CHECK(order_of(run_epoch(d, 0)) == identity);
    CHECK(order_of(run_epoch(d, 7)) == identity);
}

TEST_CASE("data_loader: normalised values, layouts and dtypes")
{
    const auto ds = make_dataset(5, 2, 3);
    const double mean = 0.5, sd = 0.25;
    // Exact values of (byte / 255 - mean) / std for the bytes 0, 51, 255.
    {
        auto small = std::make_shared<image_dataset>(image_dataset{1, 1, 3, 10, {0, 51, 255}, {4}});
        loader_options o = plain_options(1);
        o.dtype = dtype::float64;
        data_loader loader(small, o);
        const auto batches = run_epoch(loader, 0);
        REQUIRE(batches.size() == 1);
        const std::vector<double> v = to_vector(batches[0].images);
        REQUIRE(v.size() == 3);
        CHECK(v[0] == doctest::Approx(-2.0).epsilon(1e-12));
        CHECK(v[1] == doctest::Approx(-1.2).epsilon(1e-12));
        CHECK(v[2] == doctest::Approx(2.0).epsilon(1e-12));
        CHECK(to_vector(batches[0].labels) == std::vector<double>{4.0});
        CHECK(batches[0].labels.dtype() == dtype::int64);
    }

    struct dtype_case
    {
        dtype dt;
        double tolerance; // relative rounding of the dtype
    };
    for (const dtype_case c : {dtype_case{dtype::float32, 1e-7}, dtype_case{dtype::float64, 1e-15},
                               dtype_case{dtype::float16, 1e-3}, dtype_case{dtype::bfloat16, 4e-3}})
        for (const std::string format : {"NCHW", "NHWC"})
        {
            CAPTURE(c.dt);
            CAPTURE(format);
            loader_options o = plain_options(2);
            o.dtype = c.dt;
            o.data_format = format;
            data_loader loader(ds, o);
            for (const batch& b : run_epoch(loader, 1))
            {
                const std::int64_t n = b.labels.numel();
                CHECK(b.images.dtype() == c.dt);
                CHECK(b.labels.dtype() == dtype::int64);
                CHECK(b.images.shape() == (format == "NCHW" ? shape_type{n, 1, 2, 3} : shape_type{n, 2, 3, 1}));
                const std::vector<double> v = to_vector(b.images);
                const std::vector<double> labels = to_vector(b.labels);
                for (std::int64_t i = 0; i < n; ++i)
                {
                    const auto example = static_cast<std::int64_t>(labels[static_cast<std::size_t>(i)]);
                    for (std::int64_t y = 0; y < 2; ++y)
                        for (std::int64_t x = 0; x < 3; ++x)
                        {
                            // Row-major index of (i, 0, y, x) in [n, 1, 2, 3] or (i, y, x, 0) in [n, 2, 3, 1].
                            const std::int64_t at = format == "NCHW" ? ((i * 1 + 0) * 2 + y) * 3 + x
                                                                     : ((i * 2 + y) * 3 + x) * 1 + 0;
                            const std::uint8_t byte = ds->images[static_cast<std::size_t>(example * 6 + y * 3 + x)];
                            const double expected = (byte / 255.0 - mean) / sd;
                            CHECK(v[static_cast<std::size_t>(at)] ==
                                  doctest::Approx(expected).epsilon(c.tolerance).scale(1.0));
                        }
                }
            }
        }
}

TEST_CASE("data_loader: prefetching gives the batches computed in place")
{
    const auto ds = make_dataset(77, 3, 4);
    for (const dtype dt : {dtype::float32, dtype::float16})
        for (const bool shuffle : {true, false})
        {
            loader_options o = plain_options(9);
            o.dtype = dt;
            o.shuffle = shuffle;
            o.seed = 5;
            o.prefetch = true;
            data_loader on(ds, o);
            o.prefetch = false;
            data_loader off(ds, o);
            for (std::int64_t epoch : {0, 1, 2})
                CHECK(same_batches(run_epoch(on, epoch), run_epoch(off, epoch)));
        }
}

TEST_CASE("data_loader: abandoning an epoch, destroying mid-epoch")
{
    const auto ds = make_dataset(60);
    for (const bool prefetch : {true, false})
    {
        CAPTURE(prefetch);
        loader_options o = plain_options(7);
        o.prefetch = prefetch;
        data_loader reference(ds, o);
        const auto epoch1 = run_epoch(reference, 1);
        const auto epoch2 = run_epoch(reference, 2);

        data_loader loader(ds, o);
        loader.start_epoch(2);
        REQUIRE(loader.next().has_value());
        REQUIRE(loader.next().has_value());
        // Abandoned after two batches: epoch 1 starts from its first batch.
        CHECK(same_batches(run_epoch(loader, 1), epoch1));
        // Abandoned at once, twice in a row, then restarted at the same epoch.
        loader.start_epoch(1);
        loader.start_epoch(2);
        CHECK(same_batches(run_epoch(loader, 2), epoch2));
        loader.start_epoch(1);
        REQUIRE(loader.next().has_value());
        CHECK(same_batches(run_epoch(loader, 1), epoch1));
    }
    // Destroyed before any epoch, right after starting one, holding a batch, and with the
    // worker busy on a large batch.
    const auto big = make_dataset(256, 64, 64);
    for (int round = 0; round < 20; ++round)
    {
        {
            data_loader loader(ds, plain_options(7));
        }
        {
            data_loader loader(ds, plain_options(7));
            loader.start_epoch(round);
        }
        std::optional<batch> kept;
        {
            data_loader loader(big, plain_options(100));
            loader.start_epoch(round);
            kept = loader.next();
            loader.start_epoch(round + 1); // the worker may be building batch 1 of the old epoch
        }
        REQUIRE(kept.has_value());
        CHECK(kept->labels.numel() == 100); // the batch outlives the loader
    }
}

TEST_CASE("data_loader: errors")
{
    const auto ds = make_dataset(10);
    const auto reject = [&](const loader_options& o, const char* part) {
        CHECK_ERROR(data_loader(ds, o), xgrad::invalid_argument, "data_loader", part);
    };
    loader_options o = plain_options(4);
    o.batch_size = 0;
    reject(o, "batch_size must be >= 1, got 0");
    o = plain_options(4);
    o.std = 0;
    reject(o, "std must be finite and > 0");
    o.std = std::nan("");
    reject(o, "std must be finite and > 0");
    o = plain_options(4);
    o.mean = INFINITY;
    reject(o, "mean must be finite");
    o = plain_options(4);
    o.data_format = "NCWH";
    reject(o, "\"NCWH\"");
    o = plain_options(4);
    o.dtype = dtype::int64;
    reject(o, "dtype must be floating");
    CHECK_ERROR(data_loader(nullptr, plain_options(4)), xgrad::invalid_argument, "null");
    auto short_images = make_dataset(10);
    short_images->images.pop_back();
    CHECK_ERROR(data_loader(short_images, plain_options(4)), xgrad::invalid_argument, "images hold 59 bytes");
    auto short_labels = make_dataset(10);
    short_labels->labels.pop_back();
    CHECK_ERROR(data_loader(short_labels, plain_options(4)), xgrad::invalid_argument, "labels hold 9 bytes");

    data_loader loader(ds, plain_options(4));
    CHECK_THROWS_AS(loader.next(), std::logic_error);
    CHECK_ERROR(loader.start_epoch(-1), xgrad::invalid_argument, "epoch must be >= 0");

    // A hand-built dataset with a label out of range fails at the batch holding it; with
    // prefetch the error arises on the worker thread and next() rethrows it, every time.
    auto bad = make_dataset(30, 2, 3, 10);
    bad->labels[25] = 200;
    for (const bool prefetch : {true, false})
    {
        CAPTURE(prefetch);
        loader_options bo = plain_options(10);
        bo.shuffle = false;
        bo.prefetch = prefetch;
        data_loader l(bad, bo);
        l.start_epoch(0);
        CHECK(l.next().has_value());
        CHECK(l.next().has_value());
        CHECK_ERROR(l.next(), data_error, "label 200 of example 25");
        CHECK_ERROR(l.next(), data_error, "label 200 of example 25");
        l.start_epoch(1); // recovers until the same batch
        CHECK(l.next()->index == 0);
    }
}

TEST_CASE("Fashion-MNIST from Debian's dataset-fashion-mnist, when installed")
{
    const fs::path dir = default_fashion_mnist_dir;
    if (!fs::is_directory(dir))
    {
        MESSAGE("skipped: " << dir.string() << " does not exist (install dataset-fashion-mnist)");
        return;
    }
    const auto start = std::chrono::steady_clock::now();
    const std::clock_t cpu_start = std::clock();
    const auto train = std::make_shared<const image_dataset>(load_mnist(dir, true));
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    MESSAGE("loaded the Fashion-MNIST training set in " << seconds << " s ("
                                                        << double(std::clock() - cpu_start) / CLOCKS_PER_SEC
                                                        << " s of CPU time)");
    CHECK(train->size == 60000);
    CHECK(train->rows == 28);
    CHECK(train->cols == 28);
    CHECK(train->images.size() == 60000u * 28 * 28);
    std::vector<std::int64_t> counts(10);
    for (const std::uint8_t label : train->labels)
    {
        REQUIRE(label < 10);
        ++counts[label];
    }
    CHECK(counts == std::vector<std::int64_t>(10, 6000));
    // The loader's default normalisation is this training set's pixel mean and deviation.
    double sum = 0, sum_sq = 0;
    for (const std::uint8_t b : train->images)
    {
        sum += b / 255.0;
        sum_sq += (b / 255.0) * (b / 255.0);
    }
    const double mean = sum / static_cast<double>(train->images.size());
    const double sd = std::sqrt(sum_sq / static_cast<double>(train->images.size()) - mean * mean);
    const loader_options defaults;
    CHECK(mean == doctest::Approx(defaults.mean).epsilon(0.001));
    CHECK(sd == doctest::Approx(defaults.std).epsilon(0.001));

    const image_dataset test = load_mnist(dir, false);
    CHECK(test.size == 10000);
    CHECK(test.rows == 28);
    CHECK(test.cols == 28);
    std::vector<std::int64_t> test_counts(10);
    for (const std::uint8_t label : test.labels)
        ++test_counts[label];
    CHECK(test_counts == std::vector<std::int64_t>(10, 1000));

    // One prefetched epoch over the training set visits every example once.
    data_loader loader(train, loader_options{});
    loader.start_epoch(0);
    std::int64_t seen = 0, batches = 0;
    std::vector<std::int64_t> label_counts(10);
    while (auto b = loader.next())
    {
        ++batches;
        seen += b->labels.numel();
        for (const double v : to_vector(b->labels))
            ++label_counts[static_cast<std::size_t>(v)];
    }
    CHECK(seen == 60000);
    CHECK(batches == loader.batches_per_epoch());
    CHECK(label_counts == counts);
}
