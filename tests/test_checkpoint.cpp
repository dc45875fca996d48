// safetensors files and training checkpoints (xgrad/io/safetensors.hpp): bit-exact round
// trips, the byte layout against a hand-built file, every rejected corruption, atomic writes,
// and checkpoints of a module with an optimizer, including every refused load leaving the
// model and the optimizer as they were.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include <unistd.h>

#include "xgrad/factories.hpp"
#include "xgrad/io/safetensors.hpp"
#include "xgrad/layers/batch_norm.hpp"
#include "xgrad/ops/elementwise.hpp"
#include "xgrad/ops/reduce.hpp"
#include "xgrad/optim/optimizer.hpp"

namespace fs = std::filesystem;
using xgrad::dtype;
using xgrad::tensor;

// CHECK_FORMAT_ERROR(expr, path, parts...): checks that expr throws xgrad::io::format_error whose
// message starts with "<path>: " and contains every one of the string parts.
#define CHECK_FORMAT_ERROR(expr, path, ...)                                                                            \
    do                                                                                                                 \
    {                                                                                                                  \
        const std::string where = (path).string() + ": ";                                                              \
        std::string msg = "(no xgrad::io::format_error thrown)";                                                       \
        try                                                                                                            \
        {                                                                                                              \
            (void)(expr);                                                                                              \
        }                                                                                                              \
        catch (const xgrad::io::format_error& e)                                                                       \
        {                                                                                                              \
            msg = e.what();                                                                                            \
        }                                                                                                              \
        CHECK_MESSAGE(msg.rfind(where, 0) == 0, "message '" << msg << "' lacks the prefix '" << where << "'");         \
        for (const char* part : {__VA_ARGS__})                                                                         \
            CHECK_MESSAGE(msg.find(part) != std::string::npos, "message '" << msg << "' lacks '" << part << "'");      \
    } while (0)

namespace
{
    /// A fresh folder under the system's temporary folder, removed with everything in it.
    struct scratch_dir
    {
        fs::path path;

        scratch_dir()
        {
            static int counter = 0;
            path = fs::temp_directory_path() /
                   ("xgrad_test_checkpoint_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
            fs::remove_all(path);
            fs::create_directories(path);
        }
        ~scratch_dir()
        {
            std::error_code ec;
            fs::remove_all(path, ec);
        }
        fs::path operator/(const std::string& name) const { return path / name; }

        /// The names of the folder's entries, sorted.
        std::vector<std::string> entries() const
        {
            std::vector<std::string> names;
            for (const auto& e : fs::directory_iterator(path))
                names.push_back(e.path().filename().string());
            std::sort(names.begin(), names.end());
            return names;
        }
    };

    using bytes_type = std::vector<unsigned char>;

