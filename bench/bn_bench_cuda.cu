// The batch-norm gradient on the GPU: xgrad's CUDA kernels against cuDNN and against a
// device-to-device copy of the same bytes, measured in one run (the issue's shapes).
//
//   bn_bench_cuda [--reps N]        (bench/run gpu builds and runs it)
//
// Per case (shape x NHWC/NCHW x training/inference x float32/bfloat16) it times, back to back
// in each repetition and with the L2 cache flushed before every timed call:
//   xgrad   cuda::bn_grad_training / cuda::bn_grad_inference (dx and the two channel sums),
//   cudnn   cudnnBatchNormalizationBackward (training mode only: cuDNN has no inference-mode
//           backward), the faster of its SPATIAL and SPATIAL_PERSISTENT modes,
//   copy    cudaMemcpyAsync device to device of one x-sized tensor.
// GB/s count the bytes of x and dy read and dx written (3 tensors) for the
// gradients, and 2 tensors (read + write) for the copy. Medians over the repetitions.
// One line per case:
//   case=grad_<train|infer>_<nhwc|nchw>_<f32|bf16>_<N>x<C>x<H>x<W> xgrad_gbps=<x> copy_gbps=<c>
//     of_copy=<x/c> peer=<cudnn|none> peer_gbps=<p> ratio=<x/p>
// peer=none (nan) for inference, or when cuDNN was not found at build time or refuses the case.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#ifdef XGRAD_BENCH_HAVE_CUDNN
#include <cudnn.h>
#endif

#include "backends/cuda/cuda_kernels.hpp"
#include "xgrad/half.hpp"

namespace
{
    void check(cudaError_t e, const char* what)
    {
        if (e != cudaSuccess)
        {
            std::fprintf(stderr, "bn_bench_cuda: %s: %s\n", what, cudaGetErrorString(e));
            std::exit(1);
        }
    }

    struct shape4
    {
        std::int64_t n, c, h, w;
        std::int64_t numel() const { return n * c * h * w; }
    };

    /// Device memory holding seeded values in [lo, hi) of dtype dt (float32 or bfloat16).
    void* device_random(std::int64_t count, xgrad::dtype dt, std::uint64_t seed, float lo, float hi)
    {
        std::vector<float> v(static_cast<std::size_t>(count));
        std::uint64_t s = seed * 0x9e3779b97f4a7c15ull + 1;
        for (auto& e : v)
        {
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            e = lo + (hi - lo) * static_cast<float>((s >> 40) & 0xffffff) / 16777216.0f;
        }
        void* p = nullptr;
        if (dt == xgrad::dtype::bfloat16)
        {
            std::vector<std::uint16_t> b(v.size());
            for (std::size_t i = 0; i < v.size(); ++i)
                b[i] = xgrad::to_bfloat16(v[i]).bits;
            check(cudaMalloc(&p, b.size() * 2), "cudaMalloc");
            check(cudaMemcpy(p, b.data(), b.size() * 2, cudaMemcpyHostToDevice), "cudaMemcpy");
        }
        else
        {
            check(cudaMalloc(&p, v.size() * 4), "cudaMalloc");
            check(cudaMemcpy(p, v.data(), v.size() * 4, cudaMemcpyHostToDevice), "cudaMemcpy");
        }
        return p;
    }

    /// Times f() with events after flushing the L2 cache (a memset of `flush`); milliseconds.
    template <class F>
    float timed(F&& f, void* flush, std::size_t flush_bytes, cudaEvent_t t0, cudaEvent_t t1)
    {
        check(cudaMemsetAsync(flush, 0, flush_bytes, 0), "flush");
        check(cudaEventRecord(t0, 0), "event");
        f();
        check(cudaEventRecord(t1, 0), "event");
        check(cudaEventSynchronize(t1), "event sync");
        float ms = 0;
        check(cudaEventElapsedTime(&ms, t0, t1), "elapsed");
        return ms;
    }

