#pragma once
// 2-D convolution, its transpose and their linear building blocks (core/src/ops/conv.cpp, conv_gemm.cpp).
//
// conv2d is im2col + GEMM: unfold2d (im2col) gathers every receptive field into a matrix and
// one GEMM (the backend's, OpenBLAS on the CPU) multiplies it by the weights, with the bias
// added in the GEMM. conv2d runs that product, and its two gradients (fold2d of the product of
// dy with the weights, and the product of the unfolded input with dy), a cache-sized block of
// images at a time, so that the unfolded matrix never leaves the cache; each of the three is a
// recorded op whose gradients are the other two, so conv2d has gradients of every order.
// unfold2d and fold2d (col2im) are also ops of their own, a pair of adjoint linear primitives:
// the gradient of each is the other.
//
// Layouts (data_format):
//   "NCHW": x is [N, C, H, W];
//   "NHWC": x is [N, H, W, C].
// Weights are [O, C / groups, KH, KW] in both layouts (PyTorch's OIHW), so a state dict does
// not depend on the activation layout. Output spatial size, per axis:
//   out = (in + 2 * padding - dilation * (kernel - 1) - 1) / stride + 1   (floor division)
//
// dtypes: float32, float64, float16, bfloat16 (16-bit tensors compute in float32 inside the
// GEMM and round on store, like matmul). All operands must share dtype and device.
//
// Errors (xgrad::invalid_argument, naming the argument and the shapes): an undefined or
// non-floating operand, rank other than 4, an unknown data_format, kernel/stride/dilation < 1,
// padding < 0, any window field above 2^31 - 1, an empty output (kernel larger than the padded
// input), groups < 1, channels not divisible by groups, weight/bias shapes that do not match,
// operands of different dtypes or devices, a cols tensor whose shape does not match the window
// in fold2d. Everything is checked before any data is read.
//
// Strided inputs (a channel slice, a permuted view) are read in place, without a copy.
#include <array>
#include <cstdint>
#include <string_view>

#include "xgrad/tensor.hpp"

namespace xgrad
{
    /// A sliding window over the two spatial axes, {height, width} in every field.
    struct window2d
    {
        std::array<std::int64_t, 2> kernel{1, 1};
        std::array<std::int64_t, 2> stride{1, 1};
        std::array<std::int64_t, 2> padding{0, 0};
        std::array<std::int64_t, 2> dilation{1, 1};
    };

    /// Output spatial size {OH, OW} of `w` over an input of spatial size {h, wd}; throws
    /// xgrad::invalid_argument naming the window and the input when it is empty or invalid.
    std::array<std::int64_t, 2> window_output_size(const window2d& w, std::int64_t h, std::int64_t wd);

    /// im2col. Positions outside the input (padding) read `pad_value`.
    ///   "NCHW": [N, C, H, W] -> [C * KH * KW, N * OH * OW], row (c, kh, kw), column (n, oh, ow);
    ///   "NHWC": [N, H, W, C] -> [N * OH * OW, KH * KW * C], row (n, oh, ow), column (kh, kw, c).
    /// Linear in x (for pad_value 0); its gradient is fold2d.
    tensor unfold2d(const tensor& x, const window2d& w, std::string_view data_format = "NCHW", double pad_value = 0.0);

    /// col2im, the adjoint of unfold2d: adds every column entry back into the input position it
    /// was read from (entries from padding are dropped). `input_shape` is the shape of the
    /// unfolded tensor ([N, C, H, W] or [N, H, W, C]); cols must have the shape unfold2d gives
    /// for it. Its gradient is unfold2d (pad_value 0). Each sum is formed in a fixed order (the
    /// taps (kh, kw) in turn), so results do not depend on the thread count; 16-bit cols are
    /// summed in float32 and rounded once.
    tensor fold2d(const tensor& cols, const shape_type& input_shape, const window2d& w,
                  std::string_view data_format = "NCHW");

    struct conv2d_params
    {
        std::array<std::int64_t, 2> stride{1, 1};
        std::array<std::int64_t, 2> padding{0, 0};
        std::array<std::int64_t, 2> dilation{1, 1};
        std::int64_t groups = 1;
    };

    /// Cross-correlation, as PyTorch's conv2d: x [N, C, H, W] (or NHWC), weight
    /// [O, C / groups, KH, KW], bias [O] or undefined (no bias). Result [N, O, OH, OW] (or
    /// [N, OH, OW, O] for "NHWC"), contiguous. In 16 bits the products and the bias are summed in
    /// float32 and rounded once to the dtype.
    tensor conv2d(const tensor& x, const tensor& weight, const tensor& bias = {}, const conv2d_params& p = {},
                  std::string_view data_format = "NCHW");

    struct conv_transpose2d_params
    {
        std::array<std::int64_t, 2> stride{1, 1};
        std::array<std::int64_t, 2> padding{0, 0};
        /// Added to one side of each output axis, to pick among the input sizes that a strided
        /// conv2d maps to the same output size; each in [0, max(stride, dilation)).
        std::array<std::int64_t, 2> output_padding{0, 0};
        std::array<std::int64_t, 2> dilation{1, 1};
        std::int64_t groups = 1;
    };

    /// The transposed convolution (PyTorch's conv_transpose2d): the adjoint of conv2d with the
    /// same weight, window and groups, i.e. the gradient of that conv2d with respect to its
    /// input, plus bias. x [N, C_in, H, W] (or NHWC), weight [C_in, C_out / groups, KH, KW]
    /// (PyTorch's layout: conv2d's [O, C / groups, KH, KW] read the other way), bias [C_out] or
    /// undefined. Result [N, C_out, OH, OW] (or NHWC), per axis
    ///   out = (in - 1) * stride - 2 * padding + dilation * (kernel - 1) + output_padding + 1.
    /// Computed by conv2d's own input-gradient product, so its gradients are conv2d and
    /// conv2d's weight gradient, to every order. dtypes and layouts as conv2d. Errors as
    /// conv2d's, and: weight.shape[0] != C_in, C_in not divisible by groups, output_padding
    /// outside [0, max(stride, dilation)), an empty output.
    tensor conv_transpose2d(const tensor& x, const tensor& weight, const tensor& bias = {},
                            const conv_transpose2d_params& p = {}, std::string_view data_format = "NCHW");
}
