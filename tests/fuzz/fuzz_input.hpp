#pragma once
// Decoding a fuzzer's bytes into a bounded request, shared by the targets of tests/fuzz.
//
// Every read is total: past the end of the input it returns zeros, so any byte string is a
// valid request and the mutator can shorten or lengthen inputs freely. Extents and attributes
// are mostly small (so that the ops run and their branches are covered), with a fixed table
// of hostile values (0, -1, 2^31 - 1, 2^32, 2^40, INT64_MAX, INT64_MIN, ...) picked by the
// byte values at the top of the range, so huge attributes are one mutation away: byte b < 224
// is a small value, 224 + k the k-th entry of the table (k < 18), and 242..255 take the next 8
// bytes as a raw little-endian value. Regression inputs depend on this coding: change it only
// by appending to the table, and regenerate the seeds (tests/fuzz/make_seeds.cpp).
//
// Tensors are made only when their element count is at most max_elements (2^16), so a target
// never allocates much by design; a request whose size the target's own prediction says is
// too big for that is skipped, and one the op must reject (overflow, invalid attributes) is
// still passed to the op: that is where it must throw without allocating.
//
// Outcome rules (expect_rejection, fuzz_check): a target treats xgrad::invalid_argument /
// std::invalid_argument and the I/O error types as expected results; any other exception, a
// failed fuzz_check (wrong output or an op that accepted what it must reject), a sanitizer
// report, a hang or a large allocation is a finding.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "xgrad/dtype.hpp"
#include "xgrad/factories.hpp"
#include "xgrad/tensor.hpp"

namespace xgrad::fuzz
{
    /// The most elements a target puts in one tensor it makes or asks an op to make.
    inline constexpr std::int64_t max_elements = std::int64_t{1} << 16;

