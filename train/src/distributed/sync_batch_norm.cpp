// The synchronised batch norm (see sync_batch_norm.hpp): batch statistics over every rank of a
// process group, on top of the fused batch-norm op family (xgrad/ops/batch_norm.hpp).
//
//   forward:  the backend's bn_moments kernel on the local x (mean and biased variance) -> one
//             all_gather of [mean_r, M2_r, tag_r] -> Chan's merge in float64, in rank order ->
//             fused_batch_norm in inference mode with the global statistics (x read three
//             times, y written once).
//   backward: batch_norm_grad_reduce -> one all_reduce of the [2C] sums ->
//             batch_norm_grad_apply with the global count; scale and offset get the local sums.
//   backward with grad mode on (create_graph): the gradient of sync_batch_norm_composite, whose
//             all-reduces are differentiable, so every order is right.
//
// Every rank runs the same collectives in the same order whatever its data (an empty x, or
// arguments it rejects), so a mistake on one rank becomes an error on every rank, not a hang.
#include "xgrad/distributed/sync_batch_norm.hpp"

#include <cmath>
#include <cstdint>
#include <exception>
#include <optional>
#include <string>
#include <vector>

#include "xgrad/autograd.hpp"
#include "xgrad/errors.hpp"
#include "xgrad/factories.hpp"
#include "xgrad/ops/elementwise.hpp"
#include "xgrad/ops/reduce.hpp"
#include "xgrad/ops/shape.hpp"
#include "xgrad/ops/storage.hpp"

namespace xgrad::distributed
{
    namespace
    {
        constexpr const char* op_name = "distributed::sync_batch_norm";
        constexpr const char* composite_name = "distributed::sync_batch_norm_composite";

        [[noreturn]] void fail(const char* op, const std::string& what)
        {
            throw xgrad::invalid_argument(std::string(op) + ": " + what);
        }

        /// batch_norm_stats_dtype, also for an undefined x (which the checks then refuse).
        dtype stats_dtype_of(const tensor& x)
        {
            return x.defined() ? batch_norm_stats_dtype(x.dtype()) : dtype::float32;
        }

        // --- the per-rank summary -----------------------------------------------------------
        // Each rank contributes [mean (C), M2 (C), tag] in float64, tag = 8·n_r + code, where
        // code names x's dtype, or is 0 when the rank rejected its own arguments. Folding the
        // dtype and the rank's verdict into the count keeps the forward at one all_gather while
        // still letting every rank see that the ranks disagree or that one of them failed. The
        // tag is exact in float64 while 8·n_r < 2^53.
        constexpr std::int64_t max_local_count = std::int64_t{1} << 49;

        int dtype_code(dtype dt)
        {
            switch (dt)
            {
            case dtype::float16: return 1;
            case dtype::bfloat16: return 2;
            case dtype::float32: return 3;
            default: return 4; // float64 (anything else was rejected by the checks)
            }
        }

        const char* dtype_of_code(int code)
        {
            static const char* const names[] = {"?", "float16", "bfloat16", "float32", "float64"};
            return code >= 0 && code <= 4 ? names[code] : "?";
        }

        struct global_moments
        {
            std::int64_t count = 0;
            std::vector<double> mean, m2;
        };

        /// Chan, Golub and LeVeque's pairwise update, applied to the ranks in rank order (the
        /// same order, so the same bits, on every rank): for a merged (n_a, m_a, M2_a) and the
        /// next rank's (n_b, m_b, M2_b), with n = n_a + n_b and δ = m_b - m_a,
        ///   m = m_a + δ n_b / n,   M2 = M2_a + M2_b + δ² n_a n_b / n.
        /// Unlike Σx² - n m², no large terms cancel, so the variance keeps its precision when
        /// the mean is large next to the spread.
        global_moments merge(const std::vector<tensor>& summaries, const std::vector<std::int64_t>& counts,
                             std::int64_t C)
        {
            global_moments g;
            g.mean.assign(static_cast<std::size_t>(C), 0.0);
            g.m2.assign(static_cast<std::size_t>(C), 0.0);
            for (std::size_t r = 0; r < summaries.size(); ++r)
            {
                const std::int64_t nb = counts[r];
                if (nb == 0)
                    continue;
                const double* s = summaries[r].data<double>();
                if (g.count == 0)
                {
                    for (std::int64_t c = 0; c < C; ++c)
                    {
                        g.mean[c] = s[c];
                        g.m2[c] = s[C + c];
                    }
                    g.count = nb;
                    continue;
                }
                const std::int64_t n = g.count + nb;
                const double wb = static_cast<double>(nb) / static_cast<double>(n);
                const double cross = static_cast<double>(g.count) * wb; // n_a n_b / n
                for (std::int64_t c = 0; c < C; ++c)
                {
                    const double delta = s[c] - g.mean[c];
                    g.mean[c] += delta * wb;
                    g.m2[c] += s[C + c] + delta * delta * cross;
                }
                g.count = n;
            }
            return g;
        }

