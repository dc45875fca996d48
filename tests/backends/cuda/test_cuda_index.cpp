// The CUDA backend's index, pooling and window kernels (backends/cuda/index.cpp, unfold.cpp)
// against the CPU backend, and the CNN ops and matmul built on them.
//
// Kernel level: each kernel is called through the dispatch table on device copies of host
// buffers, with explicit strides (the NCHW and NHWC matrices and random permuted layouts with
// gaps), against the CPU backend's kernel (and the reference twin for the window kernels).
// Every comparison is bit for bit: unfold2d, take and one_hot move bits; the argmax is an
// integer; fold2d and put_add sum in the CPU's order (cuda_kernels.hpp). Outputs are pre-filled
// with NaN (or -7 for int64): the kernels ASSIGN, and storage outside the view must keep it.
//
// The ops built on them: test_cuda_cnn_ops.cpp.
#include "tests/backends/cuda/cuda_test_helpers.hpp"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "backends/cpu/cpu_kernels.hpp"
#include "core/src/dispatch.hpp"

using namespace cuda_test;

namespace
{
    using xgrad::kernels::window2d_dims;

    const xgrad::detail::backend_kernels& dev_kernels() { return xgrad::detail::backend_for(gpu); }
    const xgrad::detail::backend_kernels& cpu_kernels() { return xgrad::detail::backend_for(cpu_device); }

    const double nan_value = std::numeric_limits<double>::quiet_NaN();

    std::int64_t pick(std::mt19937_64& gen, std::int64_t lo, std::int64_t hi)
    {
        return lo + static_cast<std::int64_t>(gen() % static_cast<std::uint64_t>(hi - lo + 1));
    }

    /// A random window with a non-empty output; `large` crosses the CPU's thread grain.
    window2d_dims random_window(std::mt19937_64& gen, bool large)
    {
        for (;;)
        {
            window2d_dims d{};
            d.n = large ? pick(gen, 3, 6) : pick(gen, 1, 3);
            static const std::int64_t channels[] = {1, 2, 3, 5, 16, 17};
            d.c = channels[gen() % 6];
            d.h = large ? pick(gen, 14, 30) : pick(gen, 1, 11);
            d.w = large ? pick(gen, 14, 30) : pick(gen, 1, 11);
            d.kh = pick(gen, 1, 4);
            d.kw = pick(gen, 1, 4);
            d.sh = pick(gen, 1, 3);
            d.sw = pick(gen, 1, 3);
            d.ph = pick(gen, 0, 2);
            d.pw = pick(gen, 0, 2);
            d.dh = pick(gen, 1, 3);
            d.dw = pick(gen, 1, 3);
            const std::int64_t span_h = d.dh * (d.kh - 1) + 1, span_w = d.dw * (d.kw - 1) + 1;
            if (d.h + 2 * d.ph < span_h || d.w + 2 * d.pw < span_w)
                continue;
            d.oh = (d.h + 2 * d.ph - span_h) / d.sh + 1;
            d.ow = (d.w + 2 * d.pw - span_w) / d.sw + 1;
            return d;
        }
    }

    std::string describe(const window2d_dims& d)
    {
        std::ostringstream s;
        s << "n " << d.n << " c " << d.c << " h " << d.h << " w " << d.w << " kernel " << d.kh << "x" << d.kw
          << " stride " << d.sh << "x" << d.sw << " padding " << d.ph << "x" << d.pw << " dilation " << d.dh << "x"
          << d.dw << " out " << d.oh << "x" << d.ow;
        return s.str();
    }

    /// Strides of a view of `shape` inside a flat buffer of `storage` elements.
    struct layout
    {
        std::vector<std::int64_t> strides;
        std::int64_t storage = 1;
        std::string name;
    };

