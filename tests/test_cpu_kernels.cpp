// Tests of the CPU backend kernels (backends/cpu): every fast kernel against its reference
// twin over random shapes (ndim 0..4, sizes that cross SIMD widths, gather buffers, reduction
// blocks and thread chunks), random layouts (contiguous, permuted, padded/strided, broadcast
// with stride 0), float32 and float64, every op code, and every SIMD level this machine has
// (limit_simd_level caps the run-time choice, so the SSE2 code is tested on AVX2 machines too).
//
// Tolerances, and why:
// - neg, abs, relu, sqrt, rsqrt, add, sub, mul, div, pow, comparisons, where, max, copy, fill:
//   exact. They are IEEE-exact operations (sqrt; rsqrt is 1 / sqrt in both), the same
//   std::pow, selections, or the same conversion functions.
// - exp, log, tanh, sigmoid: 4 ulp. Measured over 7*10^7 float32 and 2*10^7 float64 inputs
//   spanning every exponent, the fast kernels differ from glibc's by at most 3 ulp (exp beyond
//   |x| > 80 resp. 700 and float32 sigmoid; 1-2 elsewhere, see simd_kernels_impl.hpp), and
//   glibc is within 1 ulp of the true value; 4 leaves one ulp of margin.
// - sum: checked against a long double sum of the same elements. The fast kernel's bound is
//   (c + ceil(log2 R)) * u * sum|x| (R reduced elements, u the unit roundoff), where c is at
//   most 134: row blocks of 1024 over 4 accumulators of W lanes give 1024 / (4W) + 5 + log2 W,
//   largest for float64 with SSE2 (W = 2); the column path gives 63 (see
//   backends/cpu/kernels.cpp). The test allows c = 140. The reference sums left to right:
//   (R - 1) * u * sum|x|. For R = 10^5 float32 elements with sum|x| = |sum x|, that is
//   at most 5.2e-6 relative for the fast kernel (c = 71 with SSE2) against 6e-3 for the loop.
// - matmul: each entry of both results is a dot product of length k, so each is within
//   gamma_k * sum_q |a_iq| |b_qj| of the exact value (any summation order, FMA or not;
//   gamma_k = k u / (1 - k u)); they differ by at most 2 gamma_k * sum |a||b|.
#include <doctest/doctest.h>

#include <algorithm>
#include <array>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <numeric>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "backends/cpu/cpu_kernels.hpp"
#include "backends/cpu/simd_level.hpp"
#include "xgrad/half.hpp"
#include "xgrad/thread_pool.hpp"

namespace
{
    namespace cpu = xgrad::cpu;
    using xgrad::bfloat16_t;
    using xgrad::dtype;
    using xgrad::float16_t;
    using xgrad::kernels::binary_op;
    using xgrad::kernels::reduce_op;
    using xgrad::kernels::unary_op;
    using shape_t = std::vector<std::int64_t>;

    constexpr std::array<unary_op, 9> all_unary = {unary_op::neg,  unary_op::exp,  unary_op::log,
                                                   unary_op::sqrt, unary_op::rsqrt, unary_op::abs,
                                                   unary_op::relu, unary_op::sigmoid, unary_op::tanh};
    constexpr std::array<binary_op, 11> all_binary = {binary_op::add, binary_op::sub, binary_op::mul, binary_op::div,
                                                      binary_op::pow, binary_op::eq,  binary_op::ne,  binary_op::lt,
                                                      binary_op::le,  binary_op::gt,  binary_op::ge};

    /// Restores the SIMD limit and the thread count at scope exit.
    struct settings_guard
    {
        int threads = xgrad::get_num_threads();
        ~settings_guard()
        {
            cpu::limit_simd_level(cpu::simd_level::avx2_fma);
            xgrad::set_num_threads(threads);
        }
    };

    /// The SIMD levels the fast kernels can run at on this machine.
    std::vector<cpu::simd_level> simd_levels()
    {
        std::vector<cpu::simd_level> levels;
        if (cpu::simd_supported() >= cpu::simd_level::sse2)
            levels.push_back(cpu::simd_level::sse2);
        if (cpu::simd_supported() >= cpu::simd_level::avx2_fma)
            levels.push_back(cpu::simd_level::avx2_fma);
        if (levels.empty()) // XGRAD_SIMD=scalar build: the kernels are the reference ones
            levels.push_back(cpu::simd_level::scalar);
        return levels;
    }

    std::string level_name(cpu::simd_level level)
    {
        switch (level)
        {
        case cpu::simd_level::scalar: return "scalar";
        case cpu::simd_level::sse2: return "sse2";
        case cpu::simd_level::avx2_fma: return "avx2_fma";
        }
        return "?";
    }

    template <class T>
    constexpr dtype dtype_of()
    {
        if constexpr (std::is_same_v<T, float>)
            return dtype::float32;
        else if constexpr (std::is_same_v<T, double>)
            return dtype::float64;
        else if constexpr (std::is_same_v<T, float16_t>)
            return dtype::float16;
        else if constexpr (std::is_same_v<T, bfloat16_t>)
            return dtype::bfloat16;
        else
            return dtype::int64;
    }

    std::string str(const shape_t& v)
    {
        std::ostringstream os;
        os << '{';
        for (std::size_t i = 0; i < v.size(); ++i)
            os << (i ? ", " : "") << v[i];
        os << '}';
        return os.str();
    }

    std::int64_t numel(const shape_t& shape)
    {
        return std::accumulate(shape.begin(), shape.end(), std::int64_t{1}, std::multiplies<>());
    }

    /// Element offsets of every index of `shape` in row-major order.
    std::vector<std::int64_t> offsets_of(const shape_t& shape, const shape_t& strides)
    {
        std::vector<std::int64_t> out;
        const std::int64_t n = numel(shape);
        out.reserve(static_cast<std::size_t>(n));
        shape_t index(shape.size(), 0);
        for (std::int64_t i = 0; i < n; ++i)
        {
            std::int64_t off = 0;
            for (std::size_t d = 0; d < shape.size(); ++d)
                off += index[d] * strides[d];
            out.push_back(off);
            for (std::size_t d = shape.size(); d-- > 0;)
            {
                if (++index[d] < shape[d])
                    break;
                index[d] = 0;
            }
        }
        return out;
    }

    enum class layout
    {
        contiguous,
        permuted,  // dims laid out in a random order
        padded,    // random dim order, random gaps between rows, a step of 2 innermost
        broadcast  // contiguous with some strides 0 (inputs only)
    };
    constexpr std::array<layout, 3> out_layouts = {layout::contiguous, layout::permuted, layout::padded};
    constexpr std::array<layout, 4> in_layouts = {layout::contiguous, layout::permuted, layout::padded,
                                                  layout::broadcast};

    std::string layout_name(layout l)
    {
        switch (l)
        {
        case layout::contiguous: return "contiguous";
        case layout::permuted: return "permuted";
        case layout::padded: return "padded";
        case layout::broadcast: return "broadcast";
        }
        return "?";
    }

    /// A strided view with its own storage; storage outside the view keeps its fill value.
    template <class T>
    struct view
    {
        shape_t shape, strides;
        std::vector<T> storage;

        T* data() { return storage.data(); }
        const T* data() const { return storage.data(); }
        int ndim() const { return static_cast<int>(shape.size()); }
        std::string describe() const { return "shape " + str(shape) + " strides " + str(strides); }
    };

    shape_t contiguous_strides(const shape_t& shape)
    {
        shape_t strides(shape.size());
        std::int64_t run = 1;
        for (std::size_t d = shape.size(); d-- > 0;)
        {
            strides[d] = run;
            run *= std::max<std::int64_t>(shape[d], 1);
        }
        return strides;
    }

