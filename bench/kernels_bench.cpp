// CPU kernel benchmarks: xgrad's dispatched SIMD kernels against the scalar reference loops
// and against bandwidth probes over the same bytes, in one process.
//
// Every case streams tensors of 2^24 float32 elements (64 MiB each, larger than the last-level
// cache), so memory-bound kernels are measured against DRAM bandwidth: the "probe" cases are
// plain loops the compiler vectorises (a copy: 1 read + 1 write; a triad: 2 reads + 1 write;
// a sum: 1 read), run on the same thread pool. Figures are bytes moved per second, counting
// each tensor read or written once.
//
// The optimizer step: adam_step, the fused kernel (reads p, g, m, v; writes p, m, v: 7 tensors),
// at each level against the triad probe; and one AdamW optimizer step on a parameter of the
// same size, fused (one kernel pass, in place) against the composite rule (set_fused(false):
// a dozen elementwise ops, each a pass with a temporary).
//
// Max pooling: the 2x2, stride-2 max_pool2d kernel over a [64, 64, 64, 64] float32 image (2^24
// elements) in NCHW and in NHWC, at each level; it reads x once and writes a quarter as many
// maxima and int64 positions (1.75 x's bytes in all), against the copy probe.
#include <benchmark/benchmark.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "backends/cpu/cpu_kernels.hpp"
#include "backends/cpu/simd/level.hpp"
#include "xgrad/factories.hpp"
#include "xgrad/layers/module.hpp"
#include "xgrad/optim/optimizer.hpp"
#include "xgrad/thread_pool.hpp"

namespace
{
    using namespace xgrad;
    constexpr std::int64_t n = std::int64_t{1} << 24;
    constexpr std::int64_t grain = 1 << 16;

    struct buffers
    {
        std::vector<float> a, b, out;
        buffers() : a(n, 1.25f), b(n, 0.5f), out(n, 0.f) {}
    };
    buffers& data()
    {
        static buffers d;
        return d;
    }

    void set_bytes(benchmark::State& state, int tensors)
    {
        state.SetBytesProcessed(state.iterations() * n * static_cast<std::int64_t>(sizeof(float)) * tensors);
    }

    // --- probes --------------------------------------------------------------------------
    void probe_copy(benchmark::State& state)
    {
        auto& d = data();
        for (auto _ : state)
        {
            parallel_for(0, n, grain, [&](std::int64_t b, std::int64_t e) {
                std::memcpy(d.out.data() + b, d.a.data() + b, static_cast<std::size_t>(e - b) * sizeof(float));
            });
            benchmark::ClobberMemory();
        }
        set_bytes(state, 2);
    }

    void probe_triad(benchmark::State& state)
    {
        auto& d = data();
        for (auto _ : state)
        {
            parallel_for(0, n, grain, [&](std::int64_t b, std::int64_t e) {
                float* __restrict o = d.out.data();
                const float* __restrict x = d.a.data();
                const float* __restrict y = d.b.data();
                for (std::int64_t i = b; i < e; ++i)
                    o[i] = x[i] + y[i];
            });
            benchmark::ClobberMemory();
        }
        set_bytes(state, 3);
    }

    void probe_read(benchmark::State& state)
    {
        auto& d = data();
        for (auto _ : state)
        {
            std::vector<float> partial(static_cast<std::size_t>(get_num_threads()) * 16, 0.f);
            parallel_for(0, n, grain, [&](std::int64_t b, std::int64_t e) {
                float acc[8] = {};
                for (std::int64_t i = b; i + 8 <= e; i += 8)
                    for (int k = 0; k < 8; ++k)
                        acc[k] += d.a[static_cast<std::size_t>(i + k)];
                float s = 0;
                for (float v : acc)
                    s += v;
                benchmark::DoNotOptimize(s);
            });
        }
        set_bytes(state, 1);
    }

    // --- xgrad kernels at a given SIMD level --------------------------------------------
    /// Caps the SIMD level and returns the CPU table the dispatch serves at that level (the
    /// reference kernels at simd_level::scalar).
    const kernels::kernel_table& with_level(benchmark::State& state)
    {
        cpu::limit_simd_level(static_cast<cpu::simd_level>(state.range(0)));
        state.SetLabel(cpu::simd_level_name(cpu::simd_level_in_use()));
        return cpu::simd_level_in_use() == cpu::simd_level::scalar ? cpu::reference_kernels() : cpu::fast_kernels();
    }

    /// One argument per SIMD level this processor has (0 = scalar .. simd_supported()).
    void simd_levels(benchmark::internal::Benchmark* b)
    {
        for (int level = 0; level <= static_cast<int>(cpu::simd_supported()); ++level)
            b->Arg(level);
    }

    const std::int64_t shape[1] = {n};
    const std::int64_t unit[1] = {1};

    void xgrad_add(benchmark::State& state)
    {
        const auto& k = with_level(state);
        auto& d = data();
        for (auto _ : state)
        {
            k.binary(d.out.data(), unit, d.a.data(), unit, d.b.data(), unit, dtype::float32, 1, shape,
                     kernels::binary_op::add);
            benchmark::ClobberMemory();
        }
        set_bytes(state, 3);
    }

    void xgrad_exp(benchmark::State& state)
    {
        const auto& k = with_level(state);
        auto& d = data();
        for (auto _ : state)
        {
            k.unary(d.out.data(), unit, d.a.data(), unit, dtype::float32, 1, shape, kernels::unary_op::exp);
            benchmark::ClobberMemory();
        }
        set_bytes(state, 2);
    }

    void xgrad_sum(benchmark::State& state)
    {
        const auto& k = with_level(state);
        auto& d = data();
        float out = 0;
        const std::int64_t none[1] = {0};
        for (auto _ : state)
        {
            k.reduce(&out, none, d.a.data(), unit, dtype::float32, 1, 0, shape, kernels::reduce_op::sum);
            benchmark::DoNotOptimize(out);
        }
        set_bytes(state, 1);
    }

