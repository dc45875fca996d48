#pragma once
// Shared by the CUDA backend's tests (tests/backends/cuda/test_cuda_*.cpp, one ctest executable test_cuda).
//
// Each test runs an op on CPU tensors and on the same values on cuda:0, and compares: the CPU
// backend is the reference of the CUDA one. The executable is built in two configurations:
// - XGRAD_USE_CUDA (nvcc): label `cuda`; it needs a GPU and skips (exit code 77, with a
//   message) when none is present (cuda_main.cpp).
// - XGRAD_CUDA_ON_CPU: label `cuda_cpu`; the same CUDA backend sources run on Thrust's OpenMP
//   system, so the backend's logic is tested on every machine.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

#include "xgrad/xgrad.hpp"

namespace cuda_test
{
    using namespace xgrad;

    inline const device gpu{device_type::cuda, 0};

    /// The four floating dtypes.
    inline const std::vector<dtype> float_dtypes = {dtype::float32, dtype::float64, dtype::float16, dtype::bfloat16};

    /// The dtype of batch-norm statistics for data of dtype dt.
    inline dtype stats_of(dtype dt) { return dt == dtype::float64 ? dtype::float64 : dtype::float32; }

    /// A 1-d int64 CPU tensor of v.
    inline tensor int64_tensor(const std::vector<std::int64_t>& v)
    {
        return from_host(v.data(), {static_cast<std::int64_t>(v.size())}, dtype::int64);
    }

    /// Seeded values uniform in [lo, hi), rounded to dt, on the CPU.
    inline tensor random_cpu(const shape_type& shape, dtype dt, std::uint64_t seed, double lo = -2.0, double hi = 2.0)
    {
        generator gen(seed);
        return rand(shape, gen, dt, cpu_device, lo, hi);
    }

    /// The tolerance of a device result against the CPU's, per dtype: |d - c| <= tol * (1 + |c|).
    /// The two backends run the same formulas, but sums are split differently (the device sums
    /// in a fixed tree of partial sums, the CPU in its own blocks) and the GPU contracts a*b+c
    /// into fused multiply-adds, so each result may differ by a few roundings of its dtype,
    /// grown by the condition of the sum: 1e-4 for float32 (2^-23 ~ 1.2e-7 times sums of up to
    /// ~1e3 terms of mixed sign), 1e-10 for float64, and for the 16-bit types one rounding step
    /// of their own (2^-11, 2^-8) on top of the float32 error before they were rounded.
    inline double tolerance(dtype dt)
    {
        switch (dt)
        {
        case dtype::float64: return 1e-10;
        case dtype::float16: return 2e-3;
        case dtype::bfloat16: return 1.6e-2;
        default: return 1e-4;
        }
    }

    /// CHECKs that `dev` (any device) matches `ref` (on the CPU) element by element within
    /// tol * (1 + |ref|); NaN must meet NaN and infinities the same infinity. Reports the first
    /// mismatch and how many there are.
    inline void check_close(const tensor& ref, const tensor& dev, double tol, const std::string& what)
    {
        REQUIRE_MESSAGE(ref.shape() == dev.shape(),
                        what << ": shapes " << shape_to_string(ref.shape()) << " and " << shape_to_string(dev.shape()));
        CHECK_MESSAGE(ref.dtype() == dev.dtype(), what << ": dtypes differ");
        const std::vector<double> r = to_vector(ref), d = to_vector(dev.to(cpu_device));
        std::int64_t bad = 0, first = -1;
        for (std::size_t i = 0; i < r.size(); ++i)
        {
            const bool ok = std::isnan(r[i])   ? std::isnan(d[i])
                            : std::isinf(r[i]) ? d[i] == r[i]
                                               : std::abs(d[i] - r[i]) <= tol * (1.0 + std::abs(r[i]));
            if (!ok && bad++ == 0)
                first = static_cast<std::int64_t>(i);
        }
        CHECK_MESSAGE(bad == 0, what << ": " << bad << " of " << r.size() << " elements differ beyond " << tol
                                     << "; first at flat index " << first << ": cpu "
                                     << (first >= 0 ? r[static_cast<std::size_t>(first)] : 0.0) << ", device "
                                     << (first >= 0 ? d[static_cast<std::size_t>(first)] : 0.0));
    }

    inline void check_close(const tensor& ref, const tensor& dev, const std::string& what)
    {
        check_close(ref, dev, tolerance(ref.dtype()), what);
    }

    /// CHECKs that a and b (any devices) hold the same bits (same shape and dtype).
    inline void check_same_bits(const tensor& a, const tensor& b, const std::string& what)
    {
        REQUIRE_MESSAGE(a.shape() == b.shape(), what << ": shapes differ");
        REQUIRE_MESSAGE(a.dtype() == b.dtype(), what << ": dtypes differ");
        const tensor ha = a.to(cpu_device).contiguous(), hb = b.to(cpu_device).contiguous();
        const std::size_t nbytes = static_cast<std::size_t>(ha.numel()) * itemsize(ha.dtype());
        std::vector<unsigned char> ba(nbytes), bb(nbytes);
        to_host(ha, ba.data(), ha.dtype());
        to_host(hb, bb.data(), hb.dtype());
        std::int64_t bad = 0;
        for (std::size_t i = 0; i < nbytes; ++i)
            bad += ba[i] != bb[i];
        CHECK_MESSAGE(bad == 0, what << ": " << bad << " of " << nbytes << " bytes differ");
    }
}
