#pragma once
// The batch-norm layers' rules (defined in batch_norm.cpp): the option and input checks, the
// momentum rule and the describe() text. batch_norm_base applies them for every subclass
// (nn::sync_batch_norm2d reaches the momentum rule and the text through its protected
// update_factor and describe_with), so they all accept the same options and inputs, reject the
// rest with the same messages, and fold batch statistics into running ones with the same factor.
//
// The checks return what is wrong (empty when nothing is), and the layer throws it through
// module::fail, which puts its own type_name() in front.
#include <cstdint>
#include <string>
#include <string_view>

#include "xgrad/nn/batch_norm.hpp"
#include "xgrad/tensor.hpp"

namespace xgrad::nn::detail
{
    /// Resolves options.data_format for inputs of rank 4 or 5 (empty: channels first, "NCHW" /
    /// "NCDHW") and checks every option (data_format of that rank, num_features >= 1, eps finite
    /// and >= 0, momentum in [0, 1] or nullopt, dtype float32 or float64).
    std::string check_batch_norm_options(batch_norm_options& options, std::int64_t rank);

    /// The channel dimension of inputs of `rank` in the (resolved) options' data_format.
    std::int64_t batch_norm_channel_dim(const batch_norm_options& options, std::int64_t rank);

    /// Checks a forward input: defined, of `rank`, options.num_features channels in dimension
    /// channel_dim, floating point with a dtype the options' parameter dtype serves, and on the
    /// options' device.
    std::string check_batch_norm_input(const tensor& x, const batch_norm_options& options, std::int64_t rank,
                                       std::int64_t channel_dim);

    /// The weight of the batch statistics in the running ones at update number `batches`
    /// (1-based): the momentum, or 1 / batches for a cumulative average (nullopt momentum).
    float batch_norm_update_factor(const batch_norm_options& options, std::int64_t batches);

    /// "name(32, eps=1e-05, momentum=0.1, NCHW)", with ", <extra>" before the ')' when extra is
    /// not empty.
    std::string describe_batch_norm(std::string_view name, const batch_norm_options& options,
                                    const std::string& extra = {});
}
