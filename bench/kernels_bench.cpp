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
// maxima and int64 positions (1.75 x's bytes in all), against the copy probe. Its gradient over
// those disjoint windows moves the same bytes the other way (g and the positions read, dx
// written): the max_pool2d_grad kernel at each level, and put_add (a zero fill of dx, then the
// scatter), which the op ran before that kernel, in the same layouts.
//
// GEMM: xgrad's matmul kernel (OpenBLAS, single-threaded calls over xgrad's pool) on the
// products of the Fashion-MNIST example's training step, in GFLOP/s, against oneDNN's
// dnnl_sgemm on the same operands with the same thread count (a peer only, built when oneDNN is
// found, as for bn_bench). The context line names OpenBLAS's kernel set (cpu_kernels_description):
// run it again with OPENBLAS_CORETYPE set to compare OpenBLAS's kernel sets.
//
// Convolution: the example's two convolutions in each direction and layout, xgrad's ops against
// oneDNN's convolution primitives (conv_cases.cpp).
#include <benchmark/benchmark.h>

#ifdef XGRAD_BENCH_HAVE_DNNL
#include <omp.h>

#include <oneapi/dnnl/dnnl.h>
#endif

#include <cstring>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "backends/cpu/cpu_kernels.hpp"
#include "backends/cpu/simd/level.hpp"
#include "xgrad/cpu_info.hpp"
#include "xgrad/factories.hpp"
#include "xgrad/nn/module.hpp"
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
    /// The 2x2, stride-2 pool over x = d.b viewed as [64, 64, 64, 64] in NCHW or NHWC: x's and
    /// the outputs' (n, c, h, w) strides, and x filled with values that change the winner from
    /// window to window (restored to 0.5, which the other cases read, by the destructor).
    struct pool_case
    {
        static constexpr std::int64_t side = 64, half = side / 2; // n = c = h = w = 64
        std::int64_t xs[4], os[4];
        kernels::window2d_dims dims{side, side, side, side, 2, 2, 2, 2, 0, 0, 1, 1, half, half};
        explicit pool_case(bool channels_last)
            : xs{side * side * side, channels_last ? 1 : side * side, channels_last ? side * side : side,
                 channels_last ? side : 1},
              os{side * half * half, channels_last ? 1 : half * half, channels_last ? half * side : half,
                 channels_last ? side : 1}
        {
            for (std::int64_t i = 0; i < n; ++i)
                data().b[static_cast<std::size_t>(i)] = static_cast<float>((i * 7919) % 1009);
        }
        ~pool_case()
        {
            for (std::int64_t i = 0; i < n; ++i)
                data().b[static_cast<std::size_t>(i)] = 0.5f;
        }
        pool_case(const pool_case&) = delete;
        pool_case& operator=(const pool_case&) = delete;
    };
    // The pool's outputs (a quarter of x's elements) and the gradient that flows back.
    std::vector<float>& pooled()
    {
        static std::vector<float> v(static_cast<std::size_t>(n / 4));
        return v;
    }
    std::vector<std::int64_t>& positions()
    {
        static std::vector<std::int64_t> v(static_cast<std::size_t>(n / 4));
        return v;
    }
    /// x read once; a quarter as many maxima and int64 positions written (or, for the gradient,
    /// read), and x's elements written.
    void set_pool_bytes(benchmark::State& state)
    {
        state.SetBytesProcessed(state.iterations() * (n * 4 + (n / 4) * (4 + 8)));
    }

    /// range(0): SIMD level; range(1): 0 NCHW, 1 NHWC.
    void xgrad_max_pool2d(benchmark::State& state)
    {
        const auto& k = with_level(state);
        const bool channels_last = state.range(1) == 1;
        state.SetLabel(std::string(cpu::simd_level_name(cpu::simd_level_in_use())) +
                       (channels_last ? " NHWC" : " NCHW"));
        const pool_case pc(channels_last);
        for (auto _ : state)
        {
            k.max_pool2d(pooled().data(), pc.os, positions().data(), pc.os, data().b.data(), pc.xs, dtype::float32,
                         pc.dims);
            benchmark::ClobberMemory();
        }
        set_pool_bytes(state);
    }

    /// The pool's gradient into dx = d.out: range(0) SIMD level, range(1) layout as above, and
    /// range(2) 0 for the max_pool2d_grad kernel, 1 for put_add (zero fill and scatter), 2 for
    /// the kernel with the ReLU mask of a fused batch-norm forward (the maxima as its y, read
    /// too: a quarter of x's bytes more, counted).
    void xgrad_max_pool2d_grad(benchmark::State& state)
    {
        const auto& k = with_level(state);
        const bool channels_last = state.range(1) == 1, scatter = state.range(2) == 1, masked = state.range(2) == 2;
        state.SetLabel(std::string(cpu::simd_level_name(cpu::simd_level_in_use())) +
                       (channels_last ? " NHWC" : " NCHW") +
                       (scatter  ? " put_add"
                        : masked ? " max_pool2d_grad masked"
                                 : " max_pool2d_grad"));
        const pool_case pc(channels_last);
        auto& d = data();
        k.max_pool2d(pooled().data(), pc.os, positions().data(), pc.os, d.b.data(), pc.xs, dtype::float32, pc.dims);
        for (auto _ : state)
        {
            if (scatter)
                k.put_add(d.out.data(), n, pooled().data(), positions().data(), dtype::float32, n / 4);
            else
                k.max_pool2d_grad(d.out.data(), pc.xs, pooled().data(), pc.os, positions().data(), pc.os,
                                  masked ? pooled().data() : nullptr, dtype::float32, pc.dims);
            benchmark::ClobberMemory();
        }
        set_pool_bytes(state);
        if (masked)
            state.SetBytesProcessed(state.bytes_processed() + state.iterations() * (n / 4) * 4);
    }

    /// The SIMD levels (1 .. simd_supported(); max_pool2d has no scalar twin) times the two
    /// layouts.
    void pool_args(benchmark::internal::Benchmark* b)
    {
        for (int level = 1; level <= static_cast<int>(cpu::simd_supported()); ++level)
            for (int layout = 0; layout < 2; ++layout)
                b->Args({level, layout});
    }

    /// pool_args times the three gradient paths (put_add, which has no SIMD code, at the top
    /// level only).
    void pool_grad_args(benchmark::internal::Benchmark* b)
    {
        const int top = static_cast<int>(cpu::simd_supported());
        for (int level = 1; level <= top; ++level)
            for (int layout = 0; layout < 2; ++layout)
                for (int path : {0, 1, 2})
                    if (path != 1 || level == top)
                        b->Args({level, layout, path});
    }

    // --- GEMM ---------------------------------------------------------------------------------
    /// A product C[m, n] = op(A) op(B) of the example's step (conv: im2col + GEMM, NCHW, then
    /// the convolutions' products in NHWC).
    struct gemm_case
    {
        const char* name;
        std::int64_t m, n, k;
        bool trans_a, trans_b; // the operand is stored transposed ([k, m] for A, [n, k] for B)
    };
    constexpr gemm_case gemm_cases[] = {
        {"conv1_fwd", 32, 50176, 9, false, false},    // W [32, 9] x cols [9, N*L], N = 64, L = 784
        {"conv2_fwd", 64, 12544, 288, false, false},  // W [64, 288] x cols [288, N*L], L = 196
        {"conv1_dw", 32, 9, 50176, false, true},      // dY [32, N*L] x cols^T
        {"conv2_dw", 64, 288, 12544, false, true},    // dY [64, N*L] x cols^T
        {"conv2_dcols", 288, 12544, 64, true, false}, // W^T x dY
        {"fc1_fwd", 64, 128, 3136, false, true},      // X [64, 3136] x W^T
        // The same convolutions in NHWC: cols [N*L, K] x W [K, O] -> [N*L, O], and backward.
        {"conv1_fwd_nhwc", 50176, 32, 9, false, false},
        {"conv2_fwd_nhwc", 12544, 64, 288, false, false},
        {"conv1_dw_nhwc", 9, 32, 50176, true, false},      // cols^T x dY
        {"conv2_dw_nhwc", 288, 64, 12544, true, false},    // cols^T x dY
        {"conv2_dcols_nhwc", 12544, 288, 64, false, true}, // dY x W^T
    };

    struct gemm_operands
    {
        std::vector<float> a, b, c;
        explicit gemm_operands(const gemm_case& g)
            : a(static_cast<std::size_t>(g.m * g.k)), b(static_cast<std::size_t>(g.k * g.n)),
              c(static_cast<std::size_t>(g.m * g.n))
        {
            for (std::size_t i = 0; i < a.size(); ++i)
                a[i] = static_cast<float>(i % 13) * 0.125f - 0.75f;
            for (std::size_t i = 0; i < b.size(); ++i)
                b[i] = static_cast<float>(i % 7) * 0.25f - 0.75f;
        }
    };

    void set_gemm_counters(benchmark::State& state, const gemm_case& g)
    {
        state.SetLabel(g.name);
        state.counters["flops"] = benchmark::Counter(static_cast<double>(2 * g.m * g.n * g.k),
                                                     benchmark::Counter::kIsIterationInvariantRate);
    }

    /// range(0): the index in gemm_cases.
    void xgrad_matmul(benchmark::State& state)
    {
        cpu::limit_simd_level(cpu::simd_level_max);
        const gemm_case& g = gemm_cases[state.range(0)];
        gemm_operands d(g);
        const std::int64_t as[3] = {0, g.trans_a ? 1 : g.k, g.trans_a ? g.m : 1};
        const std::int64_t bs[3] = {0, g.trans_b ? 1 : g.n, g.trans_b ? g.k : 1};
        for (auto _ : state)
        {
            cpu::fast_kernels().matmul(d.c.data(), d.a.data(), as, d.b.data(), bs, dtype::float32, 1, g.m, g.n, g.k,
                                       false);
            benchmark::ClobberMemory();
        }
        set_gemm_counters(state, g);
    }

