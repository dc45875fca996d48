#pragma once
// Shared by the tests of the CPU backend kernels (tests/backends/cpu/test_cpu_kernels_*.cpp, one ctest
// executable test_cpu_kernels). They check every fast kernel against its reference twin over
// random shapes (ndim 0..4, sizes that cross SIMD widths, gather buffers, reduction blocks and
// thread chunks), random layouts (contiguous, permuted, padded/strided, broadcast with stride
// 0), float32 and float64, every op code, and every SIMD level this machine has
// (limit_simd_level caps the run-time choice, so the SSE2 code is tested on AVX2 machines too).
// Each test file states the tolerances of its kernels, and why.
//
// This header holds what several of those files use: the SIMD levels and a guard that restores
// the settings, strided views with random layouts, random shapes, and the comparison of a fast
// result with the reference one (ulp distances, and storage outside the view left untouched).
#include <doctest/doctest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <numeric>
#include <random>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include "backends/cpu/cpu_kernels.hpp"
#include "backends/cpu/simd/level.hpp"
#include "tests/support/op_cases.hpp"
#include "xgrad/half.hpp"
#include "xgrad/interop.hpp"
#include "xgrad/tensor.hpp"
#include "xgrad/thread_pool.hpp"

namespace cpu_kernels_test
{
    namespace cpu = xgrad::cpu;
    using xgrad::bfloat16_t;
    using xgrad::contiguous_strides;
    using xgrad::dtype;
    using xgrad::dtype_of;
    using xgrad::float16_t;
    using xgrad::kernels::binary_op;
    using xgrad::kernels::reduce_op;
    using xgrad::kernels::unary_op;
    using shape_t = std::vector<std::int64_t>;

    using tests::all_binary; // every op code, from the lists of backends/common/kernels.hpp
    using tests::all_unary;

    /// The CPU backend's fast kernels, as a table (in an XGRAD_SIMD=scalar build, where they are
    /// not compiled, the reference table). Tests call `fast.unary(...)` and compare with
    /// `cpu::reference::unary(...)`.
    inline const xgrad::kernels::kernel_table& fast = cpu::fast_kernels();

    /// Restores the SIMD limits and the thread count at scope exit.
    struct settings_guard
    {
        int threads = xgrad::get_num_threads();
        ~settings_guard()
        {
            cpu::limit_simd_level(cpu::simd_level_max);
            cpu::limit_avx512_bf16(true);
            xgrad::set_num_threads(threads);
        }
    };

    /// The SIMD levels the fast kernels can run at on this machine.
    inline std::vector<cpu::simd_level> simd_levels()
    {
        std::vector<cpu::simd_level> levels;
        if (cpu::simd_supported() >= cpu::simd_level::sse2)
            levels.push_back(cpu::simd_level::sse2);
        if (cpu::simd_supported() >= cpu::simd_level::avx2_fma)
            levels.push_back(cpu::simd_level::avx2_fma);
        if (cpu::simd_supported() >= cpu::simd_level::avx512)
            levels.push_back(cpu::simd_level::avx512);
        if (levels.empty()) // XGRAD_SIMD=scalar build: the kernels are the reference ones
            levels.push_back(cpu::simd_level::scalar);
        return levels;
    }

    inline std::string level_name(cpu::simd_level level) { return cpu::simd_level_name(level); }

    inline std::string str(const shape_t& v)
    {
        std::ostringstream os;
        os << '{';
        for (std::size_t i = 0; i < v.size(); ++i)
            os << (i ? ", " : "") << v[i];
        os << '}';
        return os.str();
    }

    inline std::int64_t numel(const shape_t& shape)
    {
        return std::accumulate(shape.begin(), shape.end(), std::int64_t{1}, std::multiplies<>());
    }

    /// Element offsets of every index of `shape` in row-major order.
    inline std::vector<std::int64_t> offsets_of(const shape_t& shape, const shape_t& strides)
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
        permuted, // dims laid out in a random order
        padded,   // random dim order, random gaps between rows, a step of 2 innermost
        broadcast // contiguous with some strides 0 (inputs only)
    };
    constexpr std::array<layout, 3> out_layouts = {layout::contiguous, layout::permuted, layout::padded};
    constexpr std::array<layout, 4> in_layouts = {layout::contiguous, layout::permuted, layout::padded,
                                                  layout::broadcast};

    inline std::string layout_name(layout l)
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
    inline shape_t random_shape(std::mt19937_64& gen, int max_ndim = 4, std::int64_t max_numel = 150000)
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

    /// v rounded once to T (round to nearest even for the 16-bit types).
    template <class T>
    T from_double(double v)
    {
        if constexpr (std::is_same_v<T, float16_t>)
            return xgrad::to_float16(v);
        else if constexpr (std::is_same_v<T, bfloat16_t>)
            return xgrad::to_bfloat16(v);
        else
            return static_cast<T>(v);
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

    /// The ranges random_window draws a window geometry's fields from (each inclusive).
    struct window_ranges
    {
        std::int64_t n_lo, n_hi;
        std::vector<std::int64_t> channels; // one is picked
        std::int64_t hw_lo, hw_hi;          // input height and width
        std::int64_t kernel_hi, stride_hi, padding_hi, dilation_hi;
    };

    /// A random window (window2d_dims with its output size) whose output is not empty.
    inline xgrad::kernels::window2d_dims random_window(std::mt19937_64& gen, const window_ranges& r)
    {
        auto pick = [&](std::int64_t lo, std::int64_t hi) {
            return lo + std::int64_t(gen() % std::uint64_t(hi - lo + 1));
        };
        for (;;)
        {
            xgrad::kernels::window2d_dims d{};
            d.n = pick(r.n_lo, r.n_hi);
            d.c = r.channels[gen() % r.channels.size()];
            d.h = pick(r.hw_lo, r.hw_hi);
            d.w = pick(r.hw_lo, r.hw_hi);
            d.kh = pick(1, r.kernel_hi);
            d.kw = pick(1, r.kernel_hi);
            d.sh = pick(1, r.stride_hi);
            d.sw = pick(1, r.stride_hi);
            d.ph = pick(0, r.padding_hi);
            d.pw = pick(0, r.padding_hi);
            d.dh = pick(1, r.dilation_hi);
            d.dw = pick(1, r.dilation_hi);
            const std::int64_t span_h = d.dh * (d.kh - 1) + 1, span_w = d.dw * (d.kw - 1) + 1;
            if (d.h + 2 * d.ph < span_h || d.w + 2 * d.pw < span_w)
                continue;
            d.oh = (d.h + 2 * d.ph - span_h) / d.sh + 1;
            d.ow = (d.w + 2 * d.pw - span_w) / d.sw + 1;
            return d;
        }
    }
}
