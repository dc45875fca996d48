#pragma once
// Pooling layers (nn/src/pool.cpp): no parameters; forward calls the op of the same name
// (core/include/xgrad/ops/pool.hpp), in the layer's data_format.
#include <array>
#include <cstdint>
#include <string>

#include "xgrad/nn/module.hpp"
#include "xgrad/ops/pool.hpp"

namespace xgrad::nn
{
    class max_pool2d final : public module
    {
    public:
        explicit max_pool2d(const pool2d_params& params, std::string data_format = "NCHW");
        explicit max_pool2d(std::int64_t kernel, std::string data_format = "NCHW");
        tensor forward(const tensor& x) override;
        std::string_view type_name() const noexcept override { return "max_pool2d"; }
        std::string describe() const override;
        const pool2d_params& params() const noexcept { return m_params; }
        const std::string& data_format() const noexcept { return m_format; }

    private:
        pool2d_params m_params;
        std::string m_format;
    };

    class avg_pool2d final : public module
    {
    public:
        explicit avg_pool2d(const pool2d_params& params, std::string data_format = "NCHW");
        explicit avg_pool2d(std::int64_t kernel, std::string data_format = "NCHW");
        tensor forward(const tensor& x) override;
        std::string_view type_name() const noexcept override { return "avg_pool2d"; }
        std::string describe() const override;

    private:
        pool2d_params m_params;
        std::string m_format;
    };

    /// Output of a fixed spatial size whatever the input's; {1, 1} is global average pooling.
    class adaptive_avg_pool2d final : public module
    {
    public:
        explicit adaptive_avg_pool2d(std::array<std::int64_t, 2> output_size, std::string data_format = "NCHW");
        tensor forward(const tensor& x) override;
        std::string_view type_name() const noexcept override { return "adaptive_avg_pool2d"; }
        std::string describe() const override;

    private:
        std::array<std::int64_t, 2> m_output_size;
        std::string m_format;
    };
}