    template <class T>
    view<T> make_view(const shape_t& shape, layout kind, std::mt19937_64& gen, T fill)
    {
        view<T> v;
        v.shape = shape;
        v.strides = contiguous_strides(shape);
        const std::size_t n = shape.size();
        if (kind == layout::permuted || kind == layout::padded)
        {
            std::vector<std::size_t> order(n);
            std::iota(order.begin(), order.end(), std::size_t{0});
            std::shuffle(order.begin(), order.end(), gen);
            std::int64_t run = kind == layout::padded ? 2 : 1;
            for (std::size_t i = n; i-- > 0;)
            {
                const std::size_t d = order[i];
                v.strides[d] = run;
                run *= shape[d] + (kind == layout::padded ? std::int64_t(gen() % 3) : 0);
            }
        }
        else if (kind == layout::broadcast)
            for (std::size_t d = 0; d < n; ++d)
                if (gen() % 2 == 0)
                    v.strides[d] = 0;
        std::int64_t size = 1;
        for (std::size_t d = 0; d < n; ++d)
            size += std::max<std::int64_t>(shape[d] - 1, 0) * v.strides[d];
        v.storage.assign(static_cast<std::size_t>(size), fill);
        return v;
    }

    /// Random shapes with ndim 0..4 and sizes chosen to cross SIMD widths (1, 3, 17, 33),
    /// gather chunks and reduction blocks (1000+), and thread chunks (some > 64K elements).
    shape_t random_shape(std::mt19937_64& gen, int max_ndim = 4, std::int64_t max_numel = 150000)
    {
        static constexpr std::array<std::int64_t, 14> sizes = {1, 1, 2, 3, 5, 7, 16, 17, 33, 64, 129, 200, 1000, 1031};
        for (;;)
        {
            const int ndim = static_cast<int>(gen() % static_cast<unsigned>(max_ndim + 1));
            shape_t shape;
            for (int d = 0; d < ndim; ++d)
                shape.push_back(sizes[gen() % sizes.size()]);
            if (numel(shape) <= max_numel)
                return shape;
        }
    }

    template <class T>
    using bits_t = std::conditional_t<sizeof(T) == 4, std::int32_t, std::int64_t>;

    /// Distance in units in the last place (0 for two NaNs or +-0, huge for NaN vs number).
    template <class T>
    std::int64_t ulp_distance(T a, T b)
    {
        if (std::isnan(a) || std::isnan(b))
            return std::isnan(a) && std::isnan(b) ? 0 : std::numeric_limits<std::int64_t>::max();
        if (a == b)
            return 0;
        auto ordered = [](T x) {
            bits_t<T> i;
            std::memcpy(&i, &x, sizeof x);
            return i < 0 ? std::int64_t{std::numeric_limits<bits_t<T>>::min()} - i : std::int64_t{i};
        };
        const std::int64_t d = ordered(a) - ordered(b);
        return d < 0 ? -d : d;
    }

    template <class T>
    bool same_value(T a, T b)
    {
        if constexpr (std::is_floating_point_v<T>)
            return std::isnan(a) ? std::isnan(b) : std::memcmp(&a, &b, sizeof a) == 0;
        else if constexpr (std::is_same_v<T, std::int64_t>)
            return a == b;
        else
            return std::isnan(xgrad::to_float(a)) ? std::isnan(xgrad::to_float(b)) : a.bits == b.bits;
    }

    template <class T>
    double as_double(T v)
    {
        if constexpr (std::is_same_v<T, float16_t> || std::is_same_v<T, bfloat16_t>)
            return xgrad::to_float(v);
        else
            return static_cast<double>(v);
    }

    /// Compares two output views of one layout: inside the view with `ok(got, want, index)`,
    /// outside it the storage must still hold its fill (kernels write only their view).
    /// Returns "" or a description of the first mismatch.
    template <class T, class Ok>
    std::string compare(const view<T>& got, const view<T>& want, T got_fill, T want_fill, Ok ok)
    {
        std::vector<char> inside(got.storage.size(), 0);
        const auto offs = offsets_of(got.shape, got.strides);
        for (std::size_t i = 0; i < offs.size(); ++i)
        {
            const auto o = static_cast<std::size_t>(offs[i]);
            inside[o] = 1;
            if (!ok(got.storage[o], want.storage[o], i))
            {
                std::ostringstream os;
                os.precision(17);
                os << "element " << i << " (offset " << o << "): got " << as_double(got.storage[o]) << ", want "
                   << as_double(want.storage[o]);
                return os.str();
            }
        }
        for (std::size_t o = 0; o < inside.size(); ++o)
            if (!inside[o] && (!same_value(got.storage[o], got_fill) || !same_value(want.storage[o], want_fill)))
                return "storage outside the view was written at offset " + std::to_string(o);
        return "";
    }

    // Garbage the outputs are filled with before a kernel runs: kernels assign, so neither may
    // show up in a result, and the two differ so that a read of the output would show.
    template <class T>
    T garbage_fast()
    {
        return std::numeric_limits<T>::quiet_NaN();
    }
    template <class T>
    T garbage_reference()
    {
        return T(-7.25);
    }

    template <class T>
    bool within_ulps(T got, T want, std::int64_t ulps)
    {
        return ulp_distance(got, want) <= ulps;
    }

    bool exact_op(unary_op op)
    {
        return op != unary_op::exp && op != unary_op::log && op != unary_op::tanh && op != unary_op::sigmoid;
    }

    /// Random inputs suited to op: values in its interesting range, plus special values.
    template <class T>
    void fill_inputs(std::vector<T>& v, std::mt19937_64& gen, unary_op op)
    {
        const bool f32 = std::is_same_v<T, float>;
        std::uniform_real_distribution<double> dist;
        switch (op)
        {
        case unary_op::exp: dist = std::uniform_real_distribution<double>(f32 ? -110 : -760, f32 ? 95 : 720); break;
        case unary_op::log:
        case unary_op::sqrt:
        case unary_op::rsqrt: dist = std::uniform_real_distribution<double>(-1, 1e4); break;
        case unary_op::sigmoid:
        case unary_op::tanh: dist = std::uniform_real_distribution<double>(-40, 40); break;
        default: dist = std::uniform_real_distribution<double>(-100, 100); break;
        }
        const T specials[] = {T(0),
                              -T(0),
                              std::numeric_limits<T>::infinity(),
                              -std::numeric_limits<T>::infinity(),
                              std::numeric_limits<T>::quiet_NaN(),
                              std::numeric_limits<T>::denorm_min(),
                              T(1),
                              T(-1),
                              T(1e-3),
                              T(1000)};
        for (auto& x : v)
        {
            const auto r = gen() % 64;
            x = r < 10 ? specials[r] : static_cast<T>(dist(gen));
        }
    }

    // -------------------------------------------------------------------------------------
    // unary

    template <class T>
    void check_unary_case(std::mt19937_64& gen, unary_op op, const shape_t& shape, layout out_kind, layout in_kind)
    {
        auto x = make_view<T>(shape, in_kind, gen, T(0));
        fill_inputs(x.storage, gen, op);
        auto got = make_view<T>(shape, out_kind, gen, garbage_fast<T>());
        auto want = got;
        std::fill(want.storage.begin(), want.storage.end(), garbage_reference<T>());
        constexpr dtype dt = dtype_of<T>();
        cpu::unary(got.data(), got.strides.data(), x.data(), x.strides.data(), dt, got.ndim(), shape.data(), op);
        cpu::reference::unary(want.data(), want.strides.data(), x.data(), x.strides.data(), dt, want.ndim(),
                              shape.data(), op);
        const std::int64_t ulps = exact_op(op) ? 0 : 4;
        const std::string err = compare(got, want, garbage_fast<T>(), garbage_reference<T>(),
                                        [&](T g, T w, std::size_t) { return within_ulps(g, w, ulps); });
        INFO("unary op ", int(op), " out ", got.describe(), " (", layout_name(out_kind), "), x ", x.describe(), " (",
             layout_name(in_kind), ")");
        CHECK_MESSAGE(err.empty(), err);
    }

