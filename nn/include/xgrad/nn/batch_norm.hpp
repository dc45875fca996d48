#pragma once
// Batch normalisation layers over 4-D and 5-D inputs (nn/src/batch_norm.cpp), with
// PyTorch's BatchNorm2d / BatchNorm3d semantics, built on the fused op
// xgrad::fused_batch_norm (xgrad/ops/batch_norm.hpp). The layer holds options, parameters and
// buffers; its forward is one call of the op, and its gradients (of every order) are the op's.
//
// Per channel c, with eps = options.eps:
//
//   training:  y = (x - m_c) / sqrt(v_c + eps) * scale_c + offset_c, where m_c and v_c are the
//              mean and the biased variance of the batch. When track_running_stats, the
//              running statistics are then replaced (not differentiated) by
//                running_mean = (1 - f) running_mean + f m_c
//                running_var  = (1 - f) running_var  + f v_c R / (R - 1)
//              (Bessel's correction; R = elements per channel), with f = momentum, or
//              f = 1 / num_batches_tracked (a cumulative average) when momentum is nullopt;
//              num_batches_tracked counts the updates. This is the op with is_training = true
//              and exponential_avg_factor = f: the op's running_mean / running_var outputs.
//   eval:      y = (x - running_mean_c) / sqrt(running_var_c + eps) * scale_c + offset_c
//              (the op with is_training = false); nothing is updated. Without
//              track_running_stats there are no running statistics, and eval normalises with
//              the batch statistics as training does.
//   An empty input (no values per channel) gives an empty y and updates nothing.
//
// Gradients: y is differentiable w.r.t. x, scale and offset (in training mode the batch
// statistics are functions of x); the running statistics are constants.
//
// ReLU fusion: forward_relu(x) is relu(forward(x)) through xgrad::fused_batch_norm_relu, one
// pass that writes only the activated output. nn::sequential uses it for a batch_norm2d /
// batch_norm3d child directly followed by an nn::relu child, so conv -> bn -> relu models get
// the fusion without a change to their code. batch_norm2d's forward_relu_max_pool(x, pool)
// adds the max pooling after the ReLU (xgrad::fused_batch_norm_relu_max_pool2d), which
// nn::sequential uses for batch_norm2d -> relu -> max_pool2d children.
//
// dtypes: parameters and buffers are float32 (inputs float32, float16 or bfloat16) or float64
// (inputs float64), chosen by options.dtype. num_batches_tracked is an int64 scalar.
//
// Errors (xgrad::invalid_argument, naming the layer and the shapes, dtypes or values): bad
// options at construction (num_features < 1, eps negative or not finite, momentum outside
// [0, 1], a data_format of the wrong rank, a parameter dtype other than float32 / float64);
// in forward, an input of the wrong rank, channel count, dtype or device, or a single value per
// channel where batch statistics are needed (its variance would be 0 and its output constant).
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "xgrad/dtype.hpp"
#include "xgrad/nn/module.hpp"
#include "xgrad/ops/pool.hpp"
#include "xgrad/tensor.hpp"

namespace xgrad::nn
{
    struct batch_norm_options
    {
        batch_norm_options() = default;
        explicit batch_norm_options(std::int64_t features) : num_features(features) {}

        /// C, the number of channels.
        std::int64_t num_features = 0;
        /// Added to the variance. The op computes with a float epsilon, so this is a float.
        float eps = 1e-5f;
        /// Weight of the batch statistics in the running statistics (PyTorch's momentum, the
        /// op's exponential_avg_factor); nullopt: a cumulative average over all batches.
        std::optional<float> momentum = 0.1f;
        /// Learnable scale and offset (parameters); when false they are the constants 1 and 0
        /// and the layer has no parameters.
        bool affine = true;
        /// Keep running statistics (buffers) and use them in eval mode; when false there are
        /// no buffers and the batch statistics are used in both modes.
        bool track_running_stats = true;
        /// "NCHW" or "NHWC" (batch_norm2d), "NCDHW" or "NDHWC" (batch_norm3d); empty: channels
        /// first ("NCHW" / "NCDHW"), like PyTorch.
        std::string data_format;
        /// dtype of parameters and buffers: float32, or float64 for float64 inputs.
        xgrad::dtype dtype = xgrad::dtype::float32;
        xgrad::device device = cpu_device;
    };

    /// The implementation shared by batch_norm2d (rank 4) and batch_norm3d (rank 5).
    ///
    /// Parameters: "weight" (the scale, init ones) and "bias" (the offset, init zeros), [C]
    /// (only when affine). Buffers: "running_mean" (zeros), "running_var" (ones), [C], and
    /// "num_batches_tracked" (int64 scalar, 0) (only when track_running_stats). These are
    /// PyTorch's names, so a state dict moves between a batch_norm2d and torch.nn.BatchNorm2d
    /// unchanged (docs/interop.md).
    class batch_norm_base : public module
    {
    public:
        using options_type = batch_norm_options;

