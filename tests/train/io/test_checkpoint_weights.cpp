// Weights from files other frameworks write (xgrad::io::load_weights), the safetensors dtypes
// xgrad has no dtype of its own for (widened on load), and the layout independence of a
// checkpoint: a model trained channels-last gives the same logits when its checkpoint is loaded
// into the channels-first model. Same executable as the other checkpoint tests
// (test_checkpoint).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "checkpoint_test_helpers.hpp"
#include "xgrad/factories.hpp"
#include "xgrad/io/safetensors.hpp"
#include "xgrad/layers.hpp"
#include "xgrad/ops/elementwise.hpp"
#include "xgrad/ops/loss.hpp"
#include "xgrad/ops/reduce.hpp"
#include "xgrad/ops/shape.hpp"

namespace fs = std::filesystem;
using xgrad::dtype;
using xgrad::tensor;
using namespace checkpoint_test;
namespace nn = xgrad::nn;

namespace
{
    /// conv -> batch norm -> relu -> pool -> flatten -> linear, in either layout; the shape of
    /// the example's model, small.
    std::shared_ptr<nn::sequential> small_cnn(const std::string& format, std::uint64_t seed)
    {
        xgrad::generator gen(seed);
        auto m = std::make_shared<nn::sequential>();
        nn::conv2d_options c(2, 3, 3);
        c.padding = {1, 1};
        c.data_format = format;
        m->add("conv1", std::make_shared<nn::conv2d>(c, gen));
        nn::batch_norm_options b(3);
        b.data_format = format;
        m->add("bn1", std::make_shared<nn::batch_norm2d>(b));
        m->add("relu1", std::make_shared<nn::relu>());
        m->add("pool1", std::make_shared<nn::max_pool2d>(2, format));
        m->add("flatten", std::make_shared<nn::flatten>(1, -1, format));
        m->add("fc", std::make_shared<nn::linear>(3 * 3 * 3, 4, gen));
        return m;
    }

    std::vector<double> values(const tensor& t) { return xgrad::to_vector(t); }

    void check_close(const std::vector<double>& a, const std::vector<double>& b, double tol)
    {
        REQUIRE(a.size() == b.size());
        for (std::size_t i = 0; i < a.size(); ++i)
            CHECK_MESSAGE(std::abs(a[i] - b[i]) <= tol, "element " << i << ": " << a[i] << " vs " << b[i]);
    }
}

