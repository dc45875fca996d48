// Reading safetensors files and checkpoints from hostile input (xgrad/io/safetensors.hpp): a
// file that is not safetensors at all, duplicate header keys, a FIFO in place of a file, the
// peak memory of a load, and checkpoint counters outside their range.
#include <doctest/doctest.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <string_view>

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "checkpoint_test_helpers.hpp"
#include "child_process.hpp"
#include "xgrad/factories.hpp"
#include "xgrad/io/safetensors.hpp"
#include "xgrad/nn/module.hpp"
#include "xgrad/optim/optimizer.hpp"

namespace fs = std::filesystem;
using xgrad::dtype;
using xgrad::tensor;
using namespace checkpoint_test;

namespace
{
    /// A file of `size` bytes that starts with `head` and is zeros after it (sparse: the
    /// zeros take no disk space and writing them no memory).
    void write_sparse(const fs::path& p, const std::string& head, std::uint64_t size)
    {
        write_bytes(p, head);
        REQUIRE(::truncate(p.c_str(), static_cast<::off_t>(size)) == 0);
    }

    class one_weight : public xgrad::nn::module
    {
    public:
        one_weight() { register_parameter("weight", xgrad::ones({2})); }
        std::string_view type_name() const noexcept override { return "one_weight"; }
    };

    /// The peak resident set size (kB) reached while fn runs, above the resident size before
    /// it; run in a child of its own. "unsupported" when the kernel cannot reset the peak.
    template <class F>
    std::string peak_growth_kb(F fn)
    {
        // Writing 5 to clear_refs resets the peak to the current resident size (Linux >= 4.0),
        // so what the test process did before does not count.
        {
            std::ofstream clear("/proc/self/clear_refs");
            clear << "5";
            clear.flush();
            if (!clear)
                return "unsupported";
        }
        ::rusage before{};
        ::getrusage(RUSAGE_SELF, &before);
        const std::string outcome = fn();
        ::rusage after{};
        ::getrusage(RUSAGE_SELF, &after);
        return std::to_string(after.ru_maxrss - before.ru_maxrss) + " " + outcome;
    }

    /// Loading `file` (in a child of its own) is refused with a format_error containing
    /// `message`, and the load's peak resident size grows by less than 4 MiB.
    void check_refused_within_4_mib(const fs::path& file, const std::string& message)
    {
        const auto r = child_test::run_in_child(
            [&] {
                return peak_growth_kb([&] {
                    try
                    {
                        xgrad::io::load_safetensors(file);
                    }
                    catch (const xgrad::io::format_error& e)
                    {
                        return std::string(e.what());
                    }
                    return std::string("loaded");
                });
            },
            60);
        INFO(child_test::describe(r));
        REQUIRE(r.exited);
        if (r.report != "unsupported")
        {
            const auto space = r.report.find(' ');
            REQUIRE(space != std::string::npos);
            CHECK(std::stol(r.report.substr(0, space)) < 4096);
            CHECK_MESSAGE(r.report.find(message) != std::string::npos, r.report);
        }
    }
}

TEST_CASE("safetensors: a file whose first 8 bytes are no plausible header length is not a safetensors file")
{
    scratch_dir dir;
    const fs::path file = dir / "notes.txt";
    const std::string text = "hello, this is a text file and not a tensor file\n";
    write_bytes(file, text);
    std::uint64_t announced = 0;
    for (int i = 0; i < 8; ++i)
        announced |= std::uint64_t{static_cast<unsigned char>(text[static_cast<std::size_t>(i)])} << (8 * i);
    const std::string length_part = "header length of " + std::to_string(announced) + " bytes";
    const std::string size_part = "the file has " + std::to_string(text.size()) + " bytes";
    CHECK_FORMAT_ERROR(xgrad::io::load_safetensors(file), file, "not a safetensors file", length_part.c_str(),
                       size_part.c_str());

    // Zeros: a header length of 0 leaves no room for the JSON object.
    write_bytes(file, std::string(64, '\0'));
    CHECK_FORMAT_ERROR(xgrad::io::load_safetensors(file), file, "not a safetensors file", "header length of 0");
}