        /// Normalises x (see the formulas above); updates the running statistics in training
        /// mode when track_running_stats.
        tensor forward(const tensor& x) override;
        /// relu(forward(x)) in one fused op (xgrad::fused_batch_norm_relu): the same values,
        /// gradients (of every order) and running-statistics updates (up to floating-point
        /// rounding), with the same checks and errors, but without writing the pre-activation
        /// tensor. nn::sequential calls it for a
        /// batch_norm2d / batch_norm3d child directly followed by an nn::relu child.
        tensor forward_relu(const tensor& x);

        std::string_view type_name() const noexcept override { return m_name; }
        /// "batch_norm2d(32, eps=1e-05, momentum=0.1, NCHW)"
        std::string describe() const override;

        /// The options, with data_format resolved ("NCHW" rather than empty).
        const options_type& options() const noexcept { return m_options; }
        std::int64_t num_features() const noexcept { return m_options.num_features; }
        /// Rank of the inputs: 4 or 5.
        std::int64_t input_rank() const noexcept { return m_rank; }
        /// Which dimension of x holds the channels (1, or rank - 1 for channels last).
        std::int64_t channel_dim() const noexcept { return m_channel_dim; }

        /// The current values (undefined when the layer has no such parameter or buffer).
        /// scale() and offset() are the op's (TensorFlow's) names for weight() and bias().
        tensor weight() const;
        tensor bias() const;
        tensor scale() const { return weight(); }
        tensor offset() const { return bias(); }
        tensor running_mean() const;
        tensor running_var() const;
        tensor num_batches_tracked() const;

        /// running_mean := 0, running_var := 1, num_batches_tracked := 0.
        void reset_running_stats();
        /// reset_running_stats(), weight := 1, bias := 0.
        void reset_parameters();

    protected:
        /// rank: 4 or 5; name: "batch_norm2d", "batch_norm3d" (or a subclass's, such as
        /// "sync_batch_norm2d").
        batch_norm_base(options_type options, std::int64_t rank, std::string_view name);
        /// The options' device and the constants follow the parameters to `dev`.
        void moved_to(device dev) override;

        /// The input checks of forward (rank, channel count, dtype, device), throwing as it does.
        void check_input(const tensor& x) const;
        /// What forward normalises with: the parameters, or the constants 1 and 0 when !affine.
        tensor effective_scale() const;
        tensor effective_offset() const;
        /// forward (relu false) and forward_relu (relu true) are this one function, so a subclass
        /// that computes its statistics elsewhere (nn::sync_batch_norm2d) overrides both at once.
        virtual tensor run(const tensor& x, bool relu);
        /// run(x, true) followed by max pooling, as one op (fused_batch_norm_relu_max_pool2d);
        /// for batch_norm2d's forward_relu_max_pool, not overridable: a subclass that
        /// computes its statistics elsewhere does not get it.
        tensor run_relu_max_pool(const tensor& x, const pool2d_params& pool);
        /// The weight of a batch's statistics in the running ones at update number `batches`
        /// (1-based): the momentum, or 1 / batches for a cumulative average (nullopt momentum).
        /// The rule of forward, for a subclass that folds statistics in itself.
        double update_factor(std::int64_t batches) const;
        /// describe() with ", <extra>" before the closing parenthesis.
        std::string describe_with(const std::string& extra) const;

    private:
        tensor run_impl(const tensor& x, bool relu, const pool2d_params* pool);

        options_type m_options;
        std::int64_t m_rank = 4;
        std::int64_t m_channel_dim = 1;
        std::string_view m_name;
        tensor m_unit_scale, m_zero_offset; // the constants used when !affine
        tensor m_no_stats;                  // [0]: the op's unread mean/variance without running stats
    };

    /// Batch normalisation of [N, C, H, W] ("NCHW") or [N, H, W, C] ("NHWC") inputs.
    class batch_norm2d final : public batch_norm_base
    {
    public:
        explicit batch_norm2d(std::int64_t num_features) : batch_norm2d(options_type(num_features)) {}
        explicit batch_norm2d(const options_type& options) : batch_norm_base(options, 4, "batch_norm2d") {}

        /// max_pool2d(relu(forward(x)), pool, options().data_format) in one fused op
        /// (xgrad::fused_batch_norm_relu_max_pool2d): the same values, gradients (of every
        /// order) and running-statistics updates as forward_relu followed by the pool, bit for
        /// bit in the forward and the first order, with the checks of both layers, but the
        /// backward never reads the full-size activation. nn::sequential calls it for a batch_norm2d child directly followed by
        /// nn::relu and nn::max_pool2d children of the same data_format.
        tensor forward_relu_max_pool(const tensor& x, const pool2d_params& pool) { return run_relu_max_pool(x, pool); }
    };

    /// Batch normalisation of [N, C, D, H, W] ("NCDHW") or [N, D, H, W, C] ("NDHWC") inputs.
    class batch_norm3d final : public batch_norm_base
    {
    public:
        explicit batch_norm3d(std::int64_t num_features) : batch_norm3d(options_type(num_features)) {}
        explicit batch_norm3d(const options_type& options) : batch_norm_base(options, 5, "batch_norm3d") {}
    };
}
