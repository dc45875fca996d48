#pragma once
// The CPU thread pool every CPU kernel parallelises over.
//
// One process-wide pool of persistent worker threads. Workers are created on the first
// parallel_for that needs them, re-sized when the thread count changes, and joined at program
// exit. After the pool has been destroyed (static destruction), parallel_for runs inline.
#include <cstdint>
#include <functional>

namespace xgrad
{
    /// Sets the number of threads CPU kernels use, including the calling thread. Throws
    /// std::invalid_argument naming the value unless n >= 1. Takes effect at the next
    /// parallel_for (workers are started or stopped there, never inside a running call), so it
    /// may be called at any time, also from inside a chunk.
    /// Default: the XGRAD_NUM_THREADS environment variable when it is set to a positive
    /// integer (at most 65536; read once, when the count is first needed), otherwise
    /// std::thread::hardware_concurrency() (at least 1).
    void set_num_threads(int n);

    /// The thread count parallel_for uses: the last value given to set_num_threads, else the
    /// default.
    int get_num_threads() noexcept;

    /// The count XGRAD_NUM_THREADS sets when it is a positive integer of at most 65536 (as the
    /// default above reads it), else 0: unset, empty or not a count.
    int num_threads_from_environment() noexcept;

    /// Runs fn(chunk_begin, chunk_end) over [begin, end) split into at most get_num_threads()
    /// contiguous, disjoint chunks that cover the range, each of at least `grain` elements
    /// (grain < 1 counts as 1). The calling thread takes part (it runs chunks itself alongside
    /// the workers) and the call blocks until every chunk is done. If chunks throw, every chunk
    /// still runs and the first exception caught is rethrown at the end.
    /// Runs fn(begin, end) inline on the caller, without touching the pool, when:
    /// - end - begin < 2 * grain, or the thread count is 1;
    /// - the call is made from inside a running chunk (nested parallelism);
    /// - another thread is using the pool at the time (concurrent callers do not wait for
    ///   each other; the pool serves one call at a time);
    /// - the pool has already been destroyed at program exit.
    /// end <= begin does nothing. Which elements land in which chunk depends on the thread
    /// count, so callers that need thread-count-independent results must not let them depend
    /// on the chunking.
    void parallel_for(std::int64_t begin, std::int64_t end, std::int64_t grain,
                      const std::function<void(std::int64_t, std::int64_t)>& fn);
}