TEST_CASE("safetensors: a header that is not a JSON object is refused as soon as its first bytes are read")
{
    scratch_dir dir;
    const fs::path file = dir / "bad.safetensors";
    // A plausible length (80 MB, under the 100 MB limit, inside the file) over sparse zeros:
    // refused at the first piece of the header, never allocating the 80 MB.
    const std::uint64_t announced = 80'000'000;
    write_sparse(file, length_field(announced), announced + 8);
    check_refused_within_4_mib(file, "not a safetensors file: its header does not start with '{' (found byte 0x00)");
    // A NUL after an opening brace, at its offset.
    write_raw(file, std::string("{\"a\":") + '\0' + "1}", "");
    CHECK_FORMAT_ERROR(xgrad::io::load_safetensors(file), file, "not a safetensors file",
                       "byte 5 of its 8-byte header is 0x00");
    // A number no C++ type holds is invalid JSON here, not an escaping json exception.
    write_raw(file, R"({"__metadata__": {"n": 1e99999}})", "");
    CHECK_FORMAT_ERROR(xgrad::io::load_safetensors(file), file, "header is not valid JSON", "number overflow");
}

TEST_CASE("safetensors: a header with a key twice is refused, naming the key")
{
    scratch_dir dir;
    const fs::path file = dir / "dup.safetensors";
    const auto load = [&] { return xgrad::io::load_safetensors(file); };
    const std::string entry = R"({"dtype":"F32","shape":[1],"data_offsets":[0,4]})";

    // The same tensor twice: the last entry would silently win.
    write_raw(file, R"({"w":)" + entry + R"(,"w":)" + entry + "}", std::string(4, '\0'));
    CHECK_FORMAT_ERROR(load(), file, "duplicate key 'w'");
    // A field twice inside an entry, and a metadata key twice.
    write_raw(file, R"({"w":{"dtype":"F32","dtype":"F16","shape":[1],"data_offsets":[0,4]}})", std::string(4, '\0'));
    CHECK_FORMAT_ERROR(load(), file, "duplicate key 'dtype'", "'w'");
    write_raw(file, R"({"__metadata__":{"epoch":"1","epoch":"2"},"w":)" + entry + "}", std::string(4, '\0'));
    CHECK_FORMAT_ERROR(load(), file, "duplicate key 'epoch'", "'__metadata__'");

    // The same keys in different objects are fine.
    write_raw(file, R"({"__metadata__":{"w":"1"},"w":)" + entry + "}", std::string(4, '\0'));
    CHECK(load().tensors.at("w").shape() == xgrad::shape_type{1});
}

TEST_CASE("safetensors: a file torch.save wrote is named as such, with what to do instead")
{
    scratch_dir dir;
    const fs::path file = dir / "model.pt";
    // torch.save's zip archive (PyTorch 1.6 and later) and its older pickle (protocol 2).
    for (const std::string& start : {std::string("PK\x03\x04\x00\x00\x08\x00", 8), std::string("\x80\x02\x8a\x0a", 4)})
    {
        std::ofstream(file, std::ios::binary) << start << std::string(64, 'x');
        CHECK_FORMAT_ERROR(xgrad::io::load_safetensors(file), file, "as torch.save writes",
                           "safetensors.torch.save_file(model.state_dict(), path)");
    }
}

