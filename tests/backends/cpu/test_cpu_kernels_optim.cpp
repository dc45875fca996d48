// The fused optimizer kernels (sgd_step, adam_step; backends/cpu/kernels/optim.cpp) against
// their reference twins (backends/cpu/reference/optim.cpp): every dtype, every variant of the
// rules (first step without buffers, momentum, dampening, Nesterov, weight decay, Adam and
// AdamW), sizes around the SIMD widths and above the threading grain, at every SIMD level and
// at 1 and 2 threads. Outputs are pre-filled with NaN (the kernels ASSIGN every element);
// in-place calls (output = input) must give the out-of-place bits.
//
// Tolerance: none, the bits must agree. Both sides run the one element formula of
// backends/common/optimizer_math.hpp (the fast kernel on SIMD batches), whose operations are
// each one IEEE operation (products, sums, a quotient and a correctly rounded sqrt) in the
// same order; the padded tail runs the same vector code. A fast kernel that fused a product
// and a sum into an fma would differ in the last bit, and this test is there to notice.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "tests/support/cpu_kernels_helpers.hpp"

using namespace cpu_kernels_test;

namespace
{
    /// n random elements of dt as raw bytes, uniform in [lo, hi), rounded to dt.
    std::vector<unsigned char> random_bytes(std::mt19937_64& gen, dtype dt, std::int64_t n, double lo, double hi)
    {
        std::uniform_real_distribution<double> u(lo, hi);
        std::vector<unsigned char> out(static_cast<std::size_t>(n) * xgrad::itemsize(dt));
        for (std::int64_t i = 0; i < n; ++i)
        {
            const double v = u(gen);
            unsigned char* p = out.data() + static_cast<std::size_t>(i) * xgrad::itemsize(dt);
            switch (dt)
            {
            case dtype::float32:
            {
                const float f = static_cast<float>(v);
                std::memcpy(p, &f, 4);
                break;
            }
            case dtype::float64: std::memcpy(p, &v, 8); break;
            case dtype::float16:
            {
                const auto h = xgrad::to_float16(v);
                std::memcpy(p, &h.bits, 2);
                break;
            }
            case dtype::bfloat16:
            {
                const auto h = xgrad::to_bfloat16(v);
                std::memcpy(p, &h.bits, 2);
                break;
            }
            case dtype::int64: break;
            }
        }
        return out;
    }

    /// n elements of dt holding NaN (0xff bytes: a NaN in every floating dtype).
    std::vector<unsigned char> nan_bytes(dtype dt, std::int64_t n)
    {
        return std::vector<unsigned char>(static_cast<std::size_t>(n) * xgrad::itemsize(dt), 0xff);
    }

    void* ptr(std::vector<unsigned char>& v) { return v.data(); }
    const void* cptr(const std::vector<unsigned char>& v) { return v.data(); }

    struct sgd_variant
    {
        const char* name;
        xgrad::kernels::sgd_step_coefficients c;
        bool with_buffer; // a momentum buffer from an earlier step
    };

    struct adam_variant
    {
        const char* name;
        xgrad::kernels::adam_step_coefficients c;
        bool with_buffers;
    };

    std::vector<sgd_variant> sgd_variants()
    {
        using C = xgrad::kernels::sgd_step_coefficients;
        return {
            {"plain", C{0.1, 0.0, 0.0, 0.0, false}, false},
            {"weight decay", C{0.1, 0.05, 0.0, 0.0, false}, false},
            {"momentum, first step", C{0.1, 0.0, 0.9, 0.0, false}, false},
            {"momentum", C{0.1, 0.0, 0.9, 0.0, false}, true},
            {"dampening", C{0.05, 0.0, 0.8, 0.3, false}, true},
            {"nesterov, first step", C{0.1, 0.0, 0.9, 0.0, true}, false},
            {"nesterov and decay", C{0.03, 0.2, 0.7, 0.0, true}, true},
        };
    }

