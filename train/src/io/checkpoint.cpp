// Training checkpoints: a module's parameters and buffers, an optimizer's state and the epoch in
// one safetensors file. The layout is described in xgrad/io/safetensors.hpp.
//
// Loading is all-or-nothing. Every check that can be made on the file alone (metadata, names,
// shapes, dtypes, optimizer type) runs first and reports every problem at once. The optimizer
// state is then loaded (its load_state_dict validates the entries against the parameters and
// changes nothing when it throws), and the model last: after the checks above its
// load_state_dict cannot object, and should it fail anyway the optimizer's previous state is
// put back.
#include <algorithm>
#include <charconv>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include "checkpoint_internal.hpp"
#include "xgrad/errors.hpp"
#include "xgrad/io/safetensors.hpp"

namespace xgrad::io
{
    namespace
    {
        constexpr std::string_view format_name = "xgrad-checkpoint";
        constexpr std::string_view format_version = "2";
        constexpr std::string_view model_prefix = checkpoint_model_prefix;
        constexpr std::string_view optimizer_prefix = checkpoint_optimizer_prefix;
        constexpr std::string_view reserved_keys[] = {"format", "version", "epoch", "optimizer"};

        [[noreturn]] void fail(const std::filesystem::path& path, const std::string& what)
        {
            throw format_error(path.string() + ": " + what);
        }

        std::string describe(const tensor& t)
        {
            return shape_to_string(t.shape()) + " " + std::string(name(t.dtype()));
        }

        std::string epoch_range() { return "[0, " + std::to_string(max_checkpoint_epoch) + "]"; }

