// Tests of the CPU backend's matmul kernel (backends/cpu/kernels/matmul.cpp, OpenBLAS) against the
// reference triple loop: row- and column-major operands, padded leading dimensions, broadcast
// batches, operands BLAS cannot read in place, k = 0, and the INT_MAX dimension limit; each case
// both assigning (outputs pre-filled with garbage, which must not show) and accumulating (outputs
// pre-filled with random addends, which must be added once). Shared helpers:
// cpu_kernels_helpers.hpp.
//
// Tolerances, and why:
// - matmul: each entry of both results is a dot product of length k, so each is within
//   gamma_k * sum_q |a_iq| |b_qj| of the exact value (any summation order, FMA or not;
//   gamma_k = k u / (1 - k u)); they differ by at most 2 gamma_k * sum |a||b|. Accumulating
//   adds the addend c as one more term of the sum (k + 1 terms, the extra one |c|), so the
//   bound becomes 2 gamma_{k+1} (sum |a||b| + |c|); an addend added twice or dropped is off by
//   |c|, up to 1, far outside it.
#include <doctest/doctest.h>

#include <algorithm>
#include <array>
#include <climits>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "tests/support/cpu_kernels_helpers.hpp"

using namespace cpu_kernels_test;

namespace
{
    enum class major
    {
        row,
        column
    };

    /// batch x rows x cols operand; batch stride 0 when broadcast; ld padded by `pad`.
    template <class T>
    view<T> matrix(std::mt19937_64& gen, std::int64_t batch, std::int64_t rows, std::int64_t cols, major mj,
                   std::int64_t pad, bool broadcast_batch)
    {
        view<T> v;
        v.shape = {batch, rows, cols};
        const std::int64_t ld = (mj == major::row ? cols : rows) + pad;
        const std::int64_t matrix_size = ld * (mj == major::row ? rows : cols);
        v.strides = {broadcast_batch ? 0 : matrix_size, mj == major::row ? ld : 1, mj == major::row ? 1 : ld};
        v.storage.resize(static_cast<std::size_t>(broadcast_batch ? matrix_size : batch * matrix_size) + 1);
        std::uniform_real_distribution<double> dist(-1, 1);
        for (auto& x : v.storage)
            x = static_cast<T>(dist(gen));
        return v;
    }

    template <class T>
    void check_matmul_mode(const view<T>& a, const view<T>& b, std::int64_t batch, std::int64_t m, std::int64_t n,
                           std::int64_t k, bool accumulate)
    {
        const auto size = static_cast<std::size_t>(batch * m * n);
        std::vector<T> got(size, garbage_fast<T>()), want(size, garbage_reference<T>()), addend(size, T(0));
        if (accumulate)
        {
            std::mt19937_64 gen(static_cast<std::uint64_t>(size + 7));
            std::uniform_real_distribution<double> dist(-1, 1);
            for (auto& v : addend)
                v = static_cast<T>(dist(gen));
            got = addend;
            want = addend;
        }
        constexpr dtype dt = dtype_of<T>();
        fast.matmul(got.data(), a.data(), a.strides.data(), b.data(), b.strides.data(), dt, batch, m, n, k, accumulate);
        cpu::reference::matmul(want.data(), a.data(), a.strides.data(), b.data(), b.strides.data(), dt, batch, m, n, k,
                               accumulate);
        const double u = std::numeric_limits<T>::epsilon() / 2;
        const double terms = static_cast<double>(k + (accumulate ? 1 : 0));
        const double gamma = terms * u / (1 - terms * u);
        std::string err;
        for (std::int64_t p = 0; p < batch && err.empty(); ++p)
            for (std::int64_t i = 0; i < m && err.empty(); ++i)
                for (std::int64_t j = 0; j < n && err.empty(); ++j)
                {
                    double mag = 0;
                    for (std::int64_t q = 0; q < k; ++q)
                        mag += std::abs(double(a.storage[p * a.strides[0] + i * a.strides[1] + q * a.strides[2]]) *
                                        double(b.storage[p * b.strides[0] + q * b.strides[1] + j * b.strides[2]]));
                    const auto idx = static_cast<std::size_t>((p * m + i) * n + j);
                    mag += std::abs(double(addend[idx]));
                    if (!(std::abs(double(got[idx]) - double(want[idx])) <= 2 * gamma * mag))
                        err = "entry (" + std::to_string(p) + ", " + std::to_string(i) + ", " + std::to_string(j) +
                              "): got " + std::to_string(got[idx]) + ", want " + std::to_string(want[idx]);
                }
        INFO("matmul batch ", batch, " m ", m, " n ", n, " k ", k, " a ", a.describe(), " b ", b.describe(),
             accumulate ? " accumulating" : " assigning");
        CHECK_MESSAGE(err.empty(), err);
    }