#ifdef XGRAD_BENCH_HAVE_DNNL
    void onednn_sgemm(benchmark::State& state)
    {
        const gemm_case& g = gemm_cases[state.range(0)];
        gemm_operands d(g);
        omp_set_num_threads(get_num_threads());
        const auto m = static_cast<dnnl_dim_t>(g.m), n = static_cast<dnnl_dim_t>(g.n), k = static_cast<dnnl_dim_t>(g.k);
        for (auto _ : state)
        {
            if (dnnl_sgemm(g.trans_a ? 'T' : 'N', g.trans_b ? 'T' : 'N', m, n, k, 1.0f, d.a.data(), g.trans_a ? m : k,
                           d.b.data(), g.trans_b ? k : n, 0.0f, d.c.data(), n) != dnnl_success)
            {
                state.SkipWithError("dnnl_sgemm failed");
                break;
            }
            benchmark::ClobberMemory();
        }
        set_gemm_counters(state, g);
    }
#endif

    void gemm_args(benchmark::internal::Benchmark* b)
    {
        for (std::size_t i = 0; i < std::size(gemm_cases); ++i)
            b->Arg(static_cast<std::int64_t>(i));
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
BENCHMARK(xgrad_max_pool2d_grad)->Apply(pool_grad_args)->UseRealTime();
BENCHMARK(optim_adamw_step)->Arg(0)->Arg(1)->UseRealTime();
BENCHMARK(xgrad_matmul)->Apply(gemm_args)->UseRealTime();
#ifdef XGRAD_BENCH_HAVE_DNNL
BENCHMARK(onednn_sgemm)->Apply(gemm_args)->UseRealTime();
#endif

int main(int argc, char** argv)
{
    benchmark::Initialize(&argc, argv);
    if (benchmark::ReportUnrecognizedArguments(argc, argv))
        return 1;
    benchmark::AddCustomContext("xgrad_cpu", xgrad::cpu_kernels_description());
    benchmark::RunSpecifiedBenchmarks();
    benchmark::Shutdown();
    return 0;
}
