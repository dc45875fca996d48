// Reductions. The kernel reduces trailing dimensions, so the forward permutes the input view
// (no copy) to put the kept axes first and the reduced axes last. Backward: the gradient of a
// sum is the incoming gradient broadcast back (reshape to keepdim + expand); max routes it to
// the elements equal to the maximum, shared among ties. argmax has its own kernel over the last
// dimension (the same permutation puts `dim` there) and records nothing.
#include "xgrad/ops/reduce.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>
#include <vector>

#include "../detail.hpp"
#include "core/src/profiler/record.hpp"
#include "xgrad/autograd.hpp"
#include "xgrad/checked.hpp"
#include "xgrad/errors.hpp"
#include "xgrad/factories.hpp"
#include "xgrad/ops/elementwise.hpp"
#include "xgrad/ops/shape.hpp"

namespace xgrad
{
    namespace
    {
        /// mask[d] is true for each reduced dimension d; an empty `axes` reduces all of them.
        std::vector<bool> reduced_mask(const tensor& x, const axes_type& axes, const char* op)
        {
            std::vector<bool> mask(static_cast<std::size_t>(x.dim()), axes.empty());
            for (auto a : axes)
            {
                const auto d = static_cast<std::size_t>(detail::normalize_dim(a, x.dim(), op, x.shape()));
                if (mask[d])
                    throw xgrad::invalid_argument(std::string(op) + ": axis " + std::to_string(a) +
                                                  " listed twice for a tensor of shape " + shape_to_string(x.shape()));
                mask[d] = true;
            }
            return mask;
        }

        shape_type keepdim_shape(const tensor& x, const std::vector<bool>& mask)
        {
            shape_type s = x.shape();
            for (std::size_t i = 0; i < s.size(); ++i)
                if (mask[i])
                    s[i] = 1;
            return s;
        }

        /// x seen as the reduce kernels take it: the kept axes first, then the reduced ones.
        struct reduce_view
        {
            shape_type shape, kept; // all extents in that order; the kept ones alone
            strides_type strides;
        };

        reduce_view kept_then_reduced(const tensor& x, const std::vector<bool>& mask)
        {
            reduce_view v;
            for (int pass = 0; pass < 2; ++pass)
                for (std::size_t i = 0; i < mask.size(); ++i)
                    if (mask[i] == (pass == 1))
                    {
                        v.shape.push_back(x.shape()[i]);
                        v.strides.push_back(x.strides()[i]);
                        if (pass == 0)
                            v.kept.push_back(x.shape()[i]);
                    }
            return v;
        }

        /// Runs the reduce kernel; returns the result with keepdim shape.
        tensor reduce_forward(const tensor& x, const std::vector<bool>& mask, kernels::reduce_op op)
        {
            const dtype cdt = compute_dtype(x.dtype());
            const tensor xc = detail::raw_cast(x, cdt);
            const reduce_view v = kept_then_reduced(xc, mask);
            tensor out = detail::empty(v.kept, cdt, x.device());
            detail::backend_for(x.device())
                .reduce(out.data_ptr(), out.strides().data(), xc.data_ptr(), v.strides.data(), cdt,
                        static_cast<int>(v.shape.size()), static_cast<int>(v.kept.size()), v.shape.data(), op);
            const shape_type ks = keepdim_shape(x, mask);
            out = detail::alias(out, ks, contiguous_strides(ks), 0);
            return detail::raw_cast(out, x.dtype());
        }

        tensor drop_reduced(const tensor& y_keep, const std::vector<bool>& mask, bool keepdim)
        {
            if (keepdim)
                return y_keep;
            shape_type s;
            for (std::size_t i = 0; i < mask.size(); ++i)
                if (!mask[i])
                    s.push_back(y_keep.shape()[i]);
            return detail::alias(y_keep, s, contiguous_strides(s), y_keep.offset());
        }
    }

    tensor sum(const tensor& x, const axes_type& axes, bool keepdim)
    {
        XGRAD_PROFILE_OP("sum");
        detail::check_floating(x, "sum");
        const auto mask = reduced_mask(x, axes, "sum");
        tensor y = drop_reduced(reduce_forward(x, mask, kernels::reduce_op::sum), mask, keepdim);
        record("sum", {x}, {y},
               [xs = x.shape(), ks = keepdim_shape(x, mask)](function_node&, const std::vector<tensor>& g) {
                   return std::vector<tensor>{expand(reshape(g[0], ks), xs)};
               });
        return y;
    }

    tensor mean(const tensor& x, const axes_type& axes, bool keepdim)
    {
        XGRAD_PROFILE_OP("mean");
        detail::check_floating(x, "mean");
        const auto mask = reduced_mask(x, axes, "mean");
        // The number of reduced elements: at most numel() when none is empty, but an empty axis
        // may follow extents whose product alone overflows, so a zero makes it 0 at once.
        std::int64_t count = 1;
        for (std::size_t i = 0; i < mask.size(); ++i)
            if (mask[i] && x.shape()[i] == 0)
                count = 0;
        for (std::size_t i = 0; i < mask.size() && count != 0; ++i)
            if (mask[i])
                count = checked_mul(count, x.shape()[i], "mean: the number of reduced elements");
        return div(sum(x, axes, keepdim), scalar_like(x, static_cast<double>(count)));
    }