    template <class T>
    void check_matmul(const view<T>& a, const view<T>& b, std::int64_t batch, std::int64_t m, std::int64_t n,
                      std::int64_t k)
    {
        check_matmul_mode(a, b, batch, m, n, k, false);
        check_matmul_mode(a, b, batch, m, n, k, true);
    }

    template <class T>
    void matmul_suite(std::mt19937_64& gen)
    {
        static constexpr std::array<std::int64_t, 6> dims = {1, 2, 3, 17, 64, 100};
        for (const major ma : {major::row, major::column})
            for (const major mb : {major::row, major::column})
                for (int rep = 0; rep < 6; ++rep)
                {
                    const std::int64_t batch = 1 + std::int64_t(gen() % 4), m = dims[gen() % dims.size()],
                                       n = dims[gen() % dims.size()], k = dims[gen() % dims.size()];
                    const auto a = matrix<T>(gen, batch, m, k, ma, rep % 2 ? 3 : 0, rep == 2);
                    const auto b = matrix<T>(gen, batch, k, n, mb, rep % 3 ? 0 : 5, rep == 3);
                    check_matmul(a, b, batch, m, n, k);
                }
        // Many small products, and large ones that OpenBLAS threads itself.
        check_matmul(matrix<T>(gen, 40, 8, 9, major::row, 0, false), matrix<T>(gen, 40, 9, 7, major::column, 0, false),
                     40, 8, 7, 9);
        check_matmul(matrix<T>(gen, 2, 200, 150, major::column, 1, false),
                     matrix<T>(gen, 2, 150, 170, major::row, 0, true), 2, 200, 170, 150);
        // Products small beside their depth are summed in chunks of k (matmul.cpp, k_chunks):
        // one product over the pool (batch 1 < 3 threads), and three, one per thread, each
        // summing its chunks on its own thread; both operand majors and a padded one.
        check_matmul(matrix<T>(gen, 1, 17, 3000, major::row, 0, false),
                     matrix<T>(gen, 1, 3000, 9, major::column, 2, false), 1, 17, 9, 3000);
        check_matmul(matrix<T>(gen, 3, 40, 2100, major::column, 0, false),
                     matrix<T>(gen, 3, 2100, 33, major::row, 0, true), 3, 40, 33, 2100);
        // Operands BLAS cannot read in place are packed: rows broadcast (row stride 0) and a
        // column stride 0 (every column the same).
        auto a = matrix<T>(gen, 3, 5, 4, major::row, 0, false);
        a.strides = {20, 0, 1};
        auto b = matrix<T>(gen, 3, 4, 6, major::column, 0, false);
        b.strides = {24, 1, 0};
        check_matmul(a, b, 3, 5, 6, 4);
    }
}

TEST_CASE("cpu kernels: matmul matches the reference")
{
    settings_guard guard;
    xgrad::set_num_threads(3);
    std::mt19937_64 gen(8);
    SUBCASE("float32") { matmul_suite<float>(gen); }
    SUBCASE("float64") { matmul_suite<double>(gen); }
    SUBCASE("k = 0 gives zeros")
    {
        std::vector<float> out(2 * 3 * 4, std::nanf(""));
        const float dummy = 1.0f;
        const shape_t as = {0, 0, 1}, bs = {0, 4, 1};
        fast.matmul(out.data(), &dummy, as.data(), &dummy, bs.data(), dtype::float32, 2, 3, 4, 0, false);
        CHECK(std::all_of(out.begin(), out.end(), [](float v) { return v == 0.0f; }));
        // Accumulating an empty product leaves the addend as it was, in both backends' loops.
        for (const bool reference : {false, true})
        {
            std::vector<float> acc(2 * 3 * 4, 2.5f);
            (reference ? cpu::reference::matmul : fast.matmul)(acc.data(), &dummy, as.data(), &dummy, bs.data(),
                                                               dtype::float32, 2, 3, 4, 0, true);
            CHECK(std::all_of(acc.begin(), acc.end(), [](float v) { return v == 2.5f; }));
        }
    }
    SUBCASE("dimensions above INT_MAX are rejected")
    {
        const shape_t st = {0, 1, 1};
        CHECK_THROWS_AS(fast.matmul(nullptr, nullptr, st.data(), nullptr, st.data(), dtype::float32, 1,
                                    std::int64_t{INT_MAX} + 1, 1, 1, false),
                        std::invalid_argument);
        CHECK_THROWS_AS(fast.matmul(nullptr, nullptr, st.data(), nullptr, st.data(), dtype::float64, 1, 1, 1,
                                    std::int64_t{INT_MAX} + 1, true),
                        std::invalid_argument);
    }
}