    /// The dimensions laid out in `order` (outermost first), each padded by gap[d] elements.
    layout make_layout(const std::vector<std::int64_t>& shape, const std::vector<int>& order,
                       const std::vector<std::int64_t>& gap, std::string name)
    {
        layout l;
        l.strides.assign(shape.size(), 0);
        for (std::size_t k = order.size(); k-- > 0;)
        {
            const auto d = static_cast<std::size_t>(order[k]);
            l.strides[d] = l.storage;
            l.storage *= shape[d] + gap[d];
        }
        l.name = std::move(name);
        return l;
    }

    layout dense(const std::vector<std::int64_t>& shape, const std::vector<int>& order, std::string name)
    {
        return make_layout(shape, order, std::vector<std::int64_t>(shape.size(), 0), std::move(name));
    }

    /// A random permuted layout, some dimensions with a gap.
    layout random_layout(const std::vector<std::int64_t>& shape, std::mt19937_64& gen)
    {
        std::vector<int> order(shape.size());
        for (std::size_t k = 0; k < order.size(); ++k)
            order[k] = static_cast<int>(k);
        std::shuffle(order.begin(), order.end(), gen);
        std::vector<std::int64_t> gap(shape.size());
        for (auto& g : gap)
            g = gen() % 3 == 0 ? 1 : 0;
        return make_layout(shape, order, gap, "random");
    }

    /// The image layouts of x: NCHW, NHWC, random; `broadcast` adds a channel stride of 0.
    std::vector<layout> image_layouts(const window2d_dims& d, std::mt19937_64& gen, bool broadcast)
    {
        const std::vector<std::int64_t> shape = {d.n, d.c, d.h, d.w};
        std::vector<layout> v = {dense(shape, {0, 1, 2, 3}, "NCHW"), dense(shape, {0, 2, 3, 1}, "NHWC"),
                                 random_layout(shape, gen)};
        if (broadcast)
        {
            layout b = dense(shape, {0, 1, 2, 3}, "broadcast c");
            b.strides[1] = 0;
            v.push_back(b);
        }
        return v;
    }

    /// The cols layouts: the NCHW matrix [C*KH*KW, N*OH*OW], the NHWC matrix [N*OH*OW, KH*KW*C],
    /// and a random one, of the 6-d array [n, c, kh, kw, oh, ow].
    std::vector<layout> cols_layouts(const window2d_dims& d, std::mt19937_64& gen)
    {
        const std::vector<std::int64_t> shape = {d.n, d.c, d.kh, d.kw, d.oh, d.ow};
        return {dense(shape, {1, 2, 3, 0, 4, 5}, "NCHW matrix"), dense(shape, {0, 4, 5, 2, 3, 1}, "NHWC matrix"),
                random_layout(shape, gen)};
    }

    /// A flat CPU buffer of `numel` elements filled with `value`.
    tensor filled(std::int64_t numel, double value, dtype dt) { return full({numel}, value, dt); }

}

// ---------------------------------------------------------------------------------------------
// Kernel level

