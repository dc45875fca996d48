// Batch-norm benchmarks: xgrad's CPU batch-norm kernels against oneDNN (the peer), a plain
// two-pass loop (the "what a straightforward loop does" baseline) and bandwidth probes over the
// same bytes, in one process; plus the fused second-order op against its composite formula.
//
// The kernels are memory-bound: a training gradient reads x and dy and writes dx, so its floor
// is the time DRAM takes to move those three tensors. Each case therefore runs four benchmarks
// back to back (so that they see the same machine state): <case>/xgrad, <case>/onednn (only
// when oneDNN was found at configure time and has an implementation for the case: oneDNN 2.6
// has no bfloat16 batch norm without AVX-512, which registration reports on stderr), <case>/ref
// (float32 only) and <case>/probe_triad (2 reads + 1 write, for gradient cases) or
// <case>/probe_copy (1 read + 1 write, for forward cases): plain loops the compiler vectorises,
// over exactly the bytes the case moves, on xgrad's thread pool.
//
// Cold caches: every figure reads data that is not in the last-level cache. Each workspace
// holds k buffer sets (x, dy, dx and the per-channel vectors), and every iteration uses the
// next set; k is chosen so that the bytes of the rotated sets are at least 2.5 times the LLC
// (sysconf(_SC_LEVEL3_CACHE_SIZE), 32 MiB when unknown), counting only the two tensors every
// case touches (KVM guests may report the host's whole L3 there, e.g. 256 MiB where lscpu says
// 32 MiB: the rotation is then larger than needed, about 1 GiB, which only costs memory and fill
// time). The rotation counter is global, so consecutive benchmarks never start on the
// set the previous one ended with. Data are deterministic pseudo-random values, filled once per
// (element count, dtype).
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
// reference and the probes; omp_set_num_threads for oneDNN (Debian's build uses OpenMP).
//
// grad_grad_<layout>_f32_<shape>_t2/{fused,composite}: xgrad::fused_batch_norm_grad_grad
// against xgrad::batch_norm_grad_grad_composite at op level (allocations included), training
// mode, under no_grad, 2 threads.
//
// bench/run runs it and prints one summary line per case; only ratios measured in the same run
// are meaningful on a shared machine.
#include <benchmark/benchmark.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <string>
#include <unordered_map>
#include <vector>

#include "backends/cpu/batch_norm_kernels.hpp"
#include "xgrad/half.hpp"
#include "xgrad/thread_pool.hpp"
#include "xgrad/xgrad.hpp"

#ifdef XGRAD_BENCH_HAVE_DNNL
#include <omp.h>

#include <oneapi/dnnl/dnnl.hpp>
#endif

namespace
{
    using namespace xgrad;
    using i64 = std::int64_t;

    constexpr double eps = 1e-3;
    constexpr i64 max_channels = 128; // per-channel vectors are allocated for the largest C
    constexpr i64 grain = 1 << 16;

    // --- cases -----------------------------------------------------------------------------
    enum class op_kind
    {
        grad_train,
        grad_infer,
        fwd_train
    };
    enum class layout
    {
        nhwc,
        nchw
    };

    struct shape4
    {
        i64 n, c, h, w;
    };

    struct bn_case
    {
        op_kind kind;
        layout lay;
        dtype dt;
        shape4 s;
        int threads;

        i64 elems() const { return s.n * s.c * s.h * s.w; }
        i64 channels() const { return s.c; }
        i64 outer() const { return lay == layout::nhwc ? s.n * s.h * s.w : s.n; }
        i64 inner() const { return lay == layout::nhwc ? 1 : s.h * s.w; }
        i64 elem_size() const { return dt == dtype::float32 ? 4 : 2; }
        int tensors() const { return kind == op_kind::fwd_train ? 2 : 3; }
        i64 bytes() const { return elems() * elem_size() * tensors(); }
        std::string name() const
        {
            const char* k = kind == op_kind::grad_train ? "grad_train" : kind == op_kind::grad_infer ? "grad_infer"
                                                                                                     : "fwd_train";
            return std::string(k) + (lay == layout::nhwc ? "_nhwc" : "_nchw") +
                   (dt == dtype::float32 ? "_f32_" : "_bf16_") + std::to_string(s.n) + "x" + std::to_string(s.c) +
                   "x" + std::to_string(s.h) + "x" + std::to_string(s.w) + "_t" + std::to_string(threads);
        }
    };