    bytes_type read_bytes(const fs::path& p)
    {
        std::ifstream in(p, std::ios::binary);
        REQUIRE(in);
        return bytes_type(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    }

    void write_bytes(const fs::path& p, const std::string& bytes)
    {
        std::ofstream out(p, std::ios::binary | std::ios::trunc);
        out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
        REQUIRE(out);
    }

    /// The 8-byte little-endian length field, written out byte by byte.
    std::string length_field(std::uint64_t n)
    {
        std::string s;
        for (int i = 0; i < 8; ++i)
            s += static_cast<char>((n >> (8 * i)) & 0xff);
        return s;
    }

    /// A safetensors file from a header text and data bytes (no padding added).
    void write_raw(const fs::path& p, const std::string& header, const std::string& data)
    {
        write_bytes(p, length_field(header.size()) + header + data);
    }

    /// The tensor's elements, row-major, as raw bytes of its own dtype.
    bytes_type bytes_of(const tensor& t)
    {
        bytes_type out(static_cast<std::size_t>(t.numel()) * xgrad::itemsize(t.dtype()));
        xgrad::to_host(t, out.data(), t.dtype());
        return out;
    }

    template <class T>
    tensor from_values(const std::vector<T>& values, const xgrad::shape_type& shape, dtype dt)
    {
        REQUIRE(values.size() * sizeof(T) == static_cast<std::size_t>(xgrad::numel_of(shape)) * xgrad::itemsize(dt));
        return xgrad::from_host(values.data(), shape, dt);
    }

    template <class To, class From>
    To bits_as(From v)
    {
        static_assert(sizeof(To) == sizeof(From));
        To out;
        std::memcpy(&out, &v, sizeof out);
        return out;
    }

    void check_same_tensor(const std::string& name, const tensor& expected, const tensor& actual)
    {
        INFO("tensor ", name);
        REQUIRE(actual.defined());
        CHECK(actual.shape() == expected.shape());
        CHECK(actual.dtype() == expected.dtype());
        CHECK(actual.device() == xgrad::cpu_device);
        CHECK(bytes_of(actual) == bytes_of(expected));
    }

    /// Everything that identifies a set of tensors: names, shapes, dtypes and bytes.
    using tensor_record = std::tuple<xgrad::shape_type, dtype, bytes_type>;

    std::map<std::string, tensor_record> snapshot(const std::map<std::string, tensor>& tensors)
    {
        std::map<std::string, tensor_record> out;
        for (const auto& [name, t] : tensors)
            out.emplace(name, tensor_record{t.shape(), t.dtype(), bytes_of(t)});
        return out;
    }
}

TEST_CASE("safetensors: every dtype round-trips bit-exactly, 0-d, empty and strided tensors included")
{
    scratch_dir dir;
    const std::vector<float> f32 = {-0.0f, bits_as<float>(std::uint32_t{0x7fc12345}),
                                    std::numeric_limits<float>::infinity(), std::numeric_limits<float>::denorm_min(),
                                    3.25f, -1e30f};
    const std::vector<double> f64 = {bits_as<double>(std::uint64_t{0x7ff8000000000abcULL}), -0.0,
                                     std::numeric_limits<double>::denorm_min(), std::numeric_limits<double>::max()};
    // float16: smallest subnormal, +inf, a NaN with payload, -0, 1, -65504.
    const std::vector<std::uint16_t> f16 = {0x0001, 0x7c00, 0x7e01, 0x8000, 0x3c00, 0xfbff};
    // bfloat16: a NaN with payload, smallest subnormal, -inf, 1, -0.
    const std::vector<std::uint16_t> bf16 = {0x7fc1, 0x0001, 0xff80, 0x3f80, 0x8000};
    const std::vector<std::int64_t> i64 = {std::numeric_limits<std::int64_t>::min(), -1,
                                           std::numeric_limits<std::int64_t>::max()};

    // A strided view: the transpose of [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11]].
    const tensor base = xgrad::arange(0, 12, 1, dtype::float32).reshape({3, 4});
    const tensor transposed = base.transpose(0, 1);
    REQUIRE_FALSE(transposed.is_contiguous());
    const tensor every_other = xgrad::arange(0, 10, 1, dtype::int64).slice(0, 1, 10, 3); // 1, 4, 7
    REQUIRE_FALSE(every_other.is_contiguous());

    const xgrad::io::tensor_map tensors = {
        {"f32", from_values(f32, {2, 3}, dtype::float32)},
        {"f64", from_values(f64, {4}, dtype::float64)},
        {"f16", from_values(f16, {3, 2}, dtype::float16)},
        {"bf16", from_values(bf16, {5, 1}, dtype::bfloat16)},
        {"i64", from_values(i64, {3}, dtype::int64)},
        {"scalar_f32", from_values(std::vector<float>{2.5f}, {}, dtype::float32)},
        {"scalar_i64", from_values(std::vector<std::int64_t>{42}, {}, dtype::int64)},
        {"scalar_bf16", from_values(std::vector<std::uint16_t>{0x4049}, {}, dtype::bfloat16)},
        {"empty_f32", xgrad::empty({0, 3}, dtype::float32)},
        {"empty_i64", xgrad::empty({0}, dtype::int64)},
        {"empty_f16", xgrad::empty({2, 0, 4}, dtype::float16)},
        {"transposed", transposed},
        {"every_other", every_other},
        {"a.dotted/name with spaces", from_values(std::vector<double>{1.0, 2.0}, {2}, dtype::float64)},
    };
    const fs::path file = dir / "all.safetensors";
    xgrad::io::save_safetensors(file, tensors);
    const auto loaded = xgrad::io::load_safetensors(file);

    CHECK(loaded.metadata.empty());
    REQUIRE(loaded.tensors.size() == tensors.size());
    for (const auto& [name, t] : tensors)
    {
        const auto it = loaded.tensors.find(name);
        REQUIRE_MESSAGE(it != loaded.tensors.end(), "missing ", name);
        check_same_tensor(name, t, it->second);
        CHECK(it->second.strides() == xgrad::contiguous_strides(it->second.shape())); // row-major
    }
    // The strided views are stored in row-major order of the view, not of their storage.
    CHECK(loaded.tensors.at("transposed").shape() == xgrad::shape_type{4, 3});
    CHECK(xgrad::to_vector(loaded.tensors.at("transposed")) ==
          std::vector<double>{0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11});
    CHECK(xgrad::to_vector(loaded.tensors.at("every_other")) == std::vector<double>{1, 4, 7});
}

TEST_CASE("safetensors: metadata round-trips, with or without tensors")
{
    scratch_dir dir;
    const xgrad::io::metadata_map metadata = {
        {"empty", ""},
        {"escapes", "quote \" backslash \\ newline \n tab \t"},
        {"unicode", "\xc3\xbc \xe2\x86\x92 \xce\xbb"},
        {"key with spaces", "value"},
    };
    const fs::path only_metadata = dir / "meta.safetensors";
    xgrad::io::save_safetensors(only_metadata, {}, metadata);
    auto loaded = xgrad::io::load_safetensors(only_metadata);
    CHECK(loaded.tensors.empty());
    CHECK(loaded.metadata == metadata);

    const fs::path with_tensor = dir / "both.safetensors";
    xgrad::io::save_safetensors(with_tensor, {{"x", xgrad::ones({2}, dtype::float32)}}, metadata);
    loaded = xgrad::io::load_safetensors(with_tensor);
    CHECK(loaded.metadata == metadata);
    REQUIRE(loaded.tensors.count("x") == 1);
    CHECK(xgrad::to_vector(loaded.tensors.at("x")) == std::vector<double>{1, 1});

    const fs::path nothing = dir / "nothing.safetensors";
    xgrad::io::save_safetensors(nothing, {});
    loaded = xgrad::io::load_safetensors(nothing);
    CHECK(loaded.tensors.empty());
    CHECK(loaded.metadata.empty());
}

TEST_CASE("safetensors: the byte layout is the format's (length, sorted JSON padded with spaces, data)")
{
    scratch_dir dir;
    const fs::path file = dir / "small.safetensors";
    const tensor b = from_values(std::vector<std::int64_t>{1, -2}, {2}, dtype::int64);
    const tensor a = from_values(std::vector<float>{1.5f}, {}, dtype::float32);
    xgrad::io::save_safetensors(file, {{"b", b}, {"a", a}}, {{"k", "v"}});

    std::string header = R"({"__metadata__":{"k":"v"},)"
                         R"("a":{"data_offsets":[0,4],"dtype":"F32","shape":[]},)"
                         R"("b":{"data_offsets":[4,20],"dtype":"I64","shape":[2]}})";
    while (header.size() % 8 != 0)
        header += ' ';
    const std::string data = std::string("\x00\x00\xc0\x3f", 4) +             // 1.5f
                             std::string("\x01\x00\x00\x00\x00\x00\x00\x00", 8) + // 1
                             std::string("\xfe\xff\xff\xff\xff\xff\xff\xff", 8);  // -2
    const std::string expected = length_field(header.size()) + header + data;
    const bytes_type actual = read_bytes(file);
    CHECK(std::string(actual.begin(), actual.end()) == expected);
}

TEST_CASE("safetensors: reads a file written by another writer (any key order, unaligned data)")
{
    scratch_dir dir;
    const fs::path file = dir / "foreign.safetensors";
    // Whitespace, fields in another order, "__metadata__" in the middle, no padding: the
    // data region starts at an odd position of the file and "w" at offset 2 within it.
    const std::string header = R"({ "w": {"shape": [1], "dtype": "I64", "data_offsets": [2, 10]},)"
                               R"( "__metadata__": {"m": "n"},)"
                               R"( "h": {"data_offsets": [10, 16], "dtype": "F16", "shape": [3]},)"
                               R"( "z": {"dtype": "F32", "shape": [0], "data_offsets": [16, 16]},)"
                               R"( "c": {"dtype": "BF16", "shape": [], "data_offsets": [0, 2]} })";
    REQUIRE(header.size() % 2 == 1);
    const std::string data = std::string("\xc0\x3f", 2) +                               // bf16 1.5
                             std::string("\x08\x07\x06\x05\x04\x03\x02\x01", 8) +         // i64
                             std::string("\x00\x3c\x00\xc0\x00\x38", 6);                 // f16 1, -2, 0.5
    write_raw(file, header, data);

    const auto loaded = xgrad::io::load_safetensors(file);
    CHECK(loaded.metadata == xgrad::io::metadata_map{{"m", "n"}});
    REQUIRE(loaded.tensors.size() == 4);
    CHECK(loaded.tensors.at("c").dtype() == dtype::bfloat16);
    CHECK(loaded.tensors.at("c").shape().empty());
    CHECK(xgrad::to_vector(loaded.tensors.at("c")) == std::vector<double>{1.5});
    const tensor w = loaded.tensors.at("w");
    CHECK(w.dtype() == dtype::int64);
    std::int64_t w_value = 0;
    xgrad::to_host(w, &w_value, dtype::int64);
    CHECK(w_value == 0x0102030405060708LL);
    CHECK(loaded.tensors.at("h").dtype() == dtype::float16);
    CHECK(xgrad::to_vector(loaded.tensors.at("h")) == std::vector<double>{1.0, -2.0, 0.5});
    CHECK(loaded.tensors.at("z").shape() == xgrad::shape_type{0});
}

TEST_CASE("safetensors: every corruption is rejected with a message naming the file and the problem")
{
    scratch_dir dir;
    const fs::path file = dir / "bad.safetensors";
    const auto load = [&] { return xgrad::io::load_safetensors(file); };
    const std::string eight(8, '\0');
    const std::string ok_entry = R"("a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]})";

    // The file itself.
    CHECK_FORMAT_ERROR(xgrad::io::load_safetensors(dir / "absent.safetensors"), dir / "absent.safetensors",
                       "cannot open");
    CHECK_FORMAT_ERROR(xgrad::io::load_safetensors(dir.path), dir.path, "not a regular file");
    write_bytes(file, std::string("\x02\x00\x00", 3));
    CHECK_FORMAT_ERROR(load(), file, "3 bytes", "shorter than the 8-byte header length");

    // The header length.
    write_bytes(file, length_field(100) + R"({"a":{"dtype":"F32")");
    CHECK_FORMAT_ERROR(load(), file, "header length 100", "beyond the end of the file");
    write_bytes(file, length_field(std::numeric_limits<std::uint64_t>::max()) + "{}");
    CHECK_FORMAT_ERROR(load(), file, "header length 18446744073709551615", "beyond the end");

    // The JSON.
    write_raw(file, R"({"a": )", "");
    CHECK_FORMAT_ERROR(load(), file, "header is not valid JSON");
    write_raw(file, "[1, 2]", "");
    CHECK_FORMAT_ERROR(load(), file, "header is not a JSON object", "array");
    write_raw(file, R"({"a": 5})", "");
    CHECK_FORMAT_ERROR(load(), file, "tensor 'a'", "not an object");

    // Each field of an entry.
    write_raw(file, R"({"a":{"shape":[2],"data_offsets":[0,8]}})", eight);
    CHECK_FORMAT_ERROR(load(), file, "tensor 'a'", "missing field 'dtype'");
    write_raw(file, R"({"a":{"dtype":"F32","data_offsets":[0,8]}})", eight);
    CHECK_FORMAT_ERROR(load(), file, "tensor 'a'", "missing field 'shape'");
    write_raw(file, R"({"a":{"dtype":"F32","shape":[2]}})", eight);
    CHECK_FORMAT_ERROR(load(), file, "tensor 'a'", "missing field 'data_offsets'");
    write_raw(file, R"({"a":{"dtype":7,"shape":[2],"data_offsets":[0,8]}})", eight);
    CHECK_FORMAT_ERROR(load(), file, "tensor 'a'", "'dtype' is not a string");
    write_raw(file, R"({"a":{"dtype":"U8","shape":[8],"data_offsets":[0,8]}})", eight);
    CHECK_FORMAT_ERROR(load(), file, "tensor 'a'", "unknown dtype 'U8'");
    write_raw(file, R"({"a":{"dtype":"F32","shape":2,"data_offsets":[0,8]}})", eight);
    CHECK_FORMAT_ERROR(load(), file, "tensor 'a'", "'shape' is not an array");
    write_raw(file, R"({"a":{"dtype":"F32","shape":[2.5],"data_offsets":[0,8]}})", eight);
    CHECK_FORMAT_ERROR(load(), file, "tensor 'a'", "not an integer");
    write_raw(file, R"({"a":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", eight);
    CHECK_FORMAT_ERROR(load(), file, "tensor 'a'", "negative extent -2");
    write_raw(file, R"({"a":{"dtype":"F32","shape":[4294967296,4294967296,0],"data_offsets":[0,0]}})", "");
    CHECK_FORMAT_ERROR(load(), file, "tensor 'a'", "too many elements");
    write_raw(file, R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,4,8]}})", eight);
    CHECK_FORMAT_ERROR(load(), file, "tensor 'a'", "'data_offsets'", "not [begin, end]");
    write_raw(file, R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[-1,7]}})", eight);
    CHECK_FORMAT_ERROR(load(), file, "tensor 'a'", "not a pair of non-negative integers");
    write_raw(file, R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}})", eight);
    CHECK_FORMAT_ERROR(load(), file, "tensor 'a'", "ends before it begins");

    // Offsets against the shape and the data region.
    write_raw(file, R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}})", eight);
    CHECK_FORMAT_ERROR(load(), file, "tensor 'a'", "[0, 4] spans 4 bytes", "needs 8");
    write_raw(file, "{" + ok_entry + "}", std::string(5, '\0')); // truncated data
    CHECK_FORMAT_ERROR(load(), file, "tensor 'a'", "[0, 8]", "beyond the data region (5 bytes)");
    write_raw(file, R"({"a":{"dtype":"F32","shape":[0],"data_offsets":[9,9]}})", eight);
    CHECK_FORMAT_ERROR(load(), file, "tensor 'a'", "[9, 9]", "beyond the data region (8 bytes)");
    write_raw(file, "{" + ok_entry + R"(,"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
              std::string(12, '\0'));
    CHECK_FORMAT_ERROR(load(), file, "tensors 'a'", "'b'", "overlap");
    write_raw(file, "{" + ok_entry + R"(,"b":{"dtype":"F32","shape":[1],"data_offsets":[12,16]}})",
              std::string(16, '\0'));
    CHECK_FORMAT_ERROR(load(), file, "gap in the data region", "[8, 12)", "'b'");
    write_raw(file, "{" + ok_entry + "}", std::string(12, '\0'));
    CHECK_FORMAT_ERROR(load(), file, "gap in the data region", "[8, 12)", "at its end");

    // The metadata.
    write_raw(file, "{" + ok_entry + R"(,"__metadata__":{"k":"v","n":1}})", eight);
    CHECK_FORMAT_ERROR(load(), file, "metadata entry 'n' is not a string");
    write_raw(file, "{" + ok_entry + R"(,"__metadata__":["k"]})", eight);
    CHECK_FORMAT_ERROR(load(), file, "'__metadata__' is not an object");

    // The same entry, well formed, loads: the errors above come from the corruption alone.
    write_raw(file, "{" + ok_entry + R"(,"__metadata__":{"k":"v"}})", eight);
    CHECK(load().tensors.at("a").shape() == xgrad::shape_type{2});
}