        /// The error every rank throws when the global batch has at most one value per channel.
        [[noreturn]] void fail_count(const char* op, std::int64_t count, const tensor& x, int ranks)
        {
            fail(op, "expected more than 1 value per channel over the " + std::to_string(ranks) +
                         " ranks of the group to compute batch statistics, got " + std::to_string(count) +
                         " (this rank's x has shape " + shape_to_string(x.shape()) + ")");
        }

        /// The composite formula on checked arguments with the global count known (the forward
        /// computed it). Computed in float32 for 16-bit x, like batch_norm_grad_composite.
        tensor composite_y(const tensor& x, const tensor& scale, const tensor& offset, const batch_norm_attrs& attrs,
                           const process_group& group, const batch_norm_layout& L, std::int64_t count)
        {
            const shape_type ch = L.channel_shape();
            const axes_type axes = L.reduce_axes();
            const double n = static_cast<double>(count);
            const tensor xv = cast(x, stats_dtype_of(x));
            // Two passes, as the fused op: the global mean first, then the squared deviations
            // from it (never Σx² - n m²). functional::all_reduce is differentiable, its gradient
            // the all-reduce of the cotangents: the statistics are functions of every rank's x.
            const tensor m = functional::all_reduce(sum(xv, axes, true), reduce_op::sum, group) / n;
            const tensor xc = xv - m;
            const tensor v = functional::all_reduce(sum(square(xc), axes, true), reduce_op::sum, group) / n;
            const tensor y = xc * rsqrt(v + static_cast<double>(attrs.epsilon)) * reshape(scale, ch) +
                             reshape(offset, ch);
            return cast(y, x.dtype());
        }

        /// The backward with grad mode on: the gradient of the composite formula, built on
        /// aliases of the inputs. Inputs whose gradient is not wanted are fresh leaves rather
        /// than constants, so the graph, and with it the sequence of all-reduces the engine runs,
        /// is the same on every rank whatever each rank needs.
        std::vector<tensor> composite_backward(function_node& self, const tensor& dy, const tensor& x,
                                               const tensor& scale, const tensor& offset, const batch_norm_attrs& attrs,
                                               const process_group& group, const batch_norm_layout& L,
                                               std::int64_t count)
        {
            const tensor ins[3] = {x, scale, offset};
            std::vector<tensor> use(3);
            for (std::size_t i = 0; i < 3; ++i)
            {
                if (self.needs_input_grad(i))
                    use[i] = identity(ins[i]);
                else
                {
                    use[i] = ins[i].detach();
                    use[i].requires_grad_(true);
                }
            }
            const tensor y = composite_y(use[0], use[1], use[2], attrs, group, L, count);
            std::vector<tensor> g = grad({y}, use, {dy}, true, true, true);
            for (std::size_t i = 0; i < 3; ++i)
                if (!self.needs_input_grad(i))
                    g[i] = tensor();
            return g;
        }