    template <class T>
    void unary_suite(std::mt19937_64& gen)
    {
        for (const unary_op op : all_unary)
            for (int rep = 0; rep < 10; ++rep)
                check_unary_case<T>(gen, op, random_shape(gen), out_layouts[gen() % out_layouts.size()],
                                    in_layouts[gen() % in_layouts.size()]);
    }

    // -------------------------------------------------------------------------------------
    // binary / where

    template <class T>
    void fill_binary_inputs(std::vector<T>& v, std::mt19937_64& gen, binary_op op, bool exponent)
    {
        std::uniform_real_distribution<double> dist(-10, 10);
        std::uniform_int_distribution<int> small(-3, 3);
        for (auto& x : v)
        {
            const auto r = gen() % 32;
            if (r == 0)
                x = std::numeric_limits<T>::quiet_NaN();
            else if (r == 1)
                x = std::numeric_limits<T>::infinity();
            else if (r == 2)
                x = T(0);
            else if (r < 12 || op == binary_op::eq || op == binary_op::ne)
                x = T(small(gen)); // integers: equal pairs happen, pow of negatives is defined
            else
                x = static_cast<T>(exponent ? dist(gen) / 3 : dist(gen));
        }
    }

    template <class T>
    void check_binary_case(std::mt19937_64& gen, binary_op op, const shape_t& shape, layout out_kind, layout a_kind,
                           layout b_kind)
    {
        auto a = make_view<T>(shape, a_kind, gen, T(0));
        auto b = make_view<T>(shape, b_kind, gen, T(0));
        fill_binary_inputs(a.storage, gen, op, false);
        fill_binary_inputs(b.storage, gen, op, op == binary_op::pow);
        auto got = make_view<T>(shape, out_kind, gen, garbage_fast<T>());
        auto want = got;
        std::fill(want.storage.begin(), want.storage.end(), garbage_reference<T>());
        constexpr dtype dt = dtype_of<T>();
        cpu::binary(got.data(), got.strides.data(), a.data(), a.strides.data(), b.data(), b.strides.data(), dt,
                    got.ndim(), shape.data(), op);
        cpu::reference::binary(want.data(), want.strides.data(), a.data(), a.strides.data(), b.data(),
                               b.strides.data(), dt, want.ndim(), shape.data(), op);
        const std::string err = compare(got, want, garbage_fast<T>(), garbage_reference<T>(),
                                        [](T g, T w, std::size_t) { return same_value(g, w); });
        INFO("binary op ", int(op), " out ", got.describe(), " a ", a.describe(), " (", layout_name(a_kind), ") b ",
             b.describe(), " (", layout_name(b_kind), ")");
        CHECK_MESSAGE(err.empty(), err);
    }

    template <class T>
    void binary_suite(std::mt19937_64& gen)
    {
        for (const binary_op op : all_binary)
            for (int rep = 0; rep < 10; ++rep)
                check_binary_case<T>(gen, op, random_shape(gen), out_layouts[gen() % out_layouts.size()],
                                     in_layouts[gen() % in_layouts.size()], in_layouts[gen() % in_layouts.size()]);
    }

    template <class T>
    void check_where_case(std::mt19937_64& gen, const shape_t& shape, layout out_kind, layout c_kind, layout a_kind,
                          layout b_kind)
    {
        auto c = make_view<T>(shape, c_kind, gen, T(0));
        auto a = make_view<T>(shape, a_kind, gen, T(0));
        auto b = make_view<T>(shape, b_kind, gen, T(0));
        const T conds[] = {T(0), -T(0), T(1), T(-2), std::numeric_limits<T>::quiet_NaN()};
        for (auto& v : c.storage)
            v = conds[gen() % 5];
        std::normal_distribution<double> dist;
        for (auto& v : a.storage)
            v = static_cast<T>(dist(gen));
        for (auto& v : b.storage)
            v = static_cast<T>(dist(gen));
        auto got = make_view<T>(shape, out_kind, gen, garbage_fast<T>());
        auto want = got;
        std::fill(want.storage.begin(), want.storage.end(), garbage_reference<T>());
        constexpr dtype dt = dtype_of<T>();
        cpu::where(got.data(), got.strides.data(), c.data(), c.strides.data(), a.data(), a.strides.data(), b.data(),
                   b.strides.data(), dt, got.ndim(), shape.data());
        cpu::reference::where(want.data(), want.strides.data(), c.data(), c.strides.data(), a.data(), a.strides.data(),
                              b.data(), b.strides.data(), dt, want.ndim(), shape.data());
        const std::string err = compare(got, want, garbage_fast<T>(), garbage_reference<T>(),
                                        [](T g, T w, std::size_t) { return same_value(g, w); });
        INFO("where out ", got.describe(), " cond ", c.describe(), " a ", a.describe(), " b ", b.describe());
        CHECK_MESSAGE(err.empty(), err);
    }

    template <class T>
    void where_suite(std::mt19937_64& gen)
    {
        for (int rep = 0; rep < 40; ++rep)
            check_where_case<T>(gen, random_shape(gen), out_layouts[gen() % out_layouts.size()],
                                in_layouts[gen() % in_layouts.size()], in_layouts[gen() % in_layouts.size()],
                                in_layouts[gen() % in_layouts.size()]);
    }

    // -------------------------------------------------------------------------------------
    // reduce

    /// Runs one reduction (fast and reference) and checks it; returns the fast result view.
    template <class T>
    view<T> check_reduce_case(std::mt19937_64& gen, const view<T>& x, int n_keep, layout out_kind, reduce_op op)
    {
        const shape_t kept(x.shape.begin(), x.shape.begin() + n_keep);
        auto got = make_view<T>(kept, out_kind, gen, garbage_fast<T>());
        auto want = got;
        std::fill(want.storage.begin(), want.storage.end(), garbage_reference<T>());
        constexpr dtype dt = dtype_of<T>();
        cpu::reduce(got.data(), got.strides.data(), x.data(), x.strides.data(), dt, x.ndim(), n_keep, x.shape.data(),
                    op);
        cpu::reference::reduce(want.data(), want.strides.data(), x.data(), x.strides.data(), dt, x.ndim(), n_keep,
                               x.shape.data(), op);

        // Exact-ish sums (long double) and sum|x| per output, in the reference's index order.
        const shape_t reduced(x.shape.begin() + n_keep, x.shape.end());
        const shape_t kept_strides(x.strides.begin(), x.strides.begin() + n_keep);
        const shape_t red_strides(x.strides.begin() + n_keep, x.strides.end());
        const auto kept_offs = offsets_of(kept, kept_strides);
        const auto red_offs = offsets_of(reduced, red_strides);
        std::vector<long double> exact(kept_offs.size()), magnitude(kept_offs.size());
        for (std::size_t i = 0; i < kept_offs.size(); ++i)
            for (const auto r : red_offs)
            {
                const T v = x.storage[static_cast<std::size_t>(kept_offs[i] + r)];
                exact[i] += v;
                magnitude[i] += std::abs(static_cast<long double>(v));
            }
        const auto rn = static_cast<double>(red_offs.size());
        const double u = std::numeric_limits<T>::epsilon() / 2;
        const double ref_bound = rn * u / (1 - rn * u); // gamma_R
        // At simd_level::scalar (an XGRAD_SIMD=scalar build) the fast kernel is the reference.
        const double fast_bound = cpu::simd_level_in_use() == cpu::simd_level::scalar
                                      ? ref_bound
                                      : (140 + std::ceil(std::log2(rn + 1))) * u;
        const std::string err =
            compare(got, want, garbage_fast<T>(), garbage_reference<T>(), [&](T g, T w, std::size_t i) {
                if (op == reduce_op::max || std::isnan(w) || std::isinf(w))
                    return same_value(g, w);
                const auto m = static_cast<double>(magnitude[i]);
                const auto e = static_cast<double>(exact[i]);
                return std::abs(g - e) <= fast_bound * m + std::numeric_limits<T>::denorm_min() &&
                       std::abs(w - e) <= ref_bound * m + std::numeric_limits<T>::denorm_min();
            });
        INFO((op == reduce_op::sum ? "sum" : "max"), " x ", x.describe(), " n_keep ", n_keep, " out ", got.describe());
        CHECK_MESSAGE(err.empty(), err);
        return got;
    }

