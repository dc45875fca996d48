// The CUDA backend's reduction (backends/cuda/reduce.cpp) against long double sums and the CPU:
// the kernel through the dispatch table over random shapes and layouts and each lane split,
// determinism, and sum / mean / max as ops; argmax (kernel and op) against the CPU's, which
// must give the same indices. Tolerances: test_cuda_elementwise.cpp's header.
#include "tests/backends/cuda/cuda_elementwise_helpers.hpp"

using namespace cuda_elementwise_test;

namespace
{
    // ---------------------------------------------------------------------------------------
    // reduce

    /// Runs one reduction on the device and checks it against long double sums of the same
    /// elements (sum), the exact maximum (max) and the CPU's fast kernel. Returns the device's
    /// output storage.
    template <class T>
    std::vector<T> check_reduce_case(std::mt19937_64& gen, const ckt::view<T>& x, int n_keep, layout out_kind,
                                     reduce_op op)
    {
        const shape_t kept(x.shape.begin(), x.shape.begin() + n_keep);
        auto got_want = output_views<T>(kept, gen, out_kind);
        auto& got = got_want.first;
        auto& want = got_want.second;
        constexpr xgrad::dtype dt = xgrad::dtype_of<T>();
        {
            const device_copy<T> dx(x.storage);
            const device_copy<T> dout(got.storage);
            dev().reduce(dout.get(), got.strides.data(), dx.get(), x.strides.data(), dt, x.ndim(), n_keep,
                         x.shape.data(), op);
            got.storage = dout.download();
        }
        ckt::fast.reduce(want.data(), want.strides.data(), x.data(), x.strides.data(), dt, x.ndim(), n_keep,
                         x.shape.data(), op);

        const shape_t reduced(x.shape.begin() + n_keep, x.shape.end());
        const shape_t kept_strides(x.strides.begin(), x.strides.begin() + n_keep);
        const shape_t red_strides(x.strides.begin() + n_keep, x.strides.end());
        const auto kept_offs = ckt::offsets_of(kept, kept_strides);
        const auto red_offs = ckt::offsets_of(reduced, red_strides);
        std::vector<long double> exact(kept_offs.size()), magnitude(kept_offs.size());
        std::vector<T> maximum(kept_offs.size(), -std::numeric_limits<T>::infinity());
        for (std::size_t i = 0; i < kept_offs.size(); ++i)
            for (const auto r : red_offs)
            {
                const T v = x.storage[static_cast<std::size_t>(kept_offs[i] + r)];
                exact[i] += v;
                magnitude[i] += std::abs(static_cast<long double>(v));
                if (v > maximum[i] || std::isnan(v))
                    maximum[i] = std::isnan(maximum[i]) ? maximum[i] : v;
            }
        const bool f32 = std::is_same_v<T, float>;
        const std::string err = compare_storage(got, want, [&](T g, T w, std::size_t i) {
            if (op == reduce_op::max)
                return same_or_nan(g, maximum[i]) && same_or_nan(w, maximum[i]);
            if (std::isnan(w) || std::isinf(w))
                return same_or_nan(g, w);
            const auto e = static_cast<double>(exact[i]);
            const auto m = static_cast<double>(magnitude[i]);
            const double tiny = std::numeric_limits<T>::denorm_min();
            const double to_exact = f32 ? 0x1p-24 * std::abs(e) + 0x1p-30 * m : 1e-13 * m;
            const double to_cpu = (f32 ? 1e-5 : 1e-13) * m;
            return std::abs(g - e) <= to_exact + tiny && std::abs(g - static_cast<double>(w)) <= to_cpu + tiny;
        });
        INFO((op == reduce_op::sum ? "sum " : "max "), xgrad::name(dt), " x ", x.describe(), " n_keep ", n_keep,
             " out ", got.describe());
        CHECK_MESSAGE(err.empty(), err);
        return got.storage;
    }

}

