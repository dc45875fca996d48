#pragma once
// The three convolution kernels of the kernel list (conv2d_forward, conv2d_input_grad,
// conv2d_weight_grad), written once over a backend's own kernel table: each block of images is
// unfolded (unfold2d) into scratch from the table's allocator, multiplied (matmul) and, for the
// input gradient, folded (fold2d), so the cols matrices of a convolution live in the cache a
// block at a time instead of in memory whole. Contracts: kernel_list.hpp.
//
// A backend calls these with its table and an executor, `exec(count, fn)`, which runs
// fn(first, last) over [0, count) split into ranges as it likes: the CPU backend hands the
// ranges to its threads (each then runs its kernels on its own thread, the thread pool running
// nested calls inline), the CUDA backend runs them in order on its stream. What is computed
// does not depend on the split: every block writes its own rows of y or dx, and the weight
// gradient is summed in `chains` fixed runs of blocks whose partial sums are then added in run
// order.
#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>

#include "backends/common/kernel_list.hpp"

namespace xgrad::kernels::conv_blocks
{
    /// The sizes every kernel of the family derives from its arguments.
    struct plan
    {
        window2d_dims d;
        std::int64_t o, l, k, block, blocks;
        bool channels_last;
        std::size_t elem;

        plan(const window2d_dims& dims, std::int64_t out_channels, bool cl, std::int64_t images_per_block, dtype dt)
            // An empty batch computes no product: L is taken as 0 there, since the ops bound
            // N * L * K, not OH * OW alone.
            : d(dims), o(out_channels), l(dims.n == 0 ? 0 : dims.oh * dims.ow), k(dims.c * dims.kh * dims.kw),
              block(std::max<std::int64_t>(images_per_block, 1)), blocks((dims.n + block - 1) / block),
              channels_last(cl), elem(dt == dtype::float64 ? 8 : 4)
        {
        }

        /// Images in block b and the kernels' dims for them.
        std::int64_t images(std::int64_t b) const { return std::min(block, d.n - b * block); }
        window2d_dims dims(std::int64_t b) const
        {
            window2d_dims r = d;
            r.n = images(b);
            return r;
        }

        /// Kernel strides (n, c, kh, kw, oh, ow) of a block's cols scratch. channels_last:
        /// [nb*L, K] with columns (kh, kw, c), the matrix multiplied by w [K, O]. Channels
        /// first: [nb, K, L] with rows (c, kh, kw), one [K, L] matrix per image (by_image), or
        /// [K, nb*L], one matrix over the block (the weight gradient's operand).
        std::array<std::int64_t, 6> cols_strides(std::int64_t nb, bool by_image) const
        {
            if (channels_last)
                return {l * k, 1, d.kw * d.c, d.c, d.ow * k, k};
            const std::int64_t row = by_image ? l : nb * l; // between consecutive (c, kh, kw) rows
            return {by_image ? k * l : l, d.kh * d.kw * row, d.kw * row, row, d.ow, 1};
        }
    };

    /// Memory from a kernel table's allocator for the lifetime of the object.
    class scratch
    {
    public:
        scratch(const kernel_table& t, std::size_t bytes) : m_t(t), m_p(bytes != 0 ? t.allocate(bytes) : nullptr) {}
        ~scratch() { m_t.deallocate(m_p); }
        scratch(const scratch&) = delete;
        scratch& operator=(const scratch&) = delete;
        void* get() const noexcept { return m_p; }

    private:
        const kernel_table& m_t;
        void* m_p;
    };

    inline const char* at(const void* p, std::int64_t elements, std::size_t elem)
    {
        return static_cast<const char*>(p) + elements * static_cast<std::int64_t>(elem);
    }
    inline char* at(void* p, std::int64_t elements, std::size_t elem)
    {
        return static_cast<char*>(p) + elements * static_cast<std::int64_t>(elem);
    }

