// Batch-norm benchmarks: xgrad's CPU batch-norm kernels against oneDNN and ATen (the peers), a
// plain two-pass loop (the "what a straightforward loop does" baseline) and bandwidth probes over
// the same bytes, in one process; plus the fused second-order op against its composite formula.
//
// The kernels are memory-bound: a training gradient reads x and dy and writes dx, so its floor
// is the time DRAM takes to move those three tensors. Each case therefore runs up to five
// benchmarks back to back (so that they see the same machine state): <case>/xgrad,
// <case>/onednn (only when oneDNN was found at configure time and has an implementation for the
// case: oneDNN 2.6 has no bfloat16 batch norm without AVX-512, which registration reports on
// stderr), <case>/aten (only when LibTorch was given at configure time and ATen has a CPU kernel
// for the case), <case>/ref (float32 only) and <case>/probe_triad (2 reads + 1 write, for
// gradient cases) or <case>/probe_copy (1 read + 1 write, for forward cases): plain loops the
// compiler vectorises, over exactly the bytes the case moves, on xgrad's thread pool. Training
// cases also run <case>/probe_two_pass: the inputs summed, then the same probe (the floor of a
// kernel that reads its tensors twice from DRAM; see run_probe).
//
// Sources: this file holds xgrad's runs, the probes, the second-order comparison, registration
// and main; bn_bench_peers.cpp the two-pass loop and oneDNN; bn_bench_aten.cpp ATen;
// bn_bench_common.cpp the cold-cache workspaces, whose rotation keeps every figure's data out of
// the last-level cache (bn_bench.hpp explains how), and finish(), which sets the counters below.
//
// Figures: ms per iteration (real time) and the counter GB/s = bytes moved per second, counting
// each tensor once: x, dy read and dx written for gradients (12 bytes/element float32, 6
// bfloat16), x read and y written for the forward (8 and 4). Per-channel vectors are not
// counted. items_per_second is elements per second (for the bfloat16-vs-float32 comparison);
// cpus is process CPU time over wall time in the timed loop (about 2 for 2-thread cases on an
// idle machine: it shows that both libraries really use two threads, and flags runs disturbed by
// other processes, where one thread waits for a preempted other).
//
// Case names: <op>_<layout>_<dtype>_<N>x<C>x<H>x<W>_t<threads>, op grad_train (training
// gradient, bn_grad_training), grad_infer (inference gradient, bn_grad_inference) or fwd_train
// (training forward, bn_forward_training). Thread counts: xgrad::set_num_threads for xgrad, the
// reference and the probes; omp_set_num_threads for oneDNN (Debian's build uses OpenMP);
// at::set_num_threads for ATen.
//
// grad_grad_<layout>_f32_<shape>_t2/{fused,composite}: xgrad::fused_batch_norm_grad_grad
// against its composite formula (xgrad::detail::batch_norm_grad_grad_composite) at op level (allocations included), training
// mode, under no_grad, 2 threads.
//
// This program's own flags: --simd=<scalar|sse2|avx2_fma|avx512> caps xgrad's SIMD level for
// the whole run, to compare instruction sets; --bn-budget=<MiB> sets the batch-norm kernels'
// resident budget (cpu::bn_set_resident_budget), to measure it. The context records both
// (xgrad_simd, bn_budget_bytes), and how bfloat16 outputs are rounded (xgrad_bf16_round).
//
// bench/run runs it and prints one summary line per case; only ratios measured in the same run
// are meaningful on a shared machine.
#include <benchmark/benchmark.h>
#include <malloc.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "backends/cpu/cpu_kernels.hpp"
#include "backends/cpu/simd/level.hpp"
#include "bench/bn_bench.hpp"
#include "core/src/ops/batch_norm_internal.hpp"
#include "xgrad/thread_pool.hpp"
#include "xgrad/xgrad.hpp"

void xgrad::bn_bench::xgrad_kernel(const bn_case& c, const buffer_set& s, void* out)
{
    switch (c.kind)
    {
    case op_kind::grad_train:
        cpu::fast_kernels().bn_grad_training(out, s.sum_dy(), s.sum_dy_xc(), s.dy.get(), s.x.get(), nullptr, s.scale(),
                                             s.mean(), s.var(), eps, c.dt, c.outer(), c.channels(), c.inner());
        break;
    case op_kind::grad_infer:
        cpu::fast_kernels().bn_grad_inference(out, s.sum_dy(), s.sum_dy_xc(), s.dy.get(), s.x.get(), nullptr, s.scale(),
                                              s.mean(), s.var(), eps, c.dt, c.outer(), c.channels(), c.inner());
        break;
    case op_kind::fwd_train:
        cpu::fast_kernels().bn_forward_training(out, s.mean(), s.var(), s.x.get(), s.scale(), s.offset(), eps, false,
                                                c.dt, c.outer(), c.channels(), c.inner());
        break;
    }
}