    tensor max(const tensor& x, const axes_type& axes, bool keepdim)
    {
        XGRAD_PROFILE_OP("max");
        detail::check_floating(x, "max");
        const auto mask = reduced_mask(x, axes, "max");
        for (std::size_t i = 0; i < mask.size(); ++i)
            if (mask[i] && x.shape()[i] == 0)
                throw xgrad::invalid_argument("max: cannot reduce axis " + std::to_string(i) +
                                              " of extent 0 in a tensor of shape " + shape_to_string(x.shape()));
        const tensor y_keep = reduce_forward(x, mask, kernels::reduce_op::max);
        tensor y = drop_reduced(y_keep, mask, keepdim);
        record("max", {x}, {y}, [x, y_keep = y_keep.detach(), axes](function_node&, const std::vector<tensor>& g) {
            // Elements equal to the maximum (not differentiable); a NaN maximum is
            // matched by the NaN elements, so the gradient goes to them.
            const tensor ye = expand(y_keep, x.shape());
            const tensor hit = add(eq(x, ye), mul(ne(x, x), ne(ye, ye)));
            const tensor ties = sum(hit, axes, true);
            const tensor gk = reshape(g[0], y_keep.shape());
            return std::vector<tensor>{mul(expand(gk, x.shape()), div(hit, expand(ties, x.shape())))};
        });
        return y;
    }

    tensor argmin(const tensor& x, std::int64_t dim, bool keepdim)
    {
        XGRAD_PROFILE_OP("argmin");
        if (!x.defined())
            throw xgrad::invalid_argument("argmin: the input tensor is undefined");
        const std::int64_t d = detail::normalize_dim(dim, std::max<std::int64_t>(x.dim(), 1), "argmin", x.shape());
        if (x.dim() > 0 && x.shape()[static_cast<std::size_t>(d)] == 0)
            throw xgrad::invalid_argument("argmin: cannot take the argmin over dim " + std::to_string(dim) +
                                          " of extent 0 in a tensor of shape " + shape_to_string(x.shape()));
        no_grad guard;
        if (x.dtype() != dtype::int64)
            return argmax(neg(x), dim, keepdim);
        // ~v reverses the order of int64 values with no overflow (-v would overflow at INT64_MIN).
        std::vector<std::int64_t> values(static_cast<std::size_t>(x.numel()));
        to_host(x, values.data(), dtype::int64);
        for (std::int64_t& v : values)
            v = ~v;
        return argmax(from_host(values.data(), x.shape(), dtype::int64, x.device()), dim, keepdim);
    }

    tensor argmax(const tensor& x, std::int64_t dim, bool keepdim)
    {
        XGRAD_PROFILE_OP("argmax");
        if (!x.defined())
            throw xgrad::invalid_argument("argmax: the input tensor is undefined");
        if (x.dim() == 0) // one element: index 0 (dim must be -1 or 0, as for a 1-d tensor)
        {
            (void)detail::normalize_dim(dim, 1, "argmax", x.shape());
            const tensor y = argmax(detail::alias(x, {1}, {1}, x.offset()), 0, false);
            return detail::alias(y, {}, {}, 0);
        }
        const std::int64_t d = detail::normalize_dim(dim, x.dim(), "argmax", x.shape());
        const auto du = static_cast<std::size_t>(d);
        if (x.shape()[du] == 0)
            throw xgrad::invalid_argument("argmax: cannot take the argmax over dim " + std::to_string(dim) +
                                          " of extent 0 in a tensor of shape " + shape_to_string(x.shape()));
        // float16/bfloat16 widen exactly to float32 (order and NaN kept); int64 stays as it is.
        const dtype kdt = x.dtype() == dtype::int64 ? dtype::int64 : compute_dtype(x.dtype());
        const tensor xc = detail::raw_cast(x, kdt);
        std::vector<bool> mask(static_cast<std::size_t>(x.dim()), false);
        mask[du] = true;
        const reduce_view v = kept_then_reduced(xc, mask); // dim last
        tensor out = detail::empty(v.kept, dtype::int64, x.device());
        detail::backend_for(x.device())
            .argmax(static_cast<std::int64_t*>(out.data_ptr()), out.strides().data(), xc.data_ptr(), v.strides.data(),
                    kdt, static_cast<int>(v.shape.size()), v.shape.data());
        if (!keepdim)
            return out;
        const shape_type ks = keepdim_shape(x, mask);
        return detail::alias(out, ks, contiguous_strides(ks), 0);
    }

    tensor sum_to(const tensor& x, const shape_type& shape)
    {
        XGRAD_PROFILE_OP("sum_to");
        detail::check_defined(x, "sum_to");
        if (x.shape() == shape)
            return x;
        if (broadcast_shapes(shape, x.shape()) != x.shape())
            throw xgrad::invalid_argument("sum_to: shape " + shape_to_string(x.shape()) + " cannot be summed to " +
                                          shape_to_string(shape) + " (it does not broadcast from it)");
        const std::size_t lead = x.shape().size() - shape.size();
        axes_type axes;
        for (std::size_t i = 0; i < x.shape().size(); ++i)
            if (i < lead || (shape[i - lead] == 1 && x.shape()[i] != 1))
                axes.push_back(static_cast<std::int64_t>(i));
        if (axes.empty())
            return reshape(x, shape);
        return reshape(sum(x, axes, true), shape);
    }
}
