// Shape and layout ops. Views (reshape of a contiguous tensor, permute, slice, expand) alias
// the input's storage; concat and pad copy. Each gradient is another op of this file (or
// sum_to), so higher orders stay available:
//   reshape <-> reshape, permute <-> inverse permute, slice <-> slice_backward,
//   expand <-> sum_to, concat -> slices, pad -> slice, cast/to_device -> cast/to_device back.
#include "xgrad/ops/shape.hpp"

#include <algorithm>
#include <limits>
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
#include "xgrad/ops/index.hpp"
#include "xgrad/ops/reduce.hpp"

namespace xgrad
{
    namespace
    {
        /// `shape` with its -1 entry (if any) resolved against x's element count.
        shape_type infer_shape(const tensor& x, const shape_type& shape)
        {
            shape_type out = shape;
            int infer = -1;
            bool has_zero = false;
            for (std::size_t i = 0; i < out.size(); ++i)
            {
                if (out[i] == -1)
                {
                    if (infer >= 0)
                        throw xgrad::invalid_argument("reshape: only one dimension can be -1 in " +
                                                      shape_to_string(shape));
                    infer = static_cast<int>(i);
                }
                else if (out[i] < 0)
                    throw xgrad::invalid_argument("reshape: invalid extent in " + shape_to_string(shape));
                else if (out[i] == 0)
                    has_zero = true;
            }
            // The product of the known extents, checked: a zero extent makes it 0 whatever the
            // others are (so [0, 2^62, 4] is a valid empty shape); otherwise a product beyond
            // int64 cannot equal x's element count, and is reported as the overflow it is
            // rather than wrapping into a wrong "cannot infer" or a false match.
            std::int64_t known = 1;
            if (has_zero)
                known = 0;
            else
            {
                const std::string what = "reshape: the extents of " + shape_to_string(shape) +
                                         " (for a tensor of shape " + shape_to_string(x.shape()) + ")";
                for (std::size_t i = 0; i < out.size(); ++i)
                    if (static_cast<int>(i) != infer)
                        known = checked_mul(known, out[i], what.c_str());
            }
            const std::int64_t numel = x.numel();
            if (infer >= 0)
            {
                if (known == 0 || numel % known != 0)
                    throw xgrad::invalid_argument("reshape: cannot infer -1 in " + shape_to_string(shape) +
                                                  " for a tensor of shape " + shape_to_string(x.shape()));
                out[static_cast<std::size_t>(infer)] = numel / known;
            }
            else if (known != numel)
                throw xgrad::invalid_argument("reshape: shape " + shape_to_string(shape) +
                                              " is invalid for a tensor of shape " + shape_to_string(x.shape()) + " (" +
                                              std::to_string(numel) + " elements)");
            return out;
        }
    }

    tensor reshape(const tensor& x, const shape_type& shape)
    {
        XGRAD_PROFILE_OP("reshape");
        detail::check_defined(x, "reshape");
        const shape_type target = infer_shape(x, shape);
        const tensor src = detail::raw_contiguous(x);
        tensor y = detail::alias(src, target, contiguous_strides(target), src.offset());
        record("reshape", {x}, {y}, [xs = x.shape()](function_node&, const std::vector<tensor>& g) {
            return std::vector<tensor>{reshape(g[0], xs)};
        });
        return y;
    }

    tensor permute(const tensor& x, const std::vector<std::int64_t>& dims)
    {
        XGRAD_PROFILE_OP("permute");
        detail::check_defined(x, "permute");
        if (static_cast<std::int64_t>(dims.size()) != x.dim())
            throw xgrad::invalid_argument("permute: got " + std::to_string(dims.size()) +
                                          " dims for a tensor of shape " + shape_to_string(x.shape()));
        std::vector<std::int64_t> inverse(dims.size(), -1);
        shape_type shape(dims.size());
        strides_type strides(dims.size());
        for (std::size_t i = 0; i < dims.size(); ++i)
        {
            const auto d = static_cast<std::size_t>(detail::normalize_dim(dims[i], x.dim(), "permute", x.shape()));
            if (inverse[d] != -1)
                throw xgrad::invalid_argument("permute: dimension " + std::to_string(dims[i]) + " repeated in " +
                                              shape_to_string(dims));
            inverse[d] = static_cast<std::int64_t>(i);
            shape[i] = x.shape()[d];
            strides[i] = x.strides()[d];
        }
        tensor y = detail::alias(x, shape, strides, x.offset());
        record("permute", {x}, {y}, [inverse](function_node&, const std::vector<tensor>& g) {
            return std::vector<tensor>{permute(g[0], inverse)};
        });
        return y;
    }

