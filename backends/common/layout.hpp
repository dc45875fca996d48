#pragma once
// Internal to the backends: the N-d layout walking that the CPU's fast kernels share
// (backends/cpu/kernels/: elementwise.cpp, reduce.cpp, copy_fill.cpp) and the CUDA backend's index normalisation
// (device_loop.hpp) starts from.
//
// A fast kernel first normalises the layout of its operands: drop size-1 dimensions, order the
// rest by operand 0's strides, and merge dimensions that are contiguous for every operand
// (`space`). Most calls then become one flat contiguous run, or rows whose innermost stride is
// 1 for every operand, or 0 for an input (a broadcast scalar, e.g. a per-channel bias over
// H*W). A `cursor` walks a space run by run inside its rows, from any flat position, so each
// thread can start at its own chunk; for_each_run hands such runs to a loop.
#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace xgrad::kernels::detail
{
    /// The index space of N operands of one shape, normalised: no size-1 dimensions,
    /// ordered by operand 0's strides (largest first), adjacent dimensions merged when they
    /// are contiguous for every operand. At least one dimension (shape {1}: one element).
    template <std::size_t N>
    struct space
    {
        std::vector<std::int64_t> shape;
        std::array<std::vector<std::int64_t>, N> strides;
        std::int64_t numel = 1;
        /// Operand k walks memory contiguously in flat order / is one scalar throughout.
        std::array<bool, N> flat_contiguous{};
        std::array<bool, N> flat_scalar{};

        int last() const noexcept { return static_cast<int>(shape.size()) - 1; }
        std::int64_t inner() const noexcept { return shape.back(); }
        std::int64_t inner_stride(std::size_t k) const noexcept { return strides[k].back(); }
    };

    template <std::size_t N>
    space<N> make_space(int ndim, const std::int64_t* shape, const std::array<const std::int64_t*, N>& strides)
    {
        space<N> sp;
        std::vector<int> dims;
        // An empty space first: its other extents may multiply past int64.
        for (int d = 0; d < ndim; ++d)
            if (shape[d] == 0)
            {
                sp.numel = 0;
                return sp;
            }
        for (int d = 0; d < ndim; ++d)
        {
            if (shape[d] != 1)
                dims.push_back(d);
            sp.numel *= shape[d]; // the element count of a non-empty view, which fits
        }
        std::stable_sort(dims.begin(), dims.end(), [&](int p, int q) { return strides[0][p] > strides[0][q]; });
        for (const int d : dims)
        {
            bool merge = !sp.shape.empty();
            for (std::size_t k = 0; k < N && merge; ++k)
            {
                // A product past int64 is no operand's stride: the dims stay apart.
                std::int64_t outer = 0;
                merge = !__builtin_mul_overflow(strides[k][d], shape[d], &outer) && sp.strides[k].back() == outer;
            }
            if (merge)
            {
                sp.shape.back() *= shape[d];
                for (std::size_t k = 0; k < N; ++k)
                    sp.strides[k].back() = strides[k][d];
                continue;
            }
            sp.shape.push_back(shape[d]);
            for (std::size_t k = 0; k < N; ++k)
                sp.strides[k].push_back(strides[k][d]);
        }
        if (sp.shape.empty())
        {
            sp.shape.push_back(1);
            for (std::size_t k = 0; k < N; ++k)
                sp.strides[k].push_back(0);
        }
        for (std::size_t k = 0; k < N; ++k)
        {
            bool contiguous = true, scalar = true;
            std::int64_t expected = 1;
            for (int d = sp.last(); d >= 0; --d)
            {
                contiguous = contiguous && (sp.shape[d] == 1 || sp.strides[k][d] == expected);
                scalar = scalar && sp.strides[k][d] == 0;
                expected *= sp.shape[d];
            }
            sp.flat_contiguous[k] = contiguous;
            sp.flat_scalar[k] = scalar && !contiguous;
        }
        return sp;
    }

    /// A position in a space: the multi-index and each operand's element offset.
    template <std::size_t N>
    class cursor
    {
    public:
        explicit cursor(const space<N>& sp) : m_sp(&sp), m_index(sp.shape.size(), 0) {}

        const std::array<std::int64_t, N>& offset() const noexcept { return m_offset; }
        std::int64_t row_left() const noexcept { return m_sp->inner() - m_index.back(); }

        void seek(std::int64_t flat) noexcept
        {
            m_offset = {};
            for (int d = m_sp->last(); d >= 0; --d)
            {
                const std::int64_t i = flat % m_sp->shape[d];
                flat /= m_sp->shape[d];
                m_index[d] = i;
                for (std::size_t k = 0; k < N; ++k)
                    m_offset[k] += i * m_sp->strides[k][d];
            }
        }

        /// Visits the next len elements as runs inside rows, f(offsets, run_length), and
        /// moves past them.
        template <class F>
        void walk(std::int64_t len, F&& f)
        {
            const int last = m_sp->last();
            while (len > 0)
            {
                const std::int64_t run = std::min(len, row_left());
                f(m_offset, run);
                len -= run;
                m_index[last] += run;
                for (std::size_t k = 0; k < N; ++k)
                    m_offset[k] += run * m_sp->strides[k][last];
                if (m_index[last] == m_sp->shape[last])
                    carry();
            }
        }

        void advance(std::int64_t len)
        {
            walk(len, [](const auto&, std::int64_t) {});
        }

    private:
        void carry() noexcept
        {
            for (int d = m_sp->last();;)
            {
                for (std::size_t k = 0; k < N; ++k)
                    m_offset[k] -= m_sp->shape[d] * m_sp->strides[k][d];
                m_index[d] = 0;
                if (--d < 0)
                    return;
                ++m_index[d];
                for (std::size_t k = 0; k < N; ++k)
                    m_offset[k] += m_sp->strides[k][d];
                if (m_index[d] < m_sp->shape[d])
                    return;
            }
        }

        const space<N>* m_sp;
        std::vector<std::int64_t> m_index;
        std::array<std::int64_t, N> m_offset{};
    };

    /// Calls run(offsets, inner_strides, n) over the flat range [begin, end) of sp: one call
    /// when every operand is flat (contiguous or scalar), else one per row segment.
    template <std::size_t N, class Run>
    void for_each_run(const space<N>& sp, std::int64_t begin, std::int64_t end, Run&& run)
    {
        std::array<std::int64_t, N> offsets{}, strides{};
        bool all_flat = true;
        for (std::size_t k = 0; k < N; ++k)
        {
            all_flat = all_flat && (sp.flat_contiguous[k] || sp.flat_scalar[k]);
            offsets[k] = sp.flat_contiguous[k] ? begin : 0;
            strides[k] = sp.flat_contiguous[k] ? 1 : 0;
        }
        if (all_flat)
        {
            run(offsets, strides, end - begin);
            return;
        }
        for (std::size_t k = 0; k < N; ++k)
            strides[k] = sp.inner_stride(k);
        cursor<N> c(sp);
        c.seek(begin);
        c.walk(end - begin, [&](const auto& off, std::int64_t n) { run(off, strides, n); });
    }
}

namespace xgrad::cpu::detail
{
    // The CPU backend's code names these detail::... from inside xgrad::cpu.
    using namespace ::xgrad::kernels::detail;
}