TEST_CASE("safetensors: writes are atomic and a failed write leaves the old file intact")
{
    scratch_dir dir;
    const fs::path file = dir / "model.safetensors";
    xgrad::io::save_safetensors(file, {{"x", xgrad::ones({3}, dtype::float32)}}, {{"v", "1"}});
    CHECK(dir.entries() == std::vector<std::string>{"model.safetensors"}); // no temporary left
    const bytes_type before = read_bytes(file);

    // Replacing a file goes through a rename: the new content, still one file.
    xgrad::io::save_safetensors(file, {{"x", xgrad::zeros({2}, dtype::float64)}});
    CHECK(dir.entries() == std::vector<std::string>{"model.safetensors"});
    CHECK(xgrad::to_vector(xgrad::io::load_safetensors(file).tensors.at("x")) == std::vector<double>{0, 0});
    xgrad::io::save_safetensors(file, {{"x", xgrad::ones({3}, dtype::float32)}}, {{"v", "1"}});
    REQUIRE(read_bytes(file) == before);

    // Bad input is refused before anything is written.
    CHECK_FORMAT_ERROR(xgrad::io::save_safetensors(file, {{"good", xgrad::ones({1})}, {"hole", tensor()}}), file,
                       "tensor 'hole' is undefined");
    CHECK(read_bytes(file) == before);
    CHECK_FORMAT_ERROR(xgrad::io::save_safetensors(file, {{"__metadata__", xgrad::ones({1})}}), file, "reserved");
    CHECK(read_bytes(file) == before);
    CHECK_FORMAT_ERROR(xgrad::io::save_safetensors(file, {{"x", xgrad::ones({1})}}, {{"bad", "\xff\xfe"}}), file,
                       "not valid UTF-8");
    CHECK(read_bytes(file) == before);
    CHECK(dir.entries() == std::vector<std::string>{"model.safetensors"});

    // A folder that does not exist: nothing is created.
    const fs::path nowhere = dir / "missing" / "model.safetensors";
    CHECK_FORMAT_ERROR(xgrad::io::save_safetensors(nowhere, {{"x", xgrad::ones({1})}}), nowhere,
                       "cannot create a temporary file");
    CHECK_FALSE(fs::exists(dir / "missing"));

    // A failure after the data is written (the rename onto a folder fails): the temporary
    // is removed and the folder is untouched.
    const fs::path folder = dir / "taken";
    fs::create_directory(folder);
    CHECK_FORMAT_ERROR(xgrad::io::save_safetensors(folder, {{"x", xgrad::ones({1})}}), folder, "cannot replace it");
    CHECK(fs::is_directory(folder));
    CHECK(fs::is_empty(folder));
    CHECK(dir.entries() == std::vector<std::string>{"model.safetensors", "taken"});
    CHECK(read_bytes(file) == before);
}