    template <class T>
    view<T> random_input(std::mt19937_64& gen, const shape_t& shape, layout kind, bool with_nan)
    {
        auto x = make_view<T>(shape, kind, gen, T(0));
        std::uniform_real_distribution<double> dist(-1, 1);
        for (auto& v : x.storage)
            v = static_cast<T>(dist(gen));
        if (with_nan && !x.storage.empty())
            x.storage[gen() % x.storage.size()] = std::numeric_limits<T>::quiet_NaN();
        return x;
    }

    /// Views of a contiguous tensor of `logical` shape with the dims in `order` first...: the
    /// permutation the ops layer applies to move the reduced dims last.
    template <class T>
    view<T> permuted_input(std::mt19937_64& gen, const shape_t& logical, const std::vector<std::size_t>& order)
    {
        auto base = random_input<T>(gen, logical, layout::contiguous, false);
        view<T> v;
        v.storage = std::move(base.storage);
        for (const auto d : order)
        {
            v.shape.push_back(logical[d]);
            v.strides.push_back(base.strides[d]);
        }
        return v;
    }

    /// Layouts that exercise each reduce path: (input view, n_keep).
    template <class T>
    std::vector<std::pair<view<T>, int>> reduce_patterns(std::mt19937_64& gen)
    {
        std::vector<std::pair<view<T>, int>> cases;
        // sum(x, 0) of a contiguous [1000, 70]: columns path, 16 row blocks.
        cases.emplace_back(permuted_input<T>(gen, {1000, 70}, {1, 0}), 1);
        // sum over (0, 2, 3) of a contiguous [8, 16, 20, 20] (batch-norm statistics).
        cases.emplace_back(permuted_input<T>(gen, {8, 16, 20, 20}, {1, 0, 2, 3}), 1);
        // sum(x, 0) of [40, 300]: columns path, one row block.
        cases.emplace_back(permuted_input<T>(gen, {40, 300}, {1, 0}), 1);
        // sum(x, 0) of [3, 100000]: columns path, many column blocks, one row block.
        cases.emplace_back(permuted_input<T>(gen, {3, 100000}, {1, 0}), 1);
        // sum(x, 0) of [70000, 17]: columns path, 1094 row blocks, threads over blocks.
        cases.emplace_back(permuted_input<T>(gen, {70000, 17}, {1, 0}), 1);
        // sum(x, 0) of [70000, 5]: too narrow for the columns path, gathered row path.
        cases.emplace_back(permuted_input<T>(gen, {70000, 5}, {1, 0}), 1);
        // Full reduction of 300000 elements: 293 blocks, threads over blocks.
        cases.emplace_back(random_input<T>(gen, {300000}, layout::contiguous, false), 0);
        // Row reductions [300, 1031] and [100000, 3] (tiny rows).
        cases.emplace_back(random_input<T>(gen, {300, 1031}, layout::contiguous, false), 1);
        cases.emplace_back(random_input<T>(gen, {100000, 3}, layout::contiguous, false), 1);
        // Reduce a broadcast dim (stride 0) and a padded multi-dim reduction.
        cases.emplace_back(random_input<T>(gen, {129, 1000}, layout::broadcast, false), 1);
        cases.emplace_back(random_input<T>(gen, {33, 17, 129}, layout::padded, false), 1);
        return cases;
    }

    template <class T>
    void reduce_suite(std::mt19937_64& gen)
    {
        for (const reduce_op op : {reduce_op::sum, reduce_op::max})
        {
            for (int rep = 0; rep < 30; ++rep)
            {
                const shape_t shape = random_shape(gen);
                const int n_keep = static_cast<int>(gen() % (shape.size() + 1));
                const auto x = random_input<T>(gen, shape, in_layouts[gen() % in_layouts.size()], rep % 5 == 0);
                check_reduce_case(gen, x, n_keep, out_layouts[gen() % out_layouts.size()], op);
            }
            for (const auto& pattern : reduce_patterns<T>(gen))
                for (const layout out_kind : out_layouts)
                    check_reduce_case(gen, pattern.first, pattern.second, out_kind, op);
        }
    }

    // -------------------------------------------------------------------------------------
    // matmul

    enum class major
    {
        row,
        column
    };

    /// batch x rows x cols operand; batch stride 0 when broadcast; ld padded by `pad`.
    template <class T>
    view<T> matrix(std::mt19937_64& gen, std::int64_t batch, std::int64_t rows, std::int64_t cols, major mj,
                   std::int64_t pad, bool broadcast_batch)
    {
        view<T> v;
        v.shape = {batch, rows, cols};
        const std::int64_t ld = (mj == major::row ? cols : rows) + pad;
        const std::int64_t matrix_size = ld * (mj == major::row ? rows : cols);
        v.strides = {broadcast_batch ? 0 : matrix_size, mj == major::row ? ld : 1, mj == major::row ? 1 : ld};
        v.storage.resize(static_cast<std::size_t>(broadcast_batch ? matrix_size : batch * matrix_size) + 1);
        std::uniform_real_distribution<double> dist(-1, 1);
        for (auto& x : v.storage)
            x = static_cast<T>(dist(gen));
        return v;
    }

    template <class T>
    void check_matmul(const view<T>& a, const view<T>& b, std::int64_t batch, std::int64_t m, std::int64_t n,
                      std::int64_t k)
    {
        const auto size = static_cast<std::size_t>(batch * m * n);
        std::vector<T> got(size, garbage_fast<T>()), want(size, garbage_reference<T>());
        constexpr dtype dt = dtype_of<T>();
        cpu::matmul(got.data(), a.data(), a.strides.data(), b.data(), b.strides.data(), dt, batch, m, n, k);
        cpu::reference::matmul(want.data(), a.data(), a.strides.data(), b.data(), b.strides.data(), dt, batch, m, n,
                               k);
        const double u = std::numeric_limits<T>::epsilon() / 2;
        const double gamma = static_cast<double>(k) * u / (1 - static_cast<double>(k) * u);
        std::string err;
        for (std::int64_t p = 0; p < batch && err.empty(); ++p)
            for (std::int64_t i = 0; i < m && err.empty(); ++i)
                for (std::int64_t j = 0; j < n && err.empty(); ++j)
                {
                    double mag = 0;
                    for (std::int64_t q = 0; q < k; ++q)
                        mag += std::abs(double(a.storage[p * a.strides[0] + i * a.strides[1] + q * a.strides[2]]) *
                                        double(b.storage[p * b.strides[0] + q * b.strides[1] + j * b.strides[2]]));
                    const auto idx = static_cast<std::size_t>((p * m + i) * n + j);
                    if (!(std::abs(double(got[idx]) - double(want[idx])) <= 2 * gamma * mag))
                        err = "entry (" + std::to_string(p) + ", " + std::to_string(i) + ", " + std::to_string(j) +
                              "): got " + std::to_string(got[idx]) + ", want " + std::to_string(want[idx]);
                }
        INFO("matmul batch ", batch, " m ", m, " n ", n, " k ", k, " a ", a.describe(), " b ", b.describe());
        CHECK_MESSAGE(err.empty(), err);
    }