        /// The epoch as written by save_checkpoint: decimal digits only, in [0,
        /// max_checkpoint_epoch]. Returns the problem, empty when there is none.
        std::string parse_epoch(const std::string& text, std::int64_t& out)
        {
            const std::string value = "metadata 'epoch' is " + in_quotes(text);
            const bool digits = !text.empty() &&
                                std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; });
            if (!digits)
                return value + ", not a non-negative integer";
            // More digits than int64 holds is out of range too, not malformed.
            const char* end = text.data() + text.size();
            std::int64_t v = 0;
            const auto [ptr, ec] = std::from_chars(text.data(), end, v);
            if (ec != std::errc() || ptr != end || v > max_checkpoint_epoch)
                return value + ", outside the allowed range " + epoch_range();
            out = v;
            return {};
        }

    }

    void check_checkpoint_version(const std::filesystem::path& path, const metadata_map& metadata)
    {
        const auto it = metadata.find("version");
        if (it != metadata.end() && it->second == "1")
            fail(path, "checkpoint version '1' was written by an earlier xgrad, whose batch norm named its parameters "
                       "'scale'/'offset' and whose channels-last flatten ordered features (H, W, C); this build "
                       "reads version " +
                           std::string(format_version) +
                           " (retrain, or rename the tensors and permute the weights "
                           "of the first linear layer after a channels-last flatten)");
        if (it == metadata.end() || it->second != format_version)
            fail(path, "unsupported checkpoint version " +
                           (it != metadata.end() ? in_quotes(it->second) : std::string("(missing)")) +
                           "; this build reads version " + std::string(format_version));
    }

    bool is_checkpoint(const metadata_map& metadata)
    {
        const auto it = metadata.find("format");
        return it != metadata.end() && it->second == format_name;
    }

    void save_checkpoint(const std::filesystem::path& path, const nn::module& model, const optim::optimizer* optimizer,
                         std::int64_t epoch, const metadata_map& extra)
    {
        if (epoch < 0 || epoch > max_checkpoint_epoch)
            fail(path, std::string("cannot save a checkpoint with ") + (epoch < 0 ? "negative " : "") + "epoch " +
                           std::to_string(epoch) + " (the epoch must be in " + epoch_range() + ")");
        metadata_map metadata;
        for (const auto& [key, value] : extra)
        {
            for (const std::string_view reserved : reserved_keys)
                if (key == reserved)
                    fail(path, "metadata key " + in_quotes(key) + " is reserved for the checkpoint itself");
            metadata.emplace(key, value);
        }
        metadata["format"] = std::string(format_name);
        metadata["version"] = std::string(format_version);
        metadata["epoch"] = std::to_string(epoch);

        tensor_map tensors;
        for (const auto& [name, t] : model.state_dict())
            tensors.emplace(std::string(model_prefix) + name, t);
        if (optimizer)
        {
            metadata["optimizer"] = std::string(optimizer->type_name());
            for (const auto& [name, t] : optimizer->state_dict())
                tensors.emplace(std::string(optimizer_prefix) + name, t);
        }
        save_safetensors(path, tensors, metadata);
    }

    checkpoint_info load_checkpoint(const std::filesystem::path& path, nn::module& model, optim::optimizer* optimizer)
    {
        safetensors_content content = load_safetensors(path);
        const metadata_map& metadata = content.metadata;
        const auto meta = [&](const char* key) -> const std::string* {
            const auto it = metadata.find(key);
            return it == metadata.end() ? nullptr : &it->second;
        };

        // Without the right format tag nothing else in the file means what this code expects.
        const std::string* format = meta("format");
        if (!format || *format != format_name)
            fail(path, "not an xgrad checkpoint (metadata 'format' is " +
                           (format ? in_quotes(*format) : std::string("missing")) + ", expected " +
                           in_quotes(format_name) + ")");
        check_checkpoint_version(path, metadata);

        std::vector<std::string> problems;
        checkpoint_info info;
        info.metadata = metadata;
        const std::string* epoch = meta("epoch");
        if (!epoch)
            problems.push_back("metadata 'epoch' is missing");
        else if (std::string problem = parse_epoch(*epoch, info.epoch); !problem.empty())
            problems.push_back(std::move(problem));

        // Model: the same names, shapes and dtypes as the module's own tensors.
        const nn::module::state_dict_type current = model.state_dict();
        nn::module::state_dict_type model_state;
        std::vector<std::string> missing, unexpected;
        for (const auto& [name, t] : current)
        {
            const auto it = content.tensors.find(std::string(model_prefix) + name);
            if (it == content.tensors.end())
                missing.push_back(std::string(model_prefix) + name);
            else if (it->second.shape() != t.shape() || it->second.dtype() != t.dtype())
                problems.push_back("model tensor " + in_quotes(it->first) + " is " + describe(it->second) +
                                   ", the model's is " + describe(t));
            else
                model_state.emplace(name, it->second);
        }

        // Optimizer: the type must match; its entries are checked by load_state_dict below.
        const std::string* optimizer_type = meta("optimizer");
        if (optimizer)
        {
            if (!optimizer_type)
                problems.push_back("the checkpoint holds no optimizer state, the optimizer is " +
                                   in_quotes(optimizer->type_name()));
            else if (*optimizer_type != optimizer->type_name())
                problems.push_back("optimizer type mismatch: the checkpoint's is " + in_quotes(*optimizer_type) +
                                   ", the optimizer is " + in_quotes(optimizer->type_name()));
        }
        optim::optimizer::state_dict_type optimizer_state;
        for (const auto& [name, t] : content.tensors)
        {
            if (starts_with(name, model_prefix))
            {
                if (current.find(name.substr(model_prefix.size())) == current.end())
                    unexpected.push_back(name);
            }
            else if (starts_with(name, optimizer_prefix) && optimizer_type)
                optimizer_state.emplace(name.substr(optimizer_prefix.size()), t);
            else
                problems.push_back("unexpected tensor " + in_quotes(name) +
                                   " (neither a model tensor nor optimizer state)");
        }
        const std::vector<std::string> names = name_problems(missing, unexpected, model_prefix);
        problems.insert(problems.begin(), names.begin(), names.end());
        if (!problems.empty())
            fail(path, join_problems(problems));

        // Tensors go to the device of the value they replace: model tensors to their slot's,
        // per-parameter optimizer buffers ("<parameter>.<buffer>") to their parameter's; the
        // rest (the step counter) stays on the host.
        for (auto& [name, t] : model_state)
            t = t.to(current.at(name).device());
        for (auto& [name, t] : optimizer_state)
        {
            const auto dot = name.rfind('.');
            if (dot == std::string::npos)
                continue;
            const auto owner = current.find(name.substr(0, dot));
            if (owner != current.end())
                t = t.to(owner->second.device());
        }

        optim::optimizer::state_dict_type previous;
        if (optimizer)
        {
            previous = optimizer->state_dict();
            try
            {
                optimizer->load_state_dict(optimizer_state);
            }
            catch (const std::invalid_argument& e)
            {
                fail(path, std::string("bad optimizer state: ") + e.what());
            }
        }
        try
        {
            model.load_state_dict(model_state);
        }
        catch (const std::exception& e)
        {
            if (optimizer)
                optimizer->load_state_dict(previous);
            fail(path, std::string("cannot load the model: ") + e.what());
        }
        return info;
    }

    namespace
    {
        /// The longest prefix ending in '.' that every name shares ("" for none).
        std::string shared_prefix(const std::vector<std::string>& names)
        {
            if (names.empty())
                return {};
            std::string p = names.front();
            for (const auto& n : names)
                p.resize(std::mismatch(p.begin(), p.end(), n.begin(), n.end()).first - p.begin());
            const auto dot = p.rfind('.');
            return dot == std::string::npos ? std::string() : p.substr(0, dot + 1);
        }

        /// "'a', 'b', 'c' and 15 more"
        std::string first_names(const std::vector<std::string>& names)
        {
            constexpr std::size_t shown = 3;
            std::string s;
            for (std::size_t i = 0; i < names.size() && i < shown; ++i)
                s += (i ? ", " : "") + in_quotes(names[i]);
            if (names.size() > shown)
                s += " and " + std::to_string(names.size() - shown) + " more";
            return s;
        }

        std::string summary(std::size_t count, const char* what, const std::vector<std::string>& names)
        {
            const std::string prefix = shared_prefix(names);
            return std::to_string(count) + " " + what + " (" + first_names(names) +
                   (prefix.empty() ? "" : "; all under " + in_quotes(prefix)) + ")";
        }

        /// The prefix p such that every name of `longer` is p + a name of `shorter`, or "".
        std::string explaining_prefix(const std::vector<std::string>& longer, const std::vector<std::string>& shorter)
        {
            if (longer.empty() || longer.size() != shorter.size())
                return {};
            std::string p;
            for (const auto& l : longer)
            {
                const auto it = std::find_if(shorter.begin(), shorter.end(), [&l](const std::string& s) {
                    return l.size() > s.size() && l.compare(l.size() - s.size(), s.size(), s) == 0;
                });
                if (it == shorter.end())
                    return {};
                const std::string candidate = l.substr(0, l.size() - it->size());
                if (!p.empty() && candidate != p)
                    return {};
                p = candidate;
            }
            return p;
        }
    }

    std::vector<std::string> name_problems(const std::vector<std::string>& missing,
                                           const std::vector<std::string>& unexpected, std::string_view file_prefix)
    {
        std::vector<std::string> out;
        if (missing.size() + unexpected.size() <= 6)
        {
            for (const auto& n : missing)
                out.push_back("model tensor " + in_quotes(n) + " is missing");
            for (const auto& n : unexpected)
                out.push_back("unexpected tensor " + in_quotes(n) + ": the model has no " +
                              in_quotes(starts_with(n, file_prefix) ? n.substr(file_prefix.size()) : n));
        }
        else
        {
            if (!missing.empty())
                out.push_back(summary(missing.size(), "model tensors are missing from the file", missing));
            if (!unexpected.empty())
                out.push_back(summary(unexpected.size(), "tensors of the file are not the model's", unexpected));
        }
        if (const std::string p = explaining_prefix(unexpected, missing); !p.empty())
            out.push_back("every unexpected name is a missing one with " + in_quotes(p) +
                          " in front: strip that prefix (load_weights_options::strip_prefix, --strip-prefix " + p +
                          ")");
        else if (const std::string q = explaining_prefix(missing, unexpected); !q.empty())
            out.push_back("every missing name is an unexpected one with " + in_quotes(q) +
                          " in front: the model's names carry a prefix the file's lack (is the model wrapped in "
                          "another module?)");
        return out;
    }
}