// --- checkpoints ------------------------------------------------------------------------------

namespace
{
    /// A small model with parameters, an int64 buffer and a child holding both kinds.
    class tiny_net : public xgrad::nn::module
    {
    public:
        explicit tiny_net(std::uint64_t seed)
        {
            xgrad::generator gen(seed);
            register_parameter("weight", xgrad::randn({3, 2}, gen));
            register_parameter("bias", xgrad::randn({3}, gen));
            register_buffer("updates", xgrad::zeros({}, dtype::int64));
            m_bn = register_module("bn", std::make_shared<xgrad::nn::batch_norm2d>(3));
        }

        std::string_view type_name() const noexcept override { return "tiny_net"; }

        /// A scalar loss reaching every parameter: the batch norm's scale and offset through
        /// a weighted sum of its output (a plain sum would give scale no gradient).
        tensor loss(const tensor& x, const tensor& weights)
        {
            const tensor w = parameter("weight"), b = parameter("bias");
            return xgrad::sum(w * w) + xgrad::sum(b * b * b) + xgrad::sum((*m_bn)(x) * weights);
        }

        void count_update()
        {
            const std::int64_t n = static_cast<std::int64_t>(buffer("updates").item()) + 1;
            set_buffer("updates", xgrad::from_host(&n, {}, dtype::int64));
        }

