#pragma once
// Creating tensors: constant fills, ranges, seeded random numbers, and host data.
#include <array>
#include <cstdint>

#include "xgrad/tensor.hpp"

namespace xgrad
{
    /// A seeded pseudo-random generator (xoshiro256** seeded by splitmix64). Its streams are
    /// defined by this code alone, so a seed gives the same numbers on every platform and
    /// standard library (unlike std::normal_distribution).
    class generator
    {
    public:
        explicit generator(std::uint64_t seed = 0) noexcept;
        std::uint64_t next_u64() noexcept;
        /// Uniform in [0, 1) with 53 random bits.
        double uniform() noexcept;
        /// Standard normal (Box-Muller, both values of each pair used).
        double normal() noexcept;
        /// Uniform integer in [0, n) without modulo bias; n >= 1.
        std::uint64_t below(std::uint64_t n) noexcept;

    private:
        std::array<std::uint64_t, 4> m_state;
        double m_spare = 0.0;
        bool m_has_spare = false;
    };

    tensor empty(const shape_type& shape, dtype dt = dtype::float32, device dev = cpu_device);
    tensor zeros(const shape_type& shape, dtype dt = dtype::float32, device dev = cpu_device);
    tensor ones(const shape_type& shape, dtype dt = dtype::float32, device dev = cpu_device);
    tensor full(const shape_type& shape, double value, dtype dt = dtype::float32, device dev = cpu_device);
    tensor zeros_like(const tensor& x);
    tensor ones_like(const tensor& x);
    /// start, start+step, ... < stop (step != 0, may be negative).
    tensor arange(double start, double stop, double step = 1.0, dtype dt = dtype::float32, device dev = cpu_device);
    /// Standard normal samples drawn from gen in row-major order.
    tensor randn(const shape_type& shape, generator& gen, dtype dt = dtype::float32, device dev = cpu_device);
    /// Uniform samples in [low, high).
    tensor rand(const shape_type& shape, generator& gen, dtype dt = dtype::float32, device dev = cpu_device,
                double low = 0.0, double high = 1.0);

    /// A tensor of `shape` and dtype `dt` holding a copy of numel(shape) row-major host
    /// elements of dtype `dt` at `data`.
    tensor from_host(const void* data, const shape_type& shape, dtype dt, device dev = cpu_device);
    /// Copies t, converted to dtype `dt`, row-major into host memory at `out`
    /// (room for t.numel() elements).
    void to_host(const tensor& t, void* out, dtype dt);
    /// All elements as float64, row-major.
    std::vector<double> to_vector(const tensor& t);
}