    // --- cold-cache workspaces -------------------------------------------------------------
    struct aligned_deleter
    {
        void operator()(void* p) const noexcept { std::free(p); }
    };
    using buffer = std::unique_ptr<void, aligned_deleter>;

    buffer allocate(std::size_t bytes)
    {
        constexpr std::size_t align = 4096;
        void* p = std::aligned_alloc(align, (bytes + align - 1) / align * align);
        if (p == nullptr)
            throw std::bad_alloc();
        return buffer(p);
    }

    std::size_t llc_bytes()
    {
        const long v = sysconf(_SC_LEVEL3_CACHE_SIZE);
        return v > 0 ? static_cast<std::size_t>(v) : std::size_t{32} << 20;
    }

    std::uint64_t splitmix64(std::uint64_t& s)
    {
        std::uint64_t z = (s += 0x9e3779b97f4a7c15ull);
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        return z ^ (z >> 31);
    }

    // Uniform in [lo, hi): deterministic, independent of the thread count (seeded per block).
    void fill_uniform(void* dst, dtype dt, i64 count, float lo, float hi, std::uint64_t seed)
    {
        constexpr i64 block = 1 << 14;
        parallel_for(0, (count + block - 1) / block, 1, [&](i64 b, i64 e) {
            for (i64 blk = b; blk < e; ++blk)
            {
                std::uint64_t s = seed * 0x100000001b3ull + static_cast<std::uint64_t>(blk);
                const i64 end = std::min(count, (blk + 1) * block);
                for (i64 i = blk * block; i < end; ++i)
                {
                    const float u = static_cast<float>(splitmix64(s) >> 40) * (1.0f / 16777216.0f);
                    const float v = lo + (hi - lo) * u;
                    if (dt == dtype::float32)
                        static_cast<float*>(dst)[i] = v;
                    else
                        static_cast<std::uint16_t*>(dst)[i] = to_bfloat16(v).bits;
                }
            }
        });
    }

    struct buffer_set
    {
        buffer x, dy, dx, channel; // channel: scale, offset, mean, var, sum_dy, sum_dy_xc
        float* per_channel(int k) const { return static_cast<float*>(channel.get()) + k * max_channels; }
        float* scale() const { return per_channel(0); }
        float* offset() const { return per_channel(1); }
        float* mean() const { return per_channel(2); }
        float* var() const { return per_channel(3); }
        float* sum_dy() const { return per_channel(4); }
        float* sum_dy_xc() const { return per_channel(5); }
    };

    struct workspace
    {
        i64 elems = 0;
        dtype dt = dtype::float32;
        std::vector<buffer_set> sets;
    };

    std::unique_ptr<workspace> g_workspace;
    std::uint64_t g_next_set = 0; // global rotation counter