TEST_CASE("safetensors: the header's nesting and entry count are bounded before it is built")
{
    scratch_dir dir;
    const fs::path file = dir / "deep.safetensors";
    const auto load = [&] { return xgrad::io::load_safetensors(file); };
    // A valid header is 3 deep; 16 levels of arrays in the metadata are refused, 15 are not
    // refused for their depth (the metadata's value being an array is its own error).
    const auto nested = [](int depth) {
        return R"({"__metadata__":)" + std::string(static_cast<std::size_t>(depth), '[') +
               std::string(static_cast<std::size_t>(depth), ']') + "}";
    };
    write_raw(file, nested(15), "");
    CHECK_FORMAT_ERROR(load(), file, "__metadata__");
    write_raw(file, nested(16), "");
    CHECK_FORMAT_ERROR(load(), file, "nests objects and arrays more than 16 deep");
    std::string objects;
    for (int i = 0; i < 100000; ++i)
        objects += R"({"a":)";
    write_raw(file, objects + "1" + std::string(100000, '}'), "");
    CHECK_FORMAT_ERROR(load(), file, "more than 16 deep");
    // One entry more than the limit (2^20), each the smallest a key can be: refused by count.
    std::string many = "{";
    for (std::size_t i = 0; i <= (std::size_t{1} << 20); ++i)
        many += (i ? ",\"" : "\"") + std::to_string(i) + "\":0";
    write_raw(file, many + "}", "");
    CHECK_FORMAT_ERROR(load(), file, "more than 1048576 entries");
}

TEST_CASE("safetensors and checkpoints: a FIFO is refused at once instead of blocking the reader")
{
    scratch_dir dir;
    const fs::path fifo = dir / "ckpt.safetensors";
    REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);

    const auto safetensors = child_test::run_in_child([&] {
        xgrad::io::load_safetensors(fifo);
        return std::string("loaded");
    });
    INFO(child_test::describe(safetensors));
    CHECK(safetensors.exited);
    CHECK(safetensors.report.find("exception: " + fifo.string() + ": not a regular file") == 0);

    const auto checkpoint = child_test::run_in_child([&] {
        one_weight model;
        xgrad::io::load_checkpoint(fifo, model);
        return std::string("loaded");
    });
    INFO(child_test::describe(checkpoint));
    CHECK(checkpoint.exited);
    CHECK(checkpoint.report.find("exception: " + fifo.string() + ": not a regular file") == 0);
}

TEST_CASE("safetensors: a load needs the tensors' memory and a small constant, never a copy of the file")
{
    scratch_dir dir;
    // 64 MiB of tensors in two entries; the data is zeros, so the file is sparse.
    constexpr std::uint64_t half = 32ull << 20;
    std::string header = R"({"a":{"dtype":"F32","shape":[)" + std::to_string(half / 4) + R"(],"data_offsets":[0,)" +
                         std::to_string(half) + R"(]},"b":{"dtype":"F16","shape":[)" + std::to_string(half / 2) +
                         R"(],"data_offsets":[)" + std::to_string(half) + "," + std::to_string(2 * half) + "]}}";
    header.append((8 - header.size() % 8) % 8, ' ');
    const fs::path file = dir / "big.safetensors";
    write_sparse(file, length_field(header.size()) + header, 8 + header.size() + 2 * half);

    const auto r = child_test::run_in_child(
        [&] {
            return peak_growth_kb([&] {
                const auto content = xgrad::io::load_safetensors(file);
                return std::to_string(content.tensors.at("a").numel() + content.tensors.at("b").numel());
            });
        },
        60);
    INFO(child_test::describe(r));
    REQUIRE(r.exited);
    if (r.report == "unsupported")
    {
        MESSAGE("the kernel cannot reset the peak resident size; the peak is not measured");
        return;
    }
    long growth_kb = 0;
    std::string elements;
    {
        const auto space = r.report.find(' ');
        REQUIRE(space != std::string::npos);
        growth_kb = std::stol(r.report.substr(0, space));
        elements = r.report.substr(space + 1);
    }
    CHECK(elements == std::to_string(half / 4 + half / 2));
    const long tensors_kb = static_cast<long>(2 * half / 1024);
    CHECK_MESSAGE(growth_kb <= tensors_kb + tensors_kb / 4 + 8192,
                  "the load's peak grew by " << growth_kb << " kB for " << tensors_kb << " kB of tensors");

    // A large file that is not safetensors (zeros) is refused after reading 8 bytes.
    const fs::path zeros = dir / "zeros.bin";
    write_sparse(zeros, "", 2 * half);
    check_refused_within_4_mib(zeros, "not a safetensors file");
}