TEST_CASE("safetensors: every dtype of the format is read, widened to the xgrad dtype that holds it exactly")
{
    scratch_dir dir;
    const fs::path file = dir / "dtypes.safetensors";
    // Little-endian bytes, entries in offset order.
    const std::string data = std::string("\x80\x7f", 2) +                         // I8: -128, 127
                             std::string("\x00\x80\xff\x7f", 4) +                 // I16: -32768, 32767
                             std::string("\xff\xff\xff\xff", 4) +                 // I32: -1
                             std::string("\x00\xff", 2) +                         // U8: 0, 255
                             std::string("\xff\xff", 2) +                         // U16: 65535
                             std::string("\xff\xff\xff\xff", 4) +                 // U32: 4294967295
                             std::string("\xff\xff\xff\xff\xff\xff\xff\x7f", 8) + // U64: 2^63 - 1
                             std::string("\x01\x00", 2) +                         // BOOL: true, false
                             std::string("\x38\xc0\x7e\x7f\x01", 5) +             // F8_E4M3
                             std::string("\x3c\xc0\x7c\x7f\x01", 5);              // F8_E5M2
    const std::string header = R"({"i8":{"dtype":"I8","shape":[2],"data_offsets":[0,2]},)"
                               R"("i16":{"dtype":"I16","shape":[2],"data_offsets":[2,6]},)"
                               R"("i32":{"dtype":"I32","shape":[],"data_offsets":[6,10]},)"
                               R"("u8":{"dtype":"U8","shape":[2],"data_offsets":[10,12]},)"
                               R"("u16":{"dtype":"U16","shape":[1],"data_offsets":[12,14]},)"
                               R"("u32":{"dtype":"U32","shape":[1],"data_offsets":[14,18]},)"
                               R"("u64":{"dtype":"U64","shape":[1],"data_offsets":[18,26]},)"
                               R"("b":{"dtype":"BOOL","shape":[2],"data_offsets":[26,28]},)"
                               R"("e4m3":{"dtype":"F8_E4M3","shape":[5],"data_offsets":[28,33]},)"
                               R"("e5m2":{"dtype":"F8_E5M2","shape":[5],"data_offsets":[33,38]}})";
    write_raw(file, header, data);
    const auto loaded = xgrad::io::load_safetensors(file);
    const auto& t = loaded.tensors;
    for (const char* name : {"i8", "i16", "i32", "u8", "u16", "u32", "u64", "b"})
        CHECK_MESSAGE(t.at(name).dtype() == dtype::int64, name);
    CHECK(values(t.at("i8")) == std::vector<double>{-128, 127});
    CHECK(values(t.at("i16")) == std::vector<double>{-32768, 32767});
    CHECK(t.at("i32").shape().empty());
    CHECK(values(t.at("i32")) == std::vector<double>{-1});
    CHECK(values(t.at("u8")) == std::vector<double>{0, 255});
    CHECK(values(t.at("u16")) == std::vector<double>{65535});
    CHECK(values(t.at("u32")) == std::vector<double>{4294967295.0});
    std::int64_t u64 = 0;
    xgrad::to_host(t.at("u64"), &u64, dtype::int64);
    CHECK(u64 == std::numeric_limits<std::int64_t>::max());
    CHECK(values(t.at("b")) == std::vector<double>{1, 0});

    // E4M3 (bias 7, no infinities): 0x38 = 1, 0xc0 = -2, 0x7e = 448 (the largest), 0x7f = NaN,
    // 0x01 = 2^-9 (the smallest subnormal).
    CHECK(t.at("e4m3").dtype() == dtype::float32);
    const auto e4 = values(t.at("e4m3"));
    CHECK(e4[0] == 1.0);
    CHECK(e4[1] == -2.0);
    CHECK(e4[2] == 448.0);
    CHECK(std::isnan(e4[3]));
    CHECK(e4[4] == std::ldexp(1.0, -9));
    // E5M2 (bias 15, IEEE specials): 0x3c = 1, 0xc0 = -2, 0x7c = +inf, 0x7f = NaN, 0x01 = 2^-16.
    const auto e5 = values(t.at("e5m2"));
    CHECK(e5[0] == 1.0);
    CHECK(e5[1] == -2.0);
    CHECK(std::isinf(e5[2]));
    CHECK(e5[2] > 0);
    CHECK(std::isnan(e5[3]));
    CHECK(e5[4] == std::ldexp(1.0, -16));

    // Values with no int64: refused, naming the tensor and the element.
    write_raw(file, R"({"u":{"dtype":"U64","shape":[2],"data_offsets":[0,16]}})",
              std::string(8, '\0') + std::string("\x00\x00\x00\x00\x00\x00\x00\x80", 8));
    CHECK_FORMAT_ERROR(xgrad::io::load_safetensors(file), file, "tensor 'u'", "element 1", "U64", "2^63 - 1");
    write_raw(file, R"({"m":{"dtype":"BOOL","shape":[3],"data_offsets":[0,3]}})", std::string("\x01\x00\x02", 3));
    CHECK_FORMAT_ERROR(xgrad::io::load_safetensors(file), file, "tensor 'm'", "element 2", "BOOL", "0 or 1");
    // The stored size is the stored dtype's: 2 bytes of I8 are two elements, not a quarter of one.
    write_raw(file, R"({"s":{"dtype":"I16","shape":[2],"data_offsets":[0,8]}})", std::string(8, '\0'));
    CHECK_FORMAT_ERROR(xgrad::io::load_safetensors(file), file, "tensor 's'", "spans 8 bytes", "needs 4");
}