    tensor transpose(const tensor& x, std::int64_t d0, std::int64_t d1)
    {
        XGRAD_PROFILE_OP("transpose");
        detail::check_defined(x, "transpose");
        std::vector<std::int64_t> dims(static_cast<std::size_t>(x.dim()));
        for (std::size_t i = 0; i < dims.size(); ++i)
            dims[i] = static_cast<std::int64_t>(i);
        std::swap(dims[static_cast<std::size_t>(detail::normalize_dim(d0, x.dim(), "transpose", x.shape()))],
                  dims[static_cast<std::size_t>(detail::normalize_dim(d1, x.dim(), "transpose", x.shape()))]);
        return permute(x, dims);
    }

    namespace
    {
        struct slice_range
        {
            std::int64_t dim, start, count, step;
        };

        slice_range resolve_slice(const shape_type& shape, std::int64_t dim, std::int64_t start, std::int64_t stop,
                                  std::int64_t step)
        {
            const auto ndim = static_cast<std::int64_t>(shape.size());
            const std::int64_t d = detail::normalize_dim(dim, ndim, "slice", shape);
            if (step < 1)
                throw xgrad::invalid_argument("slice: step must be >= 1, got " + std::to_string(step));
            const std::int64_t n = shape[static_cast<std::size_t>(d)];
            auto clamp = [n](std::int64_t i) { return std::clamp(i < 0 ? i + n : i, std::int64_t{0}, n); };
            const std::int64_t b = clamp(start), e = clamp(stop);
            const std::int64_t count = e > b ? (e - b - 1) / step + 1 : 0; // no overflow for any step
            return {d, b, count, step};
        }

        /// The view of `x` that a resolved slice selects (no autograd).
        tensor slice_view(const tensor& x, const slice_range& r)
        {
            shape_type shape = x.shape();
            strides_type strides = x.strides();
            const auto d = static_cast<std::size_t>(r.dim);
            shape[d] = r.count;
            // An empty result addresses nothing (its strides and offset are never used, and
            // for an empty x with huge extents start * stride need not fit int64).
            if (numel_of(shape) == 0)
                return detail::alias(x, shape, strides, 0);
            // A nonempty view addresses elements of x's storage, so these products fit; they are
            // checked all the same.
            const std::int64_t offset = checked_add(
                x.offset(), checked_mul(r.start, strides[d], "slice: the start times the stride"), "slice: the offset");
            if (r.count > 1) // a stride along an extent-1 dimension is never used
                strides[d] = checked_mul(strides[d], r.step,
                                         "slice: the stride of the sliced dimension times the step");
            return detail::alias(x, shape, strides, offset);
        }
    }

    tensor slice(const tensor& x, std::int64_t dim, std::int64_t start, std::int64_t stop, std::int64_t step)
    {
        XGRAD_PROFILE_OP("slice");
        detail::check_defined(x, "slice");
        if (step < 0)
        {
            // Python's rule for a negative step, then the same elements as a forward slice,
            // reversed: start, start - |step|, ... > stop is lo, lo + |step|, ..., start backwards.
            if (step == std::numeric_limits<std::int64_t>::min())
                throw xgrad::invalid_argument("slice: step " + std::to_string(step) + " has no positive counterpart");
            const std::int64_t d = detail::normalize_dim(dim, x.dim(), "slice", x.shape());
            const std::int64_t n = x.shape()[static_cast<std::size_t>(d)];
            const auto clamp_back = [n](std::int64_t i) {
                // i + n cannot overflow for i < 0; the clamp keeps int64's extremes meaningful.
                return std::clamp(i < 0 ? i + n : i, std::int64_t{-1}, n - 1);
            };
            const std::int64_t first = clamp_back(start), last = clamp_back(stop), stride = -step;
            const std::int64_t count = first > last ? (first - last - 1) / stride + 1 : 0;
            const std::int64_t lo = count > 0 ? first - (count - 1) * stride : 0;
            return flip(slice(x, d, lo, count > 0 ? first + 1 : 0, stride), {d});
        }
        const slice_range r = resolve_slice(x.shape(), dim, start, stop, step);
        tensor y = slice_view(x, r);
        record("slice", {x}, {y}, [xs = x.shape(), r](function_node&, const std::vector<tensor>& g) {
            return std::vector<tensor>{slice_backward(g[0], xs, r.dim, r.start, r.step)};
        });
        return y;
    }