    private:
        std::shared_ptr<xgrad::nn::batch_norm2d> m_bn;
    };

    struct batch
    {
        tensor x, weights;
    };

    batch make_batch(std::uint64_t seed)
    {
        xgrad::generator gen(seed);
        return {xgrad::randn({4, 3, 2, 2}, gen), xgrad::randn({4, 3, 2, 2}, gen)};
    }

    void train(tiny_net& model, xgrad::optim::optimizer& opt, int steps, std::uint64_t seed)
    {
        for (int i = 0; i < steps; ++i)
        {
            const batch b = make_batch(seed + static_cast<std::uint64_t>(i));
            opt.zero_grad();
            model.loss(b.x, b.weights).backward();
            opt.step();
            model.count_update();
        }
    }

    xgrad::io::tensor_map with_tensor(xgrad::io::tensor_map tensors, const std::string& name, const tensor& t)
    {
        tensors[name] = t;
        return tensors;
    }
}

TEST_CASE("checkpoint: model, optimizer state and epoch round-trip; training continues identically")
{
    for (const char* kind : {"sgd", "adam", "adamw"})
    {
        INFO("optimizer ", kind);
        scratch_dir dir;
        const fs::path file = dir / "ckpt.safetensors";
        tiny_net a(1);
        const auto opt_a = xgrad::optim::make_optimizer(kind, a, 0.05);
        train(a, *opt_a, 2, 100);
        xgrad::io::save_checkpoint(file, a, opt_a.get(), 7, {{"run", "alpha"}, {"note", "two steps"}});
        CHECK(dir.entries() == std::vector<std::string>{"ckpt.safetensors"});

        // The file is a plain safetensors file with the documented names and metadata.
        const auto raw = xgrad::io::load_safetensors(file);
        CHECK(raw.metadata == xgrad::io::metadata_map{{"format", "xgrad-checkpoint"},
                                                      {"version", "1"},
                                                      {"epoch", "7"},
                                                      {"optimizer", kind},
                                                      {"run", "alpha"},
                                                      {"note", "two steps"}});
        for (const auto& [name, t] : a.state_dict())
            check_same_tensor(name, t, raw.tensors.at("model." + name));
        for (const auto& [name, t] : opt_a->state_dict())
            check_same_tensor(name, t, raw.tensors.at("optimizer." + name));
        CHECK(raw.tensors.size() == a.state_dict().size() + opt_a->state_dict().size());

        tiny_net b(2);
        const auto opt_b = xgrad::optim::make_optimizer(kind, b, 0.05);
        REQUIRE(snapshot(b.state_dict()) != snapshot(a.state_dict()));
        const xgrad::io::checkpoint_info info = xgrad::io::load_checkpoint(file, b, opt_b.get());
        CHECK(info.epoch == 7);
        CHECK(info.metadata == raw.metadata);
        CHECK(snapshot(b.state_dict()) == snapshot(a.state_dict()));
        CHECK(snapshot(opt_b->state_dict()) == snapshot(opt_a->state_dict()));
        CHECK(opt_b->step_count() == 2);
        CHECK(b.parameter("weight").requires_grad());
        CHECK(b.buffer("updates").item() == 2);

        // The next step from the loaded state is the step the original takes.
        train(a, *opt_a, 1, 500);
        train(b, *opt_b, 1, 500);
        CHECK(snapshot(b.state_dict()) == snapshot(a.state_dict()));
        CHECK(snapshot(opt_b->state_dict()) == snapshot(opt_a->state_dict()));
    }
}