TEST_CASE("cuda index kernels: unfold2d and fold2d give the CPU's bits")
{
    std::mt19937_64 gen(2024);
    std::uint64_t seed = 1;
    for (int rep = 0; rep < 10; ++rep)
    {
        const window2d_dims d = random_window(gen, rep % 5 == 0);
        for (const dtype dt : float_dtypes)
        {
            INFO(describe(d), " dtype ", name(dt));
            for (const layout& cl : cols_layouts(d, gen))
                for (const layout& xl : image_layouts(d, gen, true))
                {
                    INFO("cols ", cl.name, ", x ", xl.name);
                    // unfold2d: every cols element assigned, gaps keep their NaN.
                    static const double pads[] = {0.0, -std::numeric_limits<double>::infinity(), 0.1};
                    const double pad = pads[gen() % 3];
                    const tensor x = random_cpu({xl.storage}, dt, ++seed);
                    const tensor xd = x.to(gpu);
                    tensor want = filled(cl.storage, nan_value, dt), ref = filled(cl.storage, nan_value, dt);
                    const tensor got = filled(cl.storage, nan_value, dt).to(gpu);
                    cpu_kernels().unfold2d(want.data_ptr(), cl.strides.data(), x.data_ptr(), xl.strides.data(), dt, d,
                                           pad);
                    xgrad::cpu::reference::unfold2d(ref.data_ptr(), cl.strides.data(), x.data_ptr(), xl.strides.data(),
                                                    dt, d, pad);
                    dev_kernels().unfold2d(got.data_ptr(), cl.strides.data(), xd.data_ptr(), xl.strides.data(), dt, d,
                                           pad);
                    check_same_bits(want, ref, "unfold2d: cpu fast vs reference");
                    check_same_bits(want, got, "unfold2d");

                    // fold2d: x must not overlap itself (no broadcast layout as an output).
                    if (xl.strides[1] == 0)
                        continue;
                    const tensor cols = random_cpu({cl.storage}, dt, ++seed);
                    const tensor cd = cols.to(gpu);
                    tensor fwant = filled(xl.storage, nan_value, dt), fref = filled(xl.storage, nan_value, dt);
                    const tensor fgot = filled(xl.storage, nan_value, dt).to(gpu);
                    cpu_kernels().fold2d(fwant.data_ptr(), xl.strides.data(), cols.data_ptr(), cl.strides.data(), dt,
                                         d);
                    xgrad::cpu::reference::fold2d(fref.data_ptr(), xl.strides.data(), cols.data_ptr(),
                                                  cl.strides.data(), dt, d);
                    dev_kernels().fold2d(fgot.data_ptr(), xl.strides.data(), cd.data_ptr(), cl.strides.data(), dt, d);
                    check_same_bits(fwant, fref, "fold2d: cpu fast vs reference");
                    check_same_bits(fwant, fgot, "fold2d");
                }
        }
    }
}

TEST_CASE("cuda index kernels: fold2d counts overlapping taps and is deterministic")
{
    // All-ones cols, 3x3 window, stride 1, padding 1 over 4x5: interior 9, edges 6, corners 4.
    const window2d_dims d{1, 1, 4, 5, 3, 3, 1, 1, 1, 1, 1, 1, 4, 5};
    const std::int64_t cs[6] = {20, 180, 60, 20, 5, 1}, xs[4] = {20, 20, 5, 1};
    const tensor cols = ones({180}, dtype::float32, cpu_device).to(gpu);
    const tensor x = filled(20, nan_value, dtype::float32).to(gpu);
    dev_kernels().fold2d(x.data_ptr(), xs, cols.data_ptr(), cs, dtype::float32, d);
    const std::vector<double> v = to_vector(x.to(cpu_device));
    const std::vector<double> want = {4, 6, 6, 6, 4, 6, 9, 9, 9, 6, 6, 9, 9, 9, 6, 4, 6, 6, 6, 4};
    CHECK(v == want);

    // Large sums of mixed magnitudes: two device runs agree bit for bit.
    std::mt19937_64 gen(5);
    const window2d_dims big = random_window(gen, true);
    const std::vector<std::int64_t> shape = {big.n, big.c, big.kh, big.kw, big.oh, big.ow};
    const layout cl = dense(shape, {1, 2, 3, 0, 4, 5}, "NCHW matrix");
    const layout xl = dense({big.n, big.c, big.h, big.w}, {0, 1, 2, 3}, "NCHW");
    const tensor c = (random_cpu({cl.storage}, dtype::float32, 9)).to(gpu);
    const tensor a = filled(xl.storage, 0, dtype::float32).to(gpu), b = filled(xl.storage, 0, dtype::float32).to(gpu);
    dev_kernels().fold2d(a.data_ptr(), xl.strides.data(), c.data_ptr(), cl.strides.data(), dtype::float32, big);
    dev_kernels().fold2d(b.data_ptr(), xl.strides.data(), c.data_ptr(), cl.strides.data(), dtype::float32, big);
    check_same_bits(a, b, "fold2d twice");
}

