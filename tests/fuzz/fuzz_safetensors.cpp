// Fuzz target: the safetensors reader and the checkpoint loader (xgrad/io/safetensors.hpp).
//
// Input: one selector byte, then the file's bytes, written to a scratch file that is loaded:
//   even selector: load_safetensors;
//   odd selector:  load_checkpoint into a small model (conv2d 1 -> 2, 3x3, and batch_norm2d 2),
//                  with no optimizer, sgd with momentum or adam ((selector & 0x7f) / 2 % 3).
//   selector >= 0x80: the file is followed by 96 MiB of zeros (a sparse file): the reader must
//                  not load it whole (the data region no longer matches the header).
// Expected outcomes: success, io::format_error, io::file_error and std::invalid_argument
// (xgrad::invalid_argument). Checked on success: every tensor's element count times its item
// size fits in the file (a loaded tensor cannot hold more data than the file has), and a
// loaded checkpoint leaves the model's parameters with their shapes.
#include <filesystem>
#include <memory>
#include <string>

#include "tests/fuzz/fuzz_input.hpp"
#include "tests/fuzz/fuzz_temp_file.hpp"
#include "xgrad/io/atomic_file.hpp"
#include "xgrad/io/safetensors.hpp"
#include "xgrad/nn/batch_norm.hpp"
#include "xgrad/nn/conv.hpp"
#include "xgrad/nn/sequential.hpp"
#include "xgrad/optim/optimizer.hpp"

namespace
{
    using namespace xgrad;
    constexpr const char* target = "safetensors";

    void load_plain(const std::filesystem::path& path, std::size_t file_size)
    {
        const io::safetensors_content content = io::load_safetensors(path);
        for (const auto& [name, t] : content.tensors)
        {
            XGRAD_FUZZ_CHECK(target, t.defined(), "tensor " + name + " is undefined");
            const auto n = fuzz::exact_numel(t.shape());
            XGRAD_FUZZ_CHECK(target, n.has_value(), "tensor " + name + " has shape " + fuzz::shape_string(t.shape()));
            XGRAD_FUZZ_CHECK(target, static_cast<unsigned __int128>(*n) * itemsize(t.dtype()) <= file_size,
                             "tensor " + name + " of shape " + fuzz::shape_string(t.shape()) +
                                 " holds more bytes than the file (" + std::to_string(file_size) + ")");
        }
    }

    void load_into_model(const std::filesystem::path& path, unsigned optimizer_kind)
    {
        generator gen(1);
        nn::sequential model;
        model.add("conv", std::make_shared<nn::conv2d>(nn::conv2d_options(1, 2, 3), gen));
        model.add("bn", std::make_shared<nn::batch_norm2d>(2));
        std::unique_ptr<optim::optimizer> opt;
        if (optimizer_kind == 1)
        {
            optim::sgd_options o;
            o.momentum = 0.9;
            opt = std::make_unique<optim::sgd>(model, o);
        }
        else if (optimizer_kind == 2)
            opt = std::make_unique<optim::adam>(model, optim::adam_options{});
        const io::checkpoint_info info = io::load_checkpoint(path, model, opt.get());
        XGRAD_FUZZ_CHECK(target, info.epoch >= 0, "negative epoch " + std::to_string(info.epoch));
        const auto params = model.named_parameters();
        for (const auto& [name, p] : params)
            XGRAD_FUZZ_CHECK(target, p.defined(), "parameter " + name + " undefined after load_checkpoint");
    }
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size)
{
    if (size == 0)
        return 0;
    const std::uint8_t selector = data[0];
    const std::uintmax_t zeros = selector >= 0x80 ? fuzz::big_file_zeros : 0;
    const std::filesystem::path path = fuzz::scratch().write("input.safetensors", data + 1, size - 1, zeros);
    try
    {
        if (selector % 2 == 0)
            load_plain(path, static_cast<std::size_t>(size - 1 + zeros));
        else
            load_into_model(path, ((selector & 0x7f) / 2) % 3);
    }
    catch (const io::format_error&)
    {
    }
    catch (const io::file_error&)
    {
    }
    catch (const std::invalid_argument&)
    {
    }
    return 0;
}
