// distributed_data_parallel (see xgrad/distributed/data_parallel.hpp).
//
// The gradients travel in buckets: flat CPU buffers of several parameters' gradients, one
// all-reduce each, so that a model of many small tensors costs a few large messages rather
// than many latency-bound ones. Each bucket also carries one "used" flag per parameter (1 when
// this rank's backward reached the parameter): after the mean, a flag above zero says some
// rank produced a gradient, and a parameter that no rank reached keeps its undefined grad(),
// as it would in a single process. The flags ride in the same message, so they cost no
// collective of their own.
//
// Overlap: the gradient-accumulation hooks (xgrad/autograd.hpp) mark parameters ready during
// backward; a bucket whose parameters are all ready is copied and its all-reduce started then.
// MPI requires every rank to start its non-blocking collectives in the same order, and the
// order in which buckets become ready can differ between ranks (a rank whose graph skips a
// parameter), so buckets start strictly in index order: a ready bucket waits for the buckets
// before it. Open MPI progresses a request only inside MPI calls, so every hook call also
// tests the requests in flight.
#include "xgrad/distributed/data_parallel.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <map>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "xgrad/autograd.hpp"
#include "xgrad/errors.hpp"
#include "xgrad/factories.hpp"
#include "xgrad/ops/shape.hpp"
#include "xgrad/ops/storage.hpp"

namespace xgrad::distributed
{
    namespace
    {
        using clock_type = std::chrono::steady_clock;

        double seconds(clock_type::duration d) { return std::chrono::duration<double>(d).count(); }

        [[noreturn]] void fail(const std::string& what)
        {
            throw xgrad::invalid_argument("distributed_data_parallel: " + what);
        }

        std::string describe(const tensor& t)
        {
            return shape_to_string(t.shape()) + " " + std::string(name(t.dtype()));
        }

        /// The parameters that require grad, in registration order: what the buckets hold.
        nn::module::named_tensors_type trained_parameters(const nn::module& m)
        {
            nn::module::named_tensors_type out;
            for (auto& [n, p] : m.named_parameters())
                if (p.requires_grad())
                    out.emplace_back(n, p);
            return out;
        }

        /// One line per parameter and buffer, plus the options that shape the communication:
        /// what every rank must agree on.
        std::vector<std::string> model_listing(const nn::module& m, const data_parallel_options& o)
        {
            std::vector<std::string> lines;
            for (const auto& [n, p] : m.named_parameters())
                lines.push_back("parameter '" + n + "' " + describe(p) + (p.requires_grad() ? "" : " (frozen)"));
            for (const auto& [n, b] : m.named_buffers())
                lines.push_back("buffer '" + n + "' " + describe(b));
            lines.push_back("options bucket_cap_bytes=" + std::to_string(o.bucket_cap_bytes) +
                            " broadcast_buffers=" + (o.broadcast_buffers ? "true" : "false"));
            return lines;
        }

        std::uint64_t fnv1a(const std::string& text)
        {
            std::uint64_t h = 14695981039346656037ull;
            for (unsigned char c : text)
                h = (h ^ c) * 1099511628211ull;
            return h;
        }

        std::vector<std::string> split_lines(const std::string& text)
        {
            std::vector<std::string> out;
            std::size_t at = 0;
            while (at < text.size())
            {
                std::size_t end = text.find('\n', at);
                if (end == std::string::npos)
                    end = text.size();
                out.push_back(text.substr(at, end - at));
                at = end + 1;
            }
            return out;
        }

