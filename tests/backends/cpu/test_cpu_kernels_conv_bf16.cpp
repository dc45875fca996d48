// Tests of the bfloat16 convolution kernels of the CPU backend (kernels/conv.cpp): channels-last
// convolutions on the AMX tiles (amx/amx.cpp) where the processor has them, and through the
// float32 kernels elsewhere (every SIMD level below AVX-512, and with limit_amx(false)),
// against the reference twins (which widen to float32, sum in order and round once), over
// input channel counts around the tiles' 16 and 32, output channel counts around 16 and 64,
// kernels, strides, padding and dilations, blocks and weight-gradient runs; then the bits at
// 1, 2 and 3 threads.
//
// Tolerance: both sides sum the same T = K + O * KH * KW + N * L + 1 exact float32 products
// (bfloat16 products are exact in float32) in different orders, so their float32 sums s1, s2
// differ by at most 2 T u S (u = 2^-24, S the sum of the terms' absolute values, which is the
// reference's result on the absolute values of the operands), and each is then rounded once to
// bfloat16 (relative error at most 2^-9 <= 2^-9 S each). So |r1 - r2| <= (2^-8 + 2 T 2^-24) S.
// Outputs are pre-filled with NaN (fast) and -7.25 (reference): all three kernels ASSIGN.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backends/cpu/amx/amx.hpp"
#include "tests/support/cpu_kernels_helpers.hpp"
#include "xgrad/half.hpp"

using namespace cpu_kernels_test;

namespace
{
    using xgrad::bfloat16_t;
    using xgrad::kernels::window2d_dims;

    struct amx_guard
    {
        ~amx_guard() { cpu::limit_amx(true); }
    };

    std::vector<bfloat16_t> random_bf16(std::mt19937_64& gen, std::int64_t n)
    {
        std::uniform_real_distribution<float> dist(-1, 1);
        std::vector<bfloat16_t> v(static_cast<std::size_t>(n));
        for (auto& e : v)
            e = xgrad::to_bfloat16(dist(gen));
        return v;
    }

    std::vector<bfloat16_t> absolute(std::vector<bfloat16_t> v)
    {
        for (auto& e : v)
            e.bits &= 0x7fffu;
        return v;
    }

    /// A channels-last geometry (x contiguous [n, h, w, c]) and its operands.
    struct operands
    {
        window2d_dims d;
        std::int64_t o, l, k;
        std::vector<bfloat16_t> x, w, bias, dy;

        std::int64_t terms() const { return k + o * d.kh * d.kw + d.n * l + 1; }
        std::vector<std::int64_t> strides() const { return {d.h * d.w * d.c, 1, d.w * d.c, d.c}; }
    };

    window2d_dims window(std::mt19937_64& gen, std::int64_t c, std::int64_t kh, std::int64_t kw, bool stride_one)
    {
        for (;;)
        {
            window2d_dims d = random_window(gen, window_ranges{1, 4, {c}, 1, 19, 1, 3, 2, 2});
            if (stride_one)
                d.sh = d.sw = 1;
            d.kh = kh;
            d.kw = kw;
            const std::int64_t eh = d.h + 2 * d.ph - (kh - 1) * d.dh - 1, ew = d.w + 2 * d.pw - (kw - 1) * d.dw - 1;
            if (eh >= 0 && ew >= 0)
            {
                d.oh = eh / d.sh + 1;
                d.ow = ew / d.sw + 1;
                return d;
            }
        }
    }

    operands random_operands(std::mt19937_64& gen, const window2d_dims& d, std::int64_t o)
    {
        operands p;
        p.d = d;
        p.o = o;
        p.l = d.oh * d.ow;
        p.k = d.c * d.kh * d.kw;
        p.x = random_bf16(gen, d.n * d.h * d.w * d.c);
        p.w = random_bf16(gen, p.k * o);
        p.bias = random_bf16(gen, o);
        p.dy = random_bf16(gen, d.n * p.l * o);
        return p;
    }

    struct outputs
    {
        std::vector<bfloat16_t> y, dx, dw;
    };

    outputs run(const xgrad::kernels::kernel_table& t, const operands& p, std::int64_t block, std::int64_t chains,
                float fill)
    {
        const dtype dt = dtype::bfloat16;
        const bfloat16_t f = xgrad::to_bfloat16(fill);
        outputs r{std::vector<bfloat16_t>(static_cast<std::size_t>(p.d.n * p.l * p.o), f),
                  std::vector<bfloat16_t>(p.x.size(), f), std::vector<bfloat16_t>(p.w.size(), f)};
        const auto s = p.strides();
        t.conv2d_forward(r.y.data(), p.x.data(), s.data(), p.w.data(), p.bias.data(), dt, p.d, p.o, true, block);
        t.conv2d_input_grad(r.dx.data(), s.data(), p.dy.data(), p.w.data(), dt, p.d, p.o, true, block);
        t.conv2d_weight_grad(r.dw.data(), p.x.data(), s.data(), p.dy.data(), dt, p.d, p.o, true, block, chains);
        return r;
    }

