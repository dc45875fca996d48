#pragma once
// The fully connected layer (nn/src/linear.cpp): options, parameters, and a forward that calls
// one op (xgrad::matmul_add, or matmul). No layer writes a backward.
//
// Parameters: "weight" and, when `bias`, "bias", initialised from the generator given to the
// constructor as conv2d's are (xgrad/nn/conv.hpp): the weight by options.weight_init, the bias
// U(-1/sqrt(fan_in), 1/sqrt(fan_in)); reset_parameters(gen) draws them again.
// Errors: xgrad::invalid_argument naming the layer and the option (features < 1), and in
// forward naming the input's shape when it does not fit.
#include <cstdint>
#include <optional>
#include <string>

#include "xgrad/dtype.hpp"
#include "xgrad/factories.hpp"
#include "xgrad/nn/init.hpp"
#include "xgrad/nn/module.hpp"

namespace xgrad::nn
{
    struct linear_options
    {
        linear_options(std::int64_t in, std::int64_t out) : in_features(in), out_features(out) {}
        std::int64_t in_features;
        std::int64_t out_features;
        bool bias = true;
        /// The parameters' dtype (the master weights).
        xgrad::dtype dtype = xgrad::dtype::float32;
        /// As conv2d_options::compute_dtype: when set, the input, weight and bias are cast to it
        /// and the output has it (float32 after bfloat16 layers, for example). Unset: the input
        /// must have the parameters' dtype.
        std::optional<xgrad::dtype> compute_dtype;
        init::scheme weight_init = init::scheme::fan_in_uniform;
    };

    /// y = x W^T + b for x [..., in_features]; W is [out_features, in_features].
    class linear final : public module
    {
    public:
        using options_type = linear_options;

        linear(const options_type& options, generator& gen);
        linear(std::int64_t in, std::int64_t out, generator& gen) : linear(options_type(in, out), gen) {}
        tensor forward(const tensor& x) override;
        std::string_view type_name() const noexcept override { return "linear"; }
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
}
