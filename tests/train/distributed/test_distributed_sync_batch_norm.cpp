// distributed::sync_batch_norm against one process holding the whole batch: every rank builds
// the same global batch from a seed and takes its rows (even, uneven and empty shares); its y,
// statistics and gradients must be the rows (or, for the per-channel gradients, the rank-sum)
// of xgrad::fused_batch_norm's on the whole batch. Also the second order (a Hessian-vector
// product through create_graph), the composite formula as the oracle of the fused first order,
// the group of one (plain batch norm), and the errors, which every rank must see.
//
// Run alone (a world of one) every rank holds the whole batch; under mpiexec -n 2 the shares
// are {4, 4}, {3, 5} and {0, 8} rows.
#include <doctest/doctest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "sync_bn_test_helpers.hpp"
#include "tests/support/check_error.hpp"
#include "xgrad/distributed/sync_batch_norm.hpp"

using namespace sync_bn_test;

namespace
{
    constexpr std::int64_t N = 8, C = 3, H = 2, W = 3;
    constexpr std::int64_t R = N * H * W; // values per channel in the global batch
    const std::int64_t first_rows[] = {4, 3, 0};

    // Tolerances, relative to max(1, |want|). Both sides compute from identical inputs; they
    // differ in how the statistics are summed (per rank, then Chan's merge, against one pass)
    // and in rounding the global mean and variance to the statistics dtype.
    // - float64: a few roundings of 2^-53 in sums of R = 48 terms of size <= ~20 (x is
    //   5 + 2 N(0,1)): below 1e-13; 1e-12 leaves a margin.
    // - float32 statistics: the same with 2^-24, over sums as large as 48 * 20 when a kernel
    //   accumulates in float32: about 48 * 20 * 6e-8 = 6e-5 absolute on a per-channel sum, and
    //   that over R = 48 on a mean (1.2e-6); y and dx carry one mean error times r <= 1 plus
    //   a few roundings: 1e-5 for x-shaped float32 tensors and the statistics, 1e-4 for the
    //   per-channel gradient sums (Σ of 48 terms, the first bound).
    // - float16 / bfloat16 outputs are float32 values rounded once: two float32 results that
    //   agree to 1e-5 round to the same or adjacent 16-bit values, one ulp apart: 2^-10 (float16)
    //   or 2^-7 (bfloat16) of |want| at most; the tolerance is two ulps. Their per-channel
    //   tensors are float32 from the same 16-bit inputs: the float32 bounds.
    struct dtype_case
    {
        dtype dt;
        double x_tol, sum_tol, stats_tol;
    };
    const dtype_case dtype_cases[] = {
        {dtype::float64, 1e-12, 1e-12, 1e-12},
        {dtype::float32, 1e-5, 1e-4, 1e-5},
        {dtype::float16, 2.0 / 512, 1e-4, 1e-5},
        {dtype::bfloat16, 2.0 / 64, 1e-4, 1e-5},
    };

    shape_type global_shape(const std::string& format)
    {
        return format == "NCHW" ? shape_type{N, C, H, W} : shape_type{N, H, W, C};
    }

    dtype stats_dtype(dtype dt) { return dt == dtype::float64 ? dtype::float64 : dtype::float32; }

    batch_norm_attrs attrs_for(const std::string& format)
    {
        batch_norm_attrs a;
        a.epsilon = 1e-3f;
        a.data_format = format;
        a.is_training = true;
        return a;
    }

    /// The global batch of a case: x (mean 5, so Σx² - n m² would lose digits), the weights w
    /// of the loss Σ y·w, and scale and offset.
    struct batch
    {
        tensor x, w, scale, offset;
    };
    batch global_batch(const std::string& format, dtype dt)
    {
        const shape_type s = global_shape(format);
        return {seeded(s, 11, dt, 5.0, 2.0), seeded(s, 12, dt), seeded({C}, 13, stats_dtype(dt), 1.0, 0.5),
                seeded({C}, 14, stats_dtype(dt))};
    }