TEST_CASE("checkpoint: counters outside their range are refused, naming the file, the field and the range")
{
    scratch_dir dir;
    one_weight model;
    const auto opt = xgrad::optim::make_optimizer("adam", model, 0.1);
    const fs::path good = dir / "good.safetensors";
    xgrad::io::save_checkpoint(good, model, opt.get(), 1);
    const auto content = xgrad::io::load_safetensors(good);
    const fs::path bad = dir / "bad.safetensors";

    // A step counter that the next step would overflow.
    auto tensors = content.tensors;
    const std::int64_t huge = std::numeric_limits<std::int64_t>::max();
    tensors["optimizer.step"] = xgrad::from_host(&huge, {}, dtype::int64);
    xgrad::io::save_safetensors(bad, tensors, content.metadata);
    CHECK_FORMAT_ERROR(xgrad::io::load_checkpoint(bad, model, opt.get()), bad, "'step'", "9223372036854775807",
                       "[0, 9007199254740992]");
    CHECK(opt->step_count() == 0);

    // An epoch beyond what the metrics log counts.
    auto metadata = content.metadata;
    metadata["epoch"] = "9223372036854775807";
    xgrad::io::save_safetensors(bad, content.tensors, metadata);
    CHECK_FORMAT_ERROR(xgrad::io::load_checkpoint(bad, model, opt.get()), bad, "'epoch'", "9223372036854775807",
                       "[0, 2147483647]");
    metadata["epoch"] = "2147483648";
    xgrad::io::save_safetensors(bad, content.tensors, metadata);
    CHECK_FORMAT_ERROR(xgrad::io::load_checkpoint(bad, model, opt.get()), bad, "'epoch'", "2147483648");
    CHECK_FORMAT_ERROR(xgrad::io::save_checkpoint(bad, model, opt.get(), 2147483648), bad, "epoch 2147483648",
                       "[0, 2147483647]");

    // The largest allowed values load.
    metadata["epoch"] = "2147483647";
    const std::int64_t most = std::int64_t{1} << 53;
    tensors["optimizer.step"] = xgrad::from_host(&most, {}, dtype::int64);
    xgrad::io::save_safetensors(bad, tensors, metadata);
    CHECK(xgrad::io::load_checkpoint(bad, model, opt.get()).epoch == 2147483647);
    CHECK(opt->step_count() == most);
}

TEST_CASE("read_safetensors_metadata: the header only, validated as a load validates it")
{
    scratch_dir dir;
    const fs::path file = dir / "m.safetensors";
    xgrad::io::save_safetensors(file, {{"x", xgrad::ones({4})}}, {{"data_format", "NHWC"}});
    CHECK(xgrad::io::read_safetensors_metadata(file) == xgrad::io::metadata_map{{"data_format", "NHWC"}});

    // The layout is checked against the file's size, so a truncated file is refused too.
    const bytes_type bytes = read_bytes(file);
    write_bytes(file, std::string(bytes.begin(), bytes.end() - 4));
    CHECK_FORMAT_ERROR(xgrad::io::read_safetensors_metadata(file), file, "tensor 'x'", "beyond the data region");
    write_raw(file, R"({"__metadata__":{"k":"1","k":"2"}})", "");
    CHECK_FORMAT_ERROR(xgrad::io::read_safetensors_metadata(file), file, "duplicate key 'k'");

    const fs::path fifo = dir / "fifo.safetensors";
    REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
    const auto r = child_test::run_in_child([&] {
        xgrad::io::read_safetensors_metadata(fifo);
        return std::string("read");
    });
    INFO(child_test::describe(r));
    CHECK(r.exited);
    CHECK(r.report.find("exception: " + fifo.string() + ": not a regular file") == 0);
}
