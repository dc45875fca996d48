// conv2d's three products, each one recorded op and one backend kernel:
//
//   conv_forward      y  = unfold(x) * W (+ bias)        x-shaped in, y-shaped out
//   conv_input_grad   dx = fold(dy * W^T)                y-shaped in, x-shaped out
//   conv_weight_grad  dW = unfold(x)^T * dy              x- and y-shaped in, W-shaped out
//
// (NHWC: unfold(x) is [N*L, K], W is [K, O]; NCHW: per image, W is [O, K] and unfold(x_n) is
// [K, L], so y_n = W unfold(x_n); L = OH*OW, K = KH*KW*C.)
//
// Why fused: composed from unfold2d, matmul and fold2d, a convolution writes its whole cols
// matrix (K/C times the input: 14.4 MB for the example's second convolution at batch 64) to
// memory and reads it back in the GEMM, saves it for the backward pass, and in the backward
// writes and re-reads a cols-sized gradient as well. Here each op is one kernel (kernel_list.hpp,
// conv2d_*, written once in backends/common/conv_blocks.hpp) that unfolds a block of images
// into scratch small enough to stay in a core's cache (block_elements), multiplies it there
// and folds it there, so the cols matrices never reach DRAM and nothing cols-sized is kept
// between the passes: the weight gradient unfolds x again, block by block. The ops check the
// shapes, convert float16 operands to float32 (bfloat16 goes to the kernels as it is) and
// choose the blocking, from the shape alone.
//
// Gradients: all three maps are linear in each operand, and each one's adjoints are the other
// two (with <., .> the sum of elementwise products):
//   <y, G>  = <unfold(x) W, G>:   d/dx = fold(G W^T)   = conv_input_grad(G, W)
//                                 d/dW = unfold(x)^T G = conv_weight_grad(x, G)
//   <dx, G> = <fold(dy W^T), G> = <dy W^T, unfold(G)>:
//                                 d/ddy = unfold(G) W  = conv_forward(G, W)
//                                 d/dW  = unfold(G)^T dy = conv_weight_grad(G, dy)
//   <dW, G> = <unfold(x)^T dy, G> = <unfold(x) G, dy> = <dy G^T, unfold(x)>:
//                                 d/ddy = unfold(x) G  = conv_forward(x, G)
//                                 d/dx  = fold(dy G^T) = conv_input_grad(dy, G)
// Every backward rule is a call of these recorded ops, so gradients of every order exist. The
// composition (unfold2d, matmul, fold2d) remains the oracle the tests compare against.
//
// Determinism: the blocks and the weight gradient's runs of blocks (chains) depend on the shape
// alone, and the kernels' results depend on nothing else, so they are the same at every thread
// count.
#include <algorithm>
#include <atomic>
#include <string>
#include <vector>

#include "../detail.hpp"
#include "conv_internal.hpp"
#include "core/src/profiler/record.hpp"
#include "xgrad/autograd.hpp"
#include "xgrad/errors.hpp"
#include "xgrad/ops/reduce.hpp"
#include "xgrad/ops/shape.hpp"

namespace xgrad::detail
{
    namespace
    {
        /// Scratch elements of one block's cols matrix: 2^18 (1 MiB in float32) leaves a
        /// core's L2 (1-2 MiB on the machines measured) room for the GEMM's packed panels of the
        /// weights and for the block's share of x and y. An element count, not bytes, so that
        /// float32 and float64 are blocked alike. Settable for tests (conv_set_block_elements).
        std::atomic<std::int64_t> g_block_elements{std::int64_t{1} << 18};
        /// The weight gradient's runs of blocks: at most this many, so that threads have runs
        /// to share, and their partial sums (all runs but the first) at most partial_elements.
        constexpr std::int64_t max_chains = 16;
        constexpr std::int64_t partial_elements = std::int64_t{1} << 22;
        /// Blocks a batch is cut into at least, where it has that many images, so that threads
        /// have blocks to share. Settable for tests (conv_set_min_blocks).
        std::atomic<std::int64_t> g_min_blocks{max_chains};

        /// What every op of the family needs to know about the convolution.
        struct conv_layout
        {
            const conv_geometry& g;
            kernels::window2d_dims d;
            std::int64_t l, k, o; // L = OH * OW, K = C * KH * KW, output channels

