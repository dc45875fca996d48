// Training checkpoints (xgrad::io::save_checkpoint / load_checkpoint): a module with an
// optimizer round-trips with its epoch and metadata and training continues identically; a
// checkpoint without an optimizer; bad save arguments; and every refused load leaving the
// model and the optimizer as they were. The safetensors format under them is tested in
// test_checkpoint_safetensors.cpp (same executable, test_checkpoint).
#include <doctest/doctest.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "checkpoint_test_helpers.hpp"
#include "xgrad/factories.hpp"
#include "xgrad/io/safetensors.hpp"
#include "xgrad/nn/batch_norm.hpp"
#include "xgrad/ops/elementwise.hpp"
#include "xgrad/ops/reduce.hpp"
#include "xgrad/optim/optimizer.hpp"

namespace fs = std::filesystem;
using xgrad::dtype;
using xgrad::tensor;
using namespace checkpoint_test;

namespace
{
    /// Everything that identifies a set of tensors: names, shapes, dtypes and bytes.
    using tensor_record = std::tuple<xgrad::shape_type, dtype, bytes_type>;

    std::map<std::string, tensor_record> snapshot(const std::map<std::string, tensor>& tensors)
    {
        std::map<std::string, tensor_record> out;
        for (const auto& [name, t] : tensors)
            out.emplace(name, tensor_record{t.shape(), t.dtype(), bytes_of(t)});
        return out;
    }

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
            return xgrad::sum(w * w) + xgrad::sum(b * b * b) + xgrad::sum((*m_bn)(x)*weights);
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
                                                      {"version", "2"},
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
        write(content.tensors, metadata_with("version", "3"));
        CHECK_FORMAT_ERROR(load(), bad, "unsupported checkpoint version '3'");
        // Version 1 named batch norm's parameters and ordered channels-last features
        // differently: refused with a message that says so, not loaded into wrong places.
        write(content.tensors, metadata_with("version", "1"));
        CHECK_FORMAT_ERROR(load(), bad, "checkpoint version '1'", "'scale'/'offset'", "(H, W, C)");
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
        write(with_tensor(content.tensors, "optimizer.weight.momentum_buffer", xgrad::zeros({5})), content.metadata);
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
        CHECK_FORMAT_ERROR(load(), bad, "not a safetensors file", "but the file has 20 bytes");
    }
    unchanged();

    // The intact file still loads into the same model and optimizer afterwards.
    CHECK(xgrad::io::load_checkpoint(good, b, opt_b.get()).epoch == 3);
    CHECK(snapshot(b.state_dict()) == snapshot(a.state_dict()));
    CHECK(snapshot(opt_b->state_dict()) == snapshot(opt_a->state_dict()));
}
