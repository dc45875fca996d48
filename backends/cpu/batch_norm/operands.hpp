#pragma once
// Internal to the CPU backend: `operands`, the x-like inputs of one fast batch-norm kernel
// call (kernels.cpp) as the threaded walks (walk.hpp) hand them to the SIMD functors
// (simd.hpp). Every tensor dtype is read and written in place by the functors: float32 and
// float64 as they are, bfloat16 and float16 widened to float in registers on load and rounded
// once to 16 bits on store (simd_impl.hpp), so 16-bit tensors move half the bytes with no
// conversion pass.
#include <cstdint>
#include <type_traits>

#include "xgrad/half.hpp" // float16_t, bfloat16_t

namespace xgrad::cpu::bn_detail
{
    /// The x-like inputs a kernel has, e.g. operands<T, S>{}.with_x(x).with_g(dy, y); absent
    /// inputs stay null. T is the tensors' dtype, S the statistics type (float for the 16-bit
    /// dtypes, else T).
    template <class T, class S>
    struct operands
    {
        static_assert(std::is_same_v<T, S> ||
                          (std::is_same_v<S, float> && (std::is_same_v<T, bfloat16_t> || std::is_same_v<T, float16_t>)),
                      "tensors of S, or 16-bit tensors with float statistics");

        const T* x = nullptr;
        const T* g = nullptr;
        const T* a = nullptr;
        /// Not null (with g): g is read as (y > 0 ? g : 0), a fused ReLU's backward (NaN in y
        /// masks).
        const T* y = nullptr;

        operands with_x(const T* p) const noexcept
        {
            operands o = *this;
            o.x = p;
            return o;
        }
        /// g, read as (y > 0 ? g : 0) when the fused ReLU's output y is given.
        operands with_g(const T* p, const T* relu_y = nullptr) const noexcept
        {
            operands o = *this;
            o.g = p;
            o.y = relu_y;
            return o;
        }
        operands with_a(const T* p) const noexcept
        {
            operands o = *this;
            o.a = p;
            return o;
        }

        /// The inputs advanced to element `offset` (null where absent).
        operands at(std::int64_t offset) const noexcept
        {
            const auto adv = [offset](const T* p) { return p ? p + offset : nullptr; };
            operands o;
            o.x = adv(x);
            o.g = adv(g);
            o.a = adv(a);
            o.y = g ? adv(y) : nullptr;
            return o;
        }
    };
}