TEST_CASE("load_weights: a state dict written by another framework, cast to the model's dtypes")
{
    scratch_dir dir;
    const fs::path file = dir / "foreign.safetensors";
    auto source = small_cnn("NCHW", 1);
    // What PyTorch's safetensors.torch.save_file(model.half().state_dict()) would hold, with
    // no metadata, no prefix, 16-bit floats (the counter stays int64).
    xgrad::io::tensor_map foreign;
    for (const auto& [name, t] : source->state_dict())
        foreign[name] = name == "bn1.num_batches_tracked" ? t : t.to(dtype::float16);
    xgrad::io::save_safetensors(file, foreign);

    auto target = small_cnn("NCHW", 2);
    const auto result = xgrad::io::load_weights(file, *target);
    CHECK(result.missing_keys.empty());
    CHECK(result.unexpected_keys.empty());
    CHECK(result.converted.size() == source->state_dict().size() - 1);
    CHECK(std::find(result.converted.begin(), result.converted.end(), "fc.weight: float16 -> float32") !=
          result.converted.end());
    for (const auto& entry : target->state_dict())
    {
        const auto& name = entry.first;
        const auto& t = entry.second;
        INFO(name);
        CHECK(t.dtype() == source->state_dict().at(name).dtype());
        CHECK(values(t) == values(foreign.at(name).to(t.dtype())));
    }
    // The loaded parameters are the module's: trainable leaves.
    CHECK(target->parameter("fc.weight").requires_grad());
}

TEST_CASE("load_weights: an xgrad checkpoint's model part; prefixes; non-strict loading")
{
    scratch_dir dir;
    const fs::path file = dir / "ckpt.safetensors";
    auto source = small_cnn("NCHW", 3);
    const auto opt = xgrad::optim::make_optimizer("sgd", *source, 0.1);
    xgrad::io::save_checkpoint(file, *source, opt.get(), 1);
    auto target = small_cnn("NCHW", 4);
    const auto result = xgrad::io::load_weights(file, *target);
    CHECK(result.converted.empty());
    CHECK(result.metadata.at("format") == "xgrad-checkpoint");
    for (const auto& [name, t] : target->state_dict())
        CHECK(bytes_of(t) == bytes_of(source->state_dict().at(name)));

    // A prefix to strip, as DistributedDataParallel's "module.".
    const fs::path ddp = dir / "ddp.safetensors";
    xgrad::io::tensor_map prefixed;
    for (const auto& [name, t] : source->state_dict())
        prefixed["module." + name] = t;
    xgrad::io::save_safetensors(ddp, prefixed);
    // Nine names each way: summarised, with the prefix that explains them.
    CHECK_FORMAT_ERROR(xgrad::io::load_weights(ddp, *target), ddp,
                       "9 model tensors are missing from the file ('bn1.bias', 'bn1.num_batches_tracked', "
                       "'bn1.running_mean' and 6 more)",
                       "9 tensors of the file are not the model's ('module.bn1.bias', "
                       "'module.bn1.num_batches_tracked', 'module.bn1.running_mean' and 6 more; all under "
                       "'module.')",
                       "every unexpected name is a missing one with 'module.' in front: strip that prefix",
                       "--strip-prefix module.");
    xgrad::io::load_weights_options strip;
    strip.strip_prefix = "module.";
    CHECK(xgrad::io::load_weights(ddp, *target, strip).missing_keys.empty());

    // Non-strict: a backbone without its head, and an extra tensor, are reported and the rest
    // loaded.
    const fs::path partial = dir / "partial.safetensors";
    xgrad::io::tensor_map backbone;
    for (const auto& [name, t] : small_cnn("NCHW", 5)->state_dict())
        if (name.rfind("fc.", 0) != 0)
            backbone[name] = t;
    backbone["head.weight"] = xgrad::zeros({2});
    xgrad::io::save_safetensors(partial, backbone);
    xgrad::io::load_weights_options loose;
    loose.strict = false;
    const tensor head_before = target->parameter("fc.weight");
    const auto r = xgrad::io::load_weights(partial, *target, loose);
    CHECK(r.missing_keys == std::vector<std::string>{"fc.bias", "fc.weight"});
    CHECK(r.unexpected_keys == std::vector<std::string>{"head.weight"});
    CHECK(bytes_of(target->parameter("fc.weight")) == bytes_of(head_before));
    CHECK(bytes_of(target->parameter("conv1.weight")) == bytes_of(backbone.at("conv1.weight")));
}