    tensor no_stats(dtype dt) { return zeros({0}, stats_dtype(dt)); }
}

TEST_CASE("sync_batch_norm: y, statistics and gradients are the whole batch's, for every share, dtype and layout")
{
    const int rank = dist::rank(), K = dist::world_size();
    for (const std::string format : {"NCHW", "NHWC"})
        for (const dtype_case& dc : dtype_cases)
            for (const std::int64_t first : first_rows)
            {
                INFO(format << " " << name(dc.dt) << ", rank " << rank << " of " << K << ", first share " << first);
                const batch b = global_batch(format, dc.dt);
                const batch_norm_attrs attrs = attrs_for(format);

                // One process, the whole batch: the loss is Σ over the global batch of y·w.
                const tensor xr = leaf(b.x), gr = leaf(b.scale), br = leaf(b.offset);
                const batch_norm_forward_result ref = fused_batch_norm(xr, gr, br, no_stats(dc.dt), no_stats(dc.dt),
                                                                       attrs);
                sum(ref.y * b.w).backward();

                // This rank's rows; its loss is Σ over them, so the ranks' losses add up to the
                // whole batch's.
                const auto rows = rows_of(N, first, rank, K);
                const tensor xs = leaf(shard(b.x, rows)), gs = leaf(b.scale), bs = leaf(b.offset);
                const dist::sync_batch_norm_result res = dist::sync_batch_norm(xs, gs, bs, attrs);
                sum(res.y * shard(b.w, rows)).backward();

                check_close(res.y, shard(ref.y, rows), dc.x_tol, "y");
                check_close(res.mean, ref.saved_mean, dc.stats_tol, "mean");
                check_close(res.variance, ref.saved_var, dc.stats_tol, "variance");
                CHECK(res.count == R);
                CHECK(res.mean.dtype() == stats_dtype(dc.dt));
                CHECK_FALSE(res.mean.requires_grad());
                check_close(xs.grad(), shard(xr.grad(), rows), dc.x_tol, "x's gradient");
                check_close(summed(gs.grad()), gr.grad(), dc.sum_tol, "scale's gradient summed over the ranks");
                check_close(summed(bs.grad()), br.grad(), dc.sum_tol, "offset's gradient summed over the ranks");
            }
}

TEST_CASE("sync_batch_norm: a Hessian-vector product through create_graph is the whole batch's")
{
    // L = Σ y·w; g = (dL/dx, dL/dscale) with create_graph; H = Σ g_x·v + Σ g_scale·u; then
    // dH/dx and dH/dscale. Summed over the ranks H is the whole batch's (g_x's rows and the
    // rank-sum of g_scale are the whole batch's), so dH/dx on each rank must be its rows of the
    // one-process result, whose second order is checked against finite differences in
    // tests/core/ops. float64: both sides are exact formulas in float64 over sums of 48 terms,
    // rounded a few more times than the first order: 1e-11.
    const int rank = dist::rank(), K = dist::world_size();
    const double tol = 1e-11;
    for (const std::string format : {"NCHW", "NHWC"})
        for (const std::int64_t first : {std::int64_t{3}, std::int64_t{0}})
        {
            INFO(format << ", rank " << rank << " of " << K << ", first share " << first);
            const batch b = global_batch(format, dtype::float64);
            const tensor v = seeded(global_shape(format), 15, dtype::float64), u = seeded({C}, 16, dtype::float64);
            const batch_norm_attrs attrs = attrs_for(format);

            const tensor xr = leaf(b.x), gr = leaf(b.scale), br = leaf(b.offset);
            const tensor yr = fused_batch_norm(xr, gr, br, no_stats(dtype::float64), no_stats(dtype::float64), attrs).y;
            const std::vector<tensor> g1 = grad({sum(yr * b.w)}, {xr, gr}, {}, true, true);
            const std::vector<tensor> h = grad({sum(g1[0] * v) + sum(g1[1] * u)}, {xr, gr});

            const auto rows = rows_of(N, first, rank, K);
            const tensor xs = leaf(shard(b.x, rows)), gs = leaf(b.scale), bs = leaf(b.offset);
            const tensor ys = dist::sync_batch_norm(xs, gs, bs, attrs).y;
            const std::vector<tensor> g1s = grad({sum(ys * shard(b.w, rows))}, {xs, gs}, {}, true, true);
            const std::vector<tensor> hs = grad({sum(g1s[0] * shard(v, rows)) + sum(g1s[1] * u)}, {xs, gs});

            check_close(g1s[0], shard(g1[0], rows), tol, "dL/dx (create_graph)");
            check_close(summed(g1s[1]), g1[1], tol, "dL/dscale (create_graph) summed");
            check_close(hs[0], shard(h[0], rows), tol, "dH/dx");
            check_close(summed(hs[1]), h[1], tol, "dH/dscale summed");
        }
}

