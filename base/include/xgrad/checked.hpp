#pragma once
// Checked size arithmetic: the one place where extents, strides, offsets, element and byte
// counts computed from input are multiplied and added.
//
// Every function returns the exact result or throws xgrad::invalid_argument whose message names
// the operation (`what`, e.g. "pad: output extent of dim 0") and both operands, so that a
// hostile shape or attribute is reported instead of wrapping (signed overflow is undefined
// behaviour, and in practice turns a huge request into a small or negative one).
//
// Results are limited to int64 (tensor extents, strides and offsets are int64). Byte counts
// are limited to what a size_t can hold as well.
#include <cstddef>
#include <cstdint>
#include <initializer_list>

#include "xgrad/errors.hpp"

namespace xgrad
{
    namespace detail
    {
        /// Throws invalid_argument: "<what>: <a> <op> <b> overflows a 64-bit size".
        [[noreturn]] void throw_size_overflow(const char* what, std::int64_t a, const char* op, std::int64_t b);
        /// Throws invalid_argument: "<what>: count <count> is negative".
        [[noreturn]] void throw_negative_count(const char* what, std::int64_t count);
    }

    /// a * b, or invalid_argument naming `what` and the operands.
    inline std::int64_t checked_mul(std::int64_t a, std::int64_t b, const char* what)
    {
        std::int64_t r = 0;
        if (__builtin_mul_overflow(a, b, &r))
            detail::throw_size_overflow(what, a, "*", b);
        return r;
    }

    /// a + b, or invalid_argument naming `what` and the operands.
    inline std::int64_t checked_add(std::int64_t a, std::int64_t b, const char* what)
    {
        std::int64_t r = 0;
        if (__builtin_add_overflow(a, b, &r))
            detail::throw_size_overflow(what, a, "+", b);
        return r;
    }

    /// a - b, or invalid_argument naming `what` and the operands.
    inline std::int64_t checked_sub(std::int64_t a, std::int64_t b, const char* what)
    {
        std::int64_t r = 0;
        if (__builtin_sub_overflow(a, b, &r))
            detail::throw_size_overflow(what, a, "-", b);
        return r;
    }

    /// The product of `values` (1 for none), checked step by step.
    inline std::int64_t checked_product(std::initializer_list<std::int64_t> values, const char* what)
    {
        std::int64_t r = 1;
        for (const std::int64_t v : values)
            r = checked_mul(r, v, what);
        return r;
    }

    /// count * itemsize as a byte count that fits both int64 and size_t; count must be >= 0.
    inline std::size_t checked_bytes(std::int64_t count, std::size_t itemsize, const char* what)
    {
        if (count < 0)
            detail::throw_negative_count(what, count);
        const std::int64_t n = checked_mul(count, static_cast<std::int64_t>(itemsize), what);
        if (static_cast<std::uint64_t>(n) > static_cast<std::uint64_t>(SIZE_MAX))
            detail::throw_size_overflow(what, count, "*", static_cast<std::int64_t>(itemsize));
        return static_cast<std::size_t>(n);
    }

    /// n rounded up to a multiple of unit (unit >= 1), for allocators' size classes and
    /// alignment; the result must fit int64 (as every byte count of checked_bytes does), so a
    /// request near SIZE_MAX is reported instead of wrapping to a small block.
    inline std::size_t checked_round_up(std::size_t n, std::size_t unit, const char* what)
    {
        constexpr auto limit = static_cast<std::size_t>(INT64_MAX);
        if (unit == 0 || n > limit || unit > limit || n > limit - (unit - 1))
            detail::throw_size_overflow(what, static_cast<std::int64_t>(n > limit ? limit : n), "rounded up to",
                                        static_cast<std::int64_t>(unit > limit ? limit : unit));
        return (n + unit - 1) / unit * unit;
    }
}
