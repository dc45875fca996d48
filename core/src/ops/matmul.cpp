// Batched matrix product through the backend's GEMM.
//
// Forward: 1-D operands are lifted to matrices (and the added dimension squeezed away after),
// batch dimensions broadcast, and each operand is passed to the kernel as one batch stride plus
// row and column strides, one of which is 1, so transposed views go to GEMM without a copy.
// Backward (for C = A B): dA = dC B^T, dB = A^T dC, each summed over broadcast batch dims.
// matmul_add (A B + D) is the same product with the output first filled with D broadcast and
// the GEMM accumulating into it (beta = 1); its third gradient is dC summed to D's shape.
#include "xgrad/ops/matmul.hpp"

#include <algorithm>
#include <stdexcept>

#include "../detail.hpp"
#include "core/src/profiler/record.hpp"
#include "xgrad/autograd.hpp"
#include "xgrad/errors.hpp"
#include "xgrad/ops/elementwise.hpp"
#include "xgrad/ops/reduce.hpp"
#include "xgrad/ops/shape.hpp"

namespace xgrad
{
    namespace
    {
        /// The operand viewed as [batch, rows, cols] strides for the kernel, copying only when
        /// the matrix is neither row- nor column-major or the batch dims do not collapse.
        struct gemm_operand
        {
            tensor m_data;
            std::int64_t m_strides[3];
        };

        /// x viewed over `full`, a shape x broadcasts to (stride 0 along the dimensions it
        /// broadcasts over), no copy.
        tensor broadcast_view(const tensor& x, const shape_type& full)
        {
            const std::size_t lead = full.size() - static_cast<std::size_t>(x.dim());
            strides_type s(full.size(), 0);
            for (std::size_t i = 0; i < static_cast<std::size_t>(x.dim()); ++i)
                s[lead + i] = x.shape()[i] == 1 ? 0 : x.strides()[i];
            return detail::alias(x, full, s, x.offset());
        }

        gemm_operand as_gemm_operand(const tensor& x, const shape_type& batch)
        {
            shape_type full = batch;
            full.push_back(x.shape()[static_cast<std::size_t>(x.dim() - 2)]);
            full.push_back(x.shape()[static_cast<std::size_t>(x.dim() - 1)]);
            // Over the full batch, no copy.
            tensor v = broadcast_view(detail::raw_cast(x, compute_dtype(x.dtype())), full);
            const std::size_t nb = batch.size();
            const std::int64_t rows = full[nb], cols = full[nb + 1];
            // GEMM takes a matrix as row-major (column stride 1, leading dimension = row stride
            // >= max(cols, 1)) or column-major (the mirror image). A stride along an extent-1
            // dimension is never used, so it may be set to whatever makes GEMM accept it.
            auto gemm_strides = [&](const tensor& t, std::int64_t& rs, std::int64_t& cs) {
                rs = t.strides()[nb];
                cs = t.strides()[nb + 1];
                if ((cs == 1 || cols <= 1) && (rows <= 1 || rs >= std::max<std::int64_t>(cols, 1)))
                {
                    rs = rows <= 1 ? std::max<std::int64_t>(cols, 1) : rs;
                    cs = 1;
                    return true;
                }
                if ((rs == 1 || rows <= 1) && (cols <= 1 || cs >= std::max<std::int64_t>(rows, 1)))
                {
                    cs = cols <= 1 ? std::max<std::int64_t>(rows, 1) : cs;
                    rs = 1;
                    return true;
                }
                return false;
            };
            // Batch dims collapse to one stride when each is the next's stride times its extent
            // (ignoring extent-1 dims), or all are 0 (a fully broadcast operand).
            auto batch_stride = [&](const tensor& t, std::int64_t& out) {
                std::int64_t stride = 0;
                bool have = false;
                for (std::size_t i = nb; i-- > 0;)
                {
                    if (full[i] == 1)
                        continue;
                    if (!have)
                    {
                        stride = t.strides()[i];
                        have = true;
                        continue;
                    }
                    std::size_t j = i + 1; // next inner dim of extent != 1
                    while (full[j] == 1)
                        ++j;
                    // A product past int64 (possible for the strides of an empty or broadcast
                    // view) cannot be a stride: the dims do not collapse, and a copy is made.
                    std::int64_t collapsed = 0;
                    if (__builtin_mul_overflow(t.strides()[j], full[j], &collapsed) || t.strides()[i] != collapsed)
                        return false;
                }
                out = stride;
                return true;
            };
            std::int64_t bstride = 0, rs = 0, cs = 0;
            if (!gemm_strides(v, rs, cs) || !batch_stride(v, bstride))
            {
                v = detail::raw_contiguous(v);
                gemm_strides(v, rs, cs);
                batch_stride(v, bstride);
            }
            return gemm_operand{v, {bstride, rs, cs}};
        }

        /// Whether x is a matrix stored column by column (the transpose of a contiguous one).
        bool is_transposed_matrix(const tensor& x)
        {
            return x.dim() == 2 && x.shape()[0] > 1 && x.shape()[1] > 1 && x.strides()[0] == 1 &&
                   x.strides()[1] == x.shape()[0];
        }