        /// Every rank's listing must be the same. One all_gather of (hash, length) settles the
        /// usual case; on a mismatch a second all_gather brings every listing to every rank, so
        /// that all ranks build the same message from the same data and throw together.
        void check_same_models(const std::vector<std::string>& listing, const process_group& group)
        {
            std::string text;
            for (const auto& line : listing)
                text += line + '\n';
            tensor digest = xgrad::empty({2}, dtype::int64, cpu_device);
            const std::uint64_t hash = fnv1a(text);
            std::memcpy(digest.data<std::int64_t>(), &hash, sizeof hash);
            digest.data<std::int64_t>()[1] = static_cast<std::int64_t>(text.size());
            const std::vector<tensor> digests = all_gather(digest, group);
            const int k = group.size();
            bool same = true;
            std::int64_t longest = 0;
            for (int r = 0; r < k; ++r)
            {
                const auto* d = digests[static_cast<std::size_t>(r)].data<std::int64_t>();
                same = same && d[0] == digest.data<std::int64_t>()[0] && d[1] == digest.data<std::int64_t>()[1];
                longest = std::max(longest, d[1]);
            }
            if (same)
                return;

            const std::int64_t words = (longest + 7) / 8;
            tensor packed = zeros({words}, dtype::int64);
            std::memcpy(packed.data_ptr(), text.data(), text.size());
            const std::vector<tensor> gathered = all_gather(packed, group);
            std::vector<std::vector<std::string>> lines(static_cast<std::size_t>(k));
            for (int r = 0; r < k; ++r)
            {
                const auto len = static_cast<std::size_t>(digests[static_cast<std::size_t>(r)].data<std::int64_t>()[1]);
                lines[static_cast<std::size_t>(r)] = split_lines(
                    std::string(static_cast<const char*>(gathered[static_cast<std::size_t>(r)].data_ptr()), len));
            }
            auto entry = [&](int r, std::size_t i) {
                const auto& l = lines[static_cast<std::size_t>(r)];
                return i < l.size() ? l[i] : std::string("nothing (its listing ends)");
            };
            std::size_t longest_listing = 0;
            for (const auto& l : lines)
                longest_listing = std::max(longest_listing, l.size());
            for (std::size_t i = 0; i < longest_listing; ++i)
            {
                std::string differing;
                for (int r = 1; r < k; ++r)
                    if (entry(r, i) != entry(0, i))
                        differing += "; rank " + std::to_string(r) + " has " + entry(r, i);
                if (!differing.empty())
                    fail("the ranks' models differ at entry " + std::to_string(i + 1) + " (parameters, then buffers, " +
                         "then options): rank 0 has " + entry(0, i) + differing +
                         ". Every rank must build the same model (parameter and buffer names, shapes, dtypes and "
                         "which parameters require grad) with the same bucket_cap_bytes and broadcast_buffers");
            }
            // Equal listings with different digests cannot happen; say so rather than go on.
            fail("the ranks' model digests differ although their listings agree");
        }

        /// Replaces each tensor of `list` by root 0's value: one broadcast per dtype of a flat CPU
        /// buffer (tensors are immutable values, so the values are broadcast into new storage and
        /// stored with `set`). Rank 0 keeps its own tensors.
        template <class Set>
        void broadcast_from_root(const nn::module::named_tensors_type& list, const process_group& group, Set&& set)
        {
            std::vector<dtype> dtypes;
            for (const auto& [n, t] : list)
                if (std::find(dtypes.begin(), dtypes.end(), t.dtype()) == dtypes.end())
                    dtypes.push_back(t.dtype());
            for (dtype dt : dtypes)
            {
                std::int64_t total = 0;
                for (const auto& [n, t] : list)
                    if (t.dtype() == dt)
                        total += t.numel();
                tensor flat = xgrad::empty({total}, dt, cpu_device);
                auto view_of = [&](const tensor& t, std::int64_t at) {
                    return as_strided(flat, t.shape(), contiguous_strides(t.shape()), at);
                };
                if (group.rank() == 0)
                {
                    std::int64_t at = 0;
                    for (const auto& [n, t] : list)
                        if (t.dtype() == dt)
                        {
                            copy_(view_of(t, at), t.detach().to(cpu_device));
                            at += t.numel();
                        }
                }
                broadcast(flat, 0, group);
                if (group.rank() == 0)
                    continue;
                no_grad guard;
                std::int64_t at = 0;
                for (std::size_t i = 0; i < list.size(); ++i)
                {
                    const tensor& t = list[i].second;
                    if (t.dtype() != dt)
                        continue;
                    tensor value = view_of(t, at);
                    at += t.numel();
                    set(list[i].first, t.device() == cpu_device ? value : value.to(t.device()));
                }
            }
        }
    }

    struct distributed_data_parallel::state
    {
        struct param_entry
        {
            std::string m_name;
            shape_type m_shape;
            dtype m_dtype = dtype::float32;
            device m_device;
            std::int64_t m_numel = 0;
            std::int64_t m_offset = 0; // in the bucket's buffer, in elements
            std::size_t m_bucket = 0;
            std::size_t m_slot = 0; // position in the bucket (its flag's index)
        };

