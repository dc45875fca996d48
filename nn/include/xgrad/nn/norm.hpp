#pragma once
// The layer, group and instance normalisation layers (nn/src/norm.cpp), PyTorch's LayerNorm,
// GroupNorm and InstanceNorm2d, each one call of its op (xgrad/ops/norm.hpp), so their values and gradients of
// every order are the fused batch norm's on a reshaped input.
//
// Parameters: "weight" (ones) and "bias" (zeros), when the options ask for them; PyTorch's names
// and shapes, so state dicts move between the two. Normalising uses no running statistics: a
// layer computes the same function in training and in evaluation.
// Errors: xgrad::invalid_argument naming the layer and the option (an empty or non-positive
// shape, groups that do not divide the channels, eps negative or not finite, a non-floating
// dtype), and in forward naming the input's shape when it does not fit.
#include <cstdint>
#include <string>

#include "xgrad/dtype.hpp"
#include "xgrad/nn/module.hpp"

namespace xgrad::nn
{
    struct layer_norm_options
    {
        explicit layer_norm_options(shape_type shape) : normalized_shape(std::move(shape)) {}
        /// The trailing dimensions normalised over (non-empty, each at least 1).
        shape_type normalized_shape;
        double eps = 1e-5;
        /// weight (and bias, when `bias`) of shape normalized_shape.
        bool elementwise_affine = true;
        bool bias = true;
        /// The parameters' dtype: the input's dtype.
        xgrad::dtype dtype = xgrad::dtype::float32;
    };

    /// y = (x - mean) / sqrt(var + eps) * weight + bias over x's last normalized_shape.size()
    /// dimensions (xgrad::layer_norm).
    class layer_norm final : public module
    {
    public:
        using options_type = layer_norm_options;

        explicit layer_norm(const options_type& options);
        explicit layer_norm(shape_type normalized_shape) : layer_norm(options_type(std::move(normalized_shape))) {}
        tensor forward(const tensor& x) override;
        std::string_view type_name() const noexcept override { return "layer_norm"; }
        /// "layer_norm([8], eps=1e-05, elementwise_affine=true)"
        std::string describe() const override;
        const options_type& options() const noexcept { return m_options; }

    private:
        options_type m_options;
    };

    struct group_norm_options
    {
        group_norm_options(std::int64_t groups, std::int64_t channels) : num_groups(groups), num_channels(channels) {}
        std::int64_t num_groups;
        /// C of the [N, C, ...] inputs; num_groups must divide it.
        std::int64_t num_channels;
        double eps = 1e-5;
        /// weight and bias of shape [num_channels].
        bool affine = true;
        /// The parameters' dtype: the input's dtype.
        xgrad::dtype dtype = xgrad::dtype::float32;
    };

    /// Each sample's channels in num_groups groups, each group normalised over its channels and
    /// every position, then a per-channel weight and bias (xgrad::group_norm). Inputs
    /// [N, num_channels, ...], rank 2 or more.
    class group_norm final : public module
    {
    public:
        using options_type = group_norm_options;

        explicit group_norm(const options_type& options);
        group_norm(std::int64_t num_groups, std::int64_t num_channels)
            : group_norm(options_type(num_groups, num_channels))
        {
        }
        tensor forward(const tensor& x) override;
        std::string_view type_name() const noexcept override { return "group_norm"; }
        /// "group_norm(4, 32, eps=1e-05, affine=true)"
        std::string describe() const override;
        const options_type& options() const noexcept { return m_options; }

    private:
        options_type m_options;
    };

    struct instance_norm_options
    {
        explicit instance_norm_options(std::int64_t features) : num_features(features) {}
        /// C of the [N, C, H, W] inputs.
        std::int64_t num_features;
        double eps = 1e-5;
        /// weight (ones) and bias (zeros) of shape [num_features]; PyTorch's default is without.
        bool affine = false;
        /// The parameters' dtype: the input's dtype.
        xgrad::dtype dtype = xgrad::dtype::float32;
    };

    /// Each sample's channels normalised over their own positions, in training and in
    /// evaluation alike (torch.nn.InstanceNorm2d with its default track_running_stats=False;
    /// the variant with running statistics is not provided), then the optional per-channel
    /// weight and bias (xgrad::instance_norm). Inputs [N, num_features, H, W].
    class instance_norm2d final : public module
    {
    public:
        using options_type = instance_norm_options;

        explicit instance_norm2d(const options_type& options);
        explicit instance_norm2d(std::int64_t num_features) : instance_norm2d(options_type(num_features)) {}
        tensor forward(const tensor& x) override;
        std::string_view type_name() const noexcept override { return "instance_norm2d"; }
        /// "instance_norm2d(32, eps=1e-05, affine=false)"
        std::string describe() const override;
        const options_type& options() const noexcept { return m_options; }

    private:
        options_type m_options;
    };
}
