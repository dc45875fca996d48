// Views and copies that name storage directly (xgrad/ops/storage.hpp). The checks come first
// and are complete: a view that reached outside its storage, or a copy into overlapping
// memory, would be an out-of-bounds access or a result that depends on the order of the writes.
#include "xgrad/ops/storage.hpp"

#include <algorithm>
#include <numeric>
#include <string>
#include <vector>

#include "../detail.hpp"
#include "core/src/profiler/record.hpp"
#include "xgrad/autograd.hpp"
#include "xgrad/checked.hpp"
#include "xgrad/errors.hpp"

namespace xgrad
{
    namespace
    {
        [[noreturn]] void fail(const char* op, const std::string& what)
        {
            throw xgrad::invalid_argument(std::string(op) + ": " + what);
        }

        /// The lowest and highest element offsets a view addresses (numel > 0, strides >= 0).
        std::pair<std::int64_t, std::int64_t> extent_of(const shape_type& shape, const strides_type& strides,
                                                        std::int64_t offset, const char* op)
        {
            std::int64_t last = offset;
            for (std::size_t d = 0; d < shape.size(); ++d)
                last = checked_add(last, checked_mul(shape[d] - 1, strides[d], op), op);
            return {offset, last};
        }

        /// Whether two elements of the view may share an address: sorted by stride, each
        /// dimension of more than one entry must step past everything the smaller ones span
        /// (sufficient for no overlap; a broadcast dimension, stride 0, fails it).
        bool may_overlap_itself(const tensor& t)
        {
            std::vector<std::size_t> order(static_cast<std::size_t>(t.dim()));
            std::iota(order.begin(), order.end(), std::size_t{0});
            std::sort(order.begin(), order.end(),
                      [&](std::size_t a, std::size_t b) { return t.strides()[a] < t.strides()[b]; });
            std::int64_t span = 1; // elements spanned by the dimensions so far, plus one
            for (std::size_t d : order)
            {
                if (t.shape()[d] <= 1)
                    continue;
                if (t.strides()[d] < span)
                    return true;
                span = t.strides()[d] * (t.shape()[d] - 1) + span;
            }
            return false;
        }

        std::string describe_view(const tensor& t)
        {
            return "shape " + shape_to_string(t.shape()) + ", strides " + shape_to_string(t.strides()) + ", offset " +
                   std::to_string(t.offset());
        }
    }

    tensor identity(const tensor& x)
    {
        XGRAD_PROFILE_OP("identity");
        detail::check_defined(x, "identity");
        tensor y = detail::alias(x, x.shape(), x.strides(), x.offset());
        record("identity", {x}, {y},
               [](function_node&, const std::vector<tensor>& g) { return std::vector<tensor>{g[0]}; });
        return y;
    }

    tensor as_strided(const tensor& x, const shape_type& shape, const strides_type& strides, std::int64_t offset)
    {
        constexpr const char* op = "as_strided";
        detail::check_defined(x, op);
        if (shape.size() != strides.size())
            fail(op, "shape " + shape_to_string(shape) + " and strides " + shape_to_string(strides) +
                         " have different lengths");
        for (std::size_t d = 0; d < shape.size(); ++d)
            if (shape[d] < 0 || strides[d] < 0)
                fail(op, "shape " + shape_to_string(shape) + " and strides " + shape_to_string(strides) +
                             " must not be negative");
        if (offset < 0)
            fail(op, "offset " + std::to_string(offset) + " is negative");
        std::int64_t n = 1;
        for (const std::int64_t e : shape)
            n = checked_mul(n, e, op);
        if (n > 0)
        {
            const auto capacity = static_cast<std::int64_t>(x.impl()->m_storage->nbytes() / itemsize(x.dtype()));
            const std::int64_t last = extent_of(shape, strides, offset, op).second;
            if (last >= capacity)
                fail(op, "shape " + shape_to_string(shape) + ", strides " + shape_to_string(strides) + " and offset " +
                             std::to_string(offset) + " reach element " + std::to_string(last) + " of a storage of " +
                             std::to_string(capacity) + " " + std::string(name(x.dtype())) + " elements");
        }
        return detail::alias(x, shape, strides, offset);
    }

    tensor clone(const tensor& x)
    {
        XGRAD_PROFILE_OP("clone");
        detail::check_defined(x, "clone");
        return detail::copy_of(x);
    }

    const tensor& copy_(const tensor& dst, const tensor& src)
    {
        XGRAD_PROFILE_OP("copy_");
        constexpr const char* op = "copy_";
        detail::check_defined(dst, op);
        detail::check_defined(src, op);
        if (dst.shape() != src.shape())
            fail(op, "dst has shape " + shape_to_string(dst.shape()) + " and src " + shape_to_string(src.shape()));
        if (dst.device() != src.device())
            fail(op, "dst is on " + to_string(dst.device()) + " and src on " + to_string(src.device()));
        if (dst.numel() == 0)
            return dst;
        if (may_overlap_itself(dst))
            fail(op, "dst (" + describe_view(dst) + ") has elements that share an address");
        if (dst.impl()->m_storage == src.impl()->m_storage)
        {
            const bool identical = dst.offset() == src.offset() && dst.strides() == src.strides() &&
                                   dst.dtype() == src.dtype();
            const auto a = extent_of(dst.shape(), dst.strides(), dst.offset(), op);
            const auto b = extent_of(src.shape(), src.strides(), src.offset(), op);
            const bool disjoint = dst.dtype() == src.dtype() && (a.second < b.first || b.second < a.first);
            if (!identical && !disjoint)
                fail(op, "dst (" + describe_view(dst) + ") overlaps src (" + describe_view(src) + ") in one storage");
        }
        detail::copy_into(dst, src);
        return dst;
    }
}