TEST_CASE("load_weights: every problem is listed at once and the model is left unchanged")
{
    scratch_dir dir;
    const fs::path file = dir / "bad.safetensors";
    auto model = small_cnn("NCHW", 6);
    const auto before = model->state_dict();
    xgrad::io::tensor_map bad;
    for (const auto& [name, t] : small_cnn("NCHW", 7)->state_dict())
        bad[name] = t;
    bad["fc.weight"] = xgrad::zeros({4, 17});
    bad["bn1.num_batches_tracked"] = xgrad::full({}, 2.5);
    bad.erase("conv1.bias");
    bad["extra"] = xgrad::zeros({1});
    xgrad::io::save_safetensors(file, bad);
    CHECK_FORMAT_ERROR(xgrad::io::load_weights(file, *model), file, "'fc.weight' has shape [4, 17]",
                       "the model's is [4, 27]", "'bn1.num_batches_tracked' cannot be cast float32 -> int64",
                       "element 0 is 2.5", "'conv1.bias' is missing", "unexpected tensor 'extra'");
    for (const auto& entry : model->state_dict())
    {
        const auto& name = entry.first;
        const auto& t = entry.second;
        CHECK_MESSAGE(bytes_of(t) == bytes_of(before.at(name)), name);
    }

    // A whole-number float count is an exact int64.
    bad = {};
    for (const auto& [name, t] : small_cnn("NCHW", 7)->state_dict())
        bad[name] = t;
    bad["bn1.num_batches_tracked"] = xgrad::full({}, 12.0, dtype::float64);
    xgrad::io::save_safetensors(file, bad);
    xgrad::io::load_weights(file, *model);
    CHECK(model->buffer("bn1.num_batches_tracked").item<std::int64_t>() == 12);

    // A version-1 checkpoint is refused with the reason.
    xgrad::io::save_safetensors(file, {}, {{"format", "xgrad-checkpoint"}, {"version", "1"}, {"epoch", "0"}});
    CHECK_FORMAT_ERROR(xgrad::io::load_weights(file, *model), file, "version '1'", "'scale'/'offset'");
    // Not a safetensors file at all.
    write_bytes(file, "PK\x03\x04 this is a zip archive, not safetensors");
    CHECK_FORMAT_ERROR(xgrad::io::load_weights(file, *model), file, "not a safetensors file");
}

TEST_CASE("checkpoint: a model trained channels-last loads into the channels-first model with the same logits")
{
    // The flatten orders features (C, H, W) in both layouts, so the linear layer's weights mean
    // the same thing in both; before, an NHWC checkpoint loaded into an NCHW model silently
    // scrambled the first linear layer (10% accuracy instead of 83% on Fashion-MNIST).
    scratch_dir dir;
    const fs::path file = dir / "nhwc.safetensors";
    auto nhwc = small_cnn("NHWC", 8);
    // A few training steps, so the batch-norm statistics and every weight are not the initial ones.
    xgrad::generator gen(9);
    const tensor x_nchw = xgrad::randn({4, 2, 6, 6}, gen);
    const tensor x_nhwc = x_nchw.permute({0, 2, 3, 1}).contiguous();
    const std::vector<std::int64_t> labels{0, 1, 2, 3};
    const tensor y = xgrad::from_host(labels.data(), {4}, dtype::int64);
    const auto opt = xgrad::optim::make_optimizer("sgd", *nhwc, 0.05);
    for (int step = 0; step < 3; ++step)
    {
        opt->zero_grad();
        xgrad::cross_entropy((*nhwc)(x_nhwc), y).backward();
        opt->step();
    }
    xgrad::io::save_checkpoint(file, *nhwc, nullptr, 1);

    auto nchw = small_cnn("NCHW", 10);
    xgrad::io::load_checkpoint(file, *nchw);
    nhwc->eval();
    nchw->eval();
    // Float32 convolutions in two layouts sum in different orders: a few ulps of values of
    // order 1 apart.
    check_close(values((*nchw)(x_nchw)), values((*nhwc)(x_nhwc)), 1e-5);
}