namespace
{
    /// Whether every window of `d` reaches the input (max_pool2d's precondition).
    bool windows_reach_input(const window2d_dims& d)
    {
        auto axis = [](std::int64_t out, std::int64_t stride, std::int64_t pad, std::int64_t dil, std::int64_t k,
                       std::int64_t extent) {
            for (std::int64_t o = 0; o < out; ++o)
            {
                bool any = false;
                for (std::int64_t t = 0; t < k; ++t)
                {
                    const std::int64_t p = o * stride - pad + t * dil;
                    any = any || (p >= 0 && p < extent);
                }
                if (!any)
                    return false;
            }
            return true;
        };
        return axis(d.oh, d.sh, d.ph, d.dh, d.kh, d.h) && axis(d.ow, d.sw, d.pw, d.dw, d.kw, d.w);
    }

    /// Values from {-1, 0, 1, 2} (many ties), with NaNs at rate nan_rate.
    tensor tie_values(std::int64_t numel, dtype dt, std::mt19937_64& gen, double nan_rate)
    {
        std::vector<double> v(static_cast<std::size_t>(numel));
        std::uniform_real_distribution<double> u(0, 1);
        for (auto& e : v)
            e = u(gen) < nan_rate ? nan_value : static_cast<double>(pick(gen, -1, 2));
        return from_host(v.data(), {numel}, dtype::float64).to(dt);
    }
}

TEST_CASE("cuda index kernels: max_pool2d picks the CPU's maxima and positions (ties, NaN, padding)")
{
    std::mt19937_64 gen(77);
    int cases = 0;
    while (cases < 12)
    {
        const window2d_dims d = random_window(gen, cases % 6 == 0);
        if (!windows_reach_input(d))
            continue;
        ++cases;
        const std::vector<std::int64_t> out_shape = {d.n, d.c, d.oh, d.ow};
        const std::vector<layout> idx_layouts = {dense(out_shape, {0, 1, 2, 3}, "NCHW"),
                                                 dense(out_shape, {0, 2, 3, 1}, "NHWC"), random_layout(out_shape, gen)};
        for (const dtype dt : float_dtypes)
            for (const double nan_rate : {0.0, 0.05})
                for (const layout& xl : image_layouts(d, gen, false))
                {
                    const layout& il = idx_layouts[gen() % idx_layouts.size()];
                    INFO(describe(d), " dtype ", name(dt), " nan rate ", nan_rate, " x ", xl.name, " idx ", il.name);
                    const tensor x = tie_values(xl.storage, dt, gen, nan_rate);
                    const tensor xd = x.to(gpu);
                    // Both outputs pre-filled, in the same layout: the kernels assign every element.
                    tensor want = filled(il.storage, -7, dtype::int64), want_v = filled(il.storage, -7, dt);
                    const tensor got = filled(il.storage, -7, dtype::int64).to(gpu);
                    const tensor got_v = filled(il.storage, -7, dt).to(gpu);
                    cpu_kernels().max_pool2d(want_v.data_ptr(), il.strides.data(), want.data<std::int64_t>(),
                                             il.strides.data(), x.data_ptr(), xl.strides.data(), dt, d);
                    dev_kernels().max_pool2d(got_v.data_ptr(), il.strides.data(), got.data<std::int64_t>(),
                                             il.strides.data(), xd.data_ptr(), xl.strides.data(), dt, d);
                    check_same_bits(want, got, "max_pool2d positions");
                    check_same_bits(want_v, got_v, "max_pool2d maxima");
                }
    }
}

