#pragma once
// Shared by conv.cpp and pool.cpp: the argument checks of the window ops, with messages that
// start with the op's name and name the offending argument and shapes.
#include <array>
#include <cstdint>
#include <string>
#include <string_view>

#include "backends/common/kernels.hpp"
#include "xgrad/ops/conv.hpp"

namespace xgrad::detail
{
    /// Throws xgrad::invalid_argument("<op>: <what>").
    [[noreturn]] void window_fail(const char* op, const std::string& what);
    /// "{2, 3}"
    std::string pair_to_string(const std::array<std::int64_t, 2>& v);
    /// "kernel {3, 3}, stride {1, 1}, padding {0, 0}, dilation {1, 1}"
    std::string window_to_string(const window2d& w);
    /// false for "NCHW", true for "NHWC"; throws naming data_format otherwise.
    bool channels_last_format(std::string_view data_format, const char* op);
    /// Throws unless `t` (called `arg` in the message) is a defined floating-point tensor of rank 4.
    void check_image(const tensor& t, const char* arg, const char* op);

    /// The extents of an image tensor in either layout.
    struct image_dims
    {
        std::int64_t n = 0, c = 0, h = 0, w = 0;
        /// The channel, height and width axes of the layout.
        std::int64_t c_axis = 1, h_axis = 2, w_axis = 3;
    };
    image_dims image_dims_of(const shape_type& shape, bool channels_last);

    /// Checks every field of `w` (kernel, stride, dilation >= 1; padding >= 0; none above
    /// 2^31 - 1) and the input spatial size {h, wd} (0 to 2^62), and returns the output size,
    /// throwing when it would be empty.
    std::array<std::int64_t, 2> checked_output_size(const window2d& w, std::int64_t h, std::int64_t wd, const char* op);
    /// Throws unless the unfolded matrix of an image `im` under `w` (output size `out`) has at
    /// most 2^62 entries, so that no size or index computed from it overflows.
    void check_cols_size(const image_dims& im, const window2d& w, const std::array<std::int64_t, 2>& out,
                         const char* op);

    /// The kernels' geometry for an image of `shape` in the given layout, output size `out`.
    kernels::window2d_dims dims_of(const shape_type& shape, const window2d& w, bool channels_last,
                                   const std::array<std::int64_t, 2>& out);
    /// The strides of an image tensor of that layout, in the kernels' (n, c, h, w) order.
    std::array<std::int64_t, 4> image_strides(const strides_type& s, bool channels_last);
}
