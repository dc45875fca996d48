// bn_bench's peers (entry points declared in bn_bench.hpp): the plain two-pass loop, float32
// only, the "what a straightforward loop does" baseline (<case>/ref); and oneDNN (<case>/onednn),
// built only when oneDNN was found at configure time (XGRAD_BENCH_HAVE_DNNL).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "bench/bn_bench.hpp"
#include "xgrad/thread_pool.hpp"

#ifdef XGRAD_BENCH_HAVE_DNNL
#include <omp.h>

#include <oneapi/dnnl/dnnl.hpp>
#endif

namespace xgrad::bn_bench
{
    // --- the plain two-pass loop (float32) ------------------------------------------------
    // Pass 1: per-channel sums in float (gradients: sum(dy), sum(dy (x - mean)); forward:
    // sum(x), sum(x^2)); pass 2: the outputs from them. NCHW: parallel over channels; NHWC:
    // parallel over rows with per-thread partial sums. The inference gradient keeps the same
    // two passes (its sums are outputs too).
    namespace
    {
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

    // --- oneDNN ----------------------------------------------------------------------------
#ifdef XGRAD_BENCH_HAVE_DNNL
    namespace
    {
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
            const memory::data_type dt = c.dt == dtype::float32   ? memory::data_type::f32
                                         : c.dt == dtype::float16 ? memory::data_type::f16
                                                                  : memory::data_type::bf16;
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
    }

    std::string onednn_version()
    {
        const dnnl_version_t* v = dnnl_version();
        return std::to_string(v->major) + "." + std::to_string(v->minor) + "." + std::to_string(v->patch);
    }

    std::optional<std::string> onednn_unsupported(const bn_case& c)
    {
        try
        {
            omp_set_num_threads(c.threads);
            make_dnnl(c);
            return std::nullopt;
        }
        catch (const dnnl::error& e)
        {
            return std::string(e.what());
        }
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
}
