#pragma once
// The convolution layer (nn/src/conv.cpp): options, parameters, and a forward that calls one
// op (xgrad::conv2d). No layer writes a backward. The fully connected layer, which shares the
// parameter and initialisation rules below, is in xgrad/nn/linear.hpp.
//
// Parameters: "weight" and, when `bias`, "bias". Initialisation from the generator given to
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

    private:
        options_type m_options;
    };
}
