// tensor handle methods, storage, and the raw helpers of detail.hpp.
#include "xgrad/tensor.hpp"

#include <sstream>
#include <stdexcept>

#include "detail.hpp"
#include "xgrad/autograd.hpp"
#include "xgrad/checked.hpp"
#include "xgrad/errors.hpp"
#include "xgrad/factories.hpp"
#include "xgrad/ops/shape.hpp"

namespace xgrad
{
    storage::storage(std::size_t nbytes, xgrad::device dev) : m_nbytes(nbytes), m_device(dev)
    {
        // Allocate at least one byte so a zero-element tensor still has a distinct address.
        m_data = detail::backend_for(dev).allocate(nbytes == 0 ? 1 : nbytes);
    }

    storage::~storage() { detail::backend_for(m_device).deallocate(m_data); }

    std::string shape_to_string(const shape_type& shape)
    {
        std::string s = "[";
        for (std::size_t i = 0; i < shape.size(); ++i)
        {
            if (i)
                s += ", ";
            s += std::to_string(shape[i]);
        }
        return s + "]";
    }

    std::int64_t numel_of(const shape_type& shape)
    {
        // A zero extent anywhere makes the count 0, even after extents whose product alone
        // would overflow ([2^40, 2^40, 0] is a valid empty shape).
        bool empty = false;
        for (auto e : shape)
        {
            if (e < 0)
                throw invalid_argument("negative extent in shape " + shape_to_string(shape));
            empty = empty || e == 0;
        }
        if (empty)
            return 0;
        std::int64_t n = 1;
        for (auto e : shape)
            if (__builtin_mul_overflow(n, e, &n))
                throw invalid_argument("shape " + shape_to_string(shape) + " has too many elements");
        return n;
    }

    strides_type contiguous_strides(const shape_type& shape)
    {
        // A zero extent counts as 1, so an empty tensor gets the strides of its non-empty
        // neighbours. Those are products of the extents and may not fit int64 when the shape is
        // empty ([0, 2^40, 2^40]: a nonempty shape's strides are at most its element count).
        // An empty tensor addresses no element, so any strides are valid for it: then every
        // stride is 1, a defined value that keeps every offset computed from it small, rather
        // than a wrapped product or a refusal of a tensor that [2^40, 2^40, 0] shows is fine.
        strides_type strides(shape.size());
        std::int64_t s = 1;
        for (std::size_t i = shape.size(); i-- > 0;)
        {
            strides[i] = s;
            if (i == 0)
                break; // the product of all extents is no stride
            if (__builtin_mul_overflow(s, std::max<std::int64_t>(shape[i], 1), &s))
            {
                numel_of(shape); // throws for a nonempty shape: its element count overflows too
                return strides_type(shape.size(), 1);
            }
        }
        return strides;
    }

    const tensor_impl& tensor::checked() const
    {
        if (!m_impl)
            throw invalid_argument("operation on an undefined tensor");
        return *m_impl;
    }

    const shape_type& tensor::shape() const { return checked().m_shape; }
    const strides_type& tensor::strides() const { return checked().m_strides; }
    std::int64_t tensor::offset() const { return checked().m_offset; }
    std::int64_t tensor::dim() const { return static_cast<std::int64_t>(checked().m_shape.size()); }
    std::int64_t tensor::size(std::int64_t d) const
    {
        return shape()[detail::normalize_dim(d, dim(), "size", shape())];
    }
    std::int64_t tensor::numel() const { return numel_of(checked().m_shape); }
    xgrad::dtype tensor::dtype() const { return checked().m_dtype; }
    xgrad::device tensor::device() const { return checked().m_storage->device(); }

    bool tensor::is_contiguous() const
    {
        const auto& impl = checked();
        // An empty tensor has no element to be out of place: it is contiguous whatever its
        // strides (contiguous_strides counts a 0 extent as 1, which this loop would not).
        for (const auto e : impl.m_shape)
            if (e == 0)
                return true;
        std::int64_t expected = 1;
        for (std::size_t i = impl.m_shape.size(); i-- > 0;)
        {
            if (impl.m_shape[i] == 1)
                continue;
            if (impl.m_strides[i] != expected)
                return false;
            expected *= impl.m_shape[i];
        }
        return true;
    }