    // The workspace for c's element count and dtype (re-filled only when they change).
    workspace& workspace_for(const bn_case& c)
    {
        if (g_workspace && g_workspace->elems == c.elems() && g_workspace->dt == c.dt)
            return *g_workspace;
        g_workspace.reset();
        auto ws = std::make_unique<workspace>();
        ws->elems = c.elems();
        ws->dt = c.dt;
        const std::size_t tensor_bytes = static_cast<std::size_t>(c.elems() * c.elem_size());
        const std::size_t min_bytes = llc_bytes() * 5 / 2;
        const std::size_t k = std::max<std::size_t>(2, (min_bytes + 2 * tensor_bytes - 1) / (2 * tensor_bytes));
        set_num_threads(std::max(1, static_cast<int>(std::min<long>(sysconf(_SC_NPROCESSORS_ONLN), 64))));
        for (std::size_t i = 0; i < k; ++i)
        {
            buffer_set s{allocate(tensor_bytes), allocate(tensor_bytes), allocate(tensor_bytes),
                         allocate(6 * max_channels * sizeof(float))};
            const std::uint64_t seed = 1000 * i;
            fill_uniform(s.x.get(), c.dt, c.elems(), -2.0f, 3.0f, seed + 1);
            fill_uniform(s.dy.get(), c.dt, c.elems(), -1.0f, 1.0f, seed + 2);
            fill_uniform(s.dx.get(), c.dt, c.elems(), 0.0f, 0.0f, seed + 3); // touch the pages
            fill_uniform(s.scale(), dtype::float32, max_channels, 0.5f, 1.5f, seed + 4);
            fill_uniform(s.offset(), dtype::float32, max_channels, -0.5f, 0.5f, seed + 5);
            fill_uniform(s.mean(), dtype::float32, max_channels, 0.0f, 1.0f, seed + 6);
            fill_uniform(s.var(), dtype::float32, max_channels, 0.5f, 1.5f, seed + 7);
            fill_uniform(s.sum_dy(), dtype::float32, 2 * max_channels, 0.0f, 0.0f, seed + 8);
            ws->sets.push_back(std::move(s));
        }
        g_workspace = std::move(ws);
        return *g_workspace;
    }

    const buffer_set& next_set(const workspace& ws) { return ws.sets[g_next_set++ % ws.sets.size()]; }

    // Process CPU time over wall time: about 2 when two threads are busy (spinning included).
    class cpu_meter
    {
    public:
        cpu_meter() : m_cpu(cpu_seconds()), m_wall(std::chrono::steady_clock::now()) {}
        double busy() const
        {
            const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - m_wall).count();
            return wall > 0 ? (cpu_seconds() - m_cpu) / wall : 0.0;
        }