    /// A float32 copy, in scratch from the table, of a bfloat16 array of ndim axes (its strides
    /// and extents), contiguous in the same axis order; an empty one where src is null. With
    /// `read` false, only the scratch (for an output the float32 kernel assigns).
    class float32_copy
    {
    public:
        float32_copy(const kernel_table& t, const void* src, const std::int64_t* strides, int ndim,
                     const std::int64_t* shape, bool read = true)
            : m_s(t, src == nullptr ? 0 : static_cast<std::size_t>(contiguous(ndim, shape)) * 4)
        {
            if (read && src != nullptr && m_s.get() != nullptr)
                t.copy(m_s.get(), m_strides.data(), dtype::float32, src, strides, dtype::bfloat16, ndim, shape);
        }
        void* get() const noexcept { return m_s.get(); }
        const std::int64_t* strides() const noexcept { return m_strides.data(); }

    private:
        /// Fills m_strides (row-major) and returns the element count.
        std::int64_t contiguous(int ndim, const std::int64_t* shape)
        {
            std::int64_t step = 1;
            for (int i = ndim - 1; i >= 0; --i)
            {
                m_strides[static_cast<std::size_t>(i)] = step;
                step *= shape[i];
            }
            return step;
        }

        std::array<std::int64_t, 4> m_strides{};
        scratch m_s;
    };

    /// An image operand [n, c, h, w] (four strides) as float32, stored in the memory order of
    /// its layout (channels last or first), and its (n, c, h, w) strides.
    struct float32_image
    {
        float32_image(const kernel_table& t, const void* src, const std::int64_t* s, const window2d_dims& d,
                      bool channels_last, bool read = true)
            : shape(channels_last ? std::array<std::int64_t, 4>{d.n, d.h, d.w, d.c}
                                  : std::array<std::int64_t, 4>{d.n, d.c, d.h, d.w}),
              src_strides(channels_last ? std::array<std::int64_t, 4>{s[0], s[2], s[3], s[1]}
                                        : std::array<std::int64_t, 4>{s[0], s[1], s[2], s[3]}),
              copy(t, src, src_strides.data(), 4, shape.data(), read)
        {
            const std::int64_t* c = copy.strides();
            strides = channels_last ? std::array<std::int64_t, 4>{c[0], c[3], c[1], c[2]}
                                    : std::array<std::int64_t, 4>{c[0], c[1], c[2], c[3]};
        }

        std::array<std::int64_t, 4> shape, src_strides, strides{};
        float32_copy copy;
    };

    /// Rounds n contiguous float32 elements of src into the bfloat16 array dst.
    inline void round_to_bfloat16(const kernel_table& t, void* dst, const void* src, std::int64_t n)
    {
        const std::int64_t shape[1] = {n}, unit[1] = {1};
        if (n != 0)
            t.copy(dst, unit, dtype::bfloat16, src, unit, dtype::float32, 1, shape);
    }

    // bfloat16 through float32 (kernel_list.hpp: bfloat16 operands are summed in float32 and
    // rounded once): the operands converted into float32 scratch, `run` (the backend's float32
    // kernel) called on the copies, its output rounded to bfloat16. For backends, or shapes,
    // without bfloat16 products of their own; the bits are those of the float32 kernel on the
    // widened operands, rounded once.

    template <class Run>
    void forward_through_float32(const kernel_table& t, void* y, const void* x, const std::int64_t* xs, const void* w,
                                 const void* bias, const window2d_dims& d, std::int64_t o, bool channels_last,
                                 Run&& run)
    {
        const std::int64_t k = d.c * d.kh * d.kw, n_y = d.n * d.oh * d.ow * o;
        const std::int64_t unit[1] = {1}, wn[1] = {k * o}, bn[1] = {o}, yn[1] = {n_y};
        const float32_image xf(t, x, xs, d, channels_last);
        const float32_copy wf(t, w, unit, 1, wn), bf(t, bias, unit, 1, bn);
        const float32_copy yf(t, y, unit, 1, yn, false);
        run(yf.get(), xf.copy.get(), xf.strides.data(), wf.get(), bias != nullptr ? bf.get() : nullptr);
        round_to_bfloat16(t, y, yf.get(), n_y);
    }

