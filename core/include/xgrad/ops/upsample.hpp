#pragma once
// Resizing images by interpolation (core/src/ops/upsample.cpp): PyTorch's
// torch.nn.functional.interpolate for 4-D inputs in modes "nearest" and "bilinear".
//
// Composed from shape ops (slice, expand, concat: a gather of whole rows and columns, in order)
// and multiplications by constant weights, so its gradients of every order are those ops'
// (the gradient of a resize is the adjoint that adds each output back into the inputs it
// read). A non-finite input element reaches only the outputs that read it, as in PyTorch.
//
// Layouts: "NCHW" ([N, C, H, W]) or "NHWC" ([N, H, W, C]). dtypes: every floating one; 16-bit
// inputs interpolate in float32 and round once (PyTorch's opmath).
//
// Errors (xgrad::invalid_argument naming upsample and the argument): a non-floating or non-4-D
// x, an unknown mode or data_format, both or neither of size and scale_factor, a size below 1,
// a scale factor that is not positive and finite or gives an empty or oversized output,
// align_corners with mode "nearest" (PyTorch refuses it too).
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "xgrad/tensor.hpp"

namespace xgrad
{
    struct upsample_params
    {
        /// The output's spatial size {OH, OW}; or
        std::optional<std::array<std::int64_t, 2>> size;
        /// the factors {height, width}: OH = floor(H * factor). The source positions are then
        /// computed from 1 / factor, not from H / OH (PyTorch's default,
        /// recompute_scale_factor=None), which differs where H * factor is not a whole number.
        std::optional<std::array<double, 2>> scale_factor;
        /// "nearest": output o reads input min(floor(o * s), in - 1), s = in / out or
        ///   1 / factor, computed in float32 as PyTorch does (so the same pixel is chosen);
        /// "bilinear": the linear blend of the two neighbours of the source position
        ///   align_corners ? o * (in - 1) / (out - 1) : max((o + 0.5) * s - 0.5, 0), first along
        ///   the width, then the height (PyTorch's order of operations).
        std::string mode = "nearest";
        /// For "bilinear": the corner pixels of input and output are aligned (see mode).
        bool align_corners = false;
    };

    /// x resized to the params' size: [N, C, OH, OW] (or [N, OH, OW, C] for "NHWC").
    tensor upsample(const tensor& x, const upsample_params& p, std::string_view data_format = "NCHW");
}