    void* tensor::data_ptr() const
    {
        const auto& impl = checked();
        return static_cast<char*>(impl.m_storage->data()) +
               impl.m_offset * static_cast<std::int64_t>(itemsize(impl.m_dtype));
    }

    bool tensor::requires_grad() const { return checked().m_requires_grad; }

    tensor& tensor::requires_grad_(bool value)
    {
        const auto& impl = checked();
        if (impl.m_grad_fn)
            throw std::runtime_error("requires_grad_ can only change leaf tensors; this tensor was produced by '" +
                                     std::string(impl.m_grad_fn->name()) + "' (use detach() first)");
        if (value && !is_floating(impl.m_dtype))
            throw invalid_argument("only floating-point tensors can require gradients, not " +
                                   std::string(name(impl.m_dtype)));
        m_impl->m_requires_grad = value;
        return *this;
    }

    tensor tensor::grad() const { return tensor(checked().m_grad); }

    void tensor::set_grad(const tensor& g)
    {
        const auto& impl = checked();
        if (g.defined() && (g.shape() != impl.m_shape || g.dtype() != impl.m_dtype))
            throw invalid_argument("set_grad: gradient of shape " + shape_to_string(g.shape()) + " and dtype " +
                                   std::string(name(g.dtype())) + " does not match tensor of shape " +
                                   shape_to_string(impl.m_shape) + " and dtype " + std::string(name(impl.m_dtype)));
        m_impl->m_grad = g.impl();
    }

    void tensor::zero_grad() { checked(), m_impl->m_grad.reset(); }

    const std::shared_ptr<node>& tensor::grad_fn() const { return checked().m_grad_fn; }
    bool tensor::is_leaf() const { return !checked().m_grad_fn; }

    tensor& tensor::set_data(const tensor& value)
    {
        if (!defined() || !value.defined())
            throw xgrad::invalid_argument("set_data: the tensor and the new value must be defined");
        tensor_impl& impl = *m_impl;
        if (impl.m_grad_fn)
            throw xgrad::invalid_argument("set_data: the tensor is the output of '" +
                                          std::string(impl.m_grad_fn->name()) +
                                          "', not a leaf; only a leaf's data can be replaced");
        if (value.shape() != shape() || value.dtype() != dtype() || value.device() != device())
            throw xgrad::invalid_argument("set_data: the new value is " + shape_to_string(value.shape()) + " " +
                                          std::string(name(value.dtype())) + " on " + xgrad::to_string(value.device()) +
                                          ", the tensor is " + shape_to_string(shape()) + " " +
                                          std::string(name(dtype())) + " on " + xgrad::to_string(device()));
        const tensor_impl& v = *value.impl();
        impl.m_storage = v.m_storage;
        impl.m_strides = v.m_strides;
        impl.m_offset = v.m_offset;
        ++impl.m_version;
        return *this;
    }

    std::uint64_t tensor::version() const { return checked().m_version; }

    tensor tensor::detach() const
    {
        const auto& impl = checked();
        return detail::alias(*this, impl.m_shape, impl.m_strides, impl.m_offset);
    }

    void tensor::backward(const tensor& grad_output, bool retain_graph, bool create_graph) const
    {
        std::vector<tensor> grads;
        if (grad_output.defined())
            grads.push_back(grad_output);
        xgrad::backward({*this}, grads, retain_graph || create_graph, create_graph);
    }

    tensor tensor::contiguous() const { return xgrad::contiguous(*this); }
    tensor tensor::to(xgrad::dtype dt) const { return cast(*this, dt); }
    tensor tensor::to(xgrad::device dev) const { return to_device(*this, dev); }
    tensor tensor::reshape(const shape_type& s) const { return xgrad::reshape(*this, s); }
    tensor tensor::permute(const std::vector<std::int64_t>& dims) const { return xgrad::permute(*this, dims); }
    tensor tensor::transpose(std::int64_t d0, std::int64_t d1) const { return xgrad::transpose(*this, d0, d1); }
    tensor tensor::slice(std::int64_t d, std::int64_t start, std::int64_t stop, std::int64_t step) const
    {
        return xgrad::slice(*this, d, start, stop, step);
    }
    tensor tensor::expand(const shape_type& s) const { return xgrad::expand(*this, s); }