TEST_CASE("sync_batch_norm: the fused first order equals the gradients of the composite formula")
{
    // The same function twice on the same shard: y and its gradients from the fused path
    // (grad_reduce, all-reduce, grad_apply) against autograd through
    // sync_batch_norm_composite. Tolerances as in the first test case.
    const int rank = dist::rank(), K = dist::world_size();
    for (const std::string format : {"NCHW", "NHWC"})
        for (const dtype_case& dc : dtype_cases)
            for (const std::int64_t first : {std::int64_t{3}, std::int64_t{0}})
            {
                INFO(format << " " << name(dc.dt) << ", rank " << rank << " of " << K << ", first share " << first);
                const batch b = global_batch(format, dc.dt);
                const batch_norm_attrs attrs = attrs_for(format);
                const auto rows = rows_of(N, first, rank, K);
                const tensor w = shard(b.w, rows);

                const tensor xf = leaf(shard(b.x, rows)), gf = leaf(b.scale), bf = leaf(b.offset);
                const tensor yf = dist::sync_batch_norm(xf, gf, bf, attrs).y;
                sum(yf * w).backward();
                const tensor xc = leaf(shard(b.x, rows)), gc = leaf(b.scale), bc = leaf(b.offset);
                const tensor yc = dist::sync_batch_norm_composite(xc, gc, bc, attrs);
                sum(yc * w).backward();

                check_close(yf, yc, dc.x_tol, "y");
                check_close(xf.grad(), xc.grad(), dc.x_tol, "x's gradient");
                check_close(gf.grad(), gc.grad(), dc.sum_tol, "scale's gradient (local)");
                check_close(bf.grad(), bc.grad(), dc.sum_tol, "offset's gradient (local)");
            }
}

TEST_CASE("sync_batch_norm: a group of one is plain batch norm")
{
    // process_group::self(): the forward is fused_batch_norm's own call, bit for bit; the
    // gradient is its two phases with the local count, which fused_batch_norm_grad computes
    // in one kernel call (the sums may be formed in another order): the tolerances above.
    for (const std::string format : {"NCHW", "NHWC"})
        for (const dtype_case& dc : dtype_cases)
        {
            INFO(format << " " << name(dc.dt));
            const batch b = global_batch(format, dc.dt);
            const batch_norm_attrs attrs = attrs_for(format);
            const tensor xr = leaf(b.x), gr = leaf(b.scale), br = leaf(b.offset);
            const batch_norm_forward_result ref = fused_batch_norm(xr, gr, br, no_stats(dc.dt), no_stats(dc.dt), attrs);
            sum(ref.y * b.w).backward();
            const tensor xs = leaf(b.x), gs = leaf(b.scale), bs = leaf(b.offset);
            const dist::sync_batch_norm_result res = dist::sync_batch_norm(xs, gs, bs, attrs,
                                                                           dist::process_group::self());
            sum(res.y * b.w).backward();

            check_same(res.y, ref.y, "y");
            check_same(res.mean, ref.saved_mean, "mean");
            check_same(res.variance, ref.saved_var, "variance");
            CHECK(res.count == R);
            check_close(xs.grad(), xr.grad(), dc.x_tol, "x's gradient");
            check_close(gs.grad(), gr.grad(), dc.sum_tol, "scale's gradient");
            check_close(bs.grad(), br.grad(), dc.sum_tol, "offset's gradient");
        }
}

