#pragma once
// Internal to bn_bench: what its sources share. The case descriptions (bn_case), the
// cold-cache workspaces with their buffer rotation, the CPU-time meter and finish(), which sets
// the counters and label every kernel benchmark reports (definitions in bn_bench_common.cpp);
// one call of xgrad's kernel for a case (bn_bench.cpp); and the peers' entry points
// (bn_bench_peers.cpp: the two-pass loop and oneDNN; bn_bench_aten.cpp: ATen, C++20, built
// apart because LibTorch's headers need it). bn_bench.cpp holds xgrad's runs, the probes, the
// second-order comparison, registration and main.
#include <benchmark/benchmark.h>
#include <sys/resource.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "xgrad/xgrad.hpp"

namespace xgrad::bn_bench
{
    using i64 = std::int64_t;

    inline constexpr double eps = 1e-3;
    inline constexpr i64 max_channels = 128; // per-channel vectors are allocated for the largest C
    inline constexpr i64 grain = 1 << 16;

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
            const char* k = kind == op_kind::grad_train   ? "grad_train"
                            : kind == op_kind::grad_infer ? "grad_infer"
                                                          : "fwd_train";
            return std::string(k) + (lay == layout::nhwc ? "_nhwc" : "_nchw") +
                   (dt == dtype::float32   ? "_f32_"
                    : dt == dtype::float16 ? "_f16_"
                                           : "_bf16_") +
                   std::to_string(s.n) + "x" + std::to_string(s.c) + "x" + std::to_string(s.h) + "x" +
                   std::to_string(s.w) + "_t" + std::to_string(threads);
        }
    };

    // --- cold-cache workspaces -------------------------------------------------------------
    // Every figure reads data that is not in the last-level cache. Each workspace holds k buffer
    // sets (x, dy, dx and the per-channel vectors), and every iteration uses the next set; k is
    // chosen so that the bytes of the rotated sets are at least 2.5 times the LLC
    // (sysconf(_SC_LEVEL3_CACHE_SIZE), 32 MiB when unknown), counting only the two tensors every
    // case touches (KVM guests may report the host's whole L3 there, e.g. 256 MiB where lscpu
    // says 32 MiB: the rotation is then larger than needed, about 1 GiB, which only costs memory
    // and fill time). The rotation counter is global, so consecutive benchmarks never start on
    // the set the previous one ended with. Data are deterministic pseudo-random values, filled
    // once per (element count, dtype).
    struct aligned_deleter
    {
        void operator()(void* p) const noexcept { std::free(p); }
    };
    using buffer = std::unique_ptr<void, aligned_deleter>;

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

    // The LLC size the rotation is sized against (also reported in the benchmark context).
    std::size_t llc_bytes();

    // The workspace for c's element count and dtype (re-filled only when they change).
    workspace& workspace_for(const bn_case& c);

    // Frees the workspace (for benchmarks that no longer need it).
    void release_workspace();

    // The global rotation counter; inline so that stepping it in a timed loop stays a plain
    // increment (oneDNN's run rotates its own argument maps with it).
    inline std::uint64_t g_next_set = 0;

    inline const buffer_set& next_set(const workspace& ws) { return ws.sets[g_next_set++ % ws.sets.size()]; }

    // --- measurement -------------------------------------------------------------------------
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

    // Sets the counters cpus and GB/s (c.bytes() per iteration), items processed (elements) and
    // the label, once the timed loop is over.
    void finish(benchmark::State& state, const bn_case& c, const char* label, const cpu_meter& meter);

    // --- xgrad (bn_bench.cpp) ---------------------------------------------------------------
    // One call of xgrad's kernel for c on s's inputs, writing dx (or y) to out; the per-channel
    // outputs go to s's vectors (the forward's mean and variance to s.mean() and s.var()).
    void xgrad_kernel(const bn_case& c, const buffer_set& s, void* out);

    // --- peers (bn_bench_peers.cpp, bn_bench_aten.cpp) -------------------------------------
    // The plain two-pass loop, float32 cases only.
    void run_reference(benchmark::State& state, const bn_case& c);

#ifdef XGRAD_BENCH_HAVE_DNNL
    // "major.minor.patch" of the oneDNN library linked.
    std::string onednn_version();

    // No value when oneDNN has an implementation for c; otherwise the message of the dnnl::error
    // that creating the primitive threw, for registration to report (it then registers no
    // <case>/onednn). Sets oneDNN's (OpenMP's) thread count to c.threads first, as run_onednn does.
    std::optional<std::string> onednn_unsupported(const bn_case& c);

    void run_onednn(benchmark::State& state, const bn_case& c);
#endif

#ifdef XGRAD_BENCH_HAVE_ATEN
    // ATen, from the LibTorch of the current PyTorch wheel (bn_bench_aten.cpp).
    // "major.minor.patch (cpu capability <ATen's dispatch level>)" of the LibTorch linked.
    std::string aten_version();

    // No value when ATen runs c's op, type and layout; otherwise the message of the c10::Error it
    // raised on a small tensor, for registration to report (it then registers no <case>/aten).
    std::optional<std::string> aten_unsupported(const bn_case& c);

    void run_aten(benchmark::State& state, const bn_case& c);
#endif
}