namespace
{
    using namespace xgrad;
    using namespace xgrad::bn_bench;

    // --- xgrad -----------------------------------------------------------------------------
    void run_xgrad(benchmark::State& state, const bn_case& c)
    {
        const workspace& ws = workspace_for(c);
        set_num_threads(c.threads);
        const cpu_meter meter;
        for (auto _ : state)
        {
            const buffer_set& s = next_set(ws);
            xgrad_kernel(c, s, s.dx.get());
            benchmark::ClobberMemory();
        }
        finish(state, c, "xgrad", meter);
    }

    // --- bandwidth probes over the same bytes ----------------------------------------------
    // The case's tensors viewed as float arrays of elems * elem_size / 4 values: out = a + b
    // (x, dy -> dx) for gradients, out = a + 0 (x -> dx, a copy the compiler cannot turn into
    // memcpy, so it stores like the kernels do) for forwards.
    //
    // two_pass: the floor of a training kernel when its tensors do not stay in the cache
    // between its two passes: every input read once for a reduction (here a plain sum of a,
    // and of b for gradients), then the same elementwise pass reading them again. A channel's
    // sums need all of its elements before its first output, so a kernel whose channel blocks
    // do not fit the cache cannot do better; one whose blocks fit can (of_two_pass > 1).
    void run_probe(benchmark::State& state, const bn_case& c, bool two_pass)
    {
        const workspace& ws = workspace_for(c);
        set_num_threads(c.threads);
        const i64 n = c.elems() * c.elem_size() / 4;
        const bool triad = c.tensors() == 3;
        const cpu_meter meter;
        for (auto _ : state)
        {
            const buffer_set& s = next_set(ws);
            float* __restrict o = static_cast<float*>(s.dx.get());
            const float* __restrict a = static_cast<const float*>(s.x.get());
            const float* __restrict b = static_cast<const float*>(s.dy.get());
            // Eight partial sums per range, so that the compiler vectorises the loop (a single
            // float accumulator must be summed in order).
            if (two_pass)
                parallel_for(0, n, grain, [&](i64 lo, i64 hi) {
                    float acc[8] = {};
                    for (i64 i = lo; i + 8 <= hi; i += 8)
                        for (int k = 0; k < 8; ++k)
                            acc[k] += triad ? a[i + k] + b[i + k] : a[i + k];
                    float total = 0;
                    for (float v : acc)
                        total += v;
                    benchmark::DoNotOptimize(total);
                });
            if (triad)
                parallel_for(0, n, grain, [&](i64 lo, i64 hi) {
                    for (i64 i = lo; i < hi; ++i)
                        o[i] = a[i] + b[i];
                });
            else
                parallel_for(0, n, grain, [&](i64 lo, i64 hi) {
                    for (i64 i = lo; i < hi; ++i)
                        o[i] = a[i] + 0.0f;
                });
            benchmark::ClobberMemory();
        }
        finish(state, c, two_pass ? "probe two passes" : triad ? "probe 2 reads + 1 write" : "probe copy", meter);
    }

    // --- second order: fused op against the composite -------------------------------------
    struct grad_grad_inputs
    {
        tensor A[2], dy[2], x[2]; // two sets, alternated (each tensor is larger than the LLC
                                  // for the default shape; the op allocates its outputs)
        tensor a, b, scale, mean, var;
        batch_norm_attrs attrs;
    };

    std::unique_ptr<grad_grad_inputs> make_grad_grad_inputs(layout lay, shape4 s)
    {
        auto in = std::make_unique<grad_grad_inputs>();
        in->attrs.data_format = lay == layout::nhwc ? "NHWC" : "NCHW";
        in->attrs.is_training = true;
        const shape_type xs = lay == layout::nhwc ? shape_type{s.n, s.h, s.w, s.c} : shape_type{s.n, s.c, s.h, s.w};
        generator gen(42);
        for (int k = 0; k < 2; ++k)
        {
            in->A[k] = randn(xs, gen);
            in->dy[k] = randn(xs, gen);
            in->x[k] = randn(xs, gen);
        }
        in->a = randn({s.c}, gen);
        in->b = randn({s.c}, gen);
        in->scale = rand({s.c}, gen, dtype::float32, cpu_device, 0.5, 1.5);
        const tensor offset = zeros({s.c});
        const tensor unused = zeros({0}); // running statistics: not read in training mode
        // the batch statistics of x[0] (the saved statistics of the forward); used for both sets
        const batch_norm_forward_result f = fused_batch_norm(in->x[0], in->scale, offset, unused, unused, in->attrs);
        in->mean = f.saved_mean;
        in->var = f.saved_var;
        return in;
    }

