// kernels_bench's convolution cases: the two convolutions of the Fashion-MNIST example's
// training step (batch 64, 3x3, padding 1: conv1 1 -> 32 channels on 28x28, conv2 32 -> 64 on
// 14x14), each direction (the forward with its bias, the input gradient, the weight gradient),
// in NHWC and NCHW, in GFLOP/s (2 N L K O multiply-adds per direction), with xgrad's ops
// (core/src/ops/conv_gemm.cpp: one kernel each, cache-sized blocks of images) against oneDNN's
// convolution primitives on the same tensors with the same thread count (a peer only, built
// when oneDNN is found). oneDNN gets its best case: the weights (and, for channels-first,
// nothing else) in the layout its primitive asks for, reordered before timing, and
// convolution_direct with the implementation it picks (named in the case's label); its weight
// gradient leaves out the bias gradient, which xgrad's conv_weight_grad does not compute either.
// onednn_conv_bf16 runs the same primitives with bfloat16 activations and weights (float32
// bias and weight gradient, float32 accumulation inside oneDNN): what a bfloat16 training step
// could gain from AVX512-BF16 or AMX where the processor has them (the label names the kernel).
// xgrad_conv_bf16 runs xgrad's ops on bfloat16 tensors (the mixed-precision mode's
// convolutions: AMX tiles where present, else its float32 kernels on widened copies; the label
// says which).
#include <benchmark/benchmark.h>

#ifdef XGRAD_BENCH_HAVE_DNNL
#include <omp.h>

#include <oneapi/dnnl/dnnl.hpp>
#endif

#include <cstdint>
#include <iterator>
#include <string>
#include <unordered_map>

#include "backends/cpu/amx/amx.hpp"
#include "backends/cpu/simd/level.hpp"
#include "core/src/ops/conv_internal.hpp"
#include "xgrad/factories.hpp"
#include "xgrad/half.hpp"
#include "xgrad/thread_pool.hpp"

namespace
{
    using namespace xgrad;

    struct conv_case
    {
        const char* name;
        std::int64_t n, c, h, w, o;
    };
    constexpr conv_case conv_cases[] = {{"conv1", 64, 1, 28, 28, 32}, {"conv2", 64, 32, 14, 14, 64}};
    constexpr const char* directions[] = {"fwd", "bwd_data", "bwd_weights"};

    /// range(0): the case, range(1): 0 NCHW, 1 NHWC, range(2): the direction.
    struct conv_setup
    {
        const conv_case& k;
        bool cl;
        int direction;
        explicit conv_setup(const benchmark::State& state)
            : k(conv_cases[state.range(0)]), cl(state.range(1) == 1), direction(static_cast<int>(state.range(2)))
        {
        }
        std::string label() const
        {
            return std::string(k.name) + "_" + directions[direction] + (cl ? "_nhwc" : "_nchw");
        }
        double flops() const { return 2.0 * static_cast<double>(k.n * k.h * k.w * k.c * 9 * k.o); }
    };

    void set_conv_counters(benchmark::State& state, const conv_setup& s, const std::string& label)
    {
        state.SetLabel(label);
        state.counters["flops"] = benchmark::Counter(s.flops(), benchmark::Counter::kIsIterationInvariantRate);
    }

    /// xgrad's op in direction s.direction on tensors of dtype dt (float32, or bfloat16: the
    /// mixed-precision mode's convolutions).
    void xgrad_conv_run(benchmark::State& state, dtype dt)
    {
        cpu::limit_simd_level(cpu::simd_level_max);
        const conv_setup s(state);
        const conv_case& k = s.k;
        generator gen(1);
        const shape_type x_shape = s.cl ? shape_type{k.n, k.h, k.w, k.c} : shape_type{k.n, k.c, k.h, k.w};
        const shape_type y_shape = s.cl ? shape_type{k.n, k.h, k.w, k.o} : shape_type{k.n, k.o, k.h, k.w};
        const std::int64_t taps = k.c * 9;
        const tensor x = randn(x_shape, gen).to(dt), dy = randn(y_shape, gen).to(dt), bias = randn({k.o}, gen).to(dt);
        const tensor wmat = randn(s.cl ? shape_type{taps, k.o} : shape_type{k.o, taps}, gen).to(dt);
        const detail::conv_geometry g{window2d{{3, 3}, {1, 1}, {1, 1}, {1, 1}}, s.cl, {k.h, k.w}};
        for (auto _ : state)
        {
            tensor r = s.direction == 0   ? detail::conv_forward(x, wmat, bias, g)
                       : s.direction == 1 ? detail::conv_input_grad(dy, wmat, x_shape, g)
                                          : detail::conv_weight_grad(x, dy, g);
            benchmark::DoNotOptimize(r.data_ptr());
        }
        // Which kernels a bfloat16 case ran: the AMX tiles (channels-last, at least 16 input
        // channels, kernels/conv.cpp) or the float32 kernels on widened copies.
        const bool amx = dt == dtype::bfloat16 && s.cl && k.c >= 16 && cpu::amx_in_use();
        set_conv_counters(state, s, s.label() + (dt == dtype::bfloat16 ? (amx ? " amx" : " float32") : ""));
    }

