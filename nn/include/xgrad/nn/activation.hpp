#pragma once
// Parameter-free layers (nn/src/activation.cpp): the activations, identity, flatten, dropout
// and dropout2d. Each activation is its op of xgrad/ops/activation.hpp (or elementwise.hpp,
// loss.hpp for the softmax family) as a module, with PyTorch's module name and defaults
// (nn::leaky_relu(0.2) is torch.nn.LeakyReLU(0.2)); their errors are the ops'.
#include <cstdint>
#include <functional>
#include <string>

#include "xgrad/factories.hpp"
#include "xgrad/nn/module.hpp"

namespace xgrad::nn
{
    class relu final : public module
    {
    public:
        tensor forward(const tensor& x) override;
        std::string_view type_name() const noexcept override { return "relu"; }
    };

    /// A parameter-free module that applies one function of its input: the base of the
    /// activation modules below, and usable directly for a function of one's own
    /// (nn::lambda("scale2", [](const tensor& x) { return x * 2.0; })). describe() gives
    /// "<name>" or "<name>(<options>)".
    class lambda : public module
    {
    public:
        using function_type = std::function<tensor(const tensor&)>;
        /// Throws xgrad::invalid_argument when name is empty or fn is empty.
        lambda(std::string name, function_type fn, std::string options = "");
        tensor forward(const tensor& x) override { return m_fn(x); }
        std::string_view type_name() const noexcept override { return m_name; }
        std::string describe() const override;

    private:
        std::string m_name;
        function_type m_fn;
        std::string m_options;
    };

    /// Returns its input (torch.nn.Identity): a placeholder where a block has no layer.
    class identity final : public lambda
    {
    public:
        identity();
    };

    class sigmoid final : public lambda
    {
    public:
        sigmoid();
    };

    class tanh final : public lambda
    {
    public:
        tanh();
    };

    class silu final : public lambda
    {
    public:
        silu();
    };

    class relu6 final : public lambda
    {
    public:
        relu6();
    };

    class hardsigmoid final : public lambda
    {
    public:
        hardsigmoid();
    };

    class hardswish final : public lambda
    {
    public:
        hardswish();
    };

    class leaky_relu final : public lambda
    {
    public:
        /// Throws xgrad::invalid_argument for a slope that is not finite.
        explicit leaky_relu(double negative_slope = 0.01);
    };

    class elu final : public lambda
    {
    public:
        /// Throws xgrad::invalid_argument for an alpha that is not finite.
        explicit elu(double alpha = 1.0);
    };

    class gelu final : public lambda
    {
    public:
        /// approximate: "none" or "tanh"; anything else throws xgrad::invalid_argument.
        explicit gelu(std::string approximate = "none");
    };

    class softplus final : public lambda
    {
    public:
        /// Throws xgrad::invalid_argument unless beta is positive and finite.
        explicit softplus(double beta = 1.0);
    };

    /// softmax over dimension dim (negative counts from the end; checked against the input).
    class softmax final : public lambda
    {
    public:
        explicit softmax(std::int64_t dim);
    };

    class log_softmax final : public lambda
    {
    public:
        explicit log_softmax(std::int64_t dim);
    };

    /// Merges dimensions start_dim..end_dim (negative counts from the end) into one:
    /// [N, C, H, W] -> [N, C*H*W] by default.
    ///
    /// data_format: the layout of an image input. With a channels-last one ("NHWC", "NDHWC")
    /// the input is taken in channels-first order before it is merged, so the features come in
    /// (C, H, W) order in both layouts, as in PyTorch (whose channels_last is a memory format,
    /// not another logical order). A linear layer after it then has the same weights whichever
    /// layout the model runs in, and a checkpoint moves between layouts and to PyTorch
    /// unchanged. The layout costs one copy of the activations. "" and the channels-first
    /// formats merge the dimensions as they are.
    ///
    /// Errors (xgrad::invalid_argument naming the layer): an unknown data_format, or a
    /// channels-last one with dimensions other than 1..-1 (at construction); an input whose
    /// rank does not fit the dimensions, or, with a channels-last format, is not its rank.
    class flatten final : public module
    {
    public:
        explicit flatten(std::int64_t start_dim = 1, std::int64_t end_dim = -1, std::string data_format = "");
        tensor forward(const tensor& x) override;
        std::string_view type_name() const noexcept override { return "flatten"; }
        std::string describe() const override;

    private:
        std::int64_t m_start, m_end;
        std::string m_format;
    };

    /// In training mode, zeroes each element with probability p and scales the others by
    /// 1 / (1 - p) (so the expectation is unchanged); the identity in evaluation mode. The
    /// mask is drawn from the layer's own generator, seeded at construction (reseed() restarts
    /// it, e.g. from a function of the run's seed and the epoch, for reproducible runs).
    /// Throws xgrad::invalid_argument unless 0 <= p < 1.
    class dropout final : public module
    {
    public:
        explicit dropout(double p = 0.5, std::uint64_t seed = 0);
        tensor forward(const tensor& x) override;
        std::string_view type_name() const noexcept override { return "dropout"; }
        std::string describe() const override;
        void reseed(std::uint64_t seed) { m_gen = generator(seed); }
        double p() const noexcept { return m_p; }

    private:
        double m_p;
        generator m_gen;
    };

    /// Dropout of whole channels (torch.nn.Dropout2d): in training mode each (sample, channel)
    /// plane of a 4-D input is zeroed with probability p and the others scaled by 1 / (1 - p);
    /// the identity in evaluation mode. data_format "NCHW" or "NHWC" says where the channels
    /// are. Its generator works as dropout's. Throws xgrad::invalid_argument unless 0 <= p < 1
    /// and the format is one of the two (at construction), or for an input that is not 4-D.
    class dropout2d final : public module
    {
    public:
        explicit dropout2d(double p = 0.5, std::uint64_t seed = 0, std::string data_format = "NCHW");
        tensor forward(const tensor& x) override;
        std::string_view type_name() const noexcept override { return "dropout2d"; }
        std::string describe() const override;
        void reseed(std::uint64_t seed) { m_gen = generator(seed); }
        double p() const noexcept { return m_p; }

    private:
        double m_p;
        generator m_gen;
        std::string m_format;
    };
}
