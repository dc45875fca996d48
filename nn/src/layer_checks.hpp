#pragma once
// What the image layers of nn/src share: option and input checks with messages that name the
// layer, and the cast to a layer's compute dtype.
#include <array>
#include <cstdint>
#include <optional>
#include <string>

#include "xgrad/errors.hpp"
#include "xgrad/nn/module.hpp"
#include "xgrad/ops/shape.hpp"
#include "xgrad/tensor.hpp"

namespace xgrad::nn::detail
{
    inline std::string pair_to_string(const std::array<std::int64_t, 2>& p)
    {
        return "[" + std::to_string(p[0]) + ", " + std::to_string(p[1]) + "]";
    }

    inline void check_format(const module& m, const std::string& format)
    {
        if (format != "NCHW" && format != "NHWC")
            throw xgrad::invalid_argument(std::string(m.type_name()) +
                                          ": data_format must be \"NCHW\" or \"NHWC\", got \"" + format + "\"");
    }

    /// Rank-4 input whose channel axis (of `format`) has `channels` entries.
    inline void check_image_input(const module& m, const tensor& x, const std::string& format, std::int64_t channels)
    {
        if (!x.defined())
            throw xgrad::invalid_argument(std::string(m.type_name()) + ": the input is undefined");
        if (x.dim() != 4)
            throw xgrad::invalid_argument(std::string(m.type_name()) + ": expected a rank-4 " + format +
                                          " input, got shape " + shape_to_string(x.shape()));
        const std::int64_t c = x.size(format == "NCHW" ? 1 : 3);
        if (channels > 0 && c != channels)
            throw xgrad::invalid_argument(std::string(m.type_name()) + ": expected " + std::to_string(channels) +
                                          " input channels (" + format + "), got shape " + shape_to_string(x.shape()));
    }

    /// t cast to the layer's compute dtype (differentiable: the gradient is cast back), or t
    /// itself where none is set or it already has it.
    inline tensor in_compute_dtype(const tensor& t, const std::optional<xgrad::dtype>& dt)
    {
        return dt && t.dtype() != *dt ? xgrad::cast(t, *dt) : t;
    }
}