    private:
        static double cpu_seconds()
        {
            rusage u{};
            getrusage(RUSAGE_SELF, &u);
            return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
                   static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) * 1e-6;
        }
        double m_cpu;
        std::chrono::steady_clock::time_point m_wall;
    };

    void finish(benchmark::State& state, const bn_case& c, const char* label, const cpu_meter& meter)
    {
        state.counters["cpus"] = meter.busy();
        const double iters = static_cast<double>(state.iterations());
        state.counters["GB/s"] = benchmark::Counter(iters * static_cast<double>(c.bytes()) / 1e9,
                                                    benchmark::Counter::kIsRate);
        state.SetItemsProcessed(state.iterations() * c.elems());
        state.SetLabel(label);
    }

    // --- xgrad -----------------------------------------------------------------------------
    void run_xgrad(benchmark::State& state, const bn_case& c)
    {
        const workspace& ws = workspace_for(c);
        set_num_threads(c.threads);
        const cpu_meter meter;
        for (auto _ : state)
        {
            const buffer_set& s = next_set(ws);
            switch (c.kind)
            {
            case op_kind::grad_train:
                cpu::bn_grad_training(s.dx.get(), s.sum_dy(), s.sum_dy_xc(), s.dy.get(), s.x.get(), nullptr, s.scale(),
                                      s.mean(), s.var(), eps, c.dt, c.outer(), c.channels(), c.inner());
                break;
            case op_kind::grad_infer:
                cpu::bn_grad_inference(s.dx.get(), s.sum_dy(), s.sum_dy_xc(), s.dy.get(), s.x.get(), nullptr,
                                       s.scale(), s.mean(), s.var(), eps, c.dt, c.outer(), c.channels(), c.inner());
                break;
            case op_kind::fwd_train:
                cpu::bn_forward_training(s.dx.get(), s.mean(), s.var(), s.x.get(), s.scale(), s.offset(), eps, false,
                                         c.dt, c.outer(), c.channels(), c.inner());
                break;
            }
            benchmark::ClobberMemory();
        }
        finish(state, c, "xgrad", meter);
    }

    // --- the plain two-pass loop (float32) ------------------------------------------------
    // Pass 1: per-channel sums in float (gradients: sum(dy), sum(dy (x - mean)); forward:
    // sum(x), sum(x^2)); pass 2: the outputs from them. NCHW: parallel over channels; NHWC:
    // parallel over rows with per-thread partial sums. The inference gradient keeps the same
    // two passes (its sums are outputs too).
    // Adds one element to the running sums: gradients sum dy and dy (x - mean), the forward
    // x and x^2.
    template <bool fwd>
    inline void accumulate(float& a, float& b, float xv, float dyv, float mean)
    {
        if constexpr (fwd)
        {
            a += xv;
            b += xv * xv;
        }
        else
        {
            a += dyv;
            b += dyv * (xv - mean);
        }
    }

    template <bool fwd>
    void reference_pass1(const bn_case& c, const float* x, const float* dy, const float* mean, float* s1, float* s2)
    {
        const i64 C = c.channels(), outer = c.outer(), inner = c.inner();
        if (c.lay == layout::nchw)
        {
            parallel_for(0, C, 1, [&](i64 cb, i64 ce) {
                for (i64 ch = cb; ch < ce; ++ch)
                {
                    float a = 0, b = 0;
                    for (i64 o = 0; o < outer; ++o)
                    {
                        const i64 base = (o * C + ch) * inner;
                        for (i64 i = 0; i < inner; ++i)
                            accumulate<fwd>(a, b, x[base + i], fwd ? 0.f : dy[base + i], mean[ch]);
                    }
                    s1[ch] = a;
                    s2[ch] = b;
                }
            });
            return;
        }
        const i64 T = get_num_threads();
        std::vector<float> partial(static_cast<std::size_t>(2 * T * C), 0.f);
        parallel_for(0, T, 1, [&](i64 tb, i64 te) {
            for (i64 t = tb; t < te; ++t)
            {
                float* a = partial.data() + 2 * t * C;
                float* b = a + C;
                for (i64 row = t * outer / T; row < (t + 1) * outer / T; ++row)
                    for (i64 ch = 0; ch < C; ++ch)
                        accumulate<fwd>(a[ch], b[ch], x[row * C + ch], fwd ? 0.f : dy[row * C + ch], mean[ch]);
            }
        });
        for (i64 ch = 0; ch < C; ++ch)
        {
            float a = 0, b = 0;
            for (i64 t = 0; t < T; ++t)
            {
                a += partial[static_cast<std::size_t>(2 * t * C + ch)];
                b += partial[static_cast<std::size_t>((2 * t + 1) * C + ch)];
            }
            s1[ch] = a;
            s2[ch] = b;
        }
    }

    // out = x k1[c] + dy k2[c] + k0[c], reading only what the op needs: the forward has no dy
    // term, the inference gradient no x term.
    template <op_kind K>
    void reference_pass2(const bn_case& c, const float* x, const float* dy, float* out, const float* k0,
                         const float* k1, const float* k2)
    {
        const i64 C = c.channels(), outer = c.outer(), inner = c.inner();
        auto value = [&](i64 at, i64 ch) {
            if constexpr (K == op_kind::fwd_train)
                return x[at] * k1[ch] + k0[ch];
            else if constexpr (K == op_kind::grad_infer)
                return dy[at] * k2[ch];
            else
                return x[at] * k1[ch] + dy[at] * k2[ch] + k0[ch];
        };
        if (c.lay == layout::nchw)
        {
            parallel_for(0, outer * C, 1, [&](i64 b, i64 e) {
                for (i64 oc = b; oc < e; ++oc)
                {
                    const i64 ch = oc % C;
                    for (i64 i = 0; i < inner; ++i)
                        out[oc * inner + i] = value(oc * inner + i, ch);
                }
            });
            return;
        }
        parallel_for(0, outer, std::max<i64>(1, grain / C), [&](i64 b, i64 e) {
            for (i64 row = b; row < e; ++row)
                for (i64 ch = 0; ch < C; ++ch)
                    out[row * C + ch] = value(row * C + ch, ch);
        });
    }

    void reference(const bn_case& c, const buffer_set& s)
    {
        const i64 C = c.channels(), outer = c.outer(), inner = c.inner();
        const float R = static_cast<float>(outer * inner);
        const auto* x = static_cast<const float*>(s.x.get());
        const auto* dy = static_cast<const float*>(s.dy.get());
        auto* out = static_cast<float*>(s.dx.get());
        float* mean = s.mean();
        float* var = s.var();
        float* s1 = s.sum_dy();
        float* s2 = s.sum_dy_xc();
        if (c.kind == op_kind::fwd_train)
            reference_pass1<true>(c, x, dy, mean, s1, s2);
        else
            reference_pass1<false>(c, x, dy, mean, s1, s2);
        float k0[max_channels], k1[max_channels], k2[max_channels];
        for (i64 ch = 0; ch < C; ++ch)
        {
            if (c.kind == op_kind::fwd_train)
            {
                mean[ch] = s1[ch] / R;
                var[ch] = std::max(0.f, s2[ch] / R - mean[ch] * mean[ch]);
                const float r = 1.0f / std::sqrt(var[ch] + static_cast<float>(eps));
                k1[ch] = s.scale()[ch] * r;
                k2[ch] = 0;
                k0[ch] = s.offset()[ch] - mean[ch] * k1[ch];
            }
            else
            {
                const float r = 1.0f / std::sqrt(var[ch] + static_cast<float>(eps));
                k2[ch] = s.scale()[ch] * r;
                if (c.kind == op_kind::grad_train)
                {
                    k1[ch] = -k2[ch] * r * r * s2[ch] / R;
                    k0[ch] = -k2[ch] * s1[ch] / R - k1[ch] * mean[ch];
                }
                else
                    k1[ch] = k0[ch] = 0;
            }
        }
        if (c.kind == op_kind::fwd_train)
            reference_pass2<op_kind::fwd_train>(c, x, dy, out, k0, k1, k2);
        else if (c.kind == op_kind::grad_infer)
            reference_pass2<op_kind::grad_infer>(c, x, dy, out, k0, k1, k2);
        else
            reference_pass2<op_kind::grad_train>(c, x, dy, out, k0, k1, k2);
    }

    void run_reference(benchmark::State& state, const bn_case& c)
    {
        const workspace& ws = workspace_for(c);
        set_num_threads(c.threads);
        const cpu_meter meter;
        for (auto _ : state)
        {
            reference(c, next_set(ws));
            benchmark::ClobberMemory();
        }
        finish(state, c, "two-pass loop", meter);
    }

    // --- bandwidth probes over the same bytes ----------------------------------------------
    // The case's tensors viewed as float arrays of elems * elem_size / 4 values: out = a + b
    // (x, dy -> dx) for gradients, out = a + 0 (x -> dx, a copy the compiler cannot turn into
    // memcpy, so it stores like the kernels do) for forwards.
    void run_probe(benchmark::State& state, const bn_case& c)
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
        finish(state, c, triad ? "probe 2 reads + 1 write" : "probe copy", meter);
    }

    // --- oneDNN ----------------------------------------------------------------------------