TEST_CASE("checkpoint: without an optimizer")
{
    scratch_dir dir;
    tiny_net a(1);
    const auto opt_a = xgrad::optim::make_optimizer("sgd", a, 0.1);
    train(a, *opt_a, 1, 100);

    // Saved without one: no optimizer metadata nor entries; the model loads alone.
    const fs::path model_only = dir / "model_only.safetensors";
    xgrad::io::save_checkpoint(model_only, a, nullptr, 0);
    const auto raw = xgrad::io::load_safetensors(model_only);
    CHECK(raw.metadata.count("optimizer") == 0);
    CHECK(raw.tensors.size() == a.state_dict().size());
    tiny_net b(2);
    CHECK(xgrad::io::load_checkpoint(model_only, b).epoch == 0);
    CHECK(snapshot(b.state_dict()) == snapshot(a.state_dict()));

    // An optimizer cannot be restored from it, and nothing changes.
    tiny_net c(3);
    const auto opt_c = xgrad::optim::make_optimizer("sgd", c, 0.1);
    const auto model_before = snapshot(c.state_dict());
    CHECK_FORMAT_ERROR(xgrad::io::load_checkpoint(model_only, c, opt_c.get()), model_only, "holds no optimizer state");
    CHECK(snapshot(c.state_dict()) == model_before);
    CHECK(opt_c->step_count() == 0);

    // A full checkpoint loads into a model alone; its optimizer entries are left aside.
    const fs::path full = dir / "full.safetensors";
    xgrad::io::save_checkpoint(full, a, opt_a.get(), 1);
    tiny_net d(4);
    CHECK(xgrad::io::load_checkpoint(full, d).epoch == 1);
    CHECK(snapshot(d.state_dict()) == snapshot(a.state_dict()));
}