        struct bucket
        {
            std::vector<std::size_t> m_params; // indices into m_params, in reverse registration order
            dtype m_dtype = dtype::float32;    // of the buffer: the gradients' compute dtype
            std::int64_t m_grad_bytes = 0;     // the gradients at their own dtype (what the cap bounds)
            std::int64_t m_numel = 0;          // gradient elements, followed by one flag per parameter

            // This step:
            std::size_t m_ready = 0;
            bool m_started = false;
            bool m_done = false;
            tensor m_buffer;
            pending_all_reduce m_request; // valid() once started
            clock_type::time_point m_completed;
        };

        process_group m_group;
        data_parallel_options m_options;
        std::vector<param_entry> m_params; // the parameters that require grad, in registration order
        std::vector<bucket> m_buckets;     // in the order they start

        // The tensors carrying this wrapper's hooks (the parameters at the last forward()).
        std::vector<tensor> m_hooked;
        std::vector<grad_hook_handle> m_handles;

        // This step: since forward() (in grad mode) or the first hook call, until synchronize().
        bool m_armed = false;
        std::vector<char> m_ready;
        std::size_t m_next_start = 0;
        std::int64_t m_overlapped = 0;
        std::int64_t m_bytes = 0;
        bool m_any_started = false;
        clock_type::time_point m_first_start;

        state(process_group g, data_parallel_options o) : m_group(std::move(g)), m_options(o) {}

        ~state()
        {
            for (auto& h : m_handles)
                h.remove();
        }

        void build_buckets(const nn::module::named_tensors_type& params)
        {
            for (const auto& [n, p] : params)
                m_params.push_back({n, p.shape(), p.dtype(), p.device(), p.numel(), 0, 0, 0});
            // One open bucket per (dtype, device): interleaved dtypes do not fragment buckets.
            std::map<std::pair<int, std::pair<int, int>>, std::size_t> open;
            for (std::size_t j = m_params.size(); j-- > 0;)
            {
                param_entry& e = m_params[j];
                const auto key = std::make_pair(static_cast<int>(e.m_dtype),
                                                std::make_pair(static_cast<int>(e.m_device.type), e.m_device.index));
                const auto bytes = e.m_numel * static_cast<std::int64_t>(itemsize(e.m_dtype));
                auto it = open.find(key);
                if (it == open.end() || m_buckets[it->second].m_grad_bytes + bytes > m_options.bucket_cap_bytes)
                {
                    bucket b;
                    b.m_dtype = compute_dtype(e.m_dtype);
                    m_buckets.push_back(std::move(b));
                    it = open.insert_or_assign(key, m_buckets.size() - 1).first;
                }
                bucket& b = m_buckets[it->second];
                e.m_bucket = it->second;
                e.m_slot = b.m_params.size();
                e.m_offset = b.m_numel;
                b.m_params.push_back(j);
                b.m_numel += e.m_numel;
                b.m_grad_bytes += bytes;
            }
            for (auto& b : m_buckets)
                b.m_numel += static_cast<std::int64_t>(b.m_params.size()); // the flags
            m_hooked.resize(m_params.size());
            m_handles.resize(m_params.size());
            m_ready.assign(m_params.size(), 0);
        }

        tensor view(const bucket& b, std::int64_t offset, const shape_type& shape) const
        {
            return as_strided(b.m_buffer, shape, contiguous_strides(shape), offset);
        }

        // A bucket's buffer is float32 or float64 (the compute dtype of a float parameter).
        static void set_flag(const bucket& b, std::int64_t at, double v)
        {
            if (b.m_dtype == dtype::float64)
                b.m_buffer.data<double>()[at] = v;
            else
                b.m_buffer.data<float>()[at] = static_cast<float>(v);
        }
        static double flag(const bucket& b, std::int64_t at)
        {
            return b.m_dtype == dtype::float64 ? b.m_buffer.data<double>()[at] : b.m_buffer.data<float>()[at];
        }

        void arm()
        {
            if (m_armed)
                return;
            m_armed = true;
            std::fill(m_ready.begin(), m_ready.end(), 0);
            for (auto& b : m_buckets)
            {
                b.m_ready = 0;
                b.m_started = b.m_done = false;
                b.m_buffer = tensor();
                b.m_request = pending_all_reduce(); // waits if a step was dropped with requests in flight
            }
            m_next_start = 0;
            m_overlapped = 0;
            m_bytes = 0;
            m_any_started = false;
        }