    std::vector<adam_variant> adam_variants()
    {
        using C = xgrad::kernels::adam_step_coefficients;
        const double c1 = 1.0 - std::pow(0.9, 3.0), c2 = 1.0 - std::pow(0.999, 3.0);
        return {
            {"adam, first step", C{1e-3, 0.9, 0.999, 1e-8, 0.0, false, 0.1, 1.0 - 0.999}, false},
            {"adam", C{1e-3, 0.9, 0.999, 1e-8, 0.0, false, c1, c2}, true},
            {"adam with L2", C{1e-2, 0.8, 0.99, 1e-6, 0.1, false, c1, c2}, true},
            {"adamw, first step", C{1e-3, 0.9, 0.999, 1e-8, 0.01, true, 0.1, 1.0 - 0.999}, false},
            {"adamw", C{3e-3, 0.9, 0.999, 1e-3, 0.05, true, c1, c2}, true},
        };
    }

    void check_same_bytes(const std::vector<unsigned char>& want, const std::vector<unsigned char>& got,
                          const char* what)
    {
        INFO(std::string(what));
        std::size_t first = want.size();
        for (std::size_t i = 0; i < want.size() && first == want.size(); ++i)
            if (want[i] != got[i])
                first = i;
        CHECK_MESSAGE(first == want.size(), "first differing byte ", first, " of ", want.size());
    }

    const std::vector<dtype> dtypes{dtype::float32, dtype::float64, dtype::float16, dtype::bfloat16};
    // Around the SIMD widths (4, 8, 16 lanes), the 16-bit pieces (256) and the threading grain
    // (32768 elements a chunk, so the largest splits over two threads).
    const std::vector<std::int64_t> sizes{0, 1, 3, 8, 17, 255, 257, 1000, 3 * 32768 + 5};
}

TEST_CASE("cpu kernels: sgd_step matches the reference bit for bit")
{
    settings_guard restore;
    std::mt19937_64 gen(2024);
    for (const dtype dt : dtypes)
        for (const std::int64_t n : sizes)
        {
            const auto p = random_bytes(gen, dt, n, -2.0, 2.0), g = random_bytes(gen, dt, n, -1.0, 1.0),
                       b = random_bytes(gen, dt, n, -0.5, 0.5);
            for (const auto& v : sgd_variants())
            {
                INFO("dtype ", name(dt), " n ", n, " variant ", std::string(v.name));
                const bool mom = v.c.momentum != 0.0;
                auto want_p = nan_bytes(dt, n), want_b = nan_bytes(dt, n);
                cpu::reference::sgd_step(ptr(want_p), mom ? ptr(want_b) : nullptr, cptr(p), cptr(g),
                                         v.with_buffer ? cptr(b) : nullptr, dt, n, v.c);
                for (const auto level : simd_levels())
                    for (const int threads : {1, 2})
                    {
                        INFO("SIMD level ", level_name(level), " threads ", threads);
                        cpu::limit_simd_level(level);
                        xgrad::set_num_threads(threads);
                        auto got_p = nan_bytes(dt, n), got_b = nan_bytes(dt, n);
                        fast.sgd_step(ptr(got_p), mom ? ptr(got_b) : nullptr, cptr(p), cptr(g),
                                      v.with_buffer ? cptr(b) : nullptr, dt, n, v.c);
                        check_same_bytes(want_p, got_p, "param");
                        if (mom)
                            check_same_bytes(want_b, got_b, "momentum buffer");
                        // In place: the outputs are the inputs themselves.
                        auto ip = p, ib = b;
                        fast.sgd_step(ptr(ip), mom ? ptr(ib) : nullptr, cptr(ip), cptr(g),
                                      v.with_buffer ? cptr(ib) : nullptr, dt, n, v.c);
                        check_same_bytes(want_p, ip, "param, in place");
                        if (mom)
                            check_same_bytes(want_b, ib, "momentum buffer, in place");
                    }
            }
        }
}