TEST_CASE("cuda kernels: reduce matches long double sums and the CPU over random shapes and layouts")
{
    std::mt19937_64 gen(107);
    for (int rep = 0; rep < 60; ++rep)
    {
        const shape_t shape = random_shape(gen, 4, 150000);
        const int n_keep = static_cast<int>(gen() % (shape.size() + 1));
        const reduce_op op = rep % 3 == 2 ? reduce_op::max : reduce_op::sum;
        // max of an empty range is rejected by the ops layer
        bool empty_reduction = false;
        for (std::size_t d = static_cast<std::size_t>(n_keep); d < shape.size(); ++d)
            empty_reduction = empty_reduction || shape[d] == 0;
        if (op == reduce_op::max && empty_reduction)
            continue;
        const layout in = random_in_layout(gen), out = random_out_layout(gen);
        if (rep % 2)
            check_reduce_case(gen, ckt::random_input<float>(gen, shape, in, rep % 7 == 0), n_keep, out, op);
        else
            check_reduce_case(gen, ckt::random_input<double>(gen, shape, in, rep % 7 == 0), n_keep, out, op);
    }
}

TEST_CASE("cuda kernels: reduce over the shapes that pick each lane split")
{
    std::mt19937_64 gen(108);
    struct reduction_case
    {
        shape_t shape;
        int n_keep;
        layout in;
    };
    const reduction_case cases[] = {
        {{300001}, 0, layout::contiguous},     // one output, 1024 lanes
        {{1000, 1000}, 0, layout::permuted},   // a full sum of a transposed matrix
        {{3, 200000}, 1, layout::contiguous},  // few long rows
        {{200000, 3}, 1, layout::permuted},    // few long columns
        {{600, 500}, 1, layout::contiguous},   // rows: a few lanes each
        {{500, 600}, 1, layout::permuted},     // sum over axis 0 of a row-major matrix
        {{70000, 5}, 1, layout::contiguous},   // many short rows: one thread per output
        {{255}, 0, layout::contiguous},        // just under two lanes' worth
        {{256}, 0, layout::padded},            // two lanes
        {{7, 9, 1031}, 1, layout::padded},     // reduced dims not contiguous
        {{40, 1, 4000}, 2, layout::broadcast}, // a broadcast (stride 0) reduced or kept dim
        {{2, 3, 0}, 2, layout::contiguous},    // empty reductions: 0
        {{0, 3, 5}, 1, layout::contiguous},    // no outputs
        {{}, 0, layout::contiguous},           // 0-d: the element itself
        {{5, 7}, 2, layout::permuted},         // nothing reduced: a copy
    };
    for (const auto& c : cases)
        for (const reduce_op op : {reduce_op::sum, reduce_op::max})
        {
            if (op == reduce_op::max && ckt::numel(c.shape) == 0)
                continue;
            check_reduce_case(gen, ckt::random_input<float>(gen, c.shape, c.in, false), c.n_keep, layout::contiguous,
                              op);
            check_reduce_case(gen, ckt::random_input<double>(gen, c.shape, c.in, op == reduce_op::max), c.n_keep,
                              layout::padded, op);
        }
}

TEST_CASE("cuda kernels: reduce is deterministic: a large sum gives the same bits twice")
{
    std::mt19937_64 gen(109);
    for (const shape_t& shape : {shape_t{1 << 20}, shape_t{1000, 1000}, shape_t{64, 20000}})
    {
        const auto x = ckt::random_input<float>(gen, shape, layout::contiguous, false);
        for (const int n_keep : {0, 1})
        {
            if (n_keep > static_cast<int>(shape.size()))
                continue;
            const auto first = check_reduce_case(gen, x, n_keep, layout::contiguous, reduce_op::sum);
            const auto second = check_reduce_case(gen, x, n_keep, layout::contiguous, reduce_op::sum);
            REQUIRE(first.size() == second.size());
            CHECK(std::memcmp(first.data(), second.data(), first.size() * sizeof(float)) == 0);
        }
    }
}