            conv_layout(const conv_geometry& geo, const shape_type& x_shape, std::int64_t out_channels)
                // conv2d bounds N * L * K (check_cols_size), which leaves OH * OW unchecked for an
                // empty batch: L is then 0, since no product is computed.
                : g(geo), d(dims_of(x_shape, geo.w, geo.channels_last, geo.out)), l(d.n == 0 ? 0 : d.oh * d.ow),
                  k(d.c * d.kh * d.kw), o(out_channels)
            {
            }

            /// Images per block: as many as fit block_elements of cols, but no more than give
            /// min_blocks blocks where the batch allows, at least one. The second bound is for
            /// the threads: a small convolution (a first layer: 37 images of 28 x 28 x 9 taps
            /// fit) would otherwise leave a batch of 64 two blocks, and its weight gradient two
            /// threads' worth of work, unevenly shared (37 and 27 images).
            std::int64_t block() const
            {
                const std::int64_t per_image = std::max<std::int64_t>(l * k, 1);
                const std::int64_t min_blocks = g_min_blocks.load();
                const std::int64_t spread = (d.n + min_blocks - 1) / min_blocks;
                return std::clamp<std::int64_t>(std::min(g_block_elements.load() / per_image, spread), 1,
                                                std::max<std::int64_t>(d.n, 1));
            }
            /// The weight gradient's runs of blocks.
            std::int64_t chains() const
            {
                const std::int64_t blocks = (d.n + block() - 1) / block();
                const std::int64_t by_memory = 1 + partial_elements / std::max<std::int64_t>(k * o, 1);
                return std::max<std::int64_t>(1, std::min({blocks, max_chains, by_memory}));
            }

            shape_type y_shape() const
            {
                return g.channels_last ? shape_type{d.n, d.oh, d.ow, o} : shape_type{d.n, o, d.oh, d.ow};
            }
            shape_type w_shape() const { return g.channels_last ? shape_type{k, o} : shape_type{o, k}; }
        };

        void check_same_operands(const tensor& a, const tensor& b, const char* op)
        {
            check_floating(a, op);
            check_floating(b, op);
            check_same(a, b, op);
        }

        /// The dtype the kernels get: bfloat16 as it is (kernel_list.hpp: its products are
        /// summed in float32, on bfloat16 dot-product hardware where the backend has it), float16
        /// widened to float32, float32 and float64 unchanged.
        dtype kernel_dtype(dtype dt) { return dt == dtype::bfloat16 ? dt : compute_dtype(dt); }

        /// The kernel dtype's contiguous copy of an operand (itself when it already is).
        tensor gemm_ready(const tensor& t) { return raw_contiguous(raw_cast(t, kernel_dtype(t.dtype()))); }
    }

    std::int64_t conv_set_block_elements(std::int64_t elements) noexcept
    {
        return g_block_elements.exchange(std::max<std::int64_t>(elements, 1));
    }

    std::int64_t conv_set_min_blocks(std::int64_t blocks) noexcept
    {
        return g_min_blocks.exchange(std::max<std::int64_t>(blocks, 1));
    }

    tensor conv_forward(const tensor& x, const tensor& wmat, const tensor& bias, const conv_geometry& g)
    {
        XGRAD_PROFILE_OP("conv2d_forward");
        const char* op = "conv2d";
        check_same_operands(x, wmat, op);
        const conv_layout c(g, x.shape(), wmat.shape()[g.channels_last ? 1 : 0]);
        if (wmat.shape() != c.w_shape())
            window_fail(op, "weight matrix of shape " + shape_to_string(wmat.shape()) + ", expected " +
                                shape_to_string(c.w_shape()));
        const dtype cdt = kernel_dtype(x.dtype());
        const tensor xc = raw_cast(x, cdt), wc = gemm_ready(wmat);
        const tensor bc = bias.defined() ? gemm_ready(bias) : tensor{};
        tensor y = empty(c.y_shape(), cdt, x.device());
        if (y.numel() != 0)
        {
            const auto xs = image_strides(xc.strides(), g.channels_last);
            backend_for(x.device())
                .conv2d_forward(y.data_ptr(), xc.data_ptr(), xs.data(), wc.data_ptr(),
                                bc.defined() ? bc.data_ptr() : nullptr, cdt, c.d, c.o, g.channels_last, c.block());
        }
        tensor out = raw_cast(y, x.dtype());
        std::vector<tensor> inputs{x, wmat};
        if (bias.defined())
            inputs.push_back(bias);
        record("conv2d", inputs, {out}, [x, wmat, bias, g](function_node& self, const std::vector<tensor>& grads) {
            std::vector<tensor> r(bias.defined() ? 3 : 2);
            if (self.needs_input_grad(0))
                r[0] = conv_input_grad(grads[0], wmat, x.shape(), g);
            if (self.needs_input_grad(1))
                r[1] = conv_weight_grad(x, grads[0], g);
            if (bias.defined() && self.needs_input_grad(2))
                r[2] = reshape(
                    sum_to(grads[0], g.channels_last ? shape_type{bias.numel()} : shape_type{bias.numel(), 1, 1}),
                    bias.shape());
            return r;
        });
        return out;
    }