    template <class T>
    void matmul_suite(std::mt19937_64& gen)
    {
        static constexpr std::array<std::int64_t, 6> dims = {1, 2, 3, 17, 64, 100};
        for (const major ma : {major::row, major::column})
            for (const major mb : {major::row, major::column})
                for (int rep = 0; rep < 6; ++rep)
                {
                    const std::int64_t batch = 1 + std::int64_t(gen() % 4), m = dims[gen() % dims.size()],
                                       n = dims[gen() % dims.size()], k = dims[gen() % dims.size()];
                    const auto a = matrix<T>(gen, batch, m, k, ma, rep % 2 ? 3 : 0, rep == 2);
                    const auto b = matrix<T>(gen, batch, k, n, mb, rep % 3 ? 0 : 5, rep == 3);
                    check_matmul(a, b, batch, m, n, k);
                }
        // Many small products, and large ones that OpenBLAS threads itself.
        check_matmul(matrix<T>(gen, 40, 8, 9, major::row, 0, false), matrix<T>(gen, 40, 9, 7, major::column, 0, false),
                     40, 8, 7, 9);
        check_matmul(matrix<T>(gen, 2, 200, 150, major::column, 1, false),
                     matrix<T>(gen, 2, 150, 170, major::row, 0, true), 2, 200, 170, 150);
        // Operands BLAS cannot read in place are packed: rows broadcast (row stride 0) and a
        // column stride 0 (every column the same).
        auto a = matrix<T>(gen, 3, 5, 4, major::row, 0, false);
        a.strides = {20, 0, 1};
        auto b = matrix<T>(gen, 3, 4, 6, major::column, 0, false);
        b.strides = {24, 1, 0};
        check_matmul(a, b, 3, 5, 6, 4);
    }
}

TEST_CASE("cpu kernels: the dispatcher picks a SIMD instruction set")
{
    if (cpu::simd_supported() == cpu::simd_level::scalar)
    {
        MESSAGE("XGRAD_SIMD=scalar build: the kernels are the reference loops");
        return;
    }
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    const bool avx2_fma = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    CHECK(cpu::simd_supported() == (avx2_fma ? cpu::simd_level::avx2_fma : cpu::simd_level::sse2));
#endif
    CHECK(cpu::simd_level_in_use() == cpu::simd_supported());
    settings_guard guard;
    cpu::limit_simd_level(cpu::simd_level::sse2);
    CHECK(cpu::simd_level_in_use() == cpu::simd_level::sse2);
    MESSAGE("SIMD level in use by default: ", level_name(cpu::simd_supported()));
}

TEST_CASE("cpu kernels: allocator and host copies")
{
    for (const std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{100}, std::size_t{1} << 20})
    {
        void* p = cpu::allocate(n);
        REQUIRE(p != nullptr);
        CHECK(reinterpret_cast<std::uintptr_t>(p) % 64 == 0);
        std::vector<unsigned char> src(n), back(n);
        for (std::size_t i = 0; i < n; ++i)
            src[i] = static_cast<unsigned char>(i * 7);
        cpu::copy_from_host(p, src.data(), n);
        cpu::copy_to_host(back.data(), p, n);
        CHECK(src == back);
        cpu::deallocate(p);
    }
    cpu::deallocate(nullptr);
}

TEST_CASE("cpu kernels: unary, binary, where match the reference")
{
    settings_guard guard;
    xgrad::set_num_threads(3);
    // Runs suite at every SIMD level, from the same random cases.
    auto at_each_level = [](auto suite) {
        for (const auto level : simd_levels())
        {
            cpu::limit_simd_level(level);
            INFO("SIMD level ", level_name(level));
            std::mt19937_64 gen(1);
            suite(gen);
        }
    };
    SUBCASE("unary")
    {
        at_each_level([](std::mt19937_64& gen) {
            unary_suite<float>(gen);
            unary_suite<double>(gen);
        });
    }
    SUBCASE("binary")
    {
        at_each_level([](std::mt19937_64& gen) {
            binary_suite<float>(gen);
            binary_suite<double>(gen);
        });
    }
    SUBCASE("where")
    {
        at_each_level([](std::mt19937_64& gen) {
            where_suite<float>(gen);
            where_suite<double>(gen);
        });
    }
}

TEST_CASE("cpu kernels: special values")
{
    settings_guard guard;
    for (const auto level : simd_levels())
    {
        cpu::limit_simd_level(level);
        INFO("SIMD level ", level_name(level));
        const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
        // 11 elements: one full AVX2 batch plus a tail.
        const std::vector<float> x = {nan, inf, -inf, 0.0f, -0.0f, 1000.0f, -1000.0f, 89.0f, -104.0f, 1e-40f, -3.0f};
        const shape_t shape = {static_cast<std::int64_t>(x.size())}, strides = {1};
        auto run = [&](unary_op op) {
            std::vector<float> out(x.size(), 123.0f);
            cpu::unary(out.data(), strides.data(), x.data(), strides.data(), dtype::float32, 1, shape.data(), op);
            return out;
        };
        const auto relu = run(unary_op::relu);
        CHECK(std::isnan(relu[0]));
        CHECK(relu[1] == inf);
        CHECK(relu[2] == 0.0f);
        CHECK(relu[10] == 0.0f);
        const auto sig = run(unary_op::sigmoid);
        CHECK(std::isnan(sig[0]));
        CHECK(sig[1] == 1.0f);
        CHECK(sig[2] == 0.0f);
        CHECK(sig[3] == 0.5f);
        CHECK(sig[5] == 1.0f);
        CHECK(sig[6] == 0.0f);
        const auto ex = run(unary_op::exp);
        CHECK(ex[1] == inf);
        CHECK(ex[2] == 0.0f);
        CHECK(ex[7] == inf);
        const auto lg = run(unary_op::log);
        CHECK(lg[3] == -inf);
        CHECK(std::isnan(lg[10]));
        const auto th = run(unary_op::tanh);
        CHECK(th[5] == 1.0f);
        CHECK(th[6] == -1.0f);
        CHECK(std::isnan(th[0]));

        // Comparisons with NaN behave as in C++: only != is true.
        const std::vector<double> a = {std::nan(""), 1.0, 2.0}, b = {std::nan(""), std::nan(""), 2.0};
        const shape_t s3 = {3}, st = {1};
        auto cmp = [&](binary_op op) {
            std::vector<double> out(3, 99.0);
            cpu::binary(out.data(), st.data(), a.data(), st.data(), b.data(), st.data(), dtype::float64, 1, s3.data(),
                        op);
            return out;
        };
        CHECK(cmp(binary_op::eq) == std::vector<double>{0, 0, 1});
        CHECK(cmp(binary_op::ne) == std::vector<double>{1, 1, 0});
        CHECK(cmp(binary_op::lt) == std::vector<double>{0, 0, 0});
        CHECK(cmp(binary_op::ge) == std::vector<double>{0, 0, 1});
        // where: a NaN condition is != 0, so it selects a; -0 selects b.
        const std::vector<double> c = {std::nan(""), -0.0, 3.0};
        std::vector<double> w(3, 99.0);
        cpu::where(w.data(), st.data(), c.data(), st.data(), a.data(), st.data(), b.data(), st.data(), dtype::float64,
                   1, s3.data());
        CHECK(std::isnan(w[0]));
        CHECK(std::isnan(w[1]));
        CHECK(w[2] == 2.0);
    }
}