        /// Copies bucket i's gradients (zeros for parameters without one this step) and flags
        /// into a fresh buffer and starts its all-reduce.
        void start(std::size_t i, bool from_hook)
        {
            bucket& b = m_buckets[i];
            b.m_buffer = xgrad::empty({b.m_numel}, b.m_dtype, cpu_device);
            const std::int64_t flags_at = b.m_numel - static_cast<std::int64_t>(b.m_params.size());
            const std::size_t esize = itemsize(b.m_dtype);
            auto* base = static_cast<char*>(b.m_buffer.data_ptr());
            for (std::size_t j : b.m_params)
            {
                const param_entry& e = m_params[j];
                const tensor g = m_ready[j] ? m_hooked[j].grad() : tensor();
                const bool used = g.defined();
                if (used)
                    copy_(view(b, e.m_offset, e.m_shape), g.detach().to(cpu_device));
                else
                    std::memset(base + static_cast<std::size_t>(e.m_offset) * esize, 0,
                                static_cast<std::size_t>(e.m_numel) * esize);
                set_flag(b, flags_at + static_cast<std::int64_t>(e.m_slot), used ? 1.0 : 0.0);
            }
            if (!m_any_started)
            {
                m_any_started = true;
                m_first_start = clock_type::now();
            }
            b.m_request = all_reduce_async(b.m_buffer, reduce_op::mean, m_group);
            b.m_started = true;
            m_bytes += b.m_numel * static_cast<std::int64_t>(esize);
            if (from_hook)
                ++m_overlapped;
        }

        /// Drives MPI's progress and notes the completion times.
        void poll()
        {
            for (std::size_t i = 0; i < m_next_start; ++i)
            {
                bucket& b = m_buckets[i];
                if (!b.m_done && b.m_request.test())
                {
                    b.m_done = true;
                    b.m_completed = clock_type::now();
                }
            }
        }

        /// The hook of parameter j: its gradient of this backward is in grad().
        void on_grad(std::size_t j)
        {
            arm();
            const param_entry& e = m_params[j];
            bucket& b = m_buckets[e.m_bucket];
            if (m_ready[j])
            {
                if (b.m_started)
                    throw std::logic_error(
                        "distributed_data_parallel: parameter '" + e.m_name +
                        "' received a second gradient after its bucket's all-reduce had started; with overlap, "
                        "each synchronize() follows one backward (to accumulate several backward passes before "
                        "one synchronize(), set data_parallel_options::overlap to false)");
            }
            else
            {
                m_ready[j] = 1;
                ++b.m_ready;
                if (m_options.overlap)
                    while (m_next_start < m_buckets.size() &&
                           m_buckets[m_next_start].m_ready == m_buckets[m_next_start].m_params.size())
                        start(m_next_start++, true);
            }
            poll();
        }
    };

    distributed_data_parallel::distributed_data_parallel(std::shared_ptr<nn::module> model, process_group group,
                                                         options_type options)
        : m_model(std::move(model)), m_group(std::move(group)), m_options(options)
    {
        if (!m_model)
            fail("the model is null");
        if (m_options.bucket_cap_bytes < 1)
            fail("bucket_cap_bytes is " + std::to_string(m_options.bucket_cap_bytes) + ", expected at least 1");
        if (m_group.size() > 1)
        {
            check_same_models(model_listing(*m_model, m_options), m_group);
            nn::module& m = *m_model;
            broadcast_from_root(m.named_parameters(), m_group,
                                [&](const std::string& n, const tensor& v) { m.update_parameter(n, v); });
            broadcast_buffers();
        }
        m_state = std::make_shared<state>(m_group, m_options);
        m_state->build_buckets(trained_parameters(*m_model));
    }

    distributed_data_parallel::~distributed_data_parallel() = default;