    tensor flip(const tensor& x, const std::vector<std::int64_t>& dims)
    {
        XGRAD_PROFILE_OP("flip");
        detail::check_defined(x, "flip");
        std::vector<bool> flipped(static_cast<std::size_t>(x.dim()), false);
        for (const std::int64_t dim : dims)
        {
            const auto d = static_cast<std::size_t>(detail::normalize_dim(dim, x.dim(), "flip", x.shape()));
            if (flipped[d])
                throw xgrad::invalid_argument("flip: dimension " + std::to_string(d) +
                                              " is named twice in the dims of " + shape_to_string(x.shape()));
            flipped[d] = true;
        }
        if (x.numel() == 0 || std::none_of(flipped.begin(), flipped.end(), [](bool f) { return f; }))
            return x; // tensors are immutable: the input itself is the result
        // The row-major position in x of each element of the result: an odometer over the
        // result's indices, moving the source position by +-1 row-major stride per step.
        const auto ndim = static_cast<std::size_t>(x.dim());
        std::vector<std::int64_t> row_stride(ndim, 1);
        for (std::size_t d = ndim - 1; d > 0; --d)
            row_stride[d - 1] = row_stride[d] * x.shape()[d];
        std::vector<std::int64_t> index(ndim, 0), positions(static_cast<std::size_t>(x.numel()));
        std::int64_t pos = 0;
        for (std::size_t d = 0; d < ndim; ++d)
            if (flipped[d])
                pos += (x.shape()[d] - 1) * row_stride[d];
        for (std::int64_t& out : positions)
        {
            out = pos;
            for (std::size_t d = ndim; d-- > 0;)
            {
                const std::int64_t step = flipped[d] ? -row_stride[d] : row_stride[d];
                if (++index[d] < x.shape()[d])
                {
                    pos += step;
                    break;
                }
                index[d] = 0;
                pos -= step * (x.shape()[d] - 1);
            }
        }
        const tensor idx = from_host(positions.data(), x.shape(), dtype::int64, x.device());
        return take(x, idx);
    }

    tensor slice_backward(const tensor& g, const shape_type& shape, std::int64_t dim, std::int64_t start,
                          std::int64_t step)
    {
        XGRAD_PROFILE_OP("slice_backward");
        detail::check_defined(g, "slice_backward");
        const auto d = static_cast<std::size_t>(
            detail::normalize_dim(dim, static_cast<std::int64_t>(shape.size()), "slice_backward", shape));
        const std::int64_t count = g.dim() == static_cast<std::int64_t>(shape.size()) ? g.shape()[d] : -1;
        shape_type expected = shape;
        expected[d] = count;
        if (count < 0 || g.shape() != expected || step < 1 || start < 0)
            throw xgrad::invalid_argument("slice_backward: gradient of shape " + shape_to_string(g.shape()) +
                                          " cannot come from a slice of " + shape_to_string(shape) +
                                          " along dimension " + std::to_string(d));
        // (count - 1) * step + start > shape[d] - 1 tested by division, so that no product of
        // the arguments can overflow.
        if (count > 0 && (start >= shape[d] || (count - 1) > (shape[d] - 1 - start) / step))
            throw xgrad::invalid_argument("slice_backward: " + std::to_string(count) + " elements from " +
                                          std::to_string(start) + " with step " + std::to_string(step) +
                                          " overrun dimension " + std::to_string(d) + " of " + shape_to_string(shape));
        const slice_range r{static_cast<std::int64_t>(d), start, count, step};
        tensor out = zeros(shape, g.dtype(), g.device());
        const tensor view = slice_view(out, r);
        detail::copy_into(view, g);
        record("slice_backward", {g}, {out}, [r](function_node&, const std::vector<tensor>& gg) {
            // Stop just past the last element taken: start + count * step may not fit in int64.
            const std::int64_t stop = r.count > 0 ? r.start + (r.count - 1) * r.step + 1 : r.start;
            return std::vector<tensor>{slice(gg[0], r.dim, r.start, stop, r.step)};
        });
        return out;
    }

