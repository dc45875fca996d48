// bn_bench's shared machinery (declared in bn_bench.hpp): the cold-cache workspaces, allocated
// and filled here with deterministic pseudo-random data, and finish(), the counters every kernel
// benchmark reports.
#include <unistd.h>

#include <algorithm>
#include <new>

#include "bench/bn_bench.hpp"
#include "xgrad/half.hpp"
#include "xgrad/thread_pool.hpp"

namespace xgrad::bn_bench
{
    namespace
    {
        buffer allocate(std::size_t bytes)
        {
            constexpr std::size_t align = 4096;
            void* p = std::aligned_alloc(align, (bytes + align - 1) / align * align);
            if (p == nullptr)
                throw std::bad_alloc();
            return buffer(p);
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
                        else if (dt == dtype::float16)
                            static_cast<std::uint16_t*>(dst)[i] = to_float16(v).bits;
                        else
                            static_cast<std::uint16_t*>(dst)[i] = to_bfloat16(v).bits;
                    }
                }
            });
        }

        std::unique_ptr<workspace> g_workspace;
    }

    std::size_t llc_bytes()
    {
        const long v = sysconf(_SC_LEVEL3_CACHE_SIZE);
        return v > 0 ? static_cast<std::size_t>(v) : std::size_t{32} << 20;
    }

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

    void release_workspace() { g_workspace.reset(); }

    void finish(benchmark::State& state, const bn_case& c, const char* label, const cpu_meter& meter)
    {
        state.counters["cpus"] = meter.busy();
        const double iters = static_cast<double>(state.iterations());
        state.counters["GB/s"] = benchmark::Counter(iters * static_cast<double>(c.bytes()) / 1e9,
                                                    benchmark::Counter::kIsRate);
        state.SetItemsProcessed(state.iterations() * c.elems());
        state.SetLabel(label);
    }
}