TEST_CASE("cpu kernels: in-place (output is the input view) and 0-d / empty tensors")
{
    settings_guard guard;
    xgrad::set_num_threads(2);
    std::mt19937_64 gen(7);
    for (const auto level : simd_levels())
    {
        cpu::limit_simd_level(level);
        INFO("SIMD level ", level_name(level));
        for (const layout kind : out_layouts)
        {
            const shape_t shape = {70, 1031};
            auto x = random_input<double>(gen, shape, kind, false);
            auto expected = x;
            cpu::reference::unary(expected.data(), expected.strides.data(), x.data(), x.strides.data(), dtype::float64,
                                  2, shape.data(), unary_op::tanh);
            cpu::unary(x.data(), x.strides.data(), x.data(), x.strides.data(), dtype::float64, 2, shape.data(),
                       unary_op::tanh);
            // Whole storages: inside the view within 4 ulp, outside it untouched (identical).
            std::size_t bad = 0;
            for (std::size_t i = 0; i < x.storage.size(); ++i)
                bad += !within_ulps(x.storage[i], expected.storage[i], 4);
            CHECK(bad == 0);

            auto b = random_input<double>(gen, shape, layout::broadcast, false);
            auto sum = x;
            cpu::reference::binary(sum.data(), sum.strides.data(), x.data(), x.strides.data(), b.data(),
                                   b.strides.data(), dtype::float64, 2, shape.data(), binary_op::add);
            cpu::binary(x.data(), x.strides.data(), x.data(), x.strides.data(), b.data(), b.strides.data(),
                        dtype::float64, 2, shape.data(), binary_op::add);
            bad = 0;
            for (std::size_t i = 0; i < x.storage.size(); ++i)
                bad += !same_value(x.storage[i], sum.storage[i]);
            CHECK(bad == 0);
        }

        // ndim 0: one element.
        const float x0 = 2.0f;
        float y0 = std::nanf("");
        cpu::unary(&y0, nullptr, &x0, nullptr, dtype::float32, 0, nullptr, unary_op::sqrt);
        CHECK(y0 == std::sqrt(2.0f));
        float s0 = std::nanf("");
        cpu::reduce(&s0, nullptr, &x0, nullptr, dtype::float32, 0, 0, nullptr, reduce_op::sum);
        CHECK(s0 == 2.0f);

        // Empty tensors: nothing is written; the sum over an empty range is 0.
        const shape_t empty = {3, 0, 5}, strides = {5, 5, 1};
        float untouched = 42.0f;
        cpu::unary(&untouched, strides.data(), &x0, strides.data(), dtype::float32, 3, empty.data(), unary_op::exp);
        cpu::fill(&untouched, strides.data(), dtype::float32, 3, empty.data(), 1.0);
        CHECK(untouched == 42.0f);
        std::vector<float> sums(3, std::nanf(""));
        const shape_t out_strides = {1};
        cpu::reduce(sums.data(), out_strides.data(), &x0, strides.data(), dtype::float32, 3, 1, empty.data(),
                    reduce_op::sum);
        CHECK(sums == std::vector<float>{0, 0, 0});
        // No outputs at all (a kept dim of size 0): nothing is written.
        const shape_t no_rows = {0, 5}, row_strides = {5, 1};
        cpu::reduce(&untouched, out_strides.data(), &x0, row_strides.data(), dtype::float32, 2, 1, no_rows.data(),
                    reduce_op::max);
        CHECK(untouched == 42.0f);
    }
}

TEST_CASE("cpu kernels: reduce matches the reference")
{
    settings_guard guard;
    xgrad::set_num_threads(3);
    for (const auto level : simd_levels())
    {
        cpu::limit_simd_level(level);
        INFO("SIMD level ", level_name(level));
        std::mt19937_64 gen(2);
        reduce_suite<float>(gen);
        reduce_suite<double>(gen);
    }
}

TEST_CASE("cpu kernels: reduce results do not depend on the thread count")
{
    settings_guard guard;
    for (const auto level : simd_levels())
    {
        cpu::limit_simd_level(level);
        INFO("SIMD level ", level_name(level));
        std::mt19937_64 gen(3);
        for (const auto& pattern : reduce_patterns<float>(gen))
            for (const reduce_op op : {reduce_op::sum, reduce_op::max})
            {
                const auto& x = pattern.first;
                const int n_keep = pattern.second;
                const shape_t kept(x.shape.begin(), x.shape.begin() + n_keep);
                const shape_t strides = contiguous_strides(kept);
                std::vector<std::vector<float>> results;
                for (const int threads : {1, 2, 3})
                {
                    xgrad::set_num_threads(threads);
                    std::vector<float> out(static_cast<std::size_t>(numel(kept)), garbage_fast<float>());
                    cpu::reduce(out.data(), strides.data(), x.data(), x.strides.data(), dtype::float32, x.ndim(),
                                n_keep, x.shape.data(), op);
                    results.push_back(std::move(out));
                }
                INFO("x ", x.describe(), " n_keep ", n_keep);
                CHECK(std::memcmp(results[0].data(), results[1].data(), results[0].size() * sizeof(float)) == 0);
                CHECK(std::memcmp(results[0].data(), results[2].data(), results[0].size() * sizeof(float)) == 0);
            }
    }
}

namespace
{
    template <class T>
    void random_values(std::vector<T>& v, std::mt19937_64& gen)
    {
        std::normal_distribution<double> dist(0, 1000);
        const double specials[] = {0.0,     -0.0,   std::numeric_limits<double>::infinity(),
                                   -std::numeric_limits<double>::infinity(),
                                   std::nan(""), 65504.0, 65520.0, 1e-6, 1e20, -1e20, 9.3e18, 0.5, -2.5};
        for (auto& x : v)
        {
            const auto r = gen() % 40;
            const double d = r < std::size(specials) ? specials[r] : dist(gen);
            if constexpr (std::is_same_v<T, std::int64_t>)
                x = r < 3 ? std::numeric_limits<std::int64_t>::max() - std::int64_t(r)
                          : static_cast<std::int64_t>(std::trunc(dist(gen)));
            else if constexpr (std::is_same_v<T, float16_t>)
                x = xgrad::to_float16(d);
            else if constexpr (std::is_same_v<T, bfloat16_t>)
                x = xgrad::to_bfloat16(d);
            else
                x = static_cast<T>(d);
        }
    }

    template <class T>
    T garbage_of()
    {
        if constexpr (std::is_same_v<T, std::int64_t>)
            return std::int64_t{0x5a5a5a5a5a5a};
        else if constexpr (std::is_same_v<T, float16_t>)
            return float16_t{0x7e01};
        else if constexpr (std::is_same_v<T, bfloat16_t>)
            return bfloat16_t{0x7fc1};
        else
            return std::numeric_limits<T>::quiet_NaN();
    }