TEST_CASE("load_weights: a state dict without num_batches_tracked loads, keeping the counter, as in PyTorch")
{
    scratch_dir dir;
    const fs::path file = dir / "no_counter.safetensors";
    auto source = small_cnn("NCHW", 8);
    xgrad::io::tensor_map state;
    for (const auto& [name, t] : source->state_dict())
        if (name != "bn1.num_batches_tracked")
            state[name] = t;
    xgrad::io::save_safetensors(file, state);
    auto target = small_cnn("NCHW", 9);
    const tensor counter = target->buffer("bn1.num_batches_tracked");
    const auto r = xgrad::io::load_weights(file, *target);
    CHECK(r.kept == std::vector<std::string>{"bn1.num_batches_tracked"});
    CHECK(target->buffer("bn1.num_batches_tracked").is_same(counter));
    CHECK(bytes_of(target->buffer("bn1.running_mean")) == bytes_of(state.at("bn1.running_mean")));

    // Another model entirely: one message of bounded length that still names the first few.
    const fs::path other = dir / "other.safetensors";
    xgrad::io::tensor_map many;
    for (int i = 0; i < 200; ++i)
        many["encoder.layer" + std::to_string(i) + ".weight"] = xgrad::zeros({1});
    xgrad::io::save_safetensors(other, many);
    try
    {
        (void)xgrad::io::load_weights(other, *target);
        FAIL("no error");
    }
    catch (const xgrad::io::format_error& e)
    {
        const std::string msg = e.what();
        CHECK(msg.size() < 600);
        CHECK(msg.find("200 tensors of the file are not the model's ('encoder.layer0.weight', "
                       "'encoder.layer1.weight', 'encoder.layer10.weight' and 197 more; all under 'encoder.')") !=
              std::string::npos);
        CHECK(msg.find("8 model tensors are missing") != std::string::npos);
    }
}

TEST_CASE("load_weights: two names of the file that load as one are refused, naming both")
{
    scratch_dir dir;
    auto source = small_cnn("NCHW", 10);
    // A checkpoint (names under "model.") that also holds a plain "fc.bias": before, one of the
    // two was dropped silently.
    const fs::path file = dir / "both.safetensors";
    const auto opt = xgrad::optim::make_optimizer("sgd", *source, 0.1);
    xgrad::io::save_checkpoint(file, *source, opt.get(), 1);
    auto content = xgrad::io::load_safetensors(file);
    content.tensors["fc.bias"] = xgrad::zeros({4});
    xgrad::io::save_safetensors(file, content.tensors, content.metadata);
    auto target = small_cnn("NCHW", 11);
    CHECK_FORMAT_ERROR(xgrad::io::load_weights(file, *target), file,
                       "tensors 'fc.bias' and 'model.fc.bias' both load as 'fc.bias'");
    // The same with a stripped prefix.
    const fs::path ddp = dir / "ddp.safetensors";
    xgrad::io::tensor_map prefixed;
    for (const auto& [name, t] : source->state_dict())
        prefixed["module." + name] = t;
    prefixed["conv1.weight"] = source->state_dict().at("conv1.weight");
    xgrad::io::save_safetensors(ddp, prefixed);
    xgrad::io::load_weights_options strip;
    strip.strip_prefix = "module.";
    CHECK_FORMAT_ERROR(xgrad::io::load_weights(ddp, *target, strip), ddp,
                       "tensors 'conv1.weight' and 'module.conv1.weight' both load as 'conv1.weight'");
}

TEST_CASE("load_weights: says whether the file's checksums were verified")
{
    scratch_dir dir;
    xgrad::generator gen(12);
    nn::linear fc(1, 1, gen);
    // Another writer's file: no checksums, loaded unchecked (and said so).
    const fs::path foreign = dir / "foreign.safetensors";
    write_raw(foreign,
              R"({"bias":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
              R"("weight":{"dtype":"F32","shape":[1,1],"data_offsets":[4,8]}})",
              std::string("\x00\x00\x80\x3f\x00\x00\x00\x40", 8)); // 1.0f, 2.0f
    const auto unchecked = xgrad::io::load_weights(foreign, fc);
    CHECK(!unchecked.checksummed);
    CHECK(xgrad::to_vector(fc.weight()) == std::vector<double>{2.0});
    // xgrad's own file: verified.
    const fs::path own = dir / "own.safetensors";
    xgrad::io::save_safetensors(own, {{"weight", fc.weight()}, {"bias", fc.bias()}});
    CHECK(xgrad::io::load_weights(own, fc).checksummed);
}