    float median(std::vector<float> v)
    {
        std::sort(v.begin(), v.end());
        return v.empty() ? NAN : v[v.size() / 2];
    }

    /// What every case shares: the repetitions, the L2 flush buffer, the timing events and
    /// (with cuDNN) its handle.
    struct bench_env
    {
        int reps = 20;
        void* flush = nullptr;
        std::size_t flush_bytes = 0;
        cudaEvent_t t0{}, t1{};
#ifdef XGRAD_BENCH_HAVE_CUDNN
        cudnnHandle_t cudnn = nullptr;
#endif
    };

    /// One case's layout and dtype.
    struct bench_case
    {
        shape4 s;
        bool nhwc, training;
        xgrad::dtype dt;
        double eps;
    };

    /// One case's device buffers.
    struct case_buffers
    {
        void *x, *dy, *dx, *copy_dst;
        float *scale, *mean, *var, *sums, *inv_std;
    };

    case_buffers make_buffers(std::int64_t n, std::int64_t C, xgrad::dtype dt, double eps)
    {
        case_buffers b{};
        b.x = device_random(n, dt, 1, -2, 2);
        b.dy = device_random(n, dt, 2, -1, 1);
        b.dx = device_random(n, dt, 3, 0, 1);
        b.copy_dst = device_random(n, dt, 4, 0, 1);
        b.scale = static_cast<float*>(device_random(C, xgrad::dtype::float32, 5, 0.5f, 1.5f));
        b.mean = static_cast<float*>(device_random(C, xgrad::dtype::float32, 6, -0.1f, 0.1f));
        b.var = static_cast<float*>(device_random(C, xgrad::dtype::float32, 7, 0.5f, 2.0f));
        b.sums = static_cast<float*>(device_random(4 * C, xgrad::dtype::float32, 8, 0, 1));
        // cuDNN wants the saved inverse standard deviation 1/sqrt(var + eps).
        std::vector<float> hv(static_cast<std::size_t>(C));
        check(cudaMemcpy(hv.data(), b.var, C * 4, cudaMemcpyDeviceToHost), "cudaMemcpy");
        for (auto& v : hv)
            v = 1.0f / std::sqrt(v + static_cast<float>(eps));
        b.inv_std = static_cast<float*>(device_random(C, xgrad::dtype::float32, 9, 0, 1));
        check(cudaMemcpy(b.inv_std, hv.data(), C * 4, cudaMemcpyHostToDevice), "cudaMemcpy");
        return b;
    }

    void free_buffers(const case_buffers& b)
    {
        for (void* p : {b.x, b.dy, b.dx, b.copy_dst, static_cast<void*>(b.scale), static_cast<void*>(b.mean),
                        static_cast<void*>(b.var), static_cast<void*>(b.sums), static_cast<void*>(b.inv_std)})
            cudaFree(p);
    }

#ifdef XGRAD_BENCH_HAVE_CUDNN
    /// cuDNN's backward for one case: its descriptors and the faster of its modes (ok = false
    /// when there is no handle, in inference, or when cuDNN refuses the case).
    struct cudnn_peer
    {
        cudnnTensorDescriptor_t xd = nullptr, pd = nullptr;
        cudnnBatchNormMode_t best_mode = CUDNN_BATCHNORM_SPATIAL;
        bool ok = false;

        cudnnStatus_t call(const bench_env& env, cudnnBatchNormMode_t mode, const case_buffers& b, std::int64_t C,
                           double eps) const
        {
            const float one = 1.0f, zero = 0.0f;
            return cudnnBatchNormalizationBackward(env.cudnn, mode, &one, &zero, &one, &zero, xd, b.x, xd, b.dy, xd,
                                                   b.dx, pd, b.scale, b.sums + 2 * C, b.sums + 3 * C, eps, b.mean,
                                                   b.inv_std);
        }