    template <class O, class X>
    void check_copy_pair(std::mt19937_64& gen)
    {
        for (int rep = 0; rep < 6; ++rep)
        {
            // rep 0: large contiguous (memcpy / F16C / bulk conversion, threaded).
            const shape_t shape = rep == 0 ? shape_t{100, 1031} : random_shape(gen, 4, 70000);
            auto x = make_view<X>(shape, rep == 0 ? layout::contiguous : in_layouts[gen() % in_layouts.size()], gen,
                                  X{});
            random_values(x.storage, gen);
            auto got = make_view<O>(shape, rep == 0 ? layout::contiguous : out_layouts[gen() % out_layouts.size()],
                                    gen, garbage_of<O>());
            auto want = got;
            cpu::copy(got.data(), got.strides.data(), dtype_of<O>(), x.data(), x.strides.data(), dtype_of<X>(),
                      got.ndim(), shape.data());
            cpu::reference::copy(want.data(), want.strides.data(), dtype_of<O>(), x.data(), x.strides.data(),
                                 dtype_of<X>(), want.ndim(), shape.data());
            const auto err = compare(got, want, garbage_of<O>(), garbage_of<O>(),
                                     [](O g, O w, std::size_t) { return same_value(g, w); });
            INFO("copy ", xgrad::name(dtype_of<X>()), " -> ", xgrad::name(dtype_of<O>()), " out ", got.describe(),
                 " x ", x.describe());
            CHECK_MESSAGE(err.empty(), err);
        }
    }

    template <class O>
    void check_copy_to(std::mt19937_64& gen)
    {
        check_copy_pair<O, float>(gen);
        check_copy_pair<O, double>(gen);
        check_copy_pair<O, float16_t>(gen);
        check_copy_pair<O, bfloat16_t>(gen);
        check_copy_pair<O, std::int64_t>(gen);
    }

    /// One element converted by the fast copy.
    template <class O, class X>
    O convert_one(X x)
    {
        O out{};
        cpu::copy(&out, nullptr, dtype_of<O>(), &x, nullptr, dtype_of<X>(), 0, nullptr);
        return out;
    }
}

TEST_CASE("cpu kernels: copy converts every dtype pair like the reference, on strided views")
{
    settings_guard guard;
    xgrad::set_num_threads(3);
    for (const auto level : simd_levels())
    {
        cpu::limit_simd_level(level);
        INFO("SIMD level ", level_name(level));
        std::mt19937_64 gen(4);
        check_copy_to<float>(gen);
        check_copy_to<double>(gen);
        check_copy_to<float16_t>(gen);
        check_copy_to<bfloat16_t>(gen);
        check_copy_to<std::int64_t>(gen);
    }
}

TEST_CASE("cpu kernels: copy rounding and conversion rules")
{
    settings_guard guard;
    for (const auto level : simd_levels())
    {
        cpu::limit_simd_level(level);
        INFO("SIMD level ", level_name(level));
        // float16: ties to even, overflow at the midpoint 65520.
        CHECK(convert_one<float16_t>(1.0f + 0x1p-11f).bits == 0x3c00);     // tie -> even (1.0)
        CHECK(convert_one<float16_t>(1.0f + 3 * 0x1p-11f).bits == 0x3c02); // tie -> even (up)
        CHECK(convert_one<float16_t>(65519.0f).bits == 0x7bff);
        CHECK(convert_one<float16_t>(65520.0f).bits == 0x7c00);
        CHECK(convert_one<float16_t>(0x1p-25f).bits == 0x0000);        // half the smallest subnormal: even
        CHECK(convert_one<float16_t>(0x1.8p-25f).bits == 0x0001);
        // A float64 rounds in one step: through float32 this would tie and round down to 1.0.
        CHECK(convert_one<float16_t>(1.0 + 0x1p-11 + 0x1p-40).bits == 0x3c01);
        // bfloat16.
        CHECK(convert_one<bfloat16_t>(1.0f + 0x1p-8f).bits == 0x3f80);
        CHECK(convert_one<bfloat16_t>(1.0f + 3 * 0x1p-8f).bits == 0x3f82);
        CHECK(convert_one<bfloat16_t>(1.0 + 0x1p-8 + 0x1p-30).bits == 0x3f81);
        CHECK(convert_one<bfloat16_t>(std::int64_t{(std::int64_t{1} << 60) + (std::int64_t{1} << 52) + 1}).bits ==
              xgrad::to_bfloat16(0x1p60 + 0x1p53).bits);
        // To int64: truncation toward zero, saturating, NaN -> 0.
        CHECK(convert_one<std::int64_t>(2.7f) == 2);
        CHECK(convert_one<std::int64_t>(-2.7) == -2);
        CHECK(convert_one<std::int64_t>(std::nan("")) == 0);
        CHECK(convert_one<std::int64_t>(1e30) == std::numeric_limits<std::int64_t>::max());
        CHECK(convert_one<std::int64_t>(-1e30f) == std::numeric_limits<std::int64_t>::min());
        CHECK(convert_one<std::int64_t>(xgrad::to_float16(-3.5f)) == -3);
        CHECK(convert_one<double>(std::int64_t{-5}) == -5.0);
        CHECK(convert_one<float>(xgrad::bfloat16_t{0x3fc0}) == 1.5f);
    }
}

TEST_CASE("cpu kernels: bulk float16 <-> float32 copies agree with half.hpp bit for bit")
{
    settings_guard guard;
    for (const auto level : simd_levels())
    {
        cpu::limit_simd_level(level);
        INFO("SIMD level ", level_name(level));
        // Every float16 bit pattern to float32 (contiguous: the F16C path at avx2_fma).
        std::vector<float16_t> h(65536 + 5);
        for (std::size_t i = 0; i < h.size(); ++i)
            h[i].bits = static_cast<std::uint16_t>(i);
        std::vector<float> f(h.size());
        const shape_t shape = {static_cast<std::int64_t>(h.size())}, strides = {1};
        cpu::copy(f.data(), strides.data(), dtype::float32, h.data(), strides.data(), dtype::float16, 1, shape.data());
        std::size_t bad = 0;
        for (std::size_t i = 0; i < h.size(); ++i)
            bad += !same_value(f[i], xgrad::to_float(h[i]));
        CHECK(bad == 0);

        // Random float32 bit patterns, and exact halfway points between float16 values, back.
        std::mt19937_64 gen(5);
        std::vector<float> src(200003);
        for (std::size_t i = 0; i < src.size(); ++i)
        {
            const auto r = static_cast<std::uint32_t>(gen());
            if (i % 2 == 0)
                std::memcpy(&src[i], &r, sizeof r);
            else
            {
                const float lo = xgrad::to_float(float16_t{static_cast<std::uint16_t>(r & 0x7bfe)});
                const float hi = xgrad::to_float(float16_t{static_cast<std::uint16_t>((r & 0x7bfe) + 1)});
                src[i] = (r >> 31 ? -1.0f : 1.0f) * (lo + (hi - lo) / 2);
            }
        }
        std::vector<float16_t> back(src.size(), float16_t{0x1234});
        const shape_t s2 = {static_cast<std::int64_t>(src.size())};
        cpu::copy(back.data(), strides.data(), dtype::float16, src.data(), strides.data(), dtype::float32, 1, s2.data());
        bad = 0;
        for (std::size_t i = 0; i < src.size(); ++i)
            bad += back[i].bits != xgrad::to_float16(src[i]).bits;
        CHECK(bad == 0);
    }
}

TEST_CASE("cpu kernels: fill every dtype")
{
    settings_guard guard;
    std::mt19937_64 gen(6);
    auto check = [&](auto tag, double value) {
        using T = decltype(tag);
        for (const layout kind : out_layouts)
        {
            const shape_t shape = random_shape(gen, 4, 100000);
            auto got = make_view<T>(shape, kind, gen, garbage_of<T>());
            auto want = got;
            cpu::fill(got.data(), got.strides.data(), dtype_of<T>(), got.ndim(), shape.data(), value);
            cpu::reference::fill(want.data(), want.strides.data(), dtype_of<T>(), want.ndim(), shape.data(), value);
            const auto err = compare(got, want, garbage_of<T>(), garbage_of<T>(),
                                     [](T g, T w, std::size_t) { return same_value(g, w); });
            INFO("fill ", xgrad::name(dtype_of<T>()), " ", got.describe());
            CHECK_MESSAGE(err.empty(), err);
        }
    };
    for (const double value : {0.0, 1.0, -2.5, 1.0 + 0x1p-11 + 0x1p-40, 1e30})
    {
        check(float{}, value);
        check(double{}, value);
        check(float16_t{}, value);
        check(bfloat16_t{}, value);
        check(std::int64_t{}, value);
    }
    std::int64_t i = 0;
    cpu::fill(&i, nullptr, dtype::int64, 0, nullptr, -3.9);
    CHECK(i == -3);
    float16_t h{};
    cpu::fill(&h, nullptr, dtype::float16, 0, nullptr, 1.0 + 0x1p-11 + 0x1p-40);
    CHECK(h.bits == 0x3c01);
}

