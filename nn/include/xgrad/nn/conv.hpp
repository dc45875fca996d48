#pragma once
// The convolution layers (nn/src/conv.cpp): options, parameters, and a forward that calls one
// op (xgrad::conv2d, xgrad::conv_transpose2d); and upsample, which resizes between them in a
// decoder. No layer writes a backward. The fully connected layer, which shares the parameter
// and initialisation rules below, is in xgrad/nn/linear.hpp.
//
// Parameters: "weight" ([O, C/groups, KH, KW] for conv2d, [C, O/groups, KH, KW] for
// conv_transpose2d, as PyTorch) and, when `bias`, "bias" ([O]). Initialisation from the generator given to
// the constructor: the weight by options.weight_init (default U(-1/sqrt(fan_in),
// 1/sqrt(fan_in)); see init.hpp), the bias U(-1/sqrt(fan_in), 1/sqrt(fan_in));
// reset_parameters(gen) draws them again.
// Errors: xgrad::invalid_argument naming the layer and the option (channels < 1, channels not
// divisible by groups, kernel/stride/dilation < 1, padding < 0, unknown data_format), and in
// forward naming the input's shape when it does not fit.
#include <array>
#include <cstdint>
#include <optional>
#include <string>

#include "xgrad/dtype.hpp"
#include "xgrad/factories.hpp"
#include "xgrad/nn/init.hpp"
#include "xgrad/nn/module.hpp"
#include "xgrad/ops/conv.hpp"
#include "xgrad/ops/upsample.hpp"

namespace xgrad::nn
{
    struct conv2d_options
    {
        conv2d_options(std::int64_t in, std::int64_t out, std::array<std::int64_t, 2> kernel)
            : in_channels(in), out_channels(out), kernel_size(kernel)
        {
        }
        conv2d_options(std::int64_t in, std::int64_t out, std::int64_t kernel)
            : conv2d_options(in, out, {kernel, kernel})
        {
        }

        std::int64_t in_channels;
        std::int64_t out_channels;
        std::array<std::int64_t, 2> kernel_size;
        std::array<std::int64_t, 2> stride{1, 1};
        std::array<std::int64_t, 2> padding{0, 0};
        std::array<std::int64_t, 2> dilation{1, 1};
        std::int64_t groups = 1;
        bool bias = true;
        /// "NCHW" or "NHWC": the layout of inputs and outputs. The weight is [O, C/groups, KH, KW]
        /// either way.
        std::string data_format = "NCHW";
        /// The parameters' dtype (the master weights).
        xgrad::dtype dtype = xgrad::dtype::float32;
        /// Mixed precision: when set, forward casts the input, weight and bias to this dtype
        /// (xgrad::cast, whose gradient casts back, so the parameters' gradients keep their
        /// dtype) and convolves in it; the output has this dtype, so the layers after it run
        /// on it too (batch norm, ReLU and pooling take bfloat16 activations). bfloat16 over
        /// float32 parameters (the master weights) runs the convolution and its gradients with
        /// bfloat16 operands summed in float32, on AMX tiles where the processor has them.
        /// Unset: the input must have the parameters' dtype.
        std::optional<xgrad::dtype> compute_dtype;
        init::scheme weight_init = init::scheme::fan_in_uniform;
    };

    class conv2d final : public module
    {
    public:
        using options_type = conv2d_options;

        conv2d(const options_type& options, generator& gen);
        tensor forward(const tensor& x) override;
        std::string_view type_name() const noexcept override { return "conv2d"; }
        std::string describe() const override;
        void reset_parameters(generator& gen);
        const options_type& options() const noexcept { return m_options; }
        /// The parameters (the handles the module holds; see module.hpp); bias() is undefined
        /// for a layer without one.
        tensor weight() const { return parameter("weight"); }
        tensor bias() const { return m_options.bias ? parameter("bias") : tensor(); }

    private:
        options_type m_options;
    };

    /// conv2d's options and output_padding (see xgrad::conv_transpose2d_params).
    struct conv_transpose2d_options : conv2d_options
    {
        using conv2d_options::conv2d_options;
        std::array<std::int64_t, 2> output_padding{0, 0};
    };

    /// The transposed convolution (torch.nn.ConvTranspose2d): upsampling by a learned kernel.
    /// Initialised as PyTorch's, from the weight's fan-in (O / groups * KH * KW). Errors as
    /// conv2d's, and output_padding outside [0, max(stride, dilation)).
    class conv_transpose2d final : public module
    {
    public:
        using options_type = conv_transpose2d_options;

        conv_transpose2d(const options_type& options, generator& gen);
        tensor forward(const tensor& x) override;
        std::string_view type_name() const noexcept override { return "conv_transpose2d"; }
        std::string describe() const override;
        void reset_parameters(generator& gen);
        const options_type& options() const noexcept { return m_options; }
        tensor weight() const { return parameter("weight"); }
        tensor bias() const { return m_options.bias ? parameter("bias") : tensor(); }

    private:
        options_type m_options;
    };

    /// Resizes images (torch.nn.Upsample): xgrad::upsample with the layer's params, in its
    /// data_format. Errors (xgrad::invalid_argument naming upsample): the op's, at
    /// construction where they concern the params, in forward for the input.
    class upsample final : public module
    {
    public:
        explicit upsample(upsample_params params, std::string data_format = "NCHW");
        tensor forward(const tensor& x) override;
        std::string_view type_name() const noexcept override { return "upsample"; }
        std::string describe() const override;
        const upsample_params& params() const noexcept { return m_params; }

    private:
        upsample_params m_params;
        std::string m_format;
    };
}
