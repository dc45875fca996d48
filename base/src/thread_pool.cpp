#include "xgrad/thread_pool.hpp"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <stdexcept>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "xgrad/errors.hpp"

namespace xgrad
{
    namespace
    {
        using chunk_fn = std::function<void(std::int64_t, std::int64_t)>;

        // The requested thread count; 0 until first read or set. Constant-initialised, so it
        // is usable at any point of static initialisation or destruction.
        std::atomic<int> g_num_threads{0};
        // Set once the pool object is destroyed; later calls run inline.
        std::atomic<bool> g_pool_destroyed{false};
        // True while this thread runs a chunk of a pooled call (always true on workers).
        thread_local bool t_in_chunk = false;

        int default_num_threads() noexcept
        {
            if (const int n = num_threads_from_environment(); n > 0)
                return n;
            return std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
        }

        /// One parallel_for call as the workers see it. The range is split into m_num_chunks
        /// chunks whose sizes differ by at most one: the first m_remainder chunks get one extra.
        struct job
        {
            const chunk_fn* m_fn = nullptr;
            std::int64_t m_begin = 0;
            std::uint64_t m_base = 0;
            std::uint64_t m_remainder = 0;
            std::uint64_t m_num_chunks = 0;
        };

        /// Persistent workers serving one parallel_for at a time. Protocol (all fields below
        /// guarded by m_mutex unless atomic):
        /// - the caller (holding m_call_mutex) publishes m_job, opens it and bumps
        ///   m_generation, then claims and runs chunks from m_next_chunk itself;
        /// - a worker that sees an open job with a new generation registers (m_active++),
        ///   copies the job, claims chunks until none are left, then deregisters;
        /// - when the caller runs out of chunks it closes the job (no new registrations) and
        ///   waits for m_active == 0; then every chunk is done and the job may be reused.
        class thread_pool
        {
        public:
            thread_pool() = default;
            thread_pool(const thread_pool&) = delete;
            thread_pool& operator=(const thread_pool&) = delete;

            ~thread_pool()
            {
                g_pool_destroyed.store(true);
                std::lock_guard<std::mutex> call_lock(m_call_mutex);
                resize_workers(0);
            }

            /// Runs the call on the pool with `num_chunks` >= 2 chunks, or returns false
            /// without running anything when another call is using the pool.
            bool try_run(std::int64_t begin, std::uint64_t length, std::uint64_t num_chunks, const chunk_fn& fn)
            {
                std::unique_lock<std::mutex> call_lock(m_call_mutex, std::try_to_lock);
                if (!call_lock.owns_lock())
                    return false;
                resize_workers(get_num_threads() - 1);

                job current;
                current.m_fn = &fn;
                current.m_begin = begin;
                current.m_base = length / num_chunks;
                current.m_remainder = length % num_chunks;
                current.m_num_chunks = num_chunks;
                {
                    std::lock_guard<std::mutex> lock(m_mutex);
                    m_job = current;
                    m_error = nullptr;
                    m_next_chunk.store(0, std::memory_order_relaxed);
                    m_job_open = true;
                    ++m_generation;
                }
                const std::uint64_t wake = std::min<std::uint64_t>(num_chunks - 1, m_workers.size());
                for (std::uint64_t i = 0; i < wake; ++i)
                    m_work_cv.notify_one();

                const bool was_in_chunk = t_in_chunk;
                t_in_chunk = true;
                run_chunks(current);
                t_in_chunk = was_in_chunk;

                std::exception_ptr error;
                {
                    std::unique_lock<std::mutex> lock(m_mutex);
                    m_job_open = false;
                    m_done_cv.wait(lock, [this] { return m_active == 0; });
                    error = std::move(m_error);
                    m_error = nullptr;
                }
                if (error)
                    std::rethrow_exception(error);
                return true;
            }

        private:
            /// Claims and runs chunks of `current` until none are left.
            void run_chunks(const job& current)
            {
                for (;;)
                {
                    const std::uint64_t i = m_next_chunk.fetch_add(1, std::memory_order_relaxed);
                    if (i >= current.m_num_chunks)
                        return;
                    const std::uint64_t extra_before = std::min(i, current.m_remainder);
                    const std::uint64_t offset = i * current.m_base + extra_before;
                    const std::uint64_t size = current.m_base + (i < current.m_remainder ? 1 : 0);
                    // Offsets are computed unsigned so that ranges wider than INT64_MAX work.
                    const auto chunk_begin =
                        static_cast<std::int64_t>(static_cast<std::uint64_t>(current.m_begin) + offset);
                    const auto chunk_end = static_cast<std::int64_t>(static_cast<std::uint64_t>(chunk_begin) + size);
                    try
                    {
                        (*current.m_fn)(chunk_begin, chunk_end);
                    }
                    catch (...)
                    {
                        std::lock_guard<std::mutex> lock(m_mutex);
                        if (!m_error)
                            m_error = std::current_exception();
                    }
                }
            }