TEST_CASE("cpu kernels: adam_step matches the reference bit for bit")
{
    settings_guard restore;
    std::mt19937_64 gen(2025);
    for (const dtype dt : dtypes)
        for (const std::int64_t n : sizes)
        {
            const auto p = random_bytes(gen, dt, n, -2.0, 2.0), g = random_bytes(gen, dt, n, -1.0, 1.0),
                       m = random_bytes(gen, dt, n, -0.1, 0.1), s = random_bytes(gen, dt, n, 0.0, 0.01);
            for (const auto& v : adam_variants())
            {
                INFO("dtype ", name(dt), " n ", n, " variant ", std::string(v.name));
                const void* m_in = v.with_buffers ? cptr(m) : nullptr;
                const void* s_in = v.with_buffers ? cptr(s) : nullptr;
                auto want_p = nan_bytes(dt, n), want_m = nan_bytes(dt, n), want_s = nan_bytes(dt, n);
                cpu::reference::adam_step(ptr(want_p), ptr(want_m), ptr(want_s), cptr(p), cptr(g), m_in, s_in, dt, n,
                                          v.c);
                for (const auto level : simd_levels())
                    for (const int threads : {1, 2})
                    {
                        INFO("SIMD level ", level_name(level), " threads ", threads);
                        cpu::limit_simd_level(level);
                        xgrad::set_num_threads(threads);
                        auto got_p = nan_bytes(dt, n), got_m = nan_bytes(dt, n), got_s = nan_bytes(dt, n);
                        fast.adam_step(ptr(got_p), ptr(got_m), ptr(got_s), cptr(p), cptr(g), m_in, s_in, dt, n, v.c);
                        check_same_bytes(want_p, got_p, "param");
                        check_same_bytes(want_m, got_m, "exp_avg");
                        check_same_bytes(want_s, got_s, "exp_avg_sq");
                        if (v.with_buffers)
                        {
                            auto ip = p, im = m, is = s;
                            fast.adam_step(ptr(ip), ptr(im), ptr(is), cptr(ip), cptr(g), cptr(im), cptr(is), dt, n,
                                           v.c);
                            check_same_bytes(want_p, ip, "param, in place");
                            check_same_bytes(want_m, im, "exp_avg, in place");
                            check_same_bytes(want_s, is, "exp_avg_sq, in place");
                        }
                    }
            }
        }
}

TEST_CASE("cpu kernels: the reference sgd_step and adam_step compute the documented formulas")
{
    // One float64 element, by hand: the twins are the oracle of the fast kernels, so they are
    // checked against the formulas themselves.
    const double p = 1.5, g = -0.25, b = 0.125;
    double po = 0.0, bo = 0.0;
    const xgrad::kernels::sgd_step_coefficients sc{0.1, 0.2, 0.9, 0.25, false};
    cpu::reference::sgd_step(&po, &bo, &p, &g, &b, dtype::float64, 1, sc);
    const double d = g + 0.2 * p, bn = 0.9 * b + 0.75 * d;
    CHECK(bo == doctest::Approx(bn).epsilon(1e-15));
    CHECK(po == doctest::Approx(p - 0.1 * bn).epsilon(1e-15));

    const double m = 0.05, v = 0.002;
    double mo = 0.0, vo = 0.0;
    const double c1 = 1.0 - std::pow(0.9, 4.0), c2 = 1.0 - std::pow(0.999, 4.0);
    const xgrad::kernels::adam_step_coefficients ac{0.01, 0.9, 0.999, 1e-8, 0.1, true, c1, c2};
    cpu::reference::adam_step(&po, &mo, &vo, &p, &g, &m, &v, dtype::float64, 1, ac);
    const double mn = 0.9 * m + 0.1 * g, vn = 0.999 * v + 0.001 * g * g;
    CHECK(mo == doctest::Approx(mn).epsilon(1e-15));
    CHECK(vo == doctest::Approx(vn).epsilon(1e-15));
    CHECK(po ==
          doctest::Approx(p * (1.0 - 0.01 * 0.1) - 0.01 * (mn / c1) / (std::sqrt(vn / c2) + 1e-8)).epsilon(1e-13));
}