        void destroy()
        {
            if (xd)
                cudnnDestroyTensorDescriptor(xd);
            if (pd)
                cudnnDestroyTensorDescriptor(pd);
        }
    };

    cudnn_peer pick_cudnn(const bench_env& env, const bench_case& k, const case_buffers& b)
    {
        cudnn_peer peer;
        if (!env.cudnn || !k.training)
            return peer;
        const shape4& s = k.s;
        const std::int64_t C = s.c;
        cudnnCreateTensorDescriptor(&peer.xd);
        cudnnCreateTensorDescriptor(&peer.pd);
        cudnnSetTensor4dDescriptor(peer.xd, k.nhwc ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW,
                                   k.dt == xgrad::dtype::float32 ? CUDNN_DATA_FLOAT : CUDNN_DATA_BFLOAT16,
                                   static_cast<int>(s.n), static_cast<int>(s.c), static_cast<int>(s.h),
                                   static_cast<int>(s.w));
        float best = INFINITY;
        for (const auto mode : {CUDNN_BATCHNORM_SPATIAL, CUDNN_BATCHNORM_SPATIAL_PERSISTENT})
        {
            if (cudnnDeriveBNTensorDescriptor(peer.pd, peer.xd, mode) != CUDNN_STATUS_SUCCESS)
                continue;
            const auto call = [&] { return peer.call(env, mode, b, C, k.eps); };
            if (call() != CUDNN_STATUS_SUCCESS)
                continue;
            float ms = 0;
            for (int r = 0; r < 3; ++r)
                ms = timed(call, env.flush, env.flush_bytes, env.t0, env.t1);
            if (ms < best)
            {
                best = ms;
                peer.best_mode = mode;
                peer.ok = true;
            }
        }
        if (peer.ok)
            cudnnDeriveBNTensorDescriptor(peer.pd, peer.xd, peer.best_mode);
        return peer;
    }
#endif

    /// The case's line (GB/s from the median times; t_p is empty when there is no peer).
    void print_case(const bench_case& k, std::size_t item, const std::vector<float>& t_x, const std::vector<float>& t_c,
                    const std::vector<float>& t_p, bool peer_ok)
    {
        const shape4& s = k.s;
        const std::int64_t n = s.numel();
        const double bytes3 = 3.0 * static_cast<double>(n * item), bytes2 = 2.0 * static_cast<double>(n * item);
        const double gx = bytes3 / (median(t_x) * 1e6), gc = bytes2 / (median(t_c) * 1e6);
        const double gp = peer_ok ? bytes3 / (median(t_p) * 1e6) : NAN;
        std::printf("case=grad_%s_%s_%s_%lldx%lldx%lldx%lld xgrad_gbps=%.1f copy_gbps=%.1f of_copy=%.2f "
                    "peer=%s peer_gbps=%.1f ratio=%.2f\n",
                    k.training ? "train" : "infer", k.nhwc ? "nhwc" : "nchw",
                    k.dt == xgrad::dtype::float32 ? "f32" : "bf16", static_cast<long long>(s.n),
                    static_cast<long long>(s.c), static_cast<long long>(s.h), static_cast<long long>(s.w), gx, gc,
                    gx / gc, peer_ok ? "cudnn" : "none", gp, gx / gp);
        std::fflush(stdout);
    }