        /// The first-order backward (module comment).
        std::vector<tensor> fused_backward(const tensor& dy, const tensor& x, const tensor& scale, const tensor& mean,
                                           const tensor& variance, const batch_norm_attrs& attrs,
                                           const process_group& group, std::int64_t C, std::int64_t count,
                                           std::int64_t local_count)
        {
            const batch_norm_grad_sums local = batch_norm_grad_reduce(dy, x, mean, attrs);
            // One message of 2C values (concat copies, so the local sums stay as they are). The
            // forward's all_gather established that the ranks agree on C and on the dtype, so
            // the reduction skips the cross-rank check that all_reduce would make (a second
            // round trip); it runs on host memory, where a device tensor's 2C values are copied.
            tensor both = concat({local.sum_dy, local.sum_dy_xc}, 0);
            const bool on_host = both.device().type == device_type::cpu;
            const tensor host = on_host ? both : both.to(cpu_device).contiguous();
            all_reduce_async(host, reduce_op::sum, group).wait();
            if (!on_host)
                both = host.to(both.device());
            const batch_norm_grad_sums global{both.slice(0, 0, C), both.slice(0, C, 2 * C)};
            const batch_norm_grad_result r = batch_norm_grad_apply(dy, x, scale, mean, variance, global, count, attrs);
            if (count == local_count) // the whole batch is here: the global sums are the local ones
                return {r.dx, r.dscale, r.doffset};
            // scale and offset: the local sums (see sync_batch_norm.hpp). Σ over the ranks of
            // r·Σ_r dy (x - μ) is the whole batch's r·Σ dy (x - μ), so summing (or averaging, as
            // distributed_data_parallel does) these gives the whole batch's gradient.
            const tensor scale_grad = rsqrt(variance + static_cast<double>(attrs.epsilon)) * local.sum_dy_xc;
            return {r.dx, scale_grad, local.sum_dy};
        }
    }

    sync_batch_norm_result sync_batch_norm(const tensor& x, const tensor& scale, const tensor& offset,
                                           const batch_norm_attrs& attrs, const process_group& group)
    {
        const dtype sdt = stats_dtype_of(x);
        const device dev = x.defined() ? x.device() : cpu_device;
        batch_norm_attrs local_attrs = attrs;
        local_attrs.is_training = true;
        local_attrs.exponential_avg_factor = 1.0f; // running statistics are the caller's

        // The local part: checks and this rank's moments. An error is kept until every rank has
        // taken part in the all_gather.
        std::exception_ptr local_error;
        batch_norm_layout L;
        tensor local_mean, local_var;
        std::int64_t C = 0;
        try
        {
            if (!attrs.is_training)
                fail(op_name, "attrs.is_training must be true (inference normalises with running statistics, "
                              "without communication: use xgrad::fused_batch_norm)");
            L = check_batch_norm_forward(x, scale, offset, local_attrs, op_name);
            C = L.C;
            if (L.count() >= max_local_count)
                fail(op_name, "x of shape " + shape_to_string(x.shape()) + " has " + std::to_string(L.count()) +
                                  " values per channel, more than the 2^49 this op counts exactly");
            // The moments kernel (two passes: the mean, then the squared deviations from it),
            // the statistics fused_batch_norm's training forward computes, without writing a y
            // that the global statistics would replace.
            if (L.count() > 0)
            {
                const batch_norm_moments_result m = batch_norm_moments(x, local_attrs);
                local_mean = m.mean;
                local_var = m.variance;
            }
            else // an empty x: no moments (the kernel's NaN would poison the merge); n_r = 0
            {
                local_mean = zeros({C}, sdt, dev);
                local_var = zeros({C}, sdt, dev);
            }
        }
        catch (const std::invalid_argument&)
        {
            local_error = std::current_exception();
            // The summary's length must still be what the other ranks expect, if it can be.
            C = scale.defined() && scale.dim() == 1 ? scale.numel() : 0;
        }
        const std::int64_t n_local = local_error ? 0 : L.count();

        std::vector<double> mine(static_cast<std::size_t>(2 * C + 1), 0.0);
        if (!local_error)
        {
            const std::vector<double> m = to_vector(local_mean), v = to_vector(local_var);
            for (std::int64_t c = 0; c < C; ++c)
            {
                mine[c] = m[c];
                mine[C + c] = v[c] * static_cast<double>(n_local); // M2 = n v
            }
            mine[2 * C] = static_cast<double>(8 * n_local + dtype_code(x.dtype()));
        }
        std::vector<tensor> all;
        try
        {
            all = all_gather(from_host(mine.data(), {2 * C + 1}, dtype::float64), group);
        }
        catch (const std::invalid_argument&)
        {
            if (local_error) // this rank's own reason says more than the ranks' disagreement
                std::rethrow_exception(local_error);
            throw;
        }
        if (local_error)
            std::rethrow_exception(local_error);

        // Every rank decodes the same tags, so every rank throws the same error, or none does.
        const int K = static_cast<int>(all.size());
        std::vector<std::int64_t> counts(all.size());
        std::vector<int> codes(all.size());
        std::string failed, dtypes;
        bool disagree = false;
        for (std::size_t r = 0; r < all.size(); ++r)
        {
            all[r] = all[r].contiguous();
            const double tag = all[r].data<double>()[2 * C];
            codes[r] = static_cast<int>(std::fmod(tag, 8.0));
            counts[r] = static_cast<std::int64_t>((tag - codes[r]) / 8.0);
            if (codes[r] == 0)
                failed += (failed.empty() ? "" : ", ") + std::to_string(r);
            disagree = disagree || codes[r] != codes[0];
            dtypes += (r ? ", " : "") + std::string(dtype_of_code(codes[r]));
        }
        if (!failed.empty())
            fail(op_name, "rank(s) " + failed + " of " + std::to_string(K) +
                              " rejected their arguments (their own error says why); this rank's x has shape " +
                              shape_to_string(x.shape()));
        if (disagree)
            fail(op_name,
                 "the ranks disagree on x's dtype (" + dtypes + " in rank order): every rank must pass the same");
        const global_moments g = merge(all, counts, C);
        if (g.count <= 1)
            fail_count(op_name, g.count, x, K);

        sync_batch_norm_result out;
        out.count = g.count;
        if (g.count == n_local)
        {
            // Every other rank is empty (or the group is this rank alone): the local statistics
            // are the global ones, and y is bit for bit fused_batch_norm's (its training
            // forward is these moments, then this normalisation).
            out.mean = local_mean;
            out.variance = local_var;
        }
        else
        {
            std::vector<double> var(g.m2.size());
            for (std::size_t c = 0; c < var.size(); ++c)
                var[c] = g.m2[c] / static_cast<double>(g.count); // biased
            no_grad guard;
            out.mean = to_device(cast(from_host(g.mean.data(), {C}, dtype::float64), sdt), dev);
            out.variance = to_device(cast(from_host(var.data(), {C}, dtype::float64), sdt), dev);
        }
        {
            no_grad guard; // the node below differentiates y
            batch_norm_attrs inference = local_attrs;
            inference.is_training = false;
            out.y = fused_batch_norm(x, scale, offset, out.mean, out.variance, inference).y;
        }

        record("sync_batch_norm", {x, scale, offset}, {out.y},
               [x, scale, offset, mean = out.mean, variance = out.variance, attrs = local_attrs, group, L,
                count = g.count, n_local](function_node& self, const std::vector<tensor>& grads) {
                   if (is_grad_enabled()) // create_graph: a gradient that is differentiable again
                       return composite_backward(self, grads[0], x, scale, offset, attrs, group, L, count);
                   return fused_backward(grads[0], x, scale, mean, variance, attrs, group, L.C, count, n_local);
               });
        return out;
    }