TEST_CASE("cuda index kernels: max_pool2d_grad writes the CPU's bits over disjoint windows")
{
    // Random windows that do not overlap (the kernel's precondition), dx in NCHW, NHWC and a
    // random layout with gaps (storage outside the view must keep its NaN), g in a random
    // layout, positions as max_pool2d writes them for an x of dx's strides; -0 terms in g.
    std::mt19937_64 gen(91);
    int cases = 0;
    while (cases < 12)
    {
        const window2d_dims d = random_window(gen, cases % 4 == 0);
        if (!windows_reach_input(d) || !xgrad::kernels::windows_disjoint(d))
            continue;
        ++cases;
        const std::vector<std::int64_t> out_shape = {d.n, d.c, d.oh, d.ow};
        for (const dtype dt : float_dtypes)
            for (const layout& xl : image_layouts(d, gen, false))
            {
                const layout il = random_layout(out_shape, gen), gl = random_layout(out_shape, gen);
                INFO(describe(d), " dtype ", name(dt), " dx ", xl.name);
                const tensor x = tie_values(xl.storage, dt, gen, 0.0);
                tensor idx = filled(il.storage, -7, dtype::int64), maxima = filled(il.storage, -7, dt);
                cpu_kernels().max_pool2d(maxima.data_ptr(), il.strides.data(), idx.data<std::int64_t>(),
                                         il.strides.data(), x.data_ptr(), xl.strides.data(), dt, d);
                std::vector<double> gv = to_vector(random_cpu({gl.storage}, dtype::float64, gen()));
                for (double& e : gv)
                    e = gen() % 5 == 0 ? -0.0 : e;
                const tensor g = from_host(gv.data(), {gl.storage}, dtype::float64).to(dt);
                // Without and with the ReLU mask (the maxima as the fused forward's pooled y, in
                // idx's layout: ties at and below 0 included).
                const tensor yd = maxima.to(gpu);
                for (const bool masked : {false, true})
                {
                    tensor want = filled(xl.storage, nan_value, dt);
                    const tensor got = filled(xl.storage, nan_value, dt).to(gpu), gd = g.to(gpu), idxd = idx.to(gpu);
                    cpu_kernels().max_pool2d_grad(want.data_ptr(), xl.strides.data(), g.data_ptr(), gl.strides.data(),
                                                  idx.data<std::int64_t>(), il.strides.data(),
                                                  masked ? maxima.data_ptr() : nullptr, dt, d);
                    dev_kernels().max_pool2d_grad(got.data_ptr(), xl.strides.data(), gd.data_ptr(), gl.strides.data(),
                                                  idxd.data<std::int64_t>(), il.strides.data(),
                                                  masked ? yd.data_ptr() : nullptr, dt, d);
                    check_same_bits(want, got, masked ? "max_pool2d_grad (ReLU mask)" : "max_pool2d_grad");
                }
            }
    }
}