    template <class Run>
    void input_grad_through_float32(const kernel_table& t, void* dx, const std::int64_t* dxs, const void* dy,
                                    const void* w, const window2d_dims& d, std::int64_t o, bool channels_last,
                                    Run&& run)
    {
        const std::int64_t k = d.c * d.kh * d.kw;
        const std::int64_t unit[1] = {1}, wn[1] = {k * o}, yn[1] = {d.n * d.oh * d.ow * o};
        const float32_copy dyf(t, dy, unit, 1, yn), wf(t, w, unit, 1, wn);
        const float32_image dxf(t, dx, dxs, d, channels_last, false);
        run(dxf.copy.get(), dxf.strides.data(), dyf.get(), wf.get());
        if (dxf.copy.get() != nullptr)
            t.copy(dx, dxf.src_strides.data(), dtype::bfloat16, dxf.copy.get(), dxf.copy.strides(), dtype::float32, 4,
                   dxf.shape.data());
    }

    template <class Run>
    void weight_grad_through_float32(const kernel_table& t, void* dw, const void* x, const std::int64_t* xs,
                                     const void* dy, const window2d_dims& d, std::int64_t o, bool channels_last,
                                     Run&& run)
    {
        const std::int64_t k = d.c * d.kh * d.kw;
        const std::int64_t unit[1] = {1}, wn[1] = {k * o}, yn[1] = {d.n * d.oh * d.ow * o};
        const float32_image xf(t, x, xs, d, channels_last);
        const float32_copy dyf(t, dy, unit, 1, yn), dwf(t, dw, unit, 1, wn, false);
        run(dwf.get(), xf.copy.get(), xf.strides.data(), dyf.get());
        round_to_bfloat16(t, dw, dwf.get(), k * o);
    }

    /// Unfolds block b of x into cols (laid out as cols_strides(nb, by_image) says).
    inline void unfold_block(const kernel_table& t, const plan& p, void* cols, const void* x, const std::int64_t* xs,
                             dtype dt, std::int64_t b, bool by_image)
    {
        const window2d_dims d = p.dims(b);
        if (d.c == 0) // no taps: cols is empty
            return;
        const auto cs = p.cols_strides(d.n, by_image);
        t.unfold2d(cols, cs.data(), at(x, b * p.block * xs[0], p.elem), xs, dt, d, 0.0);
    }

    template <class Exec>
    void forward(const kernel_table& t, Exec&& exec, void* y, const void* x, const std::int64_t* xs, const void* w,
                 const void* bias, dtype dt, const window2d_dims& d, std::int64_t o, bool channels_last,
                 std::int64_t block)
    {
        if (dt == dtype::bfloat16)
            return forward_through_float32(
                t, y, x, xs, w, bias, d, o, channels_last,
                [&](void* yf, const void* xf, const std::int64_t* xfs, const void* wf, const void* bf) {
                    forward(t, exec, yf, xf, xfs, wf, bf, dtype::float32, d, o, channels_last, block);
                });
        const plan p(d, o, channels_last, block, dt);
        const std::int64_t l = p.l, k = p.k;
        exec(p.blocks, [&](std::int64_t first, std::int64_t last) {
            const scratch cols(t, static_cast<std::size_t>(p.block * l * k) * p.elem);
            for (std::int64_t b = first; b < last; ++b)
            {
                const std::int64_t nb = p.images(b);
                unfold_block(t, p, cols.get(), x, xs, dt, b, true);
                void* yb = at(y, b * p.block * l * o, p.elem);
                if (bias != nullptr)
                {
                    // The bias fills the block and the GEMM adds the product to it (beta = 1).
                    const std::int64_t shape[3] = {nb, channels_last ? l : o, channels_last ? o : l};
                    const std::int64_t ys[3] = {l * o, shape[2], 1};
                    const std::int64_t bs[3] = {0, channels_last ? 0 : 1, channels_last ? 1 : 0};
                    t.copy(yb, ys, dt, bias, bs, dt, 3, shape);
                }
                if (channels_last)
                {
                    const std::int64_t as[3] = {0, k, 1}, ws[3] = {0, o, 1};
                    t.matmul(yb, cols.get(), as, w, ws, dt, 1, nb * l, o, k, bias != nullptr);
                }
                else
                {
                    const std::int64_t ws[3] = {0, k, 1}, cs[3] = {k * l, l, 1};
                    t.matmul(yb, w, ws, cols.get(), cs, dt, nb, o, l, k, bias != nullptr);
                }
            }
        });
    }