    void xgrad_conv(benchmark::State& state) { xgrad_conv_run(state, dtype::float32); }
    void xgrad_conv_bf16(benchmark::State& state) { xgrad_conv_run(state, dtype::bfloat16); }

#ifdef XGRAD_BENCH_HAVE_DNNL
    /// oneDNN's convolution in direction s.direction with activations and weights of type dt
    /// (f32 or bf16); the bias and the weight gradient stay f32.
    void onednn_conv_run(benchmark::State& state, dnnl::memory::data_type dt)
    {
        using namespace dnnl;
        using tag = memory::format_tag;
        const conv_setup s(state);
        const conv_case& k = s.k;
        omp_set_num_threads(get_num_threads());
        engine eng(engine::kind::cpu, 0);
        stream strm(eng);
        const auto f32 = memory::data_type::f32;
        const tag act = s.cl ? tag::nhwc : tag::nchw;
        const memory::desc src_md({k.n, k.c, k.h, k.w}, dt, act), dst_md({k.n, k.o, k.h, k.w}, dt, act);
        const memory::desc wei_any({k.o, k.c, 3, 3}, dt, tag::any), bias_md({k.o}, f32, tag::a);
        const memory::desc dwei_any({k.o, k.c, 3, 3}, f32, tag::any);
        const memory::dims strides{1, 1}, padding{1, 1};
        const convolution_forward::primitive_desc fwd_pd(
            convolution_forward::desc(prop_kind::forward_training, algorithm::convolution_direct, src_md, wei_any,
                                      bias_md, dst_md, strides, padding, padding),
            eng);
        auto filled = [&](const memory::desc& md) {
            memory m(md, eng);
            const bool bf16 = md.data_type() == memory::data_type::bf16;
            const std::size_t count = md.get_size() / (bf16 ? 2 : 4);
            for (std::size_t i = 0; i < count; ++i)
            {
                const float v = static_cast<float>(i % 11) * 0.125f - 0.625f; // exact in bfloat16
                if (bf16)
                    static_cast<xgrad::bfloat16_t*>(m.get_data_handle())[i] = xgrad::to_bfloat16(v);
                else
                    static_cast<float*>(m.get_data_handle())[i] = v;
            }
            return m;
        };
        memory src = filled(src_md), dst = filled(dst_md), bias = filled(bias_md);
        primitive prim;
        std::unordered_map<int, memory> args;
        std::string impl;
        if (s.direction == 0)
        {
            prim = convolution_forward(fwd_pd);
            args = {{DNNL_ARG_SRC, src},
                    {DNNL_ARG_WEIGHTS, filled(fwd_pd.weights_desc())},
                    {DNNL_ARG_BIAS, bias},
                    {DNNL_ARG_DST, dst}};
            impl = fwd_pd.impl_info_str();
        }
        else if (s.direction == 1)
        {
            const convolution_backward_data::primitive_desc pd(
                convolution_backward_data::desc(algorithm::convolution_direct, src_md, wei_any, dst_md, strides,
                                                padding, padding),
                eng, fwd_pd);
            prim = convolution_backward_data(pd);
            args = {{DNNL_ARG_DIFF_DST, filled(pd.diff_dst_desc())},
                    {DNNL_ARG_WEIGHTS, filled(pd.weights_desc())},
                    {DNNL_ARG_DIFF_SRC, filled(pd.diff_src_desc())}};
            impl = pd.impl_info_str();
        }
        else
        {
            const convolution_backward_weights::primitive_desc pd(
                convolution_backward_weights::desc(algorithm::convolution_direct, src_md, dwei_any, dst_md, strides,
                                                   padding, padding),
                eng, fwd_pd);
            prim = convolution_backward_weights(pd);
            args = {{DNNL_ARG_SRC, filled(pd.src_desc())},
                    {DNNL_ARG_DIFF_DST, filled(pd.diff_dst_desc())},
                    {DNNL_ARG_DIFF_WEIGHTS, filled(pd.diff_weights_desc())}};
            impl = pd.impl_info_str();
        }
        for (auto _ : state)
        {
            prim.execute(strm, args);
            strm.wait();
        }
        set_conv_counters(state, s, s.label() + " " + impl);
    }

    void onednn_conv(benchmark::State& state) { onednn_conv_run(state, dnnl::memory::data_type::f32); }
    void onednn_conv_bf16(benchmark::State& state) { onednn_conv_run(state, dnnl::memory::data_type::bf16); }
#endif

    void conv_args(benchmark::internal::Benchmark* b)
    {
        for (std::int64_t c = 0; c < static_cast<std::int64_t>(std::size(conv_cases)); ++c)
            for (std::int64_t layout = 0; layout < 2; ++layout)
                for (std::int64_t d = 0; d < 3; ++d)
                    b->Args({c, layout, d});
    }
}

BENCHMARK(xgrad_conv)->Apply(conv_args)->UseRealTime();
BENCHMARK(xgrad_conv_bf16)->Apply(conv_args)->UseRealTime();
#ifdef XGRAD_BENCH_HAVE_DNNL
BENCHMARK(onednn_conv)->Apply(conv_args)->UseRealTime();
BENCHMARK(onednn_conv_bf16)->Apply(conv_args)->UseRealTime();
#endif