#ifdef XGRAD_BENCH_HAVE_DNNL
    struct dnnl_setup
    {
        dnnl::engine engine{dnnl::engine::kind::cpu, 0};
        dnnl::stream stream{engine};
        dnnl::primitive prim;
        dnnl::batch_normalization_forward::primitive_desc fwd_pd;
        std::string impl;
    };

    // Throws dnnl::error when oneDNN has no implementation for the case.
    std::unique_ptr<dnnl_setup> make_dnnl(const bn_case& c)
    {
        using namespace dnnl;
        auto d = std::make_unique<dnnl_setup>();
        const memory::data_type dt = c.dt == dtype::float32 ? memory::data_type::f32 : memory::data_type::bf16;
        const memory::desc data({c.s.n, c.s.c, c.s.h, c.s.w}, dt,
                                c.lay == layout::nhwc ? memory::format_tag::nhwc : memory::format_tag::nchw);
        normalization_flags flags = normalization_flags::use_scale | normalization_flags::use_shift;
        if (c.kind == op_kind::grad_infer)
            flags = flags | normalization_flags::use_global_stats;
        d->fwd_pd = batch_normalization_forward::primitive_desc(
            batch_normalization_forward::desc(prop_kind::forward_training, data, static_cast<float>(eps), flags),
            d->engine);
        if (c.kind == op_kind::fwd_train)
        {
            d->prim = batch_normalization_forward(d->fwd_pd);
            d->impl = d->fwd_pd.impl_info_str();
            return d;
        }
        const batch_normalization_backward::primitive_desc bwd_pd(
            batch_normalization_backward::desc(prop_kind::backward, data, data, static_cast<float>(eps), flags),
            d->engine, d->fwd_pd);
        d->prim = batch_normalization_backward(bwd_pd);
        d->impl = bwd_pd.impl_info_str();
        return d;
    }

    void run_onednn(benchmark::State& state, const bn_case& c)
    {
        const workspace& ws = workspace_for(c);
        set_num_threads(c.threads);
        omp_set_num_threads(c.threads); // before the primitive is created: oneDNN may size work then
        const auto d = make_dnnl(c);
        using dnnl::memory;
        const memory::desc data = d->fwd_pd.src_desc();
        const memory::desc stat = d->fwd_pd.mean_desc();
        const memory::desc weights({c.s.c}, memory::data_type::f32, memory::format_tag::a);
        std::vector<std::unordered_map<int, memory>> args;
        for (const buffer_set& s : ws.sets)
        {
            auto m = [&](const memory::desc& md, void* p) { return memory(md, d->engine, p); };
            if (c.kind == op_kind::fwd_train)
                args.push_back({{DNNL_ARG_SRC, m(data, s.x.get())},
                                {DNNL_ARG_DST, m(data, s.dx.get())},
                                {DNNL_ARG_MEAN, m(stat, s.mean())},
                                {DNNL_ARG_VARIANCE, m(stat, s.var())},
                                {DNNL_ARG_SCALE, m(weights, s.scale())},
                                {DNNL_ARG_SHIFT, m(weights, s.offset())}});
            else
                args.push_back({{DNNL_ARG_SRC, m(data, s.x.get())},
                                {DNNL_ARG_DIFF_DST, m(data, s.dy.get())},
                                {DNNL_ARG_DIFF_SRC, m(data, s.dx.get())},
                                {DNNL_ARG_MEAN, m(stat, s.mean())},
                                {DNNL_ARG_VARIANCE, m(stat, s.var())},
                                {DNNL_ARG_SCALE, m(weights, s.scale())},
                                {DNNL_ARG_SHIFT, m(weights, s.offset())},
                                {DNNL_ARG_DIFF_SCALE, m(weights, s.sum_dy_xc())},
                                {DNNL_ARG_DIFF_SHIFT, m(weights, s.sum_dy())}});
        }
        const cpu_meter meter;
        for (auto _ : state)
        {
            d->prim.execute(d->stream, args[g_next_set++ % args.size()]);
            d->stream.wait();
            benchmark::ClobberMemory();
        }
        finish(state, c, ("onednn " + d->impl).c_str(), meter);
    }