    template <class Exec>
    void input_grad(const kernel_table& t, Exec&& exec, void* dx, const std::int64_t* dxs, const void* dy,
                    const void* w, dtype dt, const window2d_dims& d, std::int64_t o, bool channels_last,
                    std::int64_t block)
    {
        if (dt == dtype::bfloat16)
            return input_grad_through_float32(
                t, dx, dxs, dy, w, d, o, channels_last,
                [&](void* dxf, const std::int64_t* dxfs, const void* dyf, const void* wf) {
                    input_grad(t, exec, dxf, dxfs, dyf, wf, dtype::float32, d, o, channels_last, block);
                });
        const plan p(d, o, channels_last, block, dt);
        const std::int64_t l = p.l, k = p.k;
        if (d.n == 0 || d.c == 0 || d.h == 0 || d.w == 0) // an empty dx: nothing to write
            return;
        exec(p.blocks, [&](std::int64_t first, std::int64_t last) {
            const scratch dcols(t, static_cast<std::size_t>(p.block * l * k) * p.elem);
            for (std::int64_t b = first; b < last; ++b)
            {
                const std::int64_t nb = p.images(b);
                const void* dyb = at(dy, b * p.block * l * o, p.elem);
                if (channels_last)
                {
                    // dcols [nb*L, K] = dy [nb*L, O] w^T, w^T read through w's [K, O] storage.
                    const std::int64_t ds[3] = {0, o, 1}, ws[3] = {0, 1, o};
                    t.matmul(dcols.get(), dyb, ds, w, ws, dt, 1, nb * l, k, o, false);
                }
                else
                {
                    // dcols[i] [K, L] = w^T [K, O] dy[i] [O, L].
                    const std::int64_t ws[3] = {0, 1, k}, ds[3] = {o * l, l, 1};
                    t.matmul(dcols.get(), w, ws, dyb, ds, dt, nb, k, l, o, false);
                }
                const auto cs = p.cols_strides(nb, true);
                t.fold2d(at(dx, b * p.block * dxs[0], p.elem), dxs, dcols.get(), cs.data(), dt, p.dims(b));
            }
        });
    }

    /// The weight gradient's sum over blocks, the order every path that computes it keeps:
    /// the blocks are summed in `chains` (clamped to [1, blocks]) consecutive runs, run c over
    /// blocks [first_block(c), last_block(c)); run 0 sums into dw itself, the others into
    /// partials that add_partials() then adds to dw in run order. With no blocks (or ko = 0)
    /// there are no runs, and dw (ko elements) is zero from the constructor on.
    class weight_grad_runs
    {
    public:
        weight_grad_runs(const kernel_table& t, void* dw, dtype dt, std::int64_t ko, std::int64_t blocks,
                         std::int64_t chains)
            : m_t(t), m_dw(dw), m_dt(dt), m_elem(dt == dtype::float64 ? 8 : 4), m_ko(ko), m_blocks(blocks),
              m_chains(blocks == 0 || ko == 0 ? 0 : std::clamp<std::int64_t>(chains, 1, blocks)),
              m_partials(t, static_cast<std::size_t>(std::max<std::int64_t>(m_chains - 1, 0) * ko) * m_elem)
        {
            if (m_chains == 0 && ko != 0) // no images: the sum over them is zero
            {
                const std::int64_t shape[1] = {ko}, unit[1] = {1};
                t.fill(dw, unit, dt, 1, shape, 0.0);
            }
        }

