// bn_bench's second peer (<case>/aten): ATen's CPU batch norm from the current PyTorch release,
// the LibTorch that its PyPI wheel carries under torch/ (include/, lib/). Built only when
// XGRAD_BENCH_TORCH_DIR names that folder at configure time (bench/run does, from
// bench/torch_venv), and compiled on its own as C++20, which LibTorch's headers need; the rest
// of bn_bench sees only the three entry points declared in bn_bench.hpp.
//
// The calls are the ones PyTorch's own autograd makes for torch.nn.functional.batch_norm:
//   training gradient:  at::native_batch_norm_backward(dy, x, scale, -, -, save_mean,
//                       save_invstd, train=true, eps, {dx, d_scale, d_offset})
//   inference gradient: the same with running_mean, running_var and train=false
//   training forward:   at::native_batch_norm_out(y, save_mean, save_invstd, x, scale, offset,
//                       -, -, training=true, momentum, eps)
// on the case's own buffers (channels-last cases as NCHW-shaped tensors with channels-last
// strides, which is how PyTorch holds a channels_last tensor), so ATen reads the same cold data
// as xgrad. The backward has no out= kernel of its own (its out= form is generated: the
// functional call, then a copy), so ATen allocates dx, as it does under PyTorch's autograd (kept
// for a rotation's length, below, so that it is written cold like the other outputs); the
// forward writes into the case's output buffer. Scale and offset are float32 for every data type
// (ATen's mixed-type path, like xgrad's kernels).
//
// Before timing, one call on the case's first buffer set is compared with xgrad's kernel on the
// same data; a peer that computes something else (a stride or layout mistake gives differences
// of the order of the values) reports an error instead of a figure.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/Version.h>

#if __has_include(<torch/headeronly/version.h>)
#include <torch/headeronly/version.h>
#else
#include <torch/version.h>
#endif

#include <cmath>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "bench/bn_bench.hpp"
#include "xgrad/thread_pool.hpp"

namespace xgrad::bn_bench
{
    namespace
    {
        at::ScalarType scalar_type(dtype dt)
        {
            return dt == dtype::float32 ? at::kFloat : dt == dtype::float16 ? at::kHalf : at::kBFloat16;
        }

        // The NCHW-shaped view of a case's tensor at p: channels-last strides for NHWC cases.
        at::Tensor data_view(void* p, const bn_case& c)
        {
            const shape4 s = c.s;
            const std::vector<std::int64_t> sizes{s.n, s.c, s.h, s.w};
            const std::vector<std::int64_t> strides =
                c.lay == layout::nhwc ? std::vector<std::int64_t>{s.h * s.w * s.c, 1, s.w * s.c, s.c}
                                      : std::vector<std::int64_t>{s.c * s.h * s.w, s.h * s.w, s.w, 1};
            return at::from_blob(p, sizes, strides, at::TensorOptions().dtype(scalar_type(c.dt)));
        }

        at::Tensor channel_view(float* p, const bn_case& c)
        {
            return at::from_blob(p, {c.channels()}, at::TensorOptions().dtype(at::kFloat));
        }

        // One buffer set's tensors. invstd = 1/sqrt(var + eps), what PyTorch's forward saves for
        // its backward (xgrad's kernels take the variance), made once per set before timing.
        struct aten_set
        {
            at::Tensor x, dy, out, scale, offset, mean, var, invstd, save_mean, save_invstd;
        };

        // The tensors over the given buffers: x, dy and out of c's shape, four per-channel float
        // vectors.
        aten_set make_set(void* x, void* dy, void* out, float* scale, float* offset, float* mean, float* var,
                          const bn_case& c)
        {
            aten_set a;
            a.x = data_view(x, c);
            a.dy = data_view(dy, c);
            a.out = data_view(out, c);
            a.scale = channel_view(scale, c);
            a.offset = channel_view(offset, c);
            a.mean = channel_view(mean, c);
            a.var = channel_view(var, c);
            a.invstd = (a.var + eps).rsqrt();
            a.save_mean = at::empty({c.channels()}, at::kFloat);
            a.save_invstd = at::empty({c.channels()}, at::kFloat);
            return a;
        }

        aten_set make_set(const buffer_set& s, const bn_case& c)
        {
            return make_set(s.x.get(), s.dy.get(), s.dx.get(), s.scale(), s.offset(), s.mean(), s.var(), c);
        }