TEST_CASE("sync_batch_norm: errors are thrown on every rank")
{
    const int rank = dist::rank(), K = dist::world_size();
    const tensor scale = ones({C}), offset = zeros({C});
    batch_norm_attrs attrs = attrs_for("NCHW");

    SUBCASE("inference mode")
    {
        attrs.is_training = false;
        CHECK_ERROR(dist::sync_batch_norm(ones({2, C, 1, 1}), scale, offset, attrs), xgrad::invalid_argument,
                    "distributed::sync_batch_norm: attrs.is_training must be true");
        CHECK_ERROR(dist::sync_batch_norm_composite(ones({2, C, 1, 1}), scale, offset, attrs), xgrad::invalid_argument,
                    "distributed::sync_batch_norm_composite: attrs.is_training must be true");
    }
    SUBCASE("at most one value per channel in the whole group")
    {
        CHECK_ERROR(dist::sync_batch_norm(zeros({0, C, 2, 2}), scale, offset, attrs), xgrad::invalid_argument,
                    "expected more than 1 value per channel", "got 0");
        const tensor one = rank == 0 ? ones({1, C, 1, 1}) : zeros({0, C, 1, 1});
        CHECK_ERROR(dist::sync_batch_norm(one, scale, offset, attrs), xgrad::invalid_argument,
                    "expected more than 1 value per channel", "got 1");
        CHECK_ERROR(dist::sync_batch_norm_composite(one, scale, offset, attrs), xgrad::invalid_argument,
                    "distributed::sync_batch_norm_composite: expected more than 1 value per channel", "got 1");
    }
    SUBCASE("a rank that rejects its arguments")
    {
        // The last rank passes a 3-D x: it reports its own reason, the others that it failed.
        const bool bad = rank == K - 1;
        const tensor x = bad ? ones({2, C, 2}) : ones({2, C, 2, 2});
        if (bad)
        {
            CHECK_ERROR(dist::sync_batch_norm(x, scale, offset, attrs), xgrad::invalid_argument,
                        "distributed::sync_batch_norm: x must be 4 or 5-dimensional");
            CHECK_ERROR(dist::sync_batch_norm_composite(x, scale, offset, attrs), xgrad::invalid_argument,
                        "distributed::sync_batch_norm_composite: x must be 4 or 5-dimensional");
        }
        else
        {
            const std::string which = "rank(s) " + std::to_string(K - 1) + " of " + std::to_string(K) + " rejected";
            const std::string how_many = "1 rank(s) of " + std::to_string(K) + " rejected";
            CHECK_ERROR(dist::sync_batch_norm(x, scale, offset, attrs), xgrad::invalid_argument, which.c_str());
            CHECK_ERROR(dist::sync_batch_norm_composite(x, scale, offset, attrs), xgrad::invalid_argument,
                        how_many.c_str());
        }
    }
    if (K >= 2)
    {
        SUBCASE("ranks that disagree on x's dtype")
        {
            const tensor x = rank == 0 ? ones({2, C, 2, 2}) : ones({2, C, 2, 2}, dtype::float16);
            CHECK_ERROR(dist::sync_batch_norm(x, scale, offset, attrs), xgrad::invalid_argument,
                        "the ranks disagree on x's dtype (float32, float16");
        }
        SUBCASE("ranks that disagree on the channels")
        {
            const std::int64_t c = rank == 0 ? C : C - 1;
            CHECK_ERROR(dist::sync_batch_norm(ones({2, c, 2, 2}), ones({c}), zeros({c}), attrs),
                        xgrad::invalid_argument, "the ranks disagree");
        }
    }
}
