// The profiled kernel tables (record.hpp): for each real table the dispatch point hands out,
// a table of the same type whose every entry is a wrapper that opens a kernel frame named
// after the entry and calls the real entry with the same arguments. The wrappers are generated
// from the kernel list, one template instantiation per (slot, entry): a slot is one real table,
// and its wrappers read that table's pointer, so no entry needs a run-time lookup.
#include <array>
#include <atomic>
#include <mutex>
#include <stdexcept>

#include "core/src/profiler/record.hpp"

namespace xgrad::profiler::detail
{
    namespace
    {
        constexpr int slot_count = 4;
        std::array<std::atomic<const kernels::kernel_table*>, slot_count> g_real{};

        template <int Slot, kernels::kernel_id Id, auto Member, class F>
        struct wrapper;

        template <int Slot, kernels::kernel_id Id, auto Member, class R, class... A>
        struct wrapper<Slot, Id, Member, R(A...)>
        {
            static R call(A... a)
            {
                const timed t(kernels::kernel_names[static_cast<int>(Id)], kind::kernel);
                return (g_real[Slot].load(std::memory_order_acquire)->*Member)(a...);
            }
        };

        template <int Slot, kernels::kernel_id Id, auto Member, class R, class... A>
        struct wrapper<Slot, Id, Member, R(A...) noexcept>
        {
            static R call(A... a) noexcept
            {
                const timed t(kernels::kernel_names[static_cast<int>(Id)], kind::kernel);
                return (g_real[Slot].load(std::memory_order_acquire)->*Member)(a...);
            }
        };

        template <int Slot>
        constexpr kernels::kernel_table make_table() noexcept
        {
            kernels::kernel_table t{};
#define XGRAD_PROFILED_ENTRY(name, twin)                                                                               \
    t.name = &wrapper<Slot, kernels::kernel_id::name, &kernels::kernel_table::name, kernels::name##_fn>::call;
            XGRAD_KERNEL_LIST(XGRAD_PROFILED_ENTRY)
#undef XGRAD_PROFILED_ENTRY
            return t;
        }

        const std::array<kernels::kernel_table, slot_count> g_profiled{make_table<0>(), make_table<1>(),
                                                                       make_table<2>(), make_table<3>()};
        std::mutex g_slots_mutex;
    }

    const kernels::kernel_table& profiled_table(const kernels::kernel_table& real)
    {
        // Read without the lock once filled: a slot is written once, before its table is
        // handed out, and never changes.
        for (int s = 0; s < slot_count; ++s)
            if (g_real[s].load(std::memory_order_acquire) == &real)
                return g_profiled[s];
        std::lock_guard<std::mutex> lock(g_slots_mutex);
        for (int s = 0; s < slot_count; ++s)
        {
            const kernels::kernel_table* held = g_real[s].load(std::memory_order_acquire);
            if (held == &real)
                return g_profiled[s];
            if (!held)
            {
                g_real[s].store(&real, std::memory_order_release);
                return g_profiled[s];
            }
        }
        throw std::logic_error("profiler: more kernel tables than the profiler has slots for");
    }
}