    tensor sync_batch_norm_composite(const tensor& x, const tensor& scale, const tensor& offset,
                                     const batch_norm_attrs& attrs, const process_group& group)
    {
        batch_norm_attrs checked = attrs;
        checked.exponential_avg_factor = 1.0f;
        std::exception_ptr local_error;
        batch_norm_layout L;
        try
        {
            if (!attrs.is_training)
                fail(composite_name, "attrs.is_training must be true (the formula uses batch statistics)");
            L = check_batch_norm_forward(x, scale, offset, checked, composite_name);
        }
        catch (const std::invalid_argument&)
        {
            local_error = std::current_exception();
        }
        // The global count, and how many ranks rejected their arguments, in one all-reduce that
        // every rank joins.
        std::vector<double> mine = {local_error ? 0.0 : static_cast<double>(L.count()), local_error ? 1.0 : 0.0};
        const tensor totals = from_host(mine.data(), {2}, dtype::float64);
        all_reduce(totals, reduce_op::sum, group);
        if (local_error)
            std::rethrow_exception(local_error);
        const std::vector<double> t = to_vector(totals);
        if (t[1] > 0)
            fail(composite_name, std::to_string(static_cast<std::int64_t>(t[1])) + " rank(s) of " +
                                     std::to_string(group.size()) + " rejected their arguments");
        const auto count = static_cast<std::int64_t>(t[0]);
        if (count <= 1)
            fail_count(composite_name, count, x, group.size());
        return composite_y(x, scale, offset, checked, group, L, count);
    }
}