// =============================================================================================
// Public ops on cuda:0 against the CPU

TEST_CASE("cuda ops: sum, mean and max over axes, with keepdim, full reductions and views")
{
    std::mt19937_64 gen(204);
    std::uint64_t seed = 3000;
    for (const dtype dt : {dtype::float32, dtype::float64})
    {
        const double rel = dt == dtype::float32 ? 1e-5 : 1e-13;
        for (int rep = 0; rep < 40; ++rep)
        {
            const shape_type shape = op_shape(gen, 4, 60000);
            const auto nd = static_cast<std::int64_t>(shape.size());
            axes_type axes;
            for (std::int64_t d = 0; d < nd; ++d)
                if (gen() % 2)
                    axes.push_back(gen() % 2 ? d : d - nd); // negative axes too
            const bool keepdim = gen() % 2;
            const auto [xc, xd] = view_pair(shape, rep % 3, gen,
                                            [&](const shape_type& s) { return random_cpu(s, dt, seed++, -3, 5); });
            std::ostringstream what;
            what << describe(xc) << " over " << axes.size() << " axes" << (axes.empty() ? " (all)" : "")
                 << (keepdim ? ", keepdim" : "");
            const tensor scale = sum(abs(xc), axes, keepdim);
            check_sum_close(sum(xc, axes, keepdim), sum(xd, axes, keepdim), scale, rel, "sum of " + what.str());
            std::int64_t count = 1;
            for (std::int64_t d = 0; d < nd; ++d)
                if (axes.empty() || std::find(axes.begin(), axes.end(), d) != axes.end() ||
                    std::find(axes.begin(), axes.end(), d - nd) != axes.end())
                    count *= shape[static_cast<std::size_t>(d)];
            check_sum_close(mean(xc, axes, keepdim), mean(xd, axes, keepdim),
                            count > 0 ? scale / static_cast<double>(count) : scale, rel, "mean of " + what.str());
            if (count > 0)
                check_identical(max(xc, axes, keepdim), max(xd, axes, keepdim), true, "max of " + what.str());
        }
    }
}

TEST_CASE("cuda ops: a long 1-d reduction (300001 elements) and NaN in max")
{
    for (const dtype dt : {dtype::float32, dtype::float64})
    {
        const double rel = dt == dtype::float32 ? 1e-5 : 1e-13;
        const tensor xc = random_cpu({300001}, dt, 77, -1, 3);
        const tensor xd = xc.to(gpu);
        const tensor scale = sum(abs(xc));
        check_sum_close(sum(xc), sum(xd), scale, rel, "sum of 300001");
        check_sum_close(mean(xc), mean(xd), scale / 300001.0, rel, "mean of 300001");
        check_identical(max(xc), max(xd), false, "max of 300001");
        // every other element, backwards-free strided view
        const tensor sc = xc.slice(0, 1, 300001, 2), sd = xd.slice(0, 1, 300001, 2);
        check_sum_close(sum(sc), sum(sd), sum(abs(sc)), rel, "sum of a strided 150000");
        // a NaN anywhere makes max NaN
        std::vector<double> host = to_vector(xc);
        host[123457] = std::nan("");
        const tensor nc = from_host(host.data(), {300001}, dtype::float64).to(dt);
        CHECK(std::isnan(max(nc.to(gpu)).item()));
        CHECK(std::isnan(max(nc).item()));
    }
}