            void worker_loop(std::size_t index)
            {
                t_in_chunk = true;
                std::unique_lock<std::mutex> lock(m_mutex);
                std::uint64_t seen = m_generation;
                for (;;)
                {
                    m_work_cv.wait(lock,
                                   [&] { return index >= m_worker_limit || (m_job_open && m_generation != seen); });
                    if (index >= m_worker_limit)
                        return;
                    seen = m_generation;
                    const job current = m_job;
                    ++m_active;
                    lock.unlock();
                    run_chunks(current);
                    lock.lock();
                    if (--m_active == 0)
                        m_done_cv.notify_one();
                }
            }

            /// Starts or stops workers so that exactly n run. Requires m_call_mutex, so no
            /// call is in flight.
            void resize_workers(int n)
            {
                const auto target = static_cast<std::size_t>(std::max(0, n));
                if (target == m_workers.size())
                    return;
                if (target < m_workers.size())
                {
                    {
                        std::lock_guard<std::mutex> lock(m_mutex);
                        m_worker_limit = target;
                    }
                    m_work_cv.notify_all();
                    while (m_workers.size() > target)
                    {
                        m_workers.back().join();
                        m_workers.pop_back();
                    }
                    return;
                }
                {
                    std::lock_guard<std::mutex> lock(m_mutex);
                    m_worker_limit = target;
                }
                m_workers.reserve(target);
                try
                {
                    while (m_workers.size() < target)
                    {
                        const std::size_t index = m_workers.size();
                        m_workers.emplace_back([this, index] { worker_loop(index); });
                    }
                }
                catch (const std::system_error&)
                {
                    // The system refused more threads: carry on with the ones we have (the
                    // caller takes any chunk no worker claims). Retried at the next call.
                    std::lock_guard<std::mutex> lock(m_mutex);
                    m_worker_limit = m_workers.size();
                }
            }

            std::mutex m_call_mutex;            // held by the one call using the pool
            std::vector<std::thread> m_workers; // guarded by m_call_mutex

            std::mutex m_mutex;
            std::condition_variable m_work_cv; // workers wait here for a job or a stop
            std::condition_variable m_done_cv; // the caller waits here for m_active == 0
            std::size_t m_worker_limit = 0;    // workers with index >= this exit
            std::uint64_t m_generation = 0;    // bumped per published job
            bool m_job_open = false;           // workers may still join the current job
            int m_active = 0;                  // workers registered with the current job
            job m_job;
            std::exception_ptr m_error; // first exception of the current job
            std::atomic<std::uint64_t> m_next_chunk{0};
        };

        thread_pool& pool()
        {
            static thread_pool instance;
            return instance;
        }
    }

    int num_threads_from_environment() noexcept
    {
        if (const char* env = std::getenv("XGRAD_NUM_THREADS"))
        {
            char* last = nullptr;
            const long n = std::strtol(env, &last, 10);
            if (last != env && *last == '\0' && n >= 1 && n <= 1 << 16)
                return static_cast<int>(n);
        }
        return 0;
    }

    void set_num_threads(int n)
    {
        if (n < 1)
            throw xgrad::invalid_argument("set_num_threads: the thread count must be >= 1, got " + std::to_string(n));
        g_num_threads.store(n, std::memory_order_relaxed);
    }

    int get_num_threads() noexcept
    {
        int n = g_num_threads.load(std::memory_order_relaxed);
        if (n == 0)
        {
            int expected = 0;
            n = default_num_threads();
            if (!g_num_threads.compare_exchange_strong(expected, n, std::memory_order_relaxed))
                n = expected; // set concurrently
        }
        return n;
    }

    void parallel_for(std::int64_t begin, std::int64_t end, std::int64_t grain,
                      const std::function<void(std::int64_t, std::int64_t)>& fn)
    {
        if (end <= begin)
            return;
        if (t_in_chunk)
        {
            fn(begin, end);
            return;
        }
        const std::uint64_t length = static_cast<std::uint64_t>(end) - static_cast<std::uint64_t>(begin);
        const auto min_chunk = static_cast<std::uint64_t>(std::max<std::int64_t>(grain, 1));
        const auto threads = static_cast<std::uint64_t>(get_num_threads());
        const std::uint64_t num_chunks = std::min(threads, length / min_chunk);
        if (num_chunks < 2 || g_pool_destroyed.load(std::memory_order_relaxed) ||
            !pool().try_run(begin, length, num_chunks, fn))
            fn(begin, end);
    }
}