TEST_CASE("cpu kernels: matmul matches the reference")
{
    settings_guard guard;
    xgrad::set_num_threads(3);
    std::mt19937_64 gen(8);
    SUBCASE("float32") { matmul_suite<float>(gen); }
    SUBCASE("float64") { matmul_suite<double>(gen); }
    SUBCASE("k = 0 gives zeros")
    {
        std::vector<float> out(2 * 3 * 4, std::nanf(""));
        const float dummy = 1.0f;
        const shape_t as = {0, 0, 1}, bs = {0, 4, 1};
        cpu::matmul(out.data(), &dummy, as.data(), &dummy, bs.data(), dtype::float32, 2, 3, 4, 0);
        CHECK(std::all_of(out.begin(), out.end(), [](float v) { return v == 0.0f; }));
    }
    SUBCASE("dimensions above INT_MAX are rejected")
    {
        const shape_t st = {0, 1, 1};
        CHECK_THROWS_AS(cpu::matmul(nullptr, nullptr, st.data(), nullptr, st.data(), dtype::float32, 1,
                                    std::int64_t{INT_MAX} + 1, 1, 1),
                        std::invalid_argument);
        CHECK_THROWS_AS(cpu::matmul(nullptr, nullptr, st.data(), nullptr, st.data(), dtype::float64, 1, 1, 1,
                                    std::int64_t{INT_MAX} + 1),
                        std::invalid_argument);
    }
}

TEST_CASE("cpu kernels: one_hot")
{
    auto check = [](auto tag) {
        using T = decltype(tag);
        const std::vector<std::int64_t> labels = {2, 0, 1, 2};
        std::vector<T> out(labels.size() * 3, garbage_of<T>());
        CHECK(cpu::one_hot(out.data(), labels.data(), dtype_of<T>(), 4, 3) == -1);
        for (std::size_t i = 0; i < labels.size(); ++i)
            for (std::int64_t c = 0; c < 3; ++c)
                CHECK(as_double(out[i * 3 + static_cast<std::size_t>(c)]) == (c == labels[i] ? 1.0 : 0.0));
        const std::vector<std::int64_t> bad = {0, 1, 3, -1};
        CHECK(cpu::one_hot(out.data(), bad.data(), dtype_of<T>(), 4, 3) == 2);
        const std::vector<std::int64_t> negative = {0, -1};
        CHECK(cpu::one_hot(out.data(), negative.data(), dtype_of<T>(), 2, 3) == 1);
    };
    check(float{});
    check(double{});
    check(float16_t{});
    check(bfloat16_t{});
    check(std::int64_t{});

    // Large enough to be split over threads.
    settings_guard guard;
    xgrad::set_num_threads(3);
    std::vector<std::int64_t> labels(50000);
    for (std::size_t i = 0; i < labels.size(); ++i)
        labels[i] = static_cast<std::int64_t>(i % 10);
    std::vector<float> out(labels.size() * 10, std::nanf(""));
    CHECK(cpu::one_hot(out.data(), labels.data(), dtype::float32, 50000, 10) == -1);
    CHECK(std::accumulate(out.begin(), out.end(), 0.0) == 50000.0);
}

TEST_CASE("cpu kernels: simd_level::scalar runs the reference kernels")
{
    settings_guard guard;
    cpu::limit_simd_level(cpu::simd_level::scalar);
    CHECK(cpu::simd_level_in_use() == cpu::simd_level::scalar);
    std::mt19937_64 gen(9);
    const shape_t shape = {33, 129};
    const auto x = random_input<float>(gen, shape, layout::permuted, false);
    const shape_t strides = contiguous_strides(shape);
    std::vector<float> fast(static_cast<std::size_t>(numel(shape))), ref(fast.size());
    for (const unary_op op : all_unary)
    {
        cpu::unary(fast.data(), strides.data(), x.data(), x.strides.data(), dtype::float32, 2, shape.data(), op);
        cpu::reference::unary(ref.data(), strides.data(), x.data(), x.strides.data(), dtype::float32, 2, shape.data(),
                              op);
        CHECK(std::memcmp(fast.data(), ref.data(), fast.size() * sizeof(float)) == 0);
    }
    auto same = [&] { return std::memcmp(fast.data(), ref.data(), fast.size() * sizeof(float)) == 0; };
    for (const binary_op op : all_binary)
    {
        cpu::binary(fast.data(), strides.data(), x.data(), x.strides.data(), x.data(), strides.data(), dtype::float32,
                    2, shape.data(), op);
        cpu::reference::binary(ref.data(), strides.data(), x.data(), x.strides.data(), x.data(), strides.data(),
                               dtype::float32, 2, shape.data(), op);
        CHECK(same());
    }
    cpu::where(fast.data(), strides.data(), x.data(), x.strides.data(), x.data(), strides.data(), x.data(),
               x.strides.data(), dtype::float32, 2, shape.data());
    cpu::reference::where(ref.data(), strides.data(), x.data(), x.strides.data(), x.data(), strides.data(), x.data(),
                          x.strides.data(), dtype::float32, 2, shape.data());
    CHECK(same());
    cpu::copy(fast.data(), strides.data(), dtype::float32, x.data(), x.strides.data(), dtype::float32, 2, shape.data());
    cpu::reference::copy(ref.data(), strides.data(), dtype::float32, x.data(), x.strides.data(), dtype::float32, 2,
                         shape.data());
    CHECK(same());
    cpu::fill(fast.data(), strides.data(), dtype::float32, 2, shape.data(), 0.1);
    cpu::reference::fill(ref.data(), strides.data(), dtype::float32, 2, shape.data(), 0.1);
    CHECK(same());
    const shape_t ma = {0, 129, 1}, mb = {0, 1, 129}; // x as [33, 129] and its transpose
    cpu::matmul(fast.data(), x.data(), ma.data(), x.data(), mb.data(), dtype::float32, 1, 33, 33, 129);
    cpu::reference::matmul(ref.data(), x.data(), ma.data(), x.data(), mb.data(), dtype::float32, 1, 33, 33, 129);
    CHECK(std::memcmp(fast.data(), ref.data(), 33 * 33 * sizeof(float)) == 0);
    const shape_t one = {1};
    cpu::reduce(fast.data(), one.data(), x.data(), x.strides.data(), dtype::float32, 2, 1, shape.data(), reduce_op::sum);
    cpu::reference::reduce(ref.data(), one.data(), x.data(), x.strides.data(), dtype::float32, 2, 1, shape.data(),
                           reduce_op::sum);
    CHECK(std::memcmp(fast.data(), ref.data(), 33 * sizeof(float)) == 0);
    // The BLAS dimension limit holds on this path too.
    const shape_t st = {0, 1, 1};
    CHECK_THROWS_AS(cpu::matmul(nullptr, nullptr, st.data(), nullptr, st.data(), dtype::float32, 1, 1,
                                std::int64_t{INT_MAX} + 1, 1),
                    std::invalid_argument);
}