    tensor expand(const tensor& x, const shape_type& shape)
    {
        XGRAD_PROFILE_OP("expand");
        detail::check_defined(x, "expand");
        if (shape.size() < static_cast<std::size_t>(x.dim()))
            throw xgrad::invalid_argument("expand: cannot expand shape " + shape_to_string(x.shape()) + " to " +
                                          shape_to_string(shape) + " (fewer dimensions)");
        numel_of(shape); // rejects negative extents and overflowing sizes, naming the shape
        const std::size_t lead = shape.size() - static_cast<std::size_t>(x.dim());
        strides_type strides(shape.size(), 0);
        for (std::size_t i = 0; i < static_cast<std::size_t>(x.dim()); ++i)
        {
            const std::int64_t e = x.shape()[i];
            if (e == shape[lead + i])
                strides[lead + i] = x.strides()[i];
            else if (e != 1)
                throw xgrad::invalid_argument("expand: cannot expand shape " + shape_to_string(x.shape()) + " to " +
                                              shape_to_string(shape) + " (dimension " + std::to_string(lead + i) + ")");
        }
        if (shape == x.shape())
            return x;
        tensor y = detail::alias(x, shape, strides, x.offset());
        record("expand", {x}, {y}, [xs = x.shape()](function_node&, const std::vector<tensor>& g) {
            return std::vector<tensor>{sum_to(g[0], xs)};
        });
        return y;
    }

    tensor concat(const std::vector<tensor>& xs, std::int64_t dim)
    {
        XGRAD_PROFILE_OP("concat");
        if (xs.empty())
            throw xgrad::invalid_argument("concat: no tensors given");
        const tensor& first = xs[0];
        detail::check_defined(first, "concat");
        const std::int64_t d = detail::normalize_dim(dim, first.dim(), "concat", first.shape());
        shape_type shape = first.shape();
        shape[static_cast<std::size_t>(d)] = 0;
        for (std::size_t i = 0; i < xs.size(); ++i)
        {
            detail::check_same(first, xs[i], "concat");
            bool fits = xs[i].dim() == first.dim();
            for (std::size_t k = 0; fits && k < shape.size(); ++k)
                fits = static_cast<std::int64_t>(k) == d || xs[i].shape()[k] == first.shape()[k];
            if (!fits)
                throw xgrad::invalid_argument("concat: tensor " + std::to_string(i) + " has shape " +
                                              shape_to_string(xs[i].shape()) + ", which does not match " +
                                              shape_to_string(first.shape()) + " outside dimension " +
                                              std::to_string(d));
            shape[static_cast<std::size_t>(d)] = checked_add(shape[static_cast<std::size_t>(d)],
                                                             xs[i].shape()[static_cast<std::size_t>(d)],
                                                             "concat: the extents along the concatenated dimension");
        }
        tensor y = detail::empty(shape, first.dtype(), first.device());
        std::vector<std::int64_t> offsets;
        std::int64_t at = 0;
        for (const auto& x : xs)
        {
            const std::int64_t n = x.shape()[static_cast<std::size_t>(d)];
            detail::copy_into(slice_view(y, {d, at, n, 1}), x);
            offsets.push_back(at);
            at += n;
        }
        offsets.push_back(at);
        record("concat", xs, {y}, [d, offsets](function_node& self, const std::vector<tensor>& g) {
            std::vector<tensor> grads(offsets.size() - 1);
            for (std::size_t i = 0; i + 1 < offsets.size(); ++i)
                if (self.needs_input_grad(i))
                    grads[i] = slice(g[0], d, offsets[i], offsets[i + 1]);
            return grads;
        });
        return y;
    }

