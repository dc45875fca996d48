#pragma once
// Shared by conv.cpp, pool.cpp and batch_norm.cpp: the argument checks of the window ops, with
// messages that start with the op's name and name the offending argument and shapes, and max
// pooling's two halves, which the batch-norm + ReLU + max-pool fusion reuses.
#include <array>
#include <cstdint>
#include <string>
#include <string_view>

#include "backends/common/kernels.hpp"
#include "xgrad/ops/conv.hpp"
#include "xgrad/ops/pool.hpp"

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

    // ---- conv2d's fused products (conv_gemm.cpp) -------------------------------------------
    //
    // Internal ops on checked arguments (conv2d checks them), each recorded, each with the
    // other two as its gradients. x is one group's input in the layout (any strides); wmat is
    // the weight as the GEMM reads it: NHWC [K, O] with rows (kh, kw, c), NCHW [O, K] with
    // columns (c, kh, kw), K = C * KH * KW; y and dy are [N, OH, OW, O] (NHWC) or
    // [N, O, OH, OW] (NCHW). Any floating dtype (16-bit ones compute in float32 and round once
    // on store); all operands share dtype and device. Results are new contiguous tensors.

    /// The window, the layout, and the output size the window gives for x's spatial size.
    struct conv_geometry
    {
        window2d w;
        bool channels_last = false;
        std::array<std::int64_t, 2> out{};
    };

    /// y = unfold(x) wmat (NHWC) or wmat unfold(x_n) per image (NCHW), plus bias [O] when
    /// defined.
    tensor conv_forward(const tensor& x, const tensor& wmat, const tensor& bias, const conv_geometry& g);
    /// dx (shape x_shape) = fold(dy wmat^T) (NHWC) or fold(wmat^T dy_n) per image (NCHW): the
    /// gradient of conv_forward with respect to x.
    tensor conv_input_grad(const tensor& dy, const tensor& wmat, const shape_type& x_shape, const conv_geometry& g);
    /// dW (wmat's shape) = unfold(x)^T dy (NHWC) or the sum over images of dy_n unfold(x_n)^T
    /// (NCHW): the gradient of conv_forward with respect to wmat.
    tensor conv_weight_grad(const tensor& x, const tensor& dy, const conv_geometry& g);
    /// Sets how many cols elements one block of images may unfold at a time (at least 1; the
    /// default is 2^18) and returns the previous value. For tests: the blocking changes the
    /// order of the weight gradient's sum over blocks, not what is summed.
    std::int64_t conv_set_block_elements(std::int64_t elements) noexcept;
    /// Sets how many blocks a batch is cut into at least, where it has that many images (at
    /// least 1, which leaves the blocks to conv_set_block_elements alone; the default is 16),
    /// and returns the previous value. For tests, like conv_set_block_elements.
    std::int64_t conv_set_min_blocks(std::int64_t blocks) noexcept;

    /// Max pooling's window positions, not recorded: what the scatter below needs to send a
    /// gradient back to x, and what a pooling node saves for its backward. The maxima are
    /// kept apart (max_pool_picked): they are the node's output, and a node that held its own
    /// output would never be freed (output -> node -> output).
    struct max_pool_picks
    {
        tensor idx;         ///< int64, the maxima's shape: each maximum's offset in a contiguous x
        shape_type x_shape; ///< the shape of the (contiguous) x the offsets index
        bool channels_last = false;
        kernels::window2d_dims d; ///< the windows
    };
    /// What max_pool_pick returns: the window maxima and their positions.
    struct max_pool_picked
    {
        tensor out; ///< the maxima, in x's layout (contiguous)
        max_pool_picks picks;
    };
    /// The argument checks of max_pool2d (errors name `op`), without touching data.
    void max_pool_check(const tensor& x, const pool2d_params& p, std::string_view data_format, const char* op);
    /// Checks the arguments as max_pool2d does (errors name `op`), then picks every window's
    /// maximum in one kernel pass (see pool.hpp for the tie and NaN rules).
    max_pool_picked max_pool_pick(const tensor& x, const pool2d_params& p, std::string_view data_format,
                                  const char* op);
    /// put_add(g, picks.idx, picks.x_shape), recorded (its gradient is take at picks.idx):
    /// the gradient of the picks' maxima sent back to x. Over disjoint windows one kernel pass
    /// writes it without a zero fill first; the bits are put_add's either way. relu_y: empty,
    /// or the maxima of a ReLU output (picks.idx's shape, contiguous), and then g is masked by
    /// relu_y > 0 first, put_add(where(relu_y > 0, g, 0), ...), over disjoint windows as the
    /// kernel reads g.
    tensor max_pool_scatter(const tensor& g, const max_pool_picks& picks, const tensor& relu_y = {});
}