    void run_grad_grad(benchmark::State& state, layout lay, shape4 s, bool fused)
    {
        release_workspace(); // the batch-norm kernel workspaces are no longer needed
        set_num_threads(2);
        no_grad guard;
        // made once per layout (the fused and composite runs of a layout share them)
        static std::unique_ptr<grad_grad_inputs> cached;
        static layout cached_layout;
        if (!cached || cached_layout != lay)
        {
            cached.reset();
            cached = make_grad_grad_inputs(lay, s);
            cached_layout = lay;
        }
        const grad_grad_inputs* in = cached.get();
        int k = 0;
        for (auto _ : state)
        {
            const auto r = fused ? fused_batch_norm_grad_grad(in->A[k], in->a, in->b, in->dy[k], in->x[k], in->scale,
                                                              in->mean, in->var, in->attrs)
                                 : detail::batch_norm_grad_grad_composite(in->A[k], in->a, in->b, in->dy[k], in->x[k],
                                                                          in->scale, in->mean, in->var, in->attrs);
            benchmark::DoNotOptimize(r.d_x.data_ptr());
            k ^= 1;
        }
        state.SetItemsProcessed(state.iterations() * s.n * s.c * s.h * s.w);
        state.SetLabel(fused ? "fused_batch_norm_grad_grad" : "batch_norm_grad_grad_composite");
    }

    // --- registration ------------------------------------------------------------------------
    template <class Fn>
    void add(const std::string& name, Fn&& fn)
    {
        benchmark::RegisterBenchmark(name.c_str(), std::forward<Fn>(fn))->UseRealTime()->Unit(benchmark::kMillisecond);
    }

    void register_all()
    {
        const shape4 shapes[] = {{32, 64, 56, 56}, {64, 128, 28, 28}, {256, 32, 14, 14}, {128, 16, 28, 28}};
        std::string dnnl_missing, aten_missing;
#ifdef XGRAD_BENCH_HAVE_DNNL
        benchmark::AddCustomContext("onednn", onednn_version());
#else
        benchmark::AddCustomContext("onednn", "none (not found at configure time)");
#endif
#ifdef XGRAD_BENCH_HAVE_ATEN
        benchmark::AddCustomContext("aten", aten_version());
#else
        benchmark::AddCustomContext("aten", "none (XGRAD_BENCH_TORCH_DIR not set at configure time)");
#endif
        benchmark::AddCustomContext("llc_bytes", std::to_string(llc_bytes()));
        benchmark::AddCustomContext("xgrad_simd", cpu::simd_level_name(cpu::simd_level_in_use()));
        benchmark::AddCustomContext("xgrad_bf16_round", cpu::avx512_bf16_in_use() ? "avx512_bf16" : "integer");
        // The budget in use: bn_set_resident_budget returns the old value, which is put back.
        const std::int64_t budget = cpu::bn_set_resident_budget(0);
        cpu::bn_set_resident_budget(budget);
        benchmark::AddCustomContext("bn_budget_bytes", std::to_string(budget));
        // Ordered so that a workspace (element count, dtype) is filled once: shapes 0-1 and 2-3
        // have the same element count, and float32 precedes the 16-bit types of the same shapes.
        for (int group = 0; group < 2; ++group)
            for (dtype dt : {dtype::float32, dtype::bfloat16, dtype::float16})
                for (int si = 2 * group; si < 2 * group + 2; ++si)
                    for (int threads : {1, 2})
                        for (op_kind kind : {op_kind::grad_train, op_kind::grad_infer, op_kind::fwd_train})
                            for (layout lay : {layout::nhwc, layout::nchw})
                            {
                                const bn_case c{kind, lay, dt, shapes[si], threads};
                                const std::string name = c.name();
                                add(name + "/xgrad", [c](benchmark::State& st) { run_xgrad(st, c); });
#ifdef XGRAD_BENCH_HAVE_DNNL
                                if (const std::optional<std::string> why = onednn_unsupported(c))
                                {
                                    std::fprintf(stderr, "oneDNN: no implementation for %s (%s)\n", name.c_str(),
                                                 why->c_str());
                                    dnnl_missing += (dnnl_missing.empty() ? "" : " ") + name;
                                }
                                else
                                    add(name + "/onednn", [c](benchmark::State& st) { run_onednn(st, c); });
#endif
#ifdef XGRAD_BENCH_HAVE_ATEN
                                if (const std::optional<std::string> why = aten_unsupported(c))
                                {
                                    std::fprintf(stderr, "ATen: no kernel for %s (%s)\n", name.c_str(), why->c_str());
                                    aten_missing += (aten_missing.empty() ? "" : " ") + name;
                                }
                                else
                                    add(name + "/aten", [c](benchmark::State& st) { run_aten(st, c); });
#endif
                                if (dt == dtype::float32)
                                    add(name + "/ref", [c](benchmark::State& st) { run_reference(st, c); });
                                add(name + (c.tensors() == 3 ? "/probe_triad" : "/probe_copy"),
                                    [c](benchmark::State& st) { run_probe(st, c, false); });
                                if (kind != op_kind::grad_infer)
                                    add(name + "/probe_two_pass",
                                        [c](benchmark::State& st) { run_probe(st, c, true); });
                            }
        if (!dnnl_missing.empty())
            benchmark::AddCustomContext("onednn_unsupported", dnnl_missing);
        if (!aten_missing.empty())
            benchmark::AddCustomContext("aten_unsupported", aten_missing);
        const shape4 gg = shapes[0];
        for (layout lay : {layout::nchw, layout::nhwc})
        {
            const std::string name = std::string("grad_grad_") + (lay == layout::nhwc ? "nhwc" : "nchw") + "_f32_" +
                                     std::to_string(gg.n) + "x" + std::to_string(gg.c) + "x" + std::to_string(gg.h) +
                                     "x" + std::to_string(gg.w) + "_t2";
            add(name + "/fused", [lay, gg](benchmark::State& st) { run_grad_grad(st, lay, gg, true); });
            add(name + "/composite", [lay, gg](benchmark::State& st) { run_grad_grad(st, lay, gg, false); });
        }
    }
}

