#pragma once
// Internal: how ops, kernels and backward nodes are timed for the profiler (xgrad/profiler.hpp).
//
// - An op puts XGRAD_PROFILE_OP("name") first in its body: a `timed` frame on this thread's
//   stack from there to the op's return (or throw). record() adds the op's tensor bytes to the
//   innermost open op (note_bytes).
// - The dispatch point hands out a table of wrappers around the real kernels while profiling
//   (profiled_table), each wrapper a `timed` frame of kind kernel around the real call.
// - The engine times each node's backward rule in a `timed` frame named "<node>_backward",
//   inside a backward_phase, which makes every frame opened meanwhile on the thread a backward
//   one.
// Without a scope, each of these costs one relaxed atomic load (enabled()).
#include <cstdint>
#include <string>

#include "backends/common/kernel_list.hpp"
#include "xgrad/profiler.hpp"

namespace xgrad::profiler::detail
{
    /// Times one call on this thread while a scope records (nothing otherwise).
    class timed
    {
    public:
        timed(const char* name, kind k) noexcept
        {
            if (enabled())
                begin(name, nullptr, k);
        }
        /// A name made at run time (a backward node's), copied only while recording.
        timed(const std::string& name, kind k) noexcept
        {
            if (enabled())
                begin(nullptr, &name, k);
        }
        ~timed()
        {
            if (m_active)
                end();
        }
        timed(const timed&) = delete;
        timed& operator=(const timed&) = delete;

    private:
        void begin(const char* name, const std::string* owned, kind k) noexcept;
        void end() noexcept;
        bool m_active = false;
    };

    /// Adds bytes to the innermost op open on this thread (when recording).
    void note_bytes(std::int64_t bytes) noexcept;

    /// Frames opened on this thread while it lives are backward ones.
    class backward_phase
    {
    public:
        backward_phase() noexcept;
        ~backward_phase();
        backward_phase(const backward_phase&) = delete;
        backward_phase& operator=(const backward_phase&) = delete;
    };

    /// A table whose every entry times the call and calls `real`'s entry (the same kernel).
    /// At most a few distinct real tables exist (the CPU's two, the CUDA backend's); a fifth
    /// throws std::logic_error.
    const kernels::kernel_table& profiled_table(const kernels::kernel_table& real);
}

#define XGRAD_PROFILE_CONCAT2(a, b) a##b
#define XGRAD_PROFILE_CONCAT(a, b) XGRAD_PROFILE_CONCAT2(a, b)
/// Times the rest of the enclosing op body as op `name` (a string literal).
#define XGRAD_PROFILE_OP(name)                                                                                         \
    const ::xgrad::profiler::detail::timed XGRAD_PROFILE_CONCAT(xgrad_profiled_op_,                                    \
                                                                __LINE__)(name, ::xgrad::profiler::kind::op)