namespace
{
    /// One argmax on the device and on the CPU (fast and reference kernels); the indices must
    /// be the same, and storage outside the output view untouched.
    template <class T>
    void check_argmax_case(std::mt19937_64& gen, bool with_nan)
    {
        constexpr xgrad::dtype dt = std::is_same_v<T, std::int64_t> ? xgrad::dtype::int64 : xgrad::dtype_of<T>();
        shape_t shape = ckt::random_shape(gen, 4, 60000);
        if (shape.empty() || ckt::numel(shape) == 0)
            shape = {7, 33};
        auto x = ckt::make_view<T>(shape, ckt::in_layouts[gen() % ckt::in_layouts.size()], gen, T(0));
        for (auto& v : x.storage) // few distinct values: ties in most rows
            v = static_cast<T>(static_cast<int>(gen() % 5) - 2);
        if constexpr (std::is_floating_point_v<T>)
            if (with_nan)
                for (auto& v : x.storage)
                    if (gen() % 89 == 0)
                        v = std::numeric_limits<T>::quiet_NaN();
        const shape_t kept(shape.begin(), shape.end() - 1);
        auto got_want = output_views<std::int64_t>(kept, gen, ckt::out_layouts[gen() % ckt::out_layouts.size()]);
        auto& got = got_want.first;
        auto& want = got_want.second;
        auto ref = want;
        {
            const device_copy<T> dx(x.storage);
            const device_copy<std::int64_t> dout(got.storage);
            dev().argmax(static_cast<std::int64_t*>(dout.get()), got.strides.data(), dx.get(), x.strides.data(), dt,
                         x.ndim(), x.shape.data());
            got.storage = dout.download();
        }
        ckt::fast.argmax(want.data(), want.strides.data(), x.data(), x.strides.data(), dt, x.ndim(), x.shape.data());
        cpu::reference::argmax(ref.data(), ref.strides.data(), x.data(), x.strides.data(), dt, x.ndim(),
                               x.shape.data());
        INFO(xgrad::name(dt), " argmax of ", x.describe(), " into ", got.describe());
        const std::string err = compare_storage(got, want,
                                                [](std::int64_t g, std::int64_t w, std::size_t) { return g == w; });
        CHECK_MESSAGE(err.empty(), err);
        const std::string err_ref = compare_storage(got, ref,
                                                    [](std::int64_t g, std::int64_t w, std::size_t) { return g == w; });
        CHECK_MESSAGE(err_ref.empty(), err_ref);
    }
}

TEST_CASE("cuda kernels: argmax gives the CPU's indices (first maximum, first NaN) over shapes and layouts")
{
    std::mt19937_64 gen(205);
    for (int rep = 0; rep < 12; ++rep)
    {
        check_argmax_case<float>(gen, rep % 2 == 1);
        check_argmax_case<double>(gen, true);
        check_argmax_case<std::int64_t>(gen, false);
    }
}

TEST_CASE("cuda ops: argmax over every dim, with keepdim, of views and 16-bit tensors")
{
    std::mt19937_64 gen(206);
    std::uint64_t seed = 4000;
    for (const dtype dt : {dtype::float32, dtype::float64, dtype::bfloat16})
        for (int rep = 0; rep < 6; ++rep)
        {
            shape_type shape = op_shape(gen, 4, 20000);
            if (shape.empty())
                shape = {5};
            const auto nd = static_cast<std::int64_t>(shape.size());
            const auto pick = static_cast<std::int64_t>(gen() % static_cast<std::uint64_t>(nd));
            const std::int64_t dim = gen() % 2 ? pick - nd : pick; // negative dims too
            if (shape[static_cast<std::size_t>(dim < 0 ? dim + nd : dim)] == 0)
                continue;
            const bool keepdim = gen() % 2;
            const auto xc_xd = view_pair(shape, rep % 3, gen, [&](const shape_type& s) {
                return sign(random_cpu(s, dt, seed++, -3, 3)); // -1, 0, 1: ties
            });
            const auto& xc = xc_xd.first; // (named: doctest's INFO captures it)
            const auto& xd = xc_xd.second;
            INFO(describe(xc), " dim ", dim, keepdim ? " keepdim" : "");
            const tensor yc = argmax(xc, dim, keepdim), yd = argmax(xd, dim, keepdim);
            CHECK(yd.device() == gpu);
            CHECK(yd.dtype() == dtype::int64);
            CHECK(yd.shape() == yc.shape());
            CHECK(to_vector(yd) == to_vector(yc));
        }
}
