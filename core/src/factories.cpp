// Tensor creation: fills, ranges, seeded random numbers, host transfers.
#include "xgrad/factories.hpp"

#include <cmath>
#include <stdexcept>

#include "detail.hpp"
#include "xgrad/checked.hpp"
#include "xgrad/errors.hpp"

namespace xgrad
{
    namespace
    {
        std::uint64_t splitmix64(std::uint64_t& x) noexcept
        {
            std::uint64_t z = (x += 0x9e3779b97f4a7c15ULL);
            z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
            z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
            return z ^ (z >> 31);
        }

        std::uint64_t rotl(std::uint64_t x, int k) noexcept { return (x << k) | (x >> (64 - k)); }

        /// The element count of `shape`, once it is known that both the float64 staging buffer
        /// and the dt result have byte counts that fit (so that neither allocation is sized by
        /// a wrapped product, nor std::vector throws length_error instead of a clear error).
        std::size_t staged_count(const shape_type& shape, dtype dt, const char* what)
        {
            const std::int64_t n = numel_of(shape);
            checked_bytes(n, sizeof(double), what);
            checked_bytes(n, itemsize(dt), what);
            return static_cast<std::size_t>(n);
        }

        tensor from_doubles(const std::vector<double>& values, const shape_type& shape, dtype dt, device dev)
        {
            return detail::raw_cast(from_host(values.data(), shape, dtype::float64, dev), dt);
        }
    }

    generator::generator(std::uint64_t seed) noexcept
    {
        for (auto& s : m_state)
            s = splitmix64(seed);
    }

    std::uint64_t generator::next_u64() noexcept
    {
        // xoshiro256** (Blackman and Vigna)
        const std::uint64_t result = rotl(m_state[1] * 5, 7) * 9;
        const std::uint64_t t = m_state[1] << 17;
        m_state[2] ^= m_state[0];
        m_state[3] ^= m_state[1];
        m_state[1] ^= m_state[2];
        m_state[0] ^= m_state[3];
        m_state[2] ^= t;
        m_state[3] = rotl(m_state[3], 45);
        return result;
    }

    double generator::uniform() noexcept { return static_cast<double>(next_u64() >> 11) * 0x1.0p-53; }

    double generator::normal() noexcept
    {
        if (m_has_spare)
        {
            m_has_spare = false;
            return m_spare;
        }
        // Box-Muller on (0, 1] x [0, 1): 1 - uniform() is never 0, so the log is finite.
        const double u1 = 1.0 - uniform(), u2 = uniform();
        const double r = std::sqrt(-2.0 * std::log(u1));
        const double theta = 2.0 * 3.14159265358979323846 * u2;
        m_spare = r * std::sin(theta);
        m_has_spare = true;
        return r * std::cos(theta);
    }

    std::uint64_t generator::below(std::uint64_t n) noexcept
    {
        // Rejection of the top partial block keeps every value equally likely.
        const std::uint64_t limit = (~std::uint64_t{0}) - (~std::uint64_t{0}) % n;
        std::uint64_t x;
        do
            x = next_u64();
        while (x >= limit);
        return x % n;
    }

    tensor empty(const shape_type& shape, dtype dt, device dev) { return detail::empty(shape, dt, dev); }

    tensor full(const shape_type& shape, double value, dtype dt, device dev)
    {
        tensor t = detail::empty(shape, dt, dev);
        detail::backend_for(dev).fill(t.data_ptr(), t.strides().data(), dt, static_cast<int>(shape.size()),
                                      shape.data(), value);
        return t;
    }

    tensor zeros(const shape_type& shape, dtype dt, device dev) { return full(shape, 0.0, dt, dev); }
    tensor ones(const shape_type& shape, dtype dt, device dev) { return full(shape, 1.0, dt, dev); }
    tensor zeros_like(const tensor& x) { return zeros(x.shape(), x.dtype(), x.device()); }
    tensor ones_like(const tensor& x) { return ones(x.shape(), x.dtype(), x.device()); }

    tensor arange(double start, double stop, double step, dtype dt, device dev)
    {
        if (step == 0.0 || !std::isfinite(start) || !std::isfinite(stop) || !std::isfinite(step))
            throw xgrad::invalid_argument("arange: need finite start, stop and a non-zero step, got (" +
                                          std::to_string(start) + ", " + std::to_string(stop) + ", " +
                                          std::to_string(step) + ")");
        const double span = std::ceil((stop - start) / step);
        if (!(span < 0x1p62))
            throw xgrad::invalid_argument("arange(" + std::to_string(start) + ", " + std::to_string(stop) + ", " +
                                          std::to_string(step) + ") would have too many elements");
        const auto n = static_cast<std::int64_t>(span > 0 ? span : 0);
        // The host staging buffer and the result are checked before either is allocated: a
        // count below 2^62 may still be more bytes than a size_t (or std::vector) can hold.
        const std::string what = "arange(" + std::to_string(start) + ", " + std::to_string(stop) + ", " +
                                 std::to_string(step) + "): bytes of " + std::to_string(n) + " elements";
        checked_bytes(n, sizeof(double), what.c_str());
        checked_bytes(n, itemsize(dt), what.c_str());
        std::vector<double> v(static_cast<std::size_t>(n));
        for (std::int64_t i = 0; i < n; ++i)
            v[static_cast<std::size_t>(i)] = start + static_cast<double>(i) * step;
        return from_doubles(v, {n}, dt, dev);
    }

    tensor randn(const shape_type& shape, generator& gen, dtype dt, device dev)
    {
        std::vector<double> v(staged_count(shape, dt, "randn: bytes"));
        for (auto& x : v)
            x = gen.normal();
        return from_doubles(v, shape, dt, dev);
    }

    tensor rand(const shape_type& shape, generator& gen, dtype dt, device dev, double low, double high)
    {
        if (!(low < high))
            throw xgrad::invalid_argument("rand: need low < high, got [" + std::to_string(low) + ", " +
                                          std::to_string(high) + ")");
        std::vector<double> v(staged_count(shape, dt, "rand: bytes"));
        for (auto& x : v)
            x = low + (high - low) * gen.uniform();
        return from_doubles(v, shape, dt, dev);
    }

    tensor from_host(const void* data, const shape_type& shape, dtype dt, device dev)
    {
        tensor t = detail::empty(shape, dt, dev);
        const std::size_t nbytes = checked_bytes(t.numel(), itemsize(dt), "from_host: bytes");
        if (nbytes)
            detail::backend_for(dev).copy_from_host(t.data_ptr(), data, nbytes);
        return t;
    }

    void to_host(const tensor& t, void* out, dtype dt)
    {
        detail::check_defined(t, "to_host");
        const tensor c = detail::raw_contiguous(detail::raw_cast(t, dt));
        const std::size_t nbytes = checked_bytes(c.numel(), itemsize(dt), "to_host: bytes");
        if (nbytes)
            detail::backend_for(c.device()).copy_to_host(out, c.data_ptr(), nbytes);
    }

    std::vector<double> to_vector(const tensor& t)
    {
        std::vector<double> v(static_cast<std::size_t>(t.numel()));
        to_host(t, v.data(), dtype::float64);
        return v;
    }
}
