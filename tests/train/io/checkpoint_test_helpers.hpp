#pragma once
// Shared by the safetensors and checkpoint tests (tests/train/io/test_checkpoint_safetensors.cpp and
// tests/train/io/test_checkpoint_checkpoints.cpp, one ctest executable test_checkpoint): the
// CHECK_FORMAT_ERROR macro, a scratch folder, raw file bytes, and the comparison of two
// tensors' shapes, dtypes and bytes.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <system_error>
#include <vector>

#include <unistd.h>

#include "xgrad/dtype.hpp"
#include "xgrad/factories.hpp"
#include "xgrad/io/safetensors.hpp"
#include "xgrad/tensor.hpp"

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

namespace checkpoint_test
{
    namespace fs = std::filesystem;
    using xgrad::dtype;
    using xgrad::tensor;

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

    inline bytes_type read_bytes(const fs::path& p)
    {
        std::ifstream in(p, std::ios::binary);
        REQUIRE(in);
        return bytes_type(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    }

    inline void write_bytes(const fs::path& p, const std::string& bytes)
    {
        std::ofstream out(p, std::ios::binary | std::ios::trunc);
        out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
        REQUIRE(out);
    }

    /// The 8-byte little-endian length field of a safetensors file, written out byte by byte.
    inline std::string length_field(std::uint64_t n)
    {
        std::string s;
        for (int i = 0; i < 8; ++i)
            s += static_cast<char>((n >> (8 * i)) & 0xff);
        return s;
    }

    /// A safetensors file from a header text and data bytes (no padding added).
    inline void write_raw(const fs::path& p, const std::string& header, const std::string& data)
    {
        write_bytes(p, length_field(header.size()) + header + data);
    }

    /// The tensor's elements, row-major, as raw bytes of its own dtype.
    inline bytes_type bytes_of(const tensor& t)
    {
        bytes_type out(static_cast<std::size_t>(t.numel()) * xgrad::itemsize(t.dtype()));
        xgrad::to_host(t, out.data(), t.dtype());
        return out;
    }

    inline void check_same_tensor(const std::string& name, const tensor& expected, const tensor& actual)
    {
        INFO("tensor ", name);
        REQUIRE(actual.defined());
        CHECK(actual.shape() == expected.shape());
        CHECK(actual.dtype() == expected.dtype());
        CHECK(actual.device() == xgrad::cpu_device);
        CHECK(bytes_of(actual) == bytes_of(expected));
    }
}