    void check_close(const std::vector<bfloat16_t>& got, const std::vector<bfloat16_t>& want,
                     const std::vector<bfloat16_t>& mag, double scale, const char* what)
    {
        REQUIRE(got.size() == want.size());
        for (std::size_t i = 0; i < got.size(); ++i)
        {
            const double g = xgrad::to_float(got[i]), w = xgrad::to_float(want[i]);
            // mag is itself rounded to bfloat16: 2^-8 above it covers the rounding.
            const double bound = scale * xgrad::to_float(mag[i]) * (1 + 0x1p-8) + 1e-300;
            if (!(std::abs(g - w) <= bound))
            {
                INFO(what, " element ", i, ": got ", g, ", want ", w, ", bound ", bound);
                CHECK(false);
                return;
            }
        }
    }

    void check_operands(const operands& p)
    {
        const auto& ref = cpu::reference_kernels();
        const outputs want = run(ref, p, p.d.n, 1, -7.25f);
        operands a = p;
        a.x = absolute(p.x);
        a.w = absolute(p.w);
        a.bias = absolute(p.bias);
        a.dy = absolute(p.dy);
        const outputs mag = run(ref, a, p.d.n, 1, 0.0f);
        const double scale = 0x1p-8 + 2.0 * static_cast<double>(p.terms()) * 0x1p-24;
        const std::int64_t three = std::min<std::int64_t>(3, p.d.n);
        for (const std::int64_t block : {std::int64_t{1}, three})
        {
            const std::int64_t blocks = (p.d.n + block - 1) / block;
            for (const std::int64_t chains : {std::int64_t{1}, blocks})
            {
                INFO("block ", block, " chains ", chains);
                const outputs got = run(fast, p, block, chains, std::nanf(""));
                check_close(got.y, want.y, mag.y, scale, "y");
                check_close(got.dx, want.dx, mag.dx, scale, "dx");
                check_close(got.dw, want.dw, mag.dw, scale, "dw");
            }
        }
    }

    std::string describe(const window2d_dims& d, std::int64_t o)
    {
        return "n " + std::to_string(d.n) + " c " + std::to_string(d.c) + " h " + std::to_string(d.h) + " w " +
               std::to_string(d.w) + " o " + std::to_string(o) + " kernel " + std::to_string(d.kh) + "x" +
               std::to_string(d.kw) + " stride " + std::to_string(d.sh) + "x" + std::to_string(d.sw) + " padding " +
               std::to_string(d.ph) + "x" + std::to_string(d.pw) + " dilation " + std::to_string(d.dh) + "x" +
               std::to_string(d.dw);
    }
}

TEST_CASE("cpu kernels: bfloat16 channels-last convolutions (AMX tiles where present) match the reference")
{
    // c from below the AMX path's 16 (through float32) to past one and two 32-channel tiles;
    // o below, at and past 16 (a tile of output channels) and 64 (a group of four tiles).
    struct taps_case
    {
        std::int64_t c, kh, kw;
    };
    const taps_case taps[] = {{8, 3, 3}, {16, 3, 3}, {32, 3, 3}, {40, 1, 3}, {64, 3, 3}, {17, 5, 5}};
    const std::int64_t outs[] = {1, 16, 17, 64, 65};
    settings_guard guard;
    amx_guard amx;
    INFO("AMX supported: ", cpu::amx_supported());
    for (const bool use_amx : {true, false})
    {
        cpu::limit_amx(use_amx);
        for (const int threads : {1, 3})
        {
            xgrad::set_num_threads(threads);
            for (const auto level : simd_levels())
            {
                cpu::limit_simd_level(level);
                std::mt19937_64 gen(23);
                for (const auto& t : taps)
                    for (const std::int64_t o : outs)
                    {
                        const bool stride_one = gen() % 4 != 0;
                        const window2d_dims d = window(gen, t.c, t.kh, t.kw, stride_one);
                        INFO("SIMD level ", level_name(level), ", ", threads, " thread(s), AMX allowed ", use_amx, ", ",
                             describe(d, o));
                        check_operands(random_operands(gen, d, o));
                    }
            }
        }
    }
}

TEST_CASE("cpu kernels: bfloat16 convolutions give the same bits at every thread count")
{
    settings_guard guard;
    std::mt19937_64 gen(29);
    // The example's second layer, and a random one with a tail of channels.
    const operands cases[] = {random_operands(gen, window2d_dims{7, 32, 14, 14, 3, 3, 1, 1, 1, 1, 1, 1, 14, 14}, 64),
                              random_operands(gen, window(gen, 40, 3, 3, true), 17)};
    for (const auto& p : cases)
    {
        INFO(describe(p.d, p.o));
        const std::int64_t block = std::max<std::int64_t>(1, p.d.n / 3);
        const std::int64_t blocks = (p.d.n + block - 1) / block;
        std::vector<outputs> runs;
        for (const int threads : {1, 2, 3})
        {
            xgrad::set_num_threads(threads);
            runs.push_back(run(fast, p, block, blocks, std::nanf("")));
        }
        for (std::size_t i = 1; i < runs.size(); ++i)
        {
            CHECK(std::memcmp(runs[i].y.data(), runs[0].y.data(), runs[0].y.size() * 2) == 0);
            CHECK(std::memcmp(runs[i].dx.data(), runs[0].dx.data(), runs[0].dx.size() * 2) == 0);
            CHECK(std::memcmp(runs[i].dw.data(), runs[0].dw.data(), runs[0].dw.size() * 2) == 0);
        }
    }
}
