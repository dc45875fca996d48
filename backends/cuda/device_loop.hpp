#pragma once
// Internal to the CUDA backend: what its Thrust sources share. Each kernel is a Thrust
// for_each over an index range with a `XGRAD_HOST_DEVICE` functor or lambda, so nvcc compiles it into a
// CUDA kernel and g++ (XGRAD_CUDA_ON_CPU) into an OpenMP loop; the same source is tested on
// both.
//
// Writing a kernel here:
// - Device lambdas are `[=] XGRAD_HOST_DEVICE (std::int64_t i) { ... }` (nvcc's extended lambdas): they
//   capture by value only, and may not sit inside a generic lambda, so choose the element type
//   with a switch over the dtype that calls a template function.
// - Host-side arrays go to the device by value inside a struct (nd_index below), never
//   through a captured pointer to host memory.
// - No float atomics and no order that depends on scheduling: every output element is
//   written by one index, and sums run in an order fixed by the shape.
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>

#include <thrust/execution_policy.h>
#include <thrust/for_each.h>
#include <thrust/iterator/counting_iterator.h>

#include "backends/common/layout.hpp"
#include "backends/cuda/cuda_kernels.hpp"
#include "xgrad/errors.hpp"
#include "xgrad/half.hpp"

#if defined(__CUDACC__)
#include <thrust/system/cuda/execution_policy.h>
#else
#include <thrust/system/omp/execution_policy.h>
#endif

namespace xgrad::cuda::detail
{
    /// The execution policy of every launch: the device's default stream without a wait after
    /// each kernel (nvcc), or Thrust's OpenMP system (g++).
    inline auto policy()
    {
#if defined(__CUDACC__)
        return thrust::cuda::par_nosync;
#else
        return thrust::device;
#endif
    }

    /// Temporary storage of Thrust's algorithms (e.g. a sort) from the caching allocator: with
    /// the default policy Thrust would call cudaMalloc and cudaFree on every call.
    struct scratch_allocator
    {
        using value_type = char;
        char* allocate(std::ptrdiff_t n) { return static_cast<char*>(cuda::allocate(static_cast<std::size_t>(n))); }
        void deallocate(char* p, std::size_t) noexcept { cuda::deallocate(p); }
    };

    /// policy() with `alloc` for the algorithm's temporaries. `alloc` must outlive the call.
    inline auto policy(scratch_allocator& alloc)
    {
#if defined(__CUDACC__)
        return thrust::cuda::par_nosync(alloc);
#else
        return thrust::omp::par(alloc);
#endif
    }

    /// f(i) for i in [0, n), in parallel, on the device.
    template <class F>
    void for_each_index(std::int64_t n, F f)
    {
        if (n <= 0)
            return;
        thrust::for_each_n(policy(), thrust::counting_iterator<std::int64_t>(0), n, f);
    }

    inline constexpr int max_dims = 8;

    /// The index space of N strided operands of one shape, normalised on the host as the CPU
    /// kernels do (kernels::detail::make_space: size-1 dimensions dropped, ordered by operand 0's
    /// strides, contiguous dimensions merged), passed to the device by value.
    template <std::size_t N>
    struct nd_index
    {
        int ndim = 1;
        std::int64_t numel = 0;
        std::int64_t shape[max_dims] = {};
        std::int64_t strides[N][max_dims] = {};
        bool contiguous[N] = {}; // operand k's offset is the flat index itself

        /// off[k] = element offset of flat index i in operand k.
        XGRAD_HOST_DEVICE void offsets(std::int64_t i, std::int64_t (&off)[N]) const
        {
            for (std::size_t k = 0; k < N; ++k)
                off[k] = 0;
            for (int d = ndim - 1; d >= 0; --d)
            {
                const std::int64_t q = d ? i / shape[d] : 0;
                const std::int64_t r = i - q * shape[d];
                for (std::size_t k = 0; k < N; ++k)
                    off[k] += r * strides[k][d];
                i = q;
            }
        }
    };

    template <std::size_t N>
    nd_index<N> make_nd_index(int ndim, const std::int64_t* shape, const std::array<const std::int64_t*, N>& strides)
    {
        const auto sp = kernels::detail::make_space<N>(ndim, shape, strides);
        nd_index<N> ix;
        ix.numel = sp.numel;
        if (sp.numel == 0)
            return ix;
        if (sp.shape.size() > static_cast<std::size_t>(max_dims))
            throw xgrad::invalid_argument("the CUDA backend supports views of at most " + std::to_string(max_dims) +
                                          " dimensions after merging contiguous ones; this one has " +
                                          std::to_string(sp.shape.size()));
        ix.ndim = static_cast<int>(sp.shape.size());
        for (int d = 0; d < ix.ndim; ++d)
        {
            ix.shape[d] = sp.shape[static_cast<std::size_t>(d)];
            for (std::size_t k = 0; k < N; ++k)
                ix.strides[k][d] = sp.strides[k][static_cast<std::size_t>(d)];
        }
        for (std::size_t k = 0; k < N; ++k)
            ix.contiguous[k] = sp.flat_contiguous[k];
        return ix;
    }

    /// Element access by storage type: float, double, std::int64_t, and the 16-bit
    /// float16_t / bfloat16_t, which load as float and store rounded to nearest even
    /// (xgrad/half.hpp's conversions, the CPU's bits).
    template <class T>
    struct element
    {
        using compute_type = T;
        XGRAD_HOST_DEVICE static T load(const void* p, std::int64_t i) { return static_cast<const T*>(p)[i]; }
        XGRAD_HOST_DEVICE static void store(void* p, std::int64_t i, T v) { static_cast<T*>(p)[i] = v; }
    };
    template <>
    struct element<float16_t>
    {
        using compute_type = float;
        XGRAD_HOST_DEVICE static float load(const void* p, std::int64_t i)
        {
            return to_float(float16_t{static_cast<const std::uint16_t*>(p)[i]});
        }
        XGRAD_HOST_DEVICE static void store(void* p, std::int64_t i, float v)
        {
            static_cast<std::uint16_t*>(p)[i] = to_float16(v).bits;
        }
    };
    template <>
    struct element<bfloat16_t>
    {
        using compute_type = float;
        XGRAD_HOST_DEVICE static float load(const void* p, std::int64_t i)
        {
            return to_float(bfloat16_t{static_cast<const std::uint16_t*>(p)[i]});
        }
        XGRAD_HOST_DEVICE static void store(void* p, std::int64_t i, float v)
        {
            static_cast<std::uint16_t*>(p)[i] = to_bfloat16(v).bits;
        }
    };

    /// Scratch device memory from the caching allocator, freed at scope exit.
    class device_buffer
    {
    public:
        explicit device_buffer(std::size_t nbytes) : m_ptr(cuda::allocate(nbytes)) {}
        ~device_buffer() { cuda::deallocate(m_ptr); }
        device_buffer(const device_buffer&) = delete;
        device_buffer& operator=(const device_buffer&) = delete;
        template <class T>
        T* as() const noexcept
        {
            return static_cast<T*>(m_ptr);
        }

    private:
        void* m_ptr;
    };
}