    /// Aborts with a message (a finding): the fuzzer saves the input that led here.
    [[noreturn]] inline void fail(const char* target, const std::string& what)
    {
        std::fprintf(stderr, "fuzz finding in %s: %s\n", target, what.c_str());
        std::fflush(stderr);
        std::abort();
    }

#define XGRAD_FUZZ_CHECK(target, cond, what)                                                                           \
    do                                                                                                                 \
    {                                                                                                                  \
        if (!(cond))                                                                                                   \
            ::xgrad::fuzz::fail(target, std::string("check failed: " #cond ": ") + (what));                            \
    } while (0)

    class fuzz_input
    {
    public:
        fuzz_input(const std::uint8_t* data, std::size_t size) : m_data(data), m_size(size) {}

        bool empty() const noexcept { return m_pos >= m_size; }
        std::size_t remaining() const noexcept { return empty() ? 0 : m_size - m_pos; }

        std::uint8_t byte() noexcept { return empty() ? 0 : m_data[m_pos++]; }
        bool boolean() noexcept { return (byte() & 1) != 0; }
        std::uint64_t u64() noexcept
        {
            std::uint64_t v = 0;
            for (int i = 0; i < 8; ++i)
                v |= std::uint64_t{byte()} << (8 * i);
            return v;
        }
        /// One of n choices (n >= 1).
        std::size_t choice(std::size_t n) noexcept { return byte() % n; }

        /// An extent or attribute: mostly in [0, small_max], sometimes a hostile value.
        std::int64_t integer(std::int64_t small_max) noexcept { return integer_in(0, small_max); }

        /// Mostly in [lo, hi] (a small range), sometimes a hostile value.
        std::int64_t integer_in(std::int64_t lo, std::int64_t hi) noexcept
        {
            const std::uint8_t b = byte();
            if (b < 224)
                return lo + static_cast<std::int64_t>(b % static_cast<std::uint64_t>(hi - lo + 1));
            static constexpr std::int64_t hostile[] = {
                0,
                -1,
                -2,
                -3,
                std::numeric_limits<std::int64_t>::max(),
                std::numeric_limits<std::int64_t>::min(),
                std::numeric_limits<std::int64_t>::max() - 1,
                std::numeric_limits<std::int64_t>::max() / 2 + 1,
                (std::int64_t{1} << 31) - 1,
                std::int64_t{1} << 31,
                (std::int64_t{1} << 32) - 1,
                std::int64_t{1} << 32,
                std::int64_t{1} << 40,
                std::int64_t{1} << 62,
                -(std::int64_t{1} << 31),
                -(std::int64_t{1} << 40),
                (std::int64_t{1} << 30) - 1, // at most half of 2^31 - 1: a pool's padding
                std::int64_t{1} << 30,
            };
            const std::uint8_t k = b - 224;
            if (k < sizeof(hostile) / sizeof(hostile[0]))
                return hostile[k];
            return static_cast<std::int64_t>(u64());
        }

        /// A floating-point value: mostly small numbers, sometimes Inf, NaN, -0, extremes.
        double real() noexcept
        {
            const std::uint8_t b = byte();
            if (b < 200)
                return (static_cast<double>(b) - 100.0) / 16.0;
            static constexpr double special[] = {
                std::numeric_limits<double>::infinity(),
                -std::numeric_limits<double>::infinity(),
                std::numeric_limits<double>::quiet_NaN(),
                -0.0,
                1e30,
                -1e30,
                65504.0,
                3.0e38,
                -3.0e38,
                1e-40,
                1e300,
                std::numeric_limits<double>::denorm_min(),
            };
            const std::uint8_t k = b - 200;
            if (k < sizeof(special) / sizeof(special[0]))
                return special[k];
            double v;
            const std::uint64_t bits = u64();
            std::memcpy(&v, &bits, sizeof v);
            return v;
        }

        /// A floating dtype; int64 now and then (the ops must reject it).
        dtype floating_dtype(bool allow_int64 = true) noexcept
        {
            switch (byte() % 9)
            {
            case 0:
            case 1: return dtype::float32;
            case 2:
            case 3: return dtype::float64;
            case 4:
            case 5: return dtype::float16;
            case 6:
            case 7: return dtype::bfloat16;
            default: return allow_int64 ? dtype::int64 : dtype::float32;
            }
        }

        /// The rest of the input as bytes.
        std::vector<std::uint8_t> rest()
        {
            std::vector<std::uint8_t> out;
            if (!empty())
                out.assign(m_data + m_pos, m_data + m_size);
            m_pos = m_size;
            return out;
        }

    private:
        const std::uint8_t* m_data;
        std::size_t m_size;
        std::size_t m_pos = 0;
    };

    /// The product of `shape` when every extent is >= 0 and the product fits int64_t.
    inline std::optional<std::int64_t> exact_numel(const shape_type& shape)
    {
        __int128 n = 1;
        for (const std::int64_t e : shape)
        {
            if (e < 0)
                return std::nullopt;
            n *= e;
            if (n > std::numeric_limits<std::int64_t>::max())
            {
                // A zero extent later would still make it 0; keep scanning for one.
                for (const std::int64_t f : shape)
                    if (f == 0)
                        return 0;
                return std::nullopt;
            }
        }
        return static_cast<std::int64_t>(n);
    }

    /// True when a tensor of `shape` is small enough for a target to create: at most
    /// max_elements elements, counting a zero extent as 1, so that an empty tensor has small
    /// extents too (the targets pass huge extents as attributes, not in the tensors they make).
    inline bool fits(const shape_type& shape)
    {
        std::int64_t n = 1;
        for (const std::int64_t e : shape)
        {
            if (e < 0 || e > max_elements)
                return false;
            n *= e == 0 ? 1 : e;
            if (n > max_elements)
                return false;
        }
        return true;
    }

    /// True when an op's result of `shape` is small enough to ask for: at most max_elements
    /// elements (an empty result may have huge extents: the op must cope with them).
    inline bool small_result(const shape_type& shape)
    {
        const auto n = exact_numel(shape);
        return n && *n <= max_elements;
    }

    /// A tensor of `shape` (which must fit) and dtype `dt` whose values come from the input.
    inline tensor make_tensor(fuzz_input& in, const shape_type& shape, dtype dt)
    {
        const std::int64_t n = *exact_numel(shape);
        std::vector<double> values(static_cast<std::size_t>(n));
        // A few values from the input, repeated: long inputs are not needed for big tensors.
        double pattern[8];
        const std::size_t count = 1 + in.choice(8);
        for (std::size_t i = 0; i < count; ++i)
            pattern[i] = in.real();
        for (std::int64_t i = 0; i < n; ++i)
            values[static_cast<std::size_t>(i)] = pattern[static_cast<std::size_t>(i) % count];
        if (dt == dtype::int64)
        {
            for (double& v : values)
                v = (v == v && v > -1e18 && v < 1e18) ? static_cast<double>(static_cast<std::int64_t>(v)) : 0.0;
        }
        return from_host(values.data(), shape, dtype::float64).to(dt);
    }

    /// Runs `f`; an exception of one of the expected types is an accepted outcome and returns
    /// false, success returns true. Any other exception propagates (a finding).
    template <class F>
    bool attempt(F&& f)
    {
        try
        {
            f();
            return true;
        }
        catch (const std::invalid_argument&) // xgrad::invalid_argument derives from it
        {
            return false;
        }
    }

    /// Runs `f`, which must throw std::invalid_argument (xgrad::invalid_argument): the op was
    /// given something the contract says it rejects.
    template <class F>
    void expect_rejection(const char* target, const std::string& what, F&& f)
    {
        if (attempt(f))
            fail(target, "accepted " + what + " (the contract says it is rejected)");
    }

    inline std::string shape_string(const shape_type& s) { return shape_to_string(s); }

    /// Runs `op` (returning a tensor): when `must_reject`, it must throw; otherwise, when it
    /// succeeds, its result's shape must be `expected` (if given). Returns the result, or an
    /// undefined tensor when it threw.
    template <class F>
    tensor checked_op(const char* target, const std::string& what, bool must_reject, const shape_type* expected, F&& op)
    {
        tensor out;
        const bool ok = attempt([&] { out = op(); });
        if (must_reject && ok)
            fail(target,
                 "accepted " + what + " (the contract says it is rejected), giving " + shape_string(out.shape()));
        if (ok && expected != nullptr)
            XGRAD_FUZZ_CHECK(target, out.shape() == *expected,
                             what + " gave " + shape_string(out.shape()) + ", expected " + shape_string(*expected));
        return ok ? out : tensor();
    }
}