        // Runs the case's op once; returns the output (dx or y).
        at::Tensor run_once(const bn_case& c, aten_set& a)
        {
            switch (c.kind)
            {
            case op_kind::grad_train:
                return std::get<0>(at::native_batch_norm_backward(a.dy, a.x, a.scale, {}, {}, a.mean, a.invstd, true,
                                                                  eps, {true, true, true}));
            case op_kind::grad_infer:
                return std::get<0>(at::native_batch_norm_backward(a.dy, a.x, a.scale, a.mean, a.var, {}, {}, false, eps,
                                                                  {true, true, true}));
            case op_kind::fwd_train:
                at::native_batch_norm_out(a.out, a.save_mean, a.save_invstd, a.x, a.scale, a.offset, {}, {}, true, 0.1,
                                          eps);
                return a.out;
            }
            return {};
        }

        void set_threads(const bn_case& c)
        {
            set_num_threads(c.threads);
            at::set_num_threads(c.threads);
        }
    }

    std::string aten_version()
    {
        return std::to_string(TORCH_VERSION_MAJOR) + "." + std::to_string(TORCH_VERSION_MINOR) + "." +
               std::to_string(TORCH_VERSION_PATCH) + " (cpu capability " + at::get_cpu_capability() + ")";
    }

    std::optional<std::string> aten_unsupported(const bn_case& c)
    {
        // A small tensor of the case's type, layout and op: ATen raises c10::Error for a type
        // it has no CPU kernel for.
        bn_case small = c;
        small.s = {2, c.channels(), 3, 3};
        small.threads = 1;
        const std::int64_t n = small.elems();
        std::vector<std::uint8_t> bytes(static_cast<std::size_t>(3 * n * c.elem_size()), 0);
        std::vector<float> channel(static_cast<std::size_t>(c.channels()), 1.0f); // every vector
        float* const ones = channel.data();
        try
        {
            set_threads(small);
            aten_set a = make_set(bytes.data(), bytes.data() + n * c.elem_size(), bytes.data() + 2 * n * c.elem_size(),
                                  ones, ones, ones, ones, small);
            run_once(small, a);
            return std::nullopt;
        }
        catch (const c10::Error& e)
        {
            return std::string(e.what_without_backtrace());
        }
    }

    void run_aten(benchmark::State& state, const bn_case& c)
    {
        const workspace& ws = workspace_for(c);
        set_threads(c);
        std::vector<aten_set> sets;
        sets.reserve(ws.sets.size());
        for (const buffer_set& s : ws.sets)
            sets.push_back(make_set(s, c));

        // The agreement check, on the first set. The bound is max|xgrad| times 1e-3 for float32
        // (both sum R terms in float32 per channel, in different orders: relative differences
        // near sqrt(R) u ~ 1e-5 for R ~ 10^5, while a wrong stride or statistic differs by the
        // order of the values) and times 2 ulps of the 16-bit type (the two may round the same
        // float differently, and the forward's statistics enter before the rounding).
        {
            at::Tensor mine = at::empty_like(sets[0].out);
            xgrad_kernel(c, ws.sets[0], mine.data_ptr());
            const at::Tensor theirs = run_once(c, sets[0]).to(at::kFloat);
            mine = mine.to(at::kFloat);
            const double scale = mine.abs().max().item<double>();
            const double diff = (mine - theirs).abs().max().item<double>();
            const double rel = c.dt == dtype::float32 ? 1e-3 : c.dt == dtype::float16 ? 2.0 / 1024 : 2.0 / 128;
            if (!(diff <= rel * scale))
            {
                state.SkipWithError(("ATen's output differs from xgrad's by " + std::to_string(diff) +
                                     " (largest |value| " + std::to_string(scale) + ")")
                                        .c_str());
                return;
            }
        }

        // The outputs ATen allocates are kept for as many calls as there are buffer sets: each
        // call's allocation then reuses the block freed by the call that many calls back, cold
        // like xgrad's rotated dx, not the block just written, which a small tensor's last call
        // would have left in the cache.
        std::vector<at::Tensor> kept(sets.size());
        std::size_t call = 0;
        const cpu_meter meter;
        for (auto _ : state)
        {
            at::Tensor out = run_once(c, sets[g_next_set++ % sets.size()]);
            benchmark::DoNotOptimize(out.data_ptr());
            benchmark::ClobberMemory();
            kept[call++ % kept.size()] = std::move(out);
        }
        finish(state, c, "aten", meter);
    }
}
