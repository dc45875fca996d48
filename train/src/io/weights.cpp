// Weights from any safetensors file: an xgrad checkpoint's model part, or a state_dict PyTorch
// saved (see load_weights in xgrad/io/safetensors.hpp).
//
// Like load_checkpoint, loading is all-or-nothing: every name, shape and cast is checked and
// every converted tensor made before module::load_state_dict replaces anything, and every
// problem is reported at once, since a user mapping a model from another framework wants the
// whole list, not one rerun per problem.
#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "checkpoint_internal.hpp"
#include "xgrad/factories.hpp"
#include "xgrad/io/safetensors.hpp"

namespace xgrad::io
{
    namespace
    {
        /// Why `t` (floating) cannot become int64 exactly, or empty: the first element that is
        /// not an integer in int64's range. num_batches_tracked is the one int64 tensor a
        /// module usually has, and a file may hold it as a float count.
        std::string integral_problem(const tensor& t)
        {
            const std::vector<double> values = to_vector(t);
            // 2^63 is exactly representable; every double below it with no fraction fits.
            constexpr double limit = 9223372036854775808.0;
            for (std::size_t i = 0; i < values.size(); ++i)
            {
                const double v = values[i];
                if (!(std::floor(v) == v && v >= -limit && v < limit))
                    return "element " + std::to_string(i) + " is " + std::to_string(v) +
                           ", not an integer in int64's range";
            }
            return {};
        }
    }

    load_weights_result load_weights(const std::filesystem::path& path, nn::module& model,
                                     const load_weights_options& options)
    {
        safetensors_content content = load_safetensors(path);
        load_weights_result result;
        result.metadata = content.metadata;
        result.checksummed = content.checksummed;
        const bool checkpoint = is_checkpoint(content.metadata);
        if (checkpoint)
            check_checkpoint_version(path, content.metadata);

        // The file's names, as the module would call them. Two that become one name (a file
        // holding both "model.fc.weight" and "fc.weight", or "module.x" and "x" with that
        // prefix stripped) are an error: keeping either would load the other silently.
        nn::module::state_dict_type found;
        std::map<std::string, std::string> origin; // the module's name -> the file's
        std::vector<std::string> collisions;
        for (auto& [name, t] : content.tensors)
        {
            std::string_view key = name;
            if (checkpoint)
            {
                if (starts_with(key, checkpoint_optimizer_prefix))
                    continue;
                if (starts_with(key, checkpoint_model_prefix))
                    key.remove_prefix(checkpoint_model_prefix.size());
            }
            if (!options.strip_prefix.empty() && starts_with(key, options.strip_prefix))
                key.remove_prefix(options.strip_prefix.size());
            const auto [at, added] = origin.emplace(std::string(key), name);
            if (!added)
                collisions.push_back("tensors " + in_quotes(at->second) + " and " + in_quotes(name) + " both load as " +
                                     in_quotes(at->first));
            found.emplace(std::string(key), std::move(t));
        }
        if (!collisions.empty())
            throw format_error(path.string() + ": " + join_problems(collisions) +
                               " (remove one of each pair from the file, or load it with another strip_prefix)");

        std::vector<std::string> problems, missing, unexpected;
        const nn::module::state_dict_type current = model.state_dict();
        nn::module::state_dict_type state;
        for (const auto& [name, target] : current)
        {
            const auto it = found.find(name);
            if (it == found.end())
            {
                // A batch norm's step counter: state dicts from older PyTorch (and hand-made
                // ones) lack it, and PyTorch's own load keeps the module's value then (unless
                // the file has it under another prefix: see below).
                if (name == "num_batches_tracked" || ends_with(name, ".num_batches_tracked"))
                    result.kept.push_back(name);
                else if (options.strict)
                    missing.push_back(name);
                else
                    result.missing_keys.push_back(name);
                continue;
            }
            const tensor& value = it->second;
            if (value.shape() != target.shape())
            {
                problems.push_back("tensor " + in_quotes(name) + " has shape " + shape_to_string(value.shape()) +
                                   ", the model's is " + shape_to_string(target.shape()));
                continue;
            }
            tensor loaded = value;
            if (value.dtype() != target.dtype())
            {
                const std::string cast = std::string(xgrad::name(value.dtype())) + " -> " +
                                         std::string(xgrad::name(target.dtype()));
                if (!is_floating(target.dtype()) && is_floating(value.dtype()))
                {
                    // Rounding a float into an integer buffer would change it silently.
                    if (std::string problem = integral_problem(value); !problem.empty())
                    {
                        problems.push_back("tensor " + in_quotes(name) + " cannot be cast " + cast + ": " + problem);
                        continue;
                    }
                }
                loaded = value.to(target.dtype());
                result.converted.push_back(name + ": " + cast);
            }
            state.emplace(name, loaded.to(target.device()));
        }
        for (const auto& [name, t] : found)
            if (current.find(name) == current.end())
            {
                if (options.strict)
                    unexpected.push_back(name);
                else
                    result.unexpected_keys.push_back(name);
            }
        // A counter the file holds under another name ("module.bn.num_batches_tracked") is part
        // of that mismatch, not a counter the file lacks.
        const auto elsewhere = [&unexpected](const std::string& name) {
            return std::any_of(unexpected.begin(), unexpected.end(), [&name](const std::string& u) {
                return ends_with(u, "." + name) || ends_with(name, "." + u);
            });
        };
        for (auto it = result.kept.begin(); it != result.kept.end();)
            if (elsewhere(*it))
            {
                missing.push_back(*it);
                it = result.kept.erase(it);
            }
            else
                ++it;
        std::sort(missing.begin(), missing.end());
        const std::vector<std::string> names = name_problems(missing, unexpected, "");
        problems.insert(problems.begin(), names.begin(), names.end());
        if (!problems.empty())
            throw format_error(path.string() + ": " + join_problems(problems));
        model.load_state_dict(state, /*strict=*/false);
        return result;
    }
}