    /// Times one case (xgrad, the copy and the peer) and prints its line.
    void run_case(const bench_env& env, const bench_case& k)
    {
        const shape4& s = k.s;
        const bool training = k.training;
        const xgrad::dtype dt = k.dt;
        const double eps = k.eps;
        const std::int64_t n = s.numel(), C = s.c;
        const std::int64_t outer = k.nhwc ? s.n * s.h * s.w : s.n, inner = k.nhwc ? 1 : s.h * s.w;
        const std::size_t item = dt == xgrad::dtype::float32 ? 4 : 2;
        const case_buffers b = make_buffers(n, C, dt, eps);

        const auto run_xgrad = [&] {
            if (training)
                xgrad::cuda::bn_grad_training(b.dx, b.sums, b.sums + C, b.dy, b.x, nullptr, b.scale, b.mean, b.var, eps,
                                              dt, outer, C, inner);
            else
                xgrad::cuda::bn_grad_inference(b.dx, b.sums, b.sums + C, b.dy, b.x, nullptr, b.scale, b.mean, b.var,
                                               eps, dt, outer, C, inner);
        };
        const auto run_copy = [&] {
            check(cudaMemcpyAsync(b.copy_dst, b.x, n * item, cudaMemcpyDeviceToDevice, 0), "copy");
        };
        std::vector<float> t_x, t_c, t_p;
        bool peer_ok = false;
#ifdef XGRAD_BENCH_HAVE_CUDNN
        cudnn_peer peer = pick_cudnn(env, k, b);
        peer_ok = peer.ok;
#endif
        for (int r = 0; r < 3; ++r) // warm-up
        {
            run_xgrad();
            run_copy();
        }
        check(cudaDeviceSynchronize(), "warm-up");
        for (int r = 0; r < env.reps; ++r)
        {
            t_x.push_back(timed(run_xgrad, env.flush, env.flush_bytes, env.t0, env.t1));
            t_c.push_back(timed(run_copy, env.flush, env.flush_bytes, env.t0, env.t1));
#ifdef XGRAD_BENCH_HAVE_CUDNN
            if (peer_ok)
                t_p.push_back(timed([&] { peer.call(env, peer.best_mode, b, C, eps); }, env.flush, env.flush_bytes,
                                    env.t0, env.t1));
#endif
        }
        check(cudaGetLastError(), "kernels");
        print_case(k, item, t_x, t_c, t_p, peer_ok);
#ifdef XGRAD_BENCH_HAVE_CUDNN
        peer.destroy();
#endif
        free_buffers(b);
    }
}

int main(int argc, char** argv)
{
    bench_env env;
    for (int i = 1; i < argc; ++i)
        if (std::strcmp(argv[i], "--reps") == 0 && i + 1 < argc)
            env.reps = std::max(1, std::atoi(argv[++i]));
    int devices = 0;
    if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0)
    {
        std::printf("bn_bench_cuda: no CUDA device: nothing to measure\n");
        return 0;
    }
    cudaDeviceProp prop{};
    check(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
    std::printf("machine: gpu=\"%s\" sms=%d l2_bytes=%d\n", prop.name, prop.multiProcessorCount, prop.l2CacheSize);
#ifdef XGRAD_BENCH_HAVE_CUDNN
    if (cudnnCreate(&env.cudnn) != CUDNN_STATUS_SUCCESS)
        env.cudnn = nullptr;
    std::printf("bn_bench_cuda: cudnn=%zu\n", cudnnGetVersion());
#else
    std::printf("bn_bench_cuda: cudnn=none\n");
#endif
    env.flush_bytes = std::max<std::size_t>(4 * static_cast<std::size_t>(prop.l2CacheSize), 1 << 28);
    check(cudaMalloc(&env.flush, env.flush_bytes), "cudaMalloc");
    check(cudaEventCreate(&env.t0), "event");
    check(cudaEventCreate(&env.t1), "event");

    const shape4 shapes[] = {{32, 64, 56, 56}, {64, 128, 28, 28}, {256, 32, 14, 14}, {128, 16, 28, 28}};
    const double eps = 1e-3;
    for (const shape4& s : shapes)
        for (const bool nhwc : {true, false})
            for (const bool training : {true, false})
                for (const xgrad::dtype dt : {xgrad::dtype::float32, xgrad::dtype::bfloat16})
                    run_case(env, bench_case{s, nhwc, training, dt, eps});
    cudaFree(env.flush);
    return 0;
}
