#pragma once
// Interop with xtensor: copy an xt::xarray into a tensor and back.
#include <type_traits>

#include <xtensor/xarray.hpp>

#include "xgrad/factories.hpp"
#include "xgrad/half.hpp"

namespace xgrad
{
    /// The dtype that stores C++ type T (float, double, float16_t, bfloat16_t, std::int64_t).
    template <class T>
    constexpr dtype dtype_of()
    {
        if constexpr (std::is_same_v<T, float>)
            return dtype::float32;
        else if constexpr (std::is_same_v<T, double>)
            return dtype::float64;
        else if constexpr (std::is_same_v<T, float16_t>)
            return dtype::float16;
        else if constexpr (std::is_same_v<T, bfloat16_t>)
            return dtype::bfloat16;
        else
        {
            static_assert(std::is_same_v<T, std::int64_t>,
                          "xgrad stores float, double, float16_t, bfloat16_t and std::int64_t");
            return dtype::int64;
        }
    }

    /// A new tensor (dtype from T) holding a copy of a.
    template <class T>
    tensor from_xarray(const xt::xarray<T>& a, device dev = cpu_device)
    {
        xt::xarray<T> row_major = a; // evaluates into row-major layout
        shape_type shape(row_major.shape().begin(), row_major.shape().end());
        return from_host(row_major.data(), shape, dtype_of<T>(), dev);
    }

    /// A copy of t converted to element type T.
    template <class T>
    xt::xarray<T> to_xarray(const tensor& t)
    {
        std::vector<std::size_t> shape(t.shape().begin(), t.shape().end());
        xt::xarray<T> out(shape);
        to_host(t, out.data(), dtype_of<T>());
        return out;
    }
}