#endif

    // --- second order: fused op against the composite -------------------------------------
    struct grad_grad_inputs
    {
        tensor A[2], y_backprop[2], x[2]; // two sets, alternated (each tensor is larger than the LLC
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
            in->y_backprop[k] = randn(xs, gen);
            in->x[k] = randn(xs, gen);
        }
        in->a = randn({s.c}, gen);
        in->b = randn({s.c}, gen);
        in->scale = rand({s.c}, gen, dtype::float32, cpu_device, 0.5, 1.5);
        const tensor offset = zeros({s.c});
        const tensor unused = zeros({0}); // running statistics: not read in training mode
        // the batch statistics of x[0] (the reserve spaces of the forward); used for both sets
        const batch_norm_forward_result f = fused_batch_norm(in->x[0], in->scale, offset, unused, unused, in->attrs);
        in->mean = f.reserve_space_1;
        in->var = f.reserve_space_2;
        return in;
    }

    void run_grad_grad(benchmark::State& state, layout lay, shape4 s, bool fused)
    {
        g_workspace.reset(); // the batch-norm kernel workspaces are no longer needed
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
            const auto r = fused ? fused_batch_norm_grad_grad(in->A[k], in->a, in->b, in->y_backprop[k], in->x[k],
                                                              in->scale, in->mean, in->var, in->attrs)
                                 : batch_norm_grad_grad_composite(in->A[k], in->a, in->b, in->y_backprop[k],
                                                                  in->x[k], in->scale, in->mean, in->var, in->attrs);
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
        benchmark::RegisterBenchmark(name.c_str(), std::forward<Fn>(fn))
            ->UseRealTime()
            ->Unit(benchmark::kMillisecond);
    }

    void register_all()
    {
        const shape4 shapes[] = {{32, 64, 56, 56}, {64, 128, 28, 28}, {256, 32, 14, 14}, {128, 16, 28, 28}};
        std::string dnnl_missing;
#ifdef XGRAD_BENCH_HAVE_DNNL
        const dnnl_version_t* v = dnnl_version();
        benchmark::AddCustomContext("onednn", std::to_string(v->major) + "." + std::to_string(v->minor) + "." +
                                                  std::to_string(v->patch));
#else
        benchmark::AddCustomContext("onednn", "none (not found at configure time)");
#endif
        benchmark::AddCustomContext("llc_bytes", std::to_string(llc_bytes()));
        // Ordered so that a workspace (element count, dtype) is filled once: shapes 0-1 and 2-3
        // have the same element count, and float32 precedes bfloat16 of the same shapes.
        for (int group = 0; group < 2; ++group)
            for (dtype dt : {dtype::float32, dtype::bfloat16})
                for (int si = 2 * group; si < 2 * group + 2; ++si)
                    for (int threads : {1, 2})
                        for (op_kind kind : {op_kind::grad_train, op_kind::grad_infer, op_kind::fwd_train})
                            for (layout lay : {layout::nhwc, layout::nchw})
                            {
                                const bn_case c{kind, lay, dt, shapes[si], threads};
                                const std::string name = c.name();
                                add(name + "/xgrad", [c](benchmark::State& st) { run_xgrad(st, c); });
#ifdef XGRAD_BENCH_HAVE_DNNL
                                try
                                {
                                    omp_set_num_threads(threads);
                                    make_dnnl(c);
                                    add(name + "/onednn", [c](benchmark::State& st) { run_onednn(st, c); });
                                }
                                catch (const dnnl::error& e)
                                {
                                    std::fprintf(stderr, "oneDNN: no implementation for %s (%s)\n", name.c_str(),
                                                 e.what());
                                    dnnl_missing += (dnnl_missing.empty() ? "" : " ") + name;
                                }
#endif
                                if (dt == dtype::float32)
                                    add(name + "/ref", [c](benchmark::State& st) { run_reference(st, c); });
                                add(name + (c.tensors() == 3 ? "/probe_triad" : "/probe_copy"),
                                    [c](benchmark::State& st) { run_probe(st, c); });
                            }
        if (!dnnl_missing.empty())
            benchmark::AddCustomContext("onednn_unsupported", dnnl_missing);
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
    benchmark::Initialize(&argc, argv);
    if (benchmark::ReportUnrecognizedArguments(argc, argv))
        return 1;
    register_all();
    benchmark::RunSpecifiedBenchmarks();
    benchmark::Shutdown();
    return 0;
}
