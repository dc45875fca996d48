// safetensors files (xgrad/io/safetensors.hpp): bit-exact round trips of every dtype, the
// byte layout against a hand-built file, files from another writer, every rejected
// corruption, and atomic writes. Checkpoints built on them are tested in
// test_checkpoint_checkpoints.cpp (same executable, test_checkpoint).
#include <doctest/doctest.h>

#include <fstream>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <limits>
#include <string>
#include <vector>

#include "checkpoint_test_helpers.hpp"
#include "xgrad/factories.hpp"
#include "xgrad/io/safetensors.hpp"

namespace fs = std::filesystem;
using xgrad::dtype;
using xgrad::tensor;
using namespace checkpoint_test;

namespace
{
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
}

TEST_CASE("safetensors: every dtype round-trips bit-exactly, 0-d, empty and strided tensors included")
{
    scratch_dir dir;
    const std::vector<float> f32 = {-0.0f,
                                    bits_as<float>(std::uint32_t{0x7fc12345}),
                                    std::numeric_limits<float>::infinity(),
                                    std::numeric_limits<float>::denorm_min(),
                                    3.25f,
                                    -1e30f};
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
    for (const auto& entry : tensors)
    {
        // Named copies: doctest's message macros capture them in lambdas (no structured bindings).
        const std::string& name = entry.first;
        const tensor& t = entry.second;
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

TEST_CASE("safetensors: the byte layout is the format's (length, sorted JSON padded with spaces, checksums, data)")
{
    scratch_dir dir;
    const fs::path file = dir / "small.safetensors";
    const tensor b = from_values(std::vector<std::int64_t>{1, -2}, {2}, dtype::int64);
    const tensor a = from_values(std::vector<float>{1.5f}, {}, dtype::float32);
    xgrad::io::save_safetensors(file, {{"b", b}, {"a", a}}, {{"k", "v"}});

    // The metadata holds each tensor's CRC-32 (of its stored bytes; the values are Python's
    // zlib.crc32 of the data below).
    std::string header = R"({"__metadata__":{"k":"v","xgrad.crc32.a":"5cd8256f","xgrad.crc32.b":"ca1fda2f"},)"
                         R"("a":{"data_offsets":[0,4],"dtype":"F32","shape":[]},)"
                         R"("b":{"data_offsets":[4,20],"dtype":"I64","shape":[2]}})";
    while (header.size() % 8 != 0)
        header += ' ';
    const std::string data = std::string("\x00\x00\xc0\x3f", 4) +                 // 1.5f
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
    const std::string data = std::string("\xc0\x3f", 2) +                         // bf16 1.5
                             std::string("\x08\x07\x06\x05\x04\x03\x02\x01", 8) + // i64
                             std::string("\x00\x3c\x00\xc0\x00\x38", 6);          // f16 1, -2, 0.5
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
    CHECK_FORMAT_ERROR(load(), file, "not a safetensors file", "header length of 100 bytes",
                       "but the file has 27 bytes");
    write_bytes(file, length_field(std::numeric_limits<std::uint64_t>::max()) + "{}");
    CHECK_FORMAT_ERROR(load(), file, "not a safetensors file", "header length of 18446744073709551615 bytes");
    write_bytes(file, length_field(1) + "{}");
    CHECK_FORMAT_ERROR(load(), file, "not a safetensors file", "header length of 1 bytes", "at least");

    // The JSON.
    write_raw(file, R"({"a": )", "");
    CHECK_FORMAT_ERROR(load(), file, "header is not valid JSON");
    // A header must open a JSON object at its first byte (as the format's reference reader
    // requires), so anything else is refused before the rest of the header is read.
    write_raw(file, "[1, 2]", "");
    CHECK_FORMAT_ERROR(load(), file, "not a safetensors file", "does not start with '{'", "0x5b");
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
    write_raw(file, R"({"a":{"dtype":"C64","shape":[1],"data_offsets":[0,8]}})", eight);
    CHECK_FORMAT_ERROR(load(), file, "tensor 'a'", "unknown dtype 'C64'", "known: F64, F32", "BOOL", "F8_E5M2");
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

TEST_CASE("safetensors: flipping any byte of the data fails the load, naming the tensor")
{
    scratch_dir dir;
    const fs::path file = dir / "ckpt.safetensors";
    xgrad::generator gen(1);
    const tensor w = xgrad::randn({3, 5}, gen), b = xgrad::randn({5}, gen, dtype::float64);
    const tensor n = from_values(std::vector<std::int64_t>{7}, {}, dtype::int64);
    xgrad::io::save_safetensors(file, {{"w", w}, {"b", b}, {"n", n}}, {{"epoch", "3"}});
    const auto clean = xgrad::io::load_safetensors(file);
    CHECK(clean.checksummed);
    CHECK(clean.metadata == xgrad::io::metadata_map{{"epoch", "3"}}); // the checksums are not the caller's
    CHECK(xgrad::io::read_safetensors_metadata(file) == clean.metadata);

    const bytes_type original = read_bytes(file);
    const std::uint64_t header = [&] {
        std::uint64_t h = 0;
        for (int i = 0; i < 8; ++i)
            h |= std::uint64_t{original[static_cast<std::size_t>(i)]} << (8 * i);
        return h;
    }();
    // Data order is name order: b (40 bytes), n (8), w (60).
    const std::size_t data = 8 + static_cast<std::size_t>(header);
    REQUIRE(original.size() == data + 40 + 8 + 60);
    for (std::size_t at = data; at < original.size(); ++at)
    {
        bytes_type flipped = original;
        flipped[at] = static_cast<unsigned char>(flipped[at] ^ 0x10);
        std::ofstream(file, std::ios::binary | std::ios::trunc)
            .write(reinterpret_cast<const char*>(flipped.data()), static_cast<std::streamsize>(flipped.size()));
        const char* owner = at < data + 40 ? "'b'" : at < data + 48 ? "'n'" : "'w'";
        CHECK_FORMAT_ERROR(xgrad::io::load_safetensors(file), file, owner, "does not match the checksum",
                           "the file is corrupt");
    }
}

TEST_CASE(
    "safetensors: files without checksums load unchecked; partial or stray checksums and reserved keys are refused")
{
    scratch_dir dir;
    const fs::path file = dir / "plain.safetensors";
    const std::string entry = R"({"dtype":"F32","shape":[1],"data_offsets":[0,4]})";
    write_raw(file, R"({"w":)" + entry + "}", std::string(4, '\0'));
    const auto plain = xgrad::io::load_safetensors(file);
    CHECK(!plain.checksummed);
    CHECK(plain.tensors.count("w") == 1);
    const std::string two = R"({"dtype":"F32","shape":[1],"data_offsets":[4,8]})";
    write_raw(file, R"({"__metadata__":{"xgrad.crc32.w":"2144df1c"},"w":)" + entry + R"(,"v":)" + two + "}",
              std::string(8, '\0'));
    CHECK_FORMAT_ERROR(xgrad::io::load_safetensors(file), file, "tensor 'v' has no checksum");
    write_raw(file, R"({"__metadata__":{"xgrad.crc32.w":"2144df1c","xgrad.crc32.x":"00000000"},"w":)" + entry + "}",
              std::string(4, '\0'));
    CHECK_FORMAT_ERROR(xgrad::io::load_safetensors(file), file, "checksum for 'x', which is not a tensor");
    write_raw(file, R"({"__metadata__":{"xgrad.crc32.w":"nothex!!"},"w":)" + entry + "}", std::string(4, '\0'));
    CHECK_FORMAT_ERROR(xgrad::io::load_safetensors(file), file, "'xgrad.crc32.w'", "not a checksum");
    CHECK_FORMAT_ERROR(xgrad::io::save_safetensors(file, {}, {{"xgrad.crc32.w", "0"}}), file, "is reserved");
}
