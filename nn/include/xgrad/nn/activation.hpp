#pragma once
// Parameter-free layers (nn/src/activation.cpp): relu, flatten, dropout.
#include <cstdint>
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
}