TEST_CASE("cuda index kernels: take, put_add and one_hot match the CPU, including the first bad index")
{
    std::mt19937_64 gen(31);
    for (const dtype dt : {dtype::float32, dtype::float64, dtype::float16, dtype::bfloat16, dtype::int64})
        for (const std::int64_t n : {std::int64_t{0}, std::int64_t{1}, std::int64_t{37}, std::int64_t{70000}})
        {
            INFO("dtype ", name(dt), " n ", n);
            const std::int64_t x_numel = pick(gen, 1, 300);
            const tensor x = dt == dtype::int64 ? random_cpu({x_numel}, dtype::float64, 3, -1e6, 1e6).to(dt)
                                                : random_cpu({x_numel}, dt, 3);
            std::vector<std::int64_t> idx(static_cast<std::size_t>(n));
            for (auto& i : idx)
                i = pick(gen, 0, x_numel - 1);
            const tensor id = int64_tensor(idx), idd = id.to(gpu), xd = x.to(gpu);

            // take
            tensor want = filled(n, nan_value, dt);
            const tensor got = filled(n, nan_value, dt).to(gpu);
            CHECK(cpu_kernels().take(want.data_ptr(), x.data_ptr(), x_numel, id.data<std::int64_t>(), dt, n) == -1);
            CHECK(dev_kernels().take(got.data_ptr(), xd.data_ptr(), x_numel, idd.data<std::int64_t>(), dt, n) == -1);
            check_same_bits(want, got, "take");

            // put_add: many collisions, terms of mixed magnitudes (any other order of addition
            // would change the bits)
            if (dt != dtype::int64)
            {
                const std::int64_t out_numel = pick(gen, 1, 40);
                std::vector<std::int64_t> pos(static_cast<std::size_t>(n));
                for (auto& i : pos)
                    i = pick(gen, 0, out_numel - 1);
                const tensor pt = int64_tensor(pos), ptd = pt.to(gpu);
                const tensor g = random_cpu({n}, dtype::float64, 4) *
                                 exp(random_cpu({n}, dtype::float64, 5, -12.0, 12.0));
                const tensor gt = g.to(dt), gd = gt.to(gpu);
                tensor pwant = filled(out_numel, nan_value, dt);
                const tensor pgot = filled(out_numel, nan_value, dt).to(gpu);
                CHECK(cpu_kernels().put_add(pwant.data_ptr(), out_numel, gt.data_ptr(), pt.data<std::int64_t>(), dt,
                                            n) == -1);
                CHECK(dev_kernels().put_add(pgot.data_ptr(), out_numel, gd.data_ptr(), ptd.data<std::int64_t>(), dt,
                                            n) == -1);
                check_same_bits(pwant, pgot, "put_add");
                const tensor again = filled(out_numel, nan_value, dt).to(gpu);
                dev_kernels().put_add(again.data_ptr(), out_numel, gd.data_ptr(), ptd.data<std::int64_t>(), dt, n);
                check_same_bits(pgot, again, "put_add twice");
            }

            // one_hot
            const std::int64_t classes = pick(gen, 1, 9);
            std::vector<std::int64_t> labels(static_cast<std::size_t>(std::min<std::int64_t>(n, 500)));
            for (auto& l : labels)
                l = pick(gen, 0, classes - 1);
            const auto rows = static_cast<std::int64_t>(labels.size());
            const tensor lt = int64_tensor(labels), ltd = lt.to(gpu);
            tensor owant = filled(rows * classes, nan_value, dt);
            const tensor ogot = filled(rows * classes, nan_value, dt).to(gpu);
            CHECK(cpu_kernels().one_hot(owant.data_ptr(), lt.data<std::int64_t>(), dt, rows, classes) == -1);
            CHECK(dev_kernels().one_hot(ogot.data_ptr(), ltd.data<std::int64_t>(), dt, rows, classes) == -1);
            check_same_bits(owant, ogot, "one_hot");

            // Bad positions: the first one is reported, by both backends.
            if (n < 2)
                continue;
            for (const std::int64_t bad_value : {std::int64_t{-1}, x_numel, std::numeric_limits<std::int64_t>::max()})
            {
                std::vector<std::int64_t> b = idx;
                const std::int64_t first = pick(gen, 0, n - 2), second = pick(gen, first + 1, n - 1);
                b[static_cast<std::size_t>(second)] = -5;
                b[static_cast<std::size_t>(first)] = bad_value;
                const tensor bt = int64_tensor(b), btd = bt.to(gpu);
                CAPTURE(bad_value);
                CAPTURE(first);
                CHECK(cpu_kernels().take(want.data_ptr(), x.data_ptr(), x_numel, bt.data<std::int64_t>(), dt, n) ==
                      first);
                CHECK(dev_kernels().take(got.data_ptr(), xd.data_ptr(), x_numel, btd.data<std::int64_t>(), dt, n) ==
                      first);
                if (dt != dtype::int64)
                {
                    const tensor g = random_cpu({n}, dt, 6).to(gpu);
                    const tensor out = filled(x_numel, 0, dt).to(gpu);
                    CHECK(dev_kernels().put_add(out.data_ptr(), x_numel, g.data_ptr(), btd.data<std::int64_t>(), dt,
                                                n) == first);
                }
                const std::int64_t rows_b = std::min<std::int64_t>(n, 3 * x_numel);
                const tensor out = filled(rows_b * x_numel, 0, dt).to(gpu);
                const std::int64_t want_first = first < rows_b ? first : (second < rows_b ? second : -1);
                CHECK(dev_kernels().one_hot(out.data_ptr(), btd.data<std::int64_t>(), dt, rows_b, x_numel) ==
                      want_first);
            }
        }
}