    double tensor::item() const
    {
        if (numel() != 1)
            throw invalid_argument("item() needs a tensor with one element, got shape " + shape_to_string(shape()));
        double v = 0;
        to_host(*this, &v, xgrad::dtype::float64);
        return v;
    }

    std::ostream& operator<<(std::ostream& os, const tensor& t) { return os << t.to_string(); }

    namespace detail
    {
        tensor empty(const shape_type& shape, xgrad::dtype dt, xgrad::device dev)
        {
            const std::int64_t n = numel_of(shape);
            std::size_t nbytes = 0;
            try
            {
                nbytes = checked_bytes(n, itemsize(dt), "tensor bytes");
            }
            catch (const invalid_argument& e)
            {
                throw invalid_argument("shape " + shape_to_string(shape) + " of " + std::string(name(dt)) +
                                       " needs more bytes than can be addressed (" + e.what() + ")");
            }
            auto impl = std::make_shared<tensor_impl>();
            impl->m_storage = std::make_shared<storage>(nbytes, dev);
            impl->m_shape = shape;
            impl->m_strides = contiguous_strides(shape);
            impl->m_dtype = dt;
            return tensor(std::move(impl));
        }

        tensor alias(const tensor& x, const shape_type& shape, const strides_type& strides, std::int64_t offset)
        {
            auto impl = std::make_shared<tensor_impl>();
            impl->m_storage = x.impl()->m_storage;
            impl->m_shape = shape;
            impl->m_strides = strides;
            // An empty view addresses no element: its offset is 0, so that data_ptr never scales
            // an offset that a view op computed from the huge extents an empty tensor may have.
            impl->m_offset = numel_of(shape) == 0 ? 0 : offset;
            impl->m_dtype = x.dtype();
            return tensor(std::move(impl));
        }

        void copy_into(const tensor& out, const tensor& x)
        {
            if (out.shape() != x.shape())
                throw std::logic_error("copy_into: shape mismatch " + shape_to_string(out.shape()) + " vs " +
                                       shape_to_string(x.shape()));
            if (out.device() != x.device())
                throw std::logic_error("copy_into: device mismatch");
            backend_for(out.device())
                .copy(out.data_ptr(), out.strides().data(), out.dtype(), x.data_ptr(), x.strides().data(), x.dtype(),
                      static_cast<int>(x.dim()), x.shape().data());
        }

        tensor raw_cast(const tensor& x, xgrad::dtype dt)
        {
            if (x.dtype() == dt)
                return x;
            tensor out = detail::empty(x.shape(), dt, x.device());
            copy_into(out, x);
            return out;
        }

        tensor raw_contiguous(const tensor& x) { return x.is_contiguous() ? x : copy_of(x); }

        tensor copy_of(const tensor& x)
        {
            tensor out = detail::empty(x.shape(), x.dtype(), x.device());
            copy_into(out, x);
            return out;
        }

        std::int64_t normalize_dim(std::int64_t d, std::int64_t ndim, const char* what, const shape_type& shape)
        {
            const std::int64_t r = d < 0 ? d + ndim : d;
            if (r < 0 || r >= ndim)
                throw invalid_argument(std::string(what) + ": dimension " + std::to_string(d) +
                                       " is out of range for a tensor of shape " + shape_to_string(shape));
            return r;
        }

        void check_defined(const tensor& x, const char* op)
        {
            if (!x.defined())
                throw invalid_argument(std::string(op) + ": got an undefined tensor");
        }

        void check_floating(const tensor& x, const char* op)
        {
            check_defined(x, op);
            if (!is_floating(x.dtype()))
                throw invalid_argument(std::string(op) + " does not support dtype " + std::string(name(x.dtype())) +
                                       " (floating-point tensors only)");
        }

        void check_same(const tensor& a, const tensor& b, const char* op)
        {
            check_defined(a, op);
            check_defined(b, op);
            if (a.dtype() != b.dtype())
                throw invalid_argument(std::string(op) + ": dtype mismatch, " + std::string(name(a.dtype())) + " and " +
                                       std::string(name(b.dtype())) + " (convert one with .to(dtype))");
            if (a.device() != b.device())
                throw invalid_argument(std::string(op) + ": tensors on different devices, " + to_string(a.device()) +
                                       " and " + to_string(b.device()));
        }
    }
}