        /// a @ b, plus c broadcast to the product when c is defined (matmul_add).
        tensor matmul_nd(const tensor& a, const tensor& b, const tensor& c = tensor{})
        {
            const auto ad = static_cast<std::size_t>(a.dim()), bd = static_cast<std::size_t>(b.dim());
            const std::int64_t m = a.shape()[ad - 2], k = a.shape()[ad - 1];
            const std::int64_t kb = b.shape()[bd - 2], n = b.shape()[bd - 1];
            if (k != kb)
                throw xgrad::invalid_argument("matmul: inner dimensions differ, shapes " + shape_to_string(a.shape()) +
                                              " and " + shape_to_string(b.shape()));
            shape_type batch;
            try
            {
                batch = broadcast_shapes(shape_type(a.shape().begin(), a.shape().end() - 2),
                                         shape_type(b.shape().begin(), b.shape().end() - 2));
            }
            catch (const std::invalid_argument&)
            {
                throw xgrad::invalid_argument("matmul: batch dimensions of shapes " + shape_to_string(a.shape()) +
                                              " and " + shape_to_string(b.shape()) + " do not broadcast");
            }
            shape_type out_shape = batch;
            out_shape.push_back(m);
            out_shape.push_back(n);
            if (c.defined())
            {
                // Checked before any operand is converted or packed.
                shape_type joint;
                try
                {
                    joint = broadcast_shapes(out_shape, c.shape());
                }
                catch (const std::invalid_argument&)
                {
                }
                if (joint != out_shape)
                    throw xgrad::invalid_argument("matmul_add: c of shape " + shape_to_string(c.shape()) +
                                                  " does not broadcast to the product's shape " +
                                                  shape_to_string(out_shape) + " (a " + shape_to_string(a.shape()) +
                                                  ", b " + shape_to_string(b.shape()) + ")");
            }
            const gemm_operand ga = as_gemm_operand(a, batch), gb = as_gemm_operand(b, batch);
            const dtype cdt = compute_dtype(a.dtype());
            tensor out = detail::empty(out_shape, cdt, a.device());
            if (c.defined())
                detail::copy_into(out, broadcast_view(c, out_shape)); // converted to cdt while copied
            detail::backend_for(a.device())
                .matmul(out.data_ptr(), ga.m_data.data_ptr(), ga.m_strides, gb.m_data.data_ptr(), gb.m_strides, cdt,
                        numel_of(batch), m, n, k, c.defined());
            tensor y = detail::raw_cast(out, a.dtype());
            const auto backward = [a, b, c](function_node& self, const std::vector<tensor>& g) {
                tensor da, db, dc;
                // A matrix operand that is a transposed view (nn::linear's weight.t()) gets
                // its gradient computed transposed, so that it lands in the operand's own layout
                // and the transpose's gradient is contiguous: the weight's gradient is then
                // written once by the GEMM instead of written and copied through a transpose.
                const bool plain = a.dim() == 2 && b.dim() == 2;
                if (self.needs_input_grad(0))
                    da = plain && is_transposed_matrix(a) ? transpose(matmul_nd(b, transpose(g[0], -1, -2)), -1, -2)
                                                          : sum_to(matmul_nd(g[0], transpose(b, -1, -2)), a.shape());
                if (self.needs_input_grad(1))
                    db = plain && is_transposed_matrix(b) ? transpose(matmul_nd(transpose(g[0], -1, -2), a), -1, -2)
                                                          : sum_to(matmul_nd(transpose(a, -1, -2), g[0]), b.shape());
                if (c.defined() && self.needs_input_grad(2))
                    dc = sum_to(g[0], c.shape());
                return c.defined() ? std::vector<tensor>{da, db, dc} : std::vector<tensor>{da, db};
            };
            if (c.defined())
                record("matmul_add", {a, b, c}, {y}, backward);
            else
                record("matmul", {a, b}, {y}, backward);
            return y;
        }
    }

    tensor matmul(const tensor& a, const tensor& b)
    {
        XGRAD_PROFILE_OP("matmul");
        detail::check_floating(a, "matmul");
        detail::check_floating(b, "matmul");
        detail::check_same(a, b, "matmul");
        if (a.dim() == 0 || b.dim() == 0)
            throw xgrad::invalid_argument("matmul: operands must have at least one dimension, got shapes " +
                                          shape_to_string(a.shape()) + " and " + shape_to_string(b.shape()));
        const bool a_vec = a.dim() == 1, b_vec = b.dim() == 1;
        if (a_vec && b_vec && a.shape()[0] != b.shape()[0])
            throw xgrad::invalid_argument("matmul: inner dimensions differ, shapes " + shape_to_string(a.shape()) +
                                          " and " + shape_to_string(b.shape()));
        const tensor a2 = a_vec ? reshape(a, {1, a.shape()[0]}) : a;
        const tensor b2 = b_vec ? reshape(b, {b.shape()[0], 1}) : b;
        if (!a_vec && !b_vec)
            return matmul_nd(a2, b2);
        tensor y = matmul_nd(a2, b2);
        shape_type s(y.shape().begin(), y.shape().end() - 2);
        if (!a_vec)
            s.push_back(y.shape()[y.shape().size() - 2]);
        if (!b_vec)
            s.push_back(y.shape().back());
        return reshape(y, s);
    }

    tensor matmul_add(const tensor& a, const tensor& b, const tensor& c)
    {
        XGRAD_PROFILE_OP("matmul_add");
        detail::check_floating(a, "matmul_add");
        detail::check_floating(b, "matmul_add");
        detail::check_floating(c, "matmul_add");
        detail::check_same(a, b, "matmul_add");
        detail::check_same(a, c, "matmul_add");
        if (a.dim() < 2 || b.dim() < 2)
            throw xgrad::invalid_argument("matmul_add: a and b must have at least two dimensions, got shapes " +
                                          shape_to_string(a.shape()) + " and " + shape_to_string(b.shape()) +
                                          " (for a vector, use matmul(a, b) + c)");
        return matmul_nd(a, b, c);
    }
}