    tensor conv_input_grad(const tensor& dy, const tensor& wmat, const shape_type& x_shape, const conv_geometry& g)
    {
        XGRAD_PROFILE_OP("conv2d_input_grad");
        check_same_operands(dy, wmat, "conv2d_input_grad");
        const conv_layout c(g, x_shape, wmat.shape()[g.channels_last ? 1 : 0]);
        if (dy.shape() != c.y_shape() || wmat.shape() != c.w_shape())
            window_fail("conv2d_input_grad",
                        "dy " + shape_to_string(dy.shape()) + " and weight matrix " + shape_to_string(wmat.shape()) +
                            " do not match x " + shape_to_string(x_shape) + " (expected " +
                            shape_to_string(c.y_shape()) + " and " + shape_to_string(c.w_shape()) + ")");
        const dtype cdt = kernel_dtype(dy.dtype());
        const tensor dyc = gemm_ready(dy), wc = gemm_ready(wmat);
        tensor dx = empty(x_shape, cdt, dy.device());
        if (dx.numel() != 0)
        {
            const auto xs = image_strides(dx.strides(), g.channels_last);
            backend_for(dy.device())
                .conv2d_input_grad(dx.data_ptr(), xs.data(), dyc.data_ptr(), wc.data_ptr(), cdt, c.d, c.o,
                                   g.channels_last, c.block());
        }
        tensor out = raw_cast(dx, dy.dtype());
        record("conv2d_input_grad", {dy, wmat}, {out},
               [dy, wmat, g](function_node& self, const std::vector<tensor>& gr) {
                   std::vector<tensor> r(2);
                   if (self.needs_input_grad(0))
                       r[0] = conv_forward(gr[0], wmat, tensor{}, g);
                   if (self.needs_input_grad(1))
                       r[1] = conv_weight_grad(gr[0], dy, g);
                   return r;
               });
        return out;
    }

    tensor conv_weight_grad(const tensor& x, const tensor& dy, const conv_geometry& g)
    {
        XGRAD_PROFILE_OP("conv2d_weight_grad");
        check_same_operands(x, dy, "conv2d_weight_grad");
        const std::int64_t o = dy.dim() == 4 ? dy.shape()[g.channels_last ? 3 : 1] : -1;
        const conv_layout c(g, x.shape(), o);
        if (dy.shape() != c.y_shape())
            window_fail("conv2d_weight_grad", "dy of shape " + shape_to_string(dy.shape()) + " does not match x " +
                                                  shape_to_string(x.shape()));
        const dtype cdt = kernel_dtype(x.dtype());
        const tensor xc = raw_cast(x, cdt), dyc = gemm_ready(dy);
        tensor dw = empty(c.w_shape(), cdt, x.device());
        if (dw.numel() != 0)
        {
            const auto xs = image_strides(xc.strides(), g.channels_last);
            backend_for(x.device())
                .conv2d_weight_grad(dw.data_ptr(), xc.data_ptr(), xs.data(), dyc.data_ptr(), cdt, c.d, c.o,
                                    g.channels_last, c.block(), c.chains());
        }
        tensor out = raw_cast(dw, x.dtype());
        record("conv2d_weight_grad", {x, dy}, {out}, [x, dy, g](function_node& self, const std::vector<tensor>& gr) {
            std::vector<tensor> r(2);
            if (self.needs_input_grad(0))
                r[0] = conv_input_grad(dy, gr[0], x.shape(), g);
            if (self.needs_input_grad(1))
                r[1] = conv_forward(x, gr[0], tensor{}, g);
            return r;
        });
        return out;
    }
}