TEST_CASE("checkpoint: bad save arguments are refused before writing")
{
    scratch_dir dir;
    const fs::path file = dir / "ckpt.safetensors";
    tiny_net a(1);
    CHECK_FORMAT_ERROR(xgrad::io::save_checkpoint(file, a, nullptr, -1), file, "negative epoch -1");
    CHECK_FORMAT_ERROR(xgrad::io::save_checkpoint(file, a, nullptr, 0, {{"epoch", "3"}}), file,
                       "metadata key 'epoch' is reserved");
    CHECK(dir.entries().empty());
}

TEST_CASE("checkpoint: every refused load names the file and the problem and changes nothing")
{
    scratch_dir dir;
    const fs::path good = dir / "good.safetensors";
    tiny_net a(1);
    const auto opt_a = xgrad::optim::make_optimizer("sgd", a, 0.1);
    train(a, *opt_a, 2, 100);
    xgrad::io::save_checkpoint(good, a, opt_a.get(), 3);
    const auto content = xgrad::io::load_safetensors(good);

    // The target has its own trained state, so an accidental partial load would show.
    tiny_net b(2);
    const auto opt_b = xgrad::optim::make_optimizer("sgd", b, 0.1);
    train(b, *opt_b, 1, 900);
    const auto model_before = snapshot(b.state_dict());
    const auto optimizer_before = snapshot(opt_b->state_dict());
    REQUIRE(model_before != snapshot(a.state_dict()));
    REQUIRE(optimizer_before != snapshot(opt_a->state_dict()));

    const fs::path bad = dir / "bad.safetensors";
    const auto unchanged = [&] {
        CHECK(snapshot(b.state_dict()) == model_before);
        CHECK(snapshot(opt_b->state_dict()) == optimizer_before);
    };
    const auto write = [&](const xgrad::io::tensor_map& tensors, const xgrad::io::metadata_map& metadata) {
        xgrad::io::save_safetensors(bad, tensors, metadata);
    };
    const auto load = [&] { return xgrad::io::load_checkpoint(bad, b, opt_b.get()); };
    auto metadata_with = [&](const std::string& key, const std::string& value) {
        auto m = content.metadata;
        m[key] = value;
        return m;
    };

    SUBCASE("not a checkpoint")
    {
        write(content.tensors, {});
        CHECK_FORMAT_ERROR(load(), bad, "not an xgrad checkpoint", "'format' is missing");
        write(content.tensors, metadata_with("format", "something-else"));
        CHECK_FORMAT_ERROR(load(), bad, "not an xgrad checkpoint", "'something-else'");
    }
    SUBCASE("unsupported version")
    {
        write(content.tensors, metadata_with("version", "2"));
        CHECK_FORMAT_ERROR(load(), bad, "unsupported checkpoint version '2'");
    }
    SUBCASE("bad epoch")
    {
        write(content.tensors, metadata_with("epoch", "-1"));
        CHECK_FORMAT_ERROR(load(), bad, "'epoch' is '-1'", "not a non-negative integer");
        write(content.tensors, metadata_with("epoch", "3x"));
        CHECK_FORMAT_ERROR(load(), bad, "'epoch' is '3x'");
    }
    SUBCASE("missing model tensor")
    {
        auto tensors = content.tensors;
        REQUIRE(tensors.erase("model.bn.running_mean") == 1);
        write(tensors, content.metadata);
        CHECK_FORMAT_ERROR(load(), bad, "'model.bn.running_mean' is missing");
    }
    SUBCASE("unexpected tensor")
    {
        write(with_tensor(content.tensors, "model.extra", xgrad::ones({1})), content.metadata);
        CHECK_FORMAT_ERROR(load(), bad, "unexpected tensor 'model.extra'");
        write(with_tensor(content.tensors, "stray", xgrad::ones({1})), content.metadata);
        CHECK_FORMAT_ERROR(load(), bad, "unexpected tensor 'stray'");
    }
    SUBCASE("wrong shape")
    {
        write(with_tensor(content.tensors, "model.weight", xgrad::zeros({2, 3})), content.metadata);
        CHECK_FORMAT_ERROR(load(), bad, "'model.weight' is [2, 3] float32", "the model's is [3, 2] float32");
    }
    SUBCASE("wrong dtype")
    {
        write(with_tensor(content.tensors, "model.bn.num_batches_tracked", xgrad::zeros({}, dtype::float32)),
              content.metadata);
        CHECK_FORMAT_ERROR(load(), bad, "'model.bn.num_batches_tracked' is [] float32", "int64");
    }
    SUBCASE("every problem is listed at once")
    {
        auto tensors = with_tensor(content.tensors, "model.bias", xgrad::zeros({4}));
        tensors.erase("model.weight");
        write(tensors, content.metadata);
        CHECK_FORMAT_ERROR(load(), bad, "'model.weight' is missing", "'model.bias' is [4]");
    }
    SUBCASE("optimizer type mismatch")
    {
        const auto adam = xgrad::optim::make_optimizer("adam", b, 0.1);
        CHECK_FORMAT_ERROR(xgrad::io::load_checkpoint(good, b, adam.get()), good, "optimizer type mismatch", "'sgd'",
                           "'adam'");
        CHECK(adam->step_count() == 0);
        CHECK(adam->state_dict().size() == 1); // just "step"
    }
    SUBCASE("bad optimizer state")
    {
        // Checked by the optimizer itself, which the model must not be loaded before.
        write(with_tensor(content.tensors, "optimizer.weight.momentum_buffer", xgrad::zeros({5})),
              content.metadata);
        CHECK_FORMAT_ERROR(load(), bad, "bad optimizer state", "weight.momentum_buffer");
        auto tensors = content.tensors;
        REQUIRE(tensors.erase("optimizer.step") == 1);
        write(tensors, content.metadata);
        CHECK_FORMAT_ERROR(load(), bad, "bad optimizer state", "'step'");
    }
    SUBCASE("truncated file")
    {
        const bytes_type bytes = read_bytes(good);
        write_bytes(bad, std::string(bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(bytes.size() - 10)));
        CHECK_FORMAT_ERROR(load(), bad, "beyond the data region");
        write_bytes(bad, std::string(bytes.begin(), bytes.begin() + 20));
        CHECK_FORMAT_ERROR(load(), bad, "beyond the end of the file");
    }
    unchanged();

    // The intact file still loads into the same model and optimizer afterwards.
    CHECK(xgrad::io::load_checkpoint(good, b, opt_b.get()).epoch == 3);
    CHECK(snapshot(b.state_dict()) == snapshot(a.state_dict()));
    CHECK(snapshot(opt_b->state_dict()) == snapshot(opt_a->state_dict()));
}