    // Column sums of a [4096, 4096] matrix: the "reduce a leading axis" pattern of bias
    // gradients and sum_to.
    void xgrad_sum_rows(benchmark::State& state)
    {
        const auto& k = with_level(state);
        auto& d = data();
        std::vector<float> out(4096);
        const std::int64_t shape2[2] = {4096, 4096}; // kept: columns; reduced: rows
        const std::int64_t strides2[2] = {1, 4096};
        const std::int64_t out_strides[1] = {1};
        for (auto _ : state)
        {
            k.reduce(out.data(), out_strides, d.a.data(), strides2, dtype::float32, 2, 1, shape2,
                     kernels::reduce_op::sum);
            benchmark::ClobberMemory();
        }
        set_bytes(state, 1);
    }

    // --- the optimizer step --------------------------------------------------------------
    void xgrad_adam_step(benchmark::State& state)
    {
        const auto& k = with_level(state);
        auto& d = data();
        static std::vector<float> m(n, 0.01f), v(n, 0.001f), p(n, 1.0f);
        kernels::adam_step_coefficients c;
        c.lr = 1e-9; // tiny steps keep the values where they are over many iterations
        c.bias_correction1 = 0.1;
        c.bias_correction2 = 0.001;
        for (auto _ : state)
        {
            k.adam_step(p.data(), m.data(), v.data(), p.data(), d.b.data(), m.data(), v.data(), dtype::float32, n, c);
            benchmark::ClobberMemory();
        }
        set_bytes(state, 7);
    }

    // --- max pooling -----------------------------------------------------------------------
    /// range(0): SIMD level; range(1): 0 NCHW, 1 NHWC.
    void xgrad_max_pool2d(benchmark::State& state)
    {
        const auto& k = with_level(state);
        const bool channels_last = state.range(1) == 1;
        state.SetLabel(std::string(cpu::simd_level_name(cpu::simd_level_in_use())) +
                       (channels_last ? " NHWC" : " NCHW"));
        auto& d = data();
        constexpr std::int64_t side = 64, half = side / 2; // n = c = h = w = 64
        static std::vector<float> out(static_cast<std::size_t>(n / 4));
        static std::vector<std::int64_t> idx(static_cast<std::size_t>(n / 4));
        // (n, c, h, w) strides of x and of the outputs in either layout.
        const std::int64_t xs[4] = {side * side * side, channels_last ? 1 : side * side,
                                    channels_last ? side * side : side, channels_last ? side : 1};
        const std::int64_t os[4] = {side * half * half, channels_last ? 1 : half * half,
                                    channels_last ? half * side : half, channels_last ? side : 1};
        const kernels::window2d_dims dims{side, side, side, side, 2, 2, 2, 2, 0, 0, 1, 1, half, half};
        // Values that change the winner from window to window.
        for (std::int64_t i = 0; i < n; ++i)
            d.b[static_cast<std::size_t>(i)] = static_cast<float>((i * 7919) % 1009);
        for (auto _ : state)
        {
            k.max_pool2d(out.data(), os, idx.data(), os, d.b.data(), xs, dtype::float32, dims);
            benchmark::ClobberMemory();
        }
        state.SetBytesProcessed(state.iterations() * (n * 4 + (n / 4) * (4 + 8)));
        for (std::int64_t i = 0; i < n; ++i) // the other cases read b as 0.5
            d.b[static_cast<std::size_t>(i)] = 0.5f;
    }

    /// The SIMD levels (1 .. simd_supported(); max_pool2d has no scalar twin) times the two
    /// layouts.
    void pool_args(benchmark::internal::Benchmark* b)
    {
        for (int level = 1; level <= static_cast<int>(cpu::simd_supported()); ++level)
            for (int layout = 0; layout < 2; ++layout)
                b->Args({level, layout});
    }

    class one_parameter final : public nn::module
    {
    public:
        one_parameter() { register_parameter("w", full({n}, 1.0, dtype::float32).requires_grad_()); }
        std::string_view type_name() const noexcept override { return "one_parameter"; }
    };

    /// One AdamW step (range 0: composite rule, 1: fused kernel) at the best SIMD level.
    void optim_adamw_step(benchmark::State& state)
    {
        cpu::limit_simd_level(cpu::simd_level_max);
        state.SetLabel(state.range(0) == 1 ? "fused" : "composite");
        one_parameter model;
        model.parameter("w").set_grad(full({n}, 0.5, dtype::float32));
        auto opt = optim::make_optimizer("adamw", model, 1e-9);
        opt->set_fused(state.range(0) == 1);
        opt->step(); // the buffers exist from here on
        for (auto _ : state)
            opt->step();
        set_bytes(state, 7);
    }
}

BENCHMARK(probe_copy)->UseRealTime();
BENCHMARK(probe_triad)->UseRealTime();
BENCHMARK(probe_read)->UseRealTime();
BENCHMARK(xgrad_add)->Apply(simd_levels)->UseRealTime();
BENCHMARK(xgrad_exp)->Apply(simd_levels)->UseRealTime();
BENCHMARK(xgrad_sum)->Apply(simd_levels)->UseRealTime();
BENCHMARK(xgrad_sum_rows)->Apply(simd_levels)->UseRealTime();
BENCHMARK(xgrad_adam_step)->Apply(simd_levels)->UseRealTime();
BENCHMARK(xgrad_max_pool2d)->Apply(pool_args)->UseRealTime();
BENCHMARK(optim_adamw_step)->Arg(0)->Arg(1)->UseRealTime();
BENCHMARK_MAIN();