        /// The runs (0 where there is nothing to sum).
        std::int64_t count() const { return m_chains; }
        std::int64_t first_block(std::int64_t c) const { return c * m_blocks / m_chains; }
        std::int64_t last_block(std::int64_t c) const { return (c + 1) * m_blocks / m_chains; }
        /// Where run c's sum goes (ko elements).
        void* out(std::int64_t c) const { return c == 0 ? m_dw : at(m_partials.get(), (c - 1) * m_ko, m_elem); }

        /// dw += each partial, in run order.
        void add_partials() const
        {
            const std::int64_t shape[1] = {m_ko}, unit[1] = {1};
            for (std::int64_t c = 1; c < m_chains; ++c)
                m_t.binary(m_dw, unit, m_dw, unit, out(c), unit, m_dt, 1, shape, binary_op::add);
        }

    private:
        const kernel_table& m_t;
        void* m_dw;
        dtype m_dt;
        std::size_t m_elem;
        std::int64_t m_ko, m_blocks, m_chains;
        scratch m_partials;
    };

    template <class Exec>
    void weight_grad(const kernel_table& t, Exec&& exec, void* dw, const void* x, const std::int64_t* xs,
                     const void* dy, dtype dt, const window2d_dims& d, std::int64_t o, bool channels_last,
                     std::int64_t block, std::int64_t chains)
    {
        if (dt == dtype::bfloat16)
            return weight_grad_through_float32(
                t, dw, x, xs, dy, d, o, channels_last,
                [&](void* dwf, const void* xf, const std::int64_t* xfs, const void* dyf) {
                    weight_grad(t, exec, dwf, xf, xfs, dyf, dtype::float32, d, o, channels_last, block, chains);
                });
        const plan p(d, o, channels_last, block, dt);
        const std::int64_t l = p.l, k = p.k;
        const weight_grad_runs runs(t, dw, dt, k * o, p.blocks, chains);
        if (runs.count() == 0)
            return;
        exec(runs.count(), [&](std::int64_t first, std::int64_t last) {
            const scratch cols(t, static_cast<std::size_t>(p.block * l * k) * p.elem);
            // Channels first: the block's dy gathered as one [O, nb*L] matrix.
            const scratch gathered(t, channels_last ? 0 : static_cast<std::size_t>(o * p.block * l) * p.elem);
            for (std::int64_t c = first; c < last; ++c)
            {
                void* out = runs.out(c);
                const std::int64_t b0 = runs.first_block(c), b1 = runs.last_block(c);
                for (std::int64_t b = b0; b < b1; ++b)
                {
                    const std::int64_t nb = p.images(b);
                    unfold_block(t, p, cols.get(), x, xs, dt, b, false);
                    const void* dyb = at(dy, b * p.block * l * o, p.elem);
                    if (channels_last)
                    {
                        // dw [K, O] (+)= cols^T [K, nb*L] dy [nb*L, O].
                        const std::int64_t cs[3] = {0, 1, k}, ds[3] = {0, o, 1};
                        t.matmul(out, cols.get(), cs, dyb, ds, dt, 1, k, o, nb * l, b > b0);
                    }
                    else
                    {
                        const std::int64_t gshape[3] = {o, nb, l};
                        const std::int64_t gs[3] = {nb * l, l, 1}, ys[3] = {l, o * l, 1};
                        t.copy(gathered.get(), gs, dt, dyb, ys, dt, 3, gshape);
                        // dw [O, K] (+)= dy [O, nb*L] cols^T [nb*L, K], cols stored as [K, nb*L].
                        const std::int64_t ds[3] = {0, nb * l, 1}, cs[3] = {0, 1, nb * l};
                        t.matmul(out, gathered.get(), ds, cols.get(), cs, dt, 1, o, k, nb * l, b > b0);
                    }
                }
            }
        });
        runs.add_partials();
    }
}
