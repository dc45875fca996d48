#pragma once
// 2-D pooling (core/src/ops/pool.cpp), composed from unfold2d, reductions and take, so that
// the gradients of every order come from those primitives.
//
// Layouts as in conv.hpp: "NCHW" [N, C, H, W] or "NHWC" [N, H, W, C]; results keep the layout
// and are contiguous. dtypes: floating point; 16-bit inputs compute in float32 inside each
// composed op and are rounded to the dtype after each (a 16-bit average is rounded after the
// window sum and after the division).
// Errors: xgrad::invalid_argument naming the argument and the shapes (undefined or
// non-floating x, rank other than 4, unknown data_format, kernel/stride/dilation < 1,
// padding < 0 or more than half the kernel, a window lying entirely in padding (possible with
// dilation), an empty output; adaptive_avg_pool2d: output_size < 1, an empty spatial
// extent, or an output whose element or byte count does not fit int64).
// Cost: the argument checks take constant time whatever the extents; an empty input (N or C
// 0) costs no work or scratch sized by the kernel or the output size.
#include <array>
#include <cstdint>
#include <optional>
#include <string_view>

#include "xgrad/ops/conv.hpp"
#include "xgrad/tensor.hpp"

namespace xgrad
{
    struct pool2d_params
    {
        std::array<std::int64_t, 2> kernel{2, 2};
        /// Defaults to the kernel (non-overlapping windows).
        std::optional<std::array<std::int64_t, 2>> stride;
        std::array<std::int64_t, 2> padding{0, 0};
        std::array<std::int64_t, 2> dilation{1, 1};
        /// avg_pool2d only: whether padded positions count in the divisor (PyTorch's default).
        bool count_include_pad = true;
    };

    /// Maximum over each window; padding never wins. The result is take(x, positions of the
    /// maxima) (ops/index.hpp), so the gradient goes to the element chosen in each window:
    /// where several tie, the first in (kh, kw) order (the usual subgradient of frameworks,
    /// unlike xgrad::max, which shares it); a NaN in a window is chosen over numbers and
    /// propagates. Overlapping windows that choose the same element add their gradients.
    tensor max_pool2d(const tensor& x, const pool2d_params& p, std::string_view data_format = "NCHW");
    /// Mean over each window.
    tensor avg_pool2d(const tensor& x, const pool2d_params& p, std::string_view data_format = "NCHW");
    /// Mean over the windows that split the input into `output_size` cells, as PyTorch's
    /// adaptive_avg_pool2d: cell i along an axis of extent n covers [floor(i n / o), ceil((i + 1) n / o)).
    /// output_size {1, 1} is global average pooling. Cells may overlap, and output_size may
    /// exceed the input. When the cells do not tile the input evenly, each axis is averaged in
    /// turn, all cells of an axis in one gather (a constant number of ops, with scratch of the
    /// order of the input plus the output; none for an empty input).
    tensor adaptive_avg_pool2d(const tensor& x, std::array<std::int64_t, 2> output_size,
                               std::string_view data_format = "NCHW");
}