int main(int argc, char** argv)
{
    // Freed blocks go back to the heap and are reused, not unmapped: glibc would otherwise map
    // each output that ATen (or the op-level second-order runs) allocates afresh, above its
    // adaptive threshold, and the kernel's zeroing of new pages would be timed as the peer's
    // work (2-3x its time for the 25 MB outputs here). 32 MiB is glibc's largest threshold;
    // the largest tensor here is 25.7 MB.
    mallopt(M_MMAP_THRESHOLD, 32 << 20);
    mallopt(M_TRIM_THRESHOLD, 1 << 30);
    // --simd=<level> and --bn-budget=<MiB>: taken out of argv before Google Benchmark sees them.
    int kept = 1;
    for (int i = 1; i < argc; ++i)
    {
        if (std::strncmp(argv[i], "--simd=", 7) == 0)
        {
            bool known = false;
            for (auto level : {xgrad::cpu::simd_level::scalar, xgrad::cpu::simd_level::sse2,
                               xgrad::cpu::simd_level::avx2_fma, xgrad::cpu::simd_level::avx512})
                if (std::strcmp(argv[i] + 7, xgrad::cpu::simd_level_name(level)) == 0)
                {
                    xgrad::cpu::limit_simd_level(level);
                    known = true;
                }
            if (!known)
            {
                std::fprintf(stderr, "bn_bench: unknown --simd level '%s' (scalar, sse2, avx2_fma or avx512)\n",
                             argv[i] + 7);
                return 1;
            }
        }
        else if (std::strncmp(argv[i], "--bn-budget=", 12) == 0)
        {
            char* end = nullptr;
            const long mib = std::strtol(argv[i] + 12, &end, 10);
            if (end == argv[i] + 12 || *end != '\0' || mib < 1 || mib > 65536)
            {
                std::fprintf(stderr, "bn_bench: --bn-budget wants MiB in 1..65536, got '%s'\n", argv[i] + 12);
                return 1;
            }
            xgrad::cpu::bn_set_resident_budget(static_cast<std::int64_t>(mib) << 20);
        }
        else
            argv[kept++] = argv[i];
    }
    argc = kept;
    benchmark::Initialize(&argc, argv);
    if (benchmark::ReportUnrecognizedArguments(argc, argv))
        return 1;
    register_all();
    benchmark::RunSpecifiedBenchmarks();
    benchmark::Shutdown();
    return 0;
}