    tensor distributed_data_parallel::forward(const tensor& x)
    {
        state& s = *m_state;
        nn::module& m = *m_model;
        if (m_options.broadcast_buffers)
            broadcast_buffers();

        const auto params = trained_parameters(m);
        bool same_set = params.size() == s.m_params.size();
        for (std::size_t j = 0; same_set && j < params.size(); ++j)
            same_set = params[j].first == s.m_params[j].m_name;
        if (!same_set)
            throw std::logic_error("distributed_data_parallel::forward: the model's parameters that require grad are "
                                   "not those it had at construction (" +
                                   std::to_string(params.size()) + " now, " + std::to_string(s.m_params.size()) +
                                   " then); the buckets are fixed when the wrapper is built, so freeze or unfreeze "
                                   "parameters before building it");

        bool replaced = false;
        for (std::size_t j = 0; j < params.size(); ++j)
            replaced = replaced || !params[j].second.is_same(s.m_hooked[j]);
        if (replaced && s.m_armed)
        {
            for (std::size_t j = 0; j < params.size(); ++j)
                if (s.m_ready[j] && !params[j].second.is_same(s.m_hooked[j]))
                    throw std::logic_error("distributed_data_parallel::forward: parameter '" + params[j].first +
                                           "' was replaced after a backward pass reached it and before "
                                           "synchronize(); call synchronize() before the optimizer step");
            s.m_armed = false; // nothing of this step reached the old tensors: start afresh
        }
        if (replaced)
            for (std::size_t j = 0; j < params.size(); ++j)
                if (!params[j].second.is_same(s.m_hooked[j]))
                {
                    s.m_handles[j].remove();
                    state* self = m_state.get(); // the state removes its hooks before it dies
                    s.m_handles[j] = register_grad_accumulated_hook(params[j].second,
                                                                    [self, j](const tensor&) { self->on_grad(j); });
                    s.m_hooked[j] = params[j].second;
                }
        if (is_grad_enabled())
            s.arm();
        return m.forward(x);
    }

    void distributed_data_parallel::broadcast_buffers()
    {
        if (m_group.size() == 1)
            return;
        nn::module& m = *m_model;
        const auto buffers = m.named_buffers();
        if (!buffers.empty())
            broadcast_from_root(buffers, m_group, [&](const std::string& n, const tensor& v) { m.set_buffer(n, v); });
    }

    void distributed_data_parallel::synchronize()
    {
        state& s = *m_state;
        if (!s.m_armed)
            return;
        const auto params = trained_parameters(*m_model);
        for (std::size_t j = 0; j < s.m_params.size(); ++j)
            if (j >= params.size() || params[j].first != s.m_params[j].m_name ||
                !params[j].second.is_same(s.m_hooked[j]))
            {
                s.m_armed = false; // the buckets in flight are waited for as they are dropped
                throw std::logic_error("distributed_data_parallel::synchronize: parameter '" + s.m_params[j].m_name +
                                       "' is not the tensor forward() hooked (the model's parameters changed "
                                       "between forward() and synchronize(); call synchronize() before the "
                                       "optimizer step)");
            }

        while (s.m_next_start < s.m_buckets.size())
            s.start(s.m_next_start++, false);
        double waited = 0.0;
        clock_type::time_point last = s.m_first_start;
        for (auto& b : s.m_buckets)
        {
            if (!b.m_done)
            {
                const auto t0 = clock_type::now();
                b.m_request.wait();
                b.m_completed = clock_type::now();
                b.m_done = true;
                waited += seconds(b.m_completed - t0);
            }
            last = std::max(last, b.m_completed);
        }

        for (const auto& b : s.m_buckets)
        {
            const std::int64_t flags_at = b.m_numel - static_cast<std::int64_t>(b.m_params.size());
            for (std::size_t slot = 0; slot < b.m_params.size(); ++slot)
            {
                if (state::flag(b, flags_at + static_cast<std::int64_t>(slot)) <= 0.0)
                    continue; // no rank's backward reached it: its grad() stays as it is
                const auto& e = s.m_params[b.m_params[slot]];
                tensor g = s.view(b, e.m_offset, e.m_shape);
                if (g.dtype() != e.m_dtype)
                    g = cast(g, e.m_dtype);
                if (e.m_device != cpu_device)
                    g = g.to(e.m_device);
                s.m_hooked[b.m_params[slot]].set_grad(g);
            }
        }

        m_stats.buckets = static_cast<std::int64_t>(s.m_buckets.size());
        m_stats.bytes = s.m_bytes;
        m_stats.buckets_overlapped = s.m_overlapped;
        m_stats.communication_s = s.m_any_started ? seconds(last - s.m_first_start) : 0.0;
        m_stats.wait_s = waited;
        s.m_armed = false;
    }
}