    tensor pad(const tensor& x, const std::vector<std::pair<std::int64_t, std::int64_t>>& widths, double value)
    {
        XGRAD_PROFILE_OP("pad");
        detail::check_defined(x, "pad");
        if (static_cast<std::int64_t>(widths.size()) != x.dim())
            throw xgrad::invalid_argument("pad: got " + std::to_string(widths.size()) +
                                          " (before, after) pairs for a tensor of shape " + shape_to_string(x.shape()));
        shape_type shape = x.shape();
        for (std::size_t i = 0; i < widths.size(); ++i)
        {
            if (widths[i].first < 0 || widths[i].second < 0)
                throw xgrad::invalid_argument("pad: negative width (" + std::to_string(widths[i].first) + ", " +
                                              std::to_string(widths[i].second) + ") for dimension " +
                                              std::to_string(i));
            const std::string what = "pad: extent " + std::to_string(shape[i]) + " of dimension " + std::to_string(i) +
                                     " of shape " + shape_to_string(x.shape()) + " plus the widths (" +
                                     std::to_string(widths[i].first) + ", " + std::to_string(widths[i].second) + ")";
            shape[i] = checked_add(checked_add(shape[i], widths[i].first, what.c_str()), widths[i].second,
                                   what.c_str());
        }
        tensor y = full(shape, value, x.dtype(), x.device());
        tensor inner = y;
        for (std::size_t i = 0; i < widths.size(); ++i)
            inner = slice_view(inner, {static_cast<std::int64_t>(i), widths[i].first, x.shape()[i], 1});
        detail::copy_into(inner, x);
        record("pad", {x}, {y}, [widths, xs = x.shape()](function_node&, const std::vector<tensor>& g) {
            tensor gi = g[0];
            for (std::size_t i = 0; i < widths.size(); ++i)
                if (widths[i].first != 0 || widths[i].second != 0)
                    gi = slice(gi, static_cast<std::int64_t>(i), widths[i].first, widths[i].first + xs[i]);
            return std::vector<tensor>{gi};
        });
        return y;
    }

    tensor contiguous(const tensor& x)
    {
        XGRAD_PROFILE_OP("contiguous");
        detail::check_defined(x, "contiguous");
        if (x.is_contiguous())
            return x;
        tensor y = detail::raw_contiguous(x);
        record("contiguous", {x}, {y},
               [](function_node&, const std::vector<tensor>& g) { return std::vector<tensor>{g[0]}; });
        return y;
    }

    tensor cast(const tensor& x, dtype dt)
    {
        XGRAD_PROFILE_OP("cast");
        detail::check_defined(x, "cast");
        if (x.dtype() == dt)
            return x;
        tensor y = detail::raw_cast(x, dt);
        if (is_floating(dt))
            record("cast", {x}, {y}, [from = x.dtype()](function_node&, const std::vector<tensor>& g) {
                return std::vector<tensor>{cast(g[0], from)};
            });
        return y;
    }

    tensor to_device(const tensor& x, device dev)
    {
        XGRAD_PROFILE_OP("to_device");
        detail::check_defined(x, "to_device");
        if (x.device() == dev)
            return x;
        const tensor src = detail::raw_contiguous(x);
        tensor y = detail::empty(x.shape(), x.dtype(), dev);
        const std::size_t nbytes = checked_bytes(x.numel(), itemsize(x.dtype()), "to_device: the tensor's bytes");
        // CPU memory is host memory, so a copy to or from the CPU is one transfer of the other
        // backend; between two CUDA devices it goes through a host buffer.
        if (dev.type == device_type::cpu)
            detail::backend_for(x.device()).copy_to_host(y.data_ptr(), src.data_ptr(), nbytes);
        else if (x.device().type == device_type::cpu)
            detail::backend_for(dev).copy_from_host(y.data_ptr(), src.data_ptr(), nbytes);
        else
        {
            std::vector<unsigned char> host(nbytes);
            detail::backend_for(x.device()).copy_to_host(host.data(), src.data_ptr(), nbytes);
            detail::backend_for(dev).copy_from_host(y.data_ptr(), host.data(), nbytes);
        }
        record("to_device", {x}, {y}, [from = x.device()](function_node&, const std::vector<tensor>& g) {
            return std::vector<tensor>{to_device(g[0], from)};
        });
        return y;
    }
}
