#pragma once
// xgrad::tensor: a reference-counted handle to a strided view of typed storage on a device,
// plus the autograd metadata that links it into the define-by-run graph.
//
// Copying a tensor copies the handle (both refer to the same data and graph node), as in
// PyTorch. Views (reshape of a contiguous tensor, permute, transpose, slice, expand) share
// storage; `contiguous()` and `to(...)` return new storage only when they must.
//
// Errors: every method that can fail on user input throws std::invalid_argument (bad shapes,
// dims, dtypes) or std::runtime_error (autograd misuse), with a message naming what was wrong.
#include <cstdint>
#include <iosfwd>
#include <memory>
#include <string>
#include <vector>

#include "xgrad/dtype.hpp"

namespace xgrad
{
    using shape_type = std::vector<std::int64_t>;
    using strides_type = std::vector<std::int64_t>;

    class node;
    struct grad_hooks; // a leaf's gradient-accumulation hooks (xgrad/autograd.hpp)

    /// Device memory owned by one or more tensors. Allocated and freed by the device's backend.
    class storage
    {
    public:
        storage(std::size_t nbytes, device dev);
        ~storage();
        storage(const storage&) = delete;
        storage& operator=(const storage&) = delete;

        void* data() const noexcept { return m_data; }
        std::size_t nbytes() const noexcept { return m_nbytes; }
        xgrad::device device() const noexcept { return m_device; }

    private:
        void* m_data = nullptr;
        std::size_t m_nbytes = 0;
        xgrad::device m_device;
    };

    /// The shared state behind a tensor handle. Users reach it only through `tensor`.
    struct tensor_impl
    {
        std::shared_ptr<storage> m_storage;
        shape_type m_shape;
        strides_type m_strides;    // in elements
        std::int64_t m_offset = 0; // in elements, from m_storage->data()
        xgrad::dtype m_dtype = xgrad::dtype::float32;

        bool m_requires_grad = false;
        std::shared_ptr<tensor_impl> m_grad;      // accumulated gradient of a leaf
        std::shared_ptr<node> m_grad_fn;          // producer of a non-leaf
        int m_output_nr = 0;                      // which output of m_grad_fn this is
        std::weak_ptr<node> m_grad_accumulator;   // the leaf's accumulate node, while a graph uses it
        std::shared_ptr<grad_hooks> m_grad_hooks; // run after each accumulation; null without hooks
        std::uint64_t m_version = 0; // counts set_data calls: a graph that recorded an older one refuses to run
    };

    class tensor
    {
    public:
        using shape_type = xgrad::shape_type;
        using strides_type = xgrad::strides_type;
        using size_type = std::int64_t;

        /// An undefined tensor (no storage). Most methods throw on it; `defined()` tells.
        tensor() = default;
        explicit tensor(std::shared_ptr<tensor_impl> impl) noexcept : m_impl(std::move(impl)) {}

        bool defined() const noexcept { return static_cast<bool>(m_impl); }
        const std::shared_ptr<tensor_impl>& impl() const noexcept { return m_impl; }

        // --- metadata --------------------------------------------------------------------
        const shape_type& shape() const;
        const strides_type& strides() const;
        std::int64_t offset() const;
        std::int64_t dim() const;
        /// Extent of dimension d; negative d counts from the end.
        std::int64_t size(std::int64_t d) const;
        std::int64_t numel() const;
        xgrad::dtype dtype() const;
        xgrad::device device() const;
        bool is_contiguous() const;
        /// Pointer to element 0 of this view (device memory for device tensors).
        void* data_ptr() const;
        template <class T>
        T* data() const
        {
            return static_cast<T*>(data_ptr());
        }
        /// True when both handles refer to the same tensor.
        bool is_same(const tensor& other) const noexcept { return m_impl == other.m_impl; }

        // --- autograd --------------------------------------------------------------------
        bool requires_grad() const;
        /// Marks a leaf as requiring (or not) gradients; throws on a non-leaf or an int64 tensor.
        tensor& requires_grad_(bool value = true);
        /// The gradient accumulated into this leaf by backward (undefined before).
        tensor grad() const;
        void set_grad(const tensor& g);
        /// Clears the accumulated gradient.
        void zero_grad();
        const std::shared_ptr<node>& grad_fn() const;
        bool is_leaf() const;
        /// A tensor sharing storage with this one, cut from the graph (requires_grad false).
        tensor detach() const;
        /// Gives this handle the data of `value` (its storage, strides and offset; the
        /// storage is shared, never written), keeping this tensor's identity: every copy of
        /// the handle sees the new values, its requires_grad, grad() and gradient hooks stay.
        /// This is how an optimizer updates a parameter in place, so that handles users keep
        /// (auto w = conv->weight()) stay valid; views taken of the old value keep the old
        /// values. The data of a tensor is never changed under a graph that uses it: set_data
        /// increments the tensor's version, and a backward pass through an op that recorded
        /// the tensor at an older version throws std::runtime_error naming the op. Not
        /// differentiable and not recorded. Throws xgrad::invalid_argument when either is
        /// undefined, this is not a leaf (it has a grad_fn), or value's shape, dtype or device
        /// differ from this tensor's.
        tensor& set_data(const tensor& value);
        /// How many times set_data gave this tensor new data.
        std::uint64_t version() const;
        /// Gradient of this tensor w.r.t. the graph's leaves, accumulated into their grad().
        /// grad_output defaults to 1 for a one-element tensor and is required otherwise.
        void backward(const tensor& grad_output = {}, bool retain_graph = false, bool create_graph = false) const;

        // --- conversions and views (all differentiable) ----------------------------------
        tensor contiguous() const;
        tensor to(xgrad::dtype dt) const;
        tensor to(xgrad::device dev) const;
        tensor reshape(const shape_type& shape) const;
        tensor permute(const std::vector<std::int64_t>& dims) const;
        tensor transpose(std::int64_t d0, std::int64_t d1) const;
        tensor slice(std::int64_t dim, std::int64_t start, std::int64_t stop, std::int64_t step = 1) const;
        tensor expand(const shape_type& shape) const;

        /// The value of a one-element tensor (throws naming the shape otherwise).
        double item() const;
        template <class T>
        T item() const
        {
            return static_cast<T>(item());
        }

        /// Readable text, e.g. "tensor([[1, 2], [3, 4]], dtype=float32)"; long tensors elided.
        std::string to_string() const;

    private:
        const tensor_impl& checked() const;
        std::shared_ptr<tensor_impl> m_impl;
    };

    std::ostream& operator<<(std::ostream& os, const tensor& t);
    /// "[2, 3]"
    std::string shape_to_string(const shape_type& shape);
    /// The element count of `shape`: 0 when an extent is 0 (however large the others), else the
    /// product. Throws xgrad::invalid_argument naming the shape for a negative extent or a
    /// product beyond int64.
    std::int64_t numel_of(const shape_type& shape);
    /// Row-major strides of `shape`, counting a 0 extent as 1. When those do not fit int64
    /// (possible only for an empty shape, such as [0, 2^40, 2^40], which addresses no element),
    /// every stride is 1.
    strides_type contiguous_strides(const shape_type& shape);
}
