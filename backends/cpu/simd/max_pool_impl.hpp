#pragma once
// The max-pooling SIMD functors' bodies (kernels/index.cpp): the 2x2 NCHW row and plane loops,
// the channels-last window loop (max_pool_taps_fn) and the channels-last gradient rows.
// Included ONLY through simd/kernels_impl.hpp by the per-instruction-set translation units
// (simd/sse2.cpp, avx2.cpp, avx512.cpp); every helper is a template on the architecture, and no
// standard-library math is called (the rule and its reason: kernels_impl.hpp).
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "backends/cpu/simd/batch_impl.hpp"

namespace xgrad::cpu::simd
{
    // The max-pooling row and channel loops are plain loops, not xsimd batches: GCC vectorises
    // both at -O3 in each instruction set's translation unit (the 2x2 one with its even/odd
    // permutes, which xsimd 8 does not offer); the plane loop gathers with xsimd, which GCC does
    // not do on its own here. The selection is exact comparisons, so the result of an element
    // does not depend on the vector width or on whether it falls in a tail.
    // `take` below is the kernel's rule: the best so far is a number and v is larger or NaN.

    namespace impl
    {
        /// Max pooling compares bfloat16 elements as the floats they are (their bits shifted
        /// up, exact) and writes back the chosen element's own bits: `key` widens, `from_key`
        /// narrows a key that came from an element (exact: no rounding, NaN payloads kept).
        /// For float and double both are the identity.
        template <class T>
        auto key(T v) noexcept
        {
            if constexpr (std::is_same_v<T, bfloat16_t>)
            {
                const std::uint32_t u = std::uint32_t{v.bits} << 16;
                float f;
                std::memcpy(&f, &u, 4);
                return f;
            }
            else
                return v;
        }
        template <class T, class K>
        T from_key(K k) noexcept
        {
            if constexpr (std::is_same_v<T, bfloat16_t>)
            {
                std::uint32_t u;
                std::memcpy(&u, &k, 4);
                return T{static_cast<std::uint16_t>(u >> 16)};
            }
            else
                return k;
        }

        /// One step of max pooling's search: takes tap v (at position p) when the best so far is
        /// a number and v is larger or NaN, so that the first maximum in tap order wins and the
        /// first NaN wins over numbers. Branch-free, so that the loops calling it vectorise.
        template <class T>
        void max_pool_pick(T& best, std::int64_t& at, T v, std::int64_t p) noexcept
        {
            const bool take = best == best && !(v <= best);
            best = take ? v : best;
            at = take ? p : at;
        }

        /// The 2x2 window with its first tap at x[q]: taps q, q + 1, q + row, q + row + 1 in
        /// that order; writes their maximum to best and returns the chosen tap's offset.
        template <class T>
        std::int64_t max_pool_2x2(const T* x, std::int64_t q, std::int64_t row, T& best) noexcept
        {
            const T b = x[q + 1], c = x[q + row], d = x[q + row + 1];
            best = x[q];
            std::int64_t at = q;
            max_pool_pick(best, at, b, q + 1);
            max_pool_pick(best, at, c, q + row);
            max_pool_pick(best, at, d, q + row + 1);
            return at;
        }
    }

    template <class Arch, class T>
    void max_pool_2x2_row_fn::operator()(Arch, T* out, std::int64_t* idx, const T* r0, std::int64_t row,
                                         std::int64_t base, std::int64_t n) const noexcept
    {
        for (std::int64_t o = 0; o < n; ++o)
            idx[o] = base + impl::max_pool_2x2(r0, 2 * o, row, out[o]);
    }

    template <class Arch, class T>
    void max_pool_2x2_plane_fn::operator()(Arch, T* out, std::int64_t* idx, const T* x, const std::int32_t* offsets,
                                           std::int32_t row, std::int64_t base, std::int64_t n) const noexcept
    {
        // Four gathers per batch of windows; the chosen tap is kept as a code 0..3 (exact in
        // T) and turned into its offset when stored. `take` is the rule of the row loop above,
        // written with isnan because xsimd's != is the ordered compare on some sets.
        std::int64_t o = 0;
        if constexpr (std::is_same_v<T, float>)
        {
            using B = impl::batch<Arch, float>;
            using I = impl::batch<Arch, std::int32_t>;
            constexpr std::int64_t w = impl::lanes<Arch, float>;
            static_assert(static_cast<std::int64_t>(I::size) == w, "one int32 offset per float lane");
            const I one(1), down(row);
            for (; o + w <= n; o += w)
            {
                const I p = I::load_unaligned(offsets + o);
                B best = B::gather(x, p), code(0.0f);
                const auto pick = [&](const B& v, float k) {
                    const auto take = ~xsimd::isnan(best) & ((v > best) | xsimd::isnan(v));
                    best = xsimd::select(take, v, best);
                    code = xsimd::select(take, B(k), code);
                };
                pick(B::gather(x, p + one), 1.0f);
                pick(B::gather(x, p + down), 2.0f);
                pick(B::gather(x, p + down + one), 3.0f);
                best.store_unaligned(out + o);
                alignas(64) float chosen[w];
                code.store_aligned(chosen);
                for (std::int64_t j = 0; j < w; ++j)
                {
                    const auto c = static_cast<std::int64_t>(chosen[j]);
                    idx[o + j] = base + offsets[o + j] + (c >> 1) * row + (c & 1);
                }
            }
        }
        for (; o < n; ++o)
            idx[o] = base + impl::max_pool_2x2(x, offsets[o], row, out[o]);
    }

    template <class Arch, class T>
    void max_pool_taps_fn::operator()(Arch, T* out, std::int64_t out_step, std::int64_t* idx, std::int64_t idx_step,
                                      const T* x, std::int64_t x_step, const std::int64_t* offsets, std::int64_t ntaps,
                                      std::int64_t base, std::int64_t n, std::int64_t windows) const noexcept
    {
        // A whole output row per call: with the 32 or 64 channels of a small CNN a window is
        // only a few vectors, and a dispatched call per window cost about as much as its loads
        // (kernels_bench's channels-last pool ran 25-35% faster against the copy probe).
        for (std::int64_t w = 0; w < windows; ++w)
        {
            T* __restrict o = out + w * out_step;
            std::int64_t* __restrict id = idx + w * idx_step;
            const T* xw = x + w * x_step;
            const std::int64_t at = base + w * x_step;
            if (ntaps == 4)
            {
                // The 2x2 window: the four taps of a channel in registers, the maximum and its
                // position selected without branches, one store of each.
                const T *x0 = xw + offsets[0], *x1 = xw + offsets[1], *x2 = xw + offsets[2], *x3 = xw + offsets[3];
                const std::int64_t p0 = at + offsets[0], p1 = at + offsets[1], p2 = at + offsets[2],
                                   p3 = at + offsets[3];
                for (std::int64_t j = 0; j < n; ++j)
                {
                    auto best = impl::key(x0[j]);
                    std::int64_t pos = p0;
                    impl::max_pool_pick(best, pos, impl::key(x1[j]), p1);
                    impl::max_pool_pick(best, pos, impl::key(x2[j]), p2);
                    impl::max_pool_pick(best, pos, impl::key(x3[j]), p3);
                    o[j] = impl::from_key<T>(best);
                    id[j] = pos + j;
                }
                continue;
            }
            // Any other window, tap by tap over the run (o and id stay in L1 for the channel
            // counts of a CNN), so that the inner loop is contiguous; id holds the chosen
            // tap's offset until the last pass adds the window's position and the channel.
            const T* x0 = xw + offsets[0];
            for (std::int64_t j = 0; j < n; ++j)
            {
                o[j] = x0[j];
                id[j] = offsets[0];
            }
            for (std::int64_t k = 1; k < ntaps; ++k)
            {
                const T* xk = xw + offsets[k];
                const std::int64_t off = offsets[k];
                for (std::int64_t j = 0; j < n; ++j)
                {
                    auto best = impl::key(o[j]);
                    impl::max_pool_pick(best, id[j], impl::key(xk[j]), off);
                    o[j] = impl::from_key<T>(best);
                }
            }
            for (std::int64_t j = 0; j < n; ++j)
                id[j] += at + j;
        }
    }

    namespace impl
    {
        /// max_pool_grad_row_fn's loops, with (Masked) or without the ReLU mask y > 0.
        template <bool Masked, class T>
        void max_pool_grad_row(T* dx, std::int64_t dx_step, const T* g, std::int64_t g_step, const std::int64_t* idx,
                               std::int64_t idx_step, const T* y, const std::int64_t* window, std::int64_t pos,
                               std::int64_t width, std::int64_t c) noexcept
        {
            for (std::int64_t w = 0; w < width; ++w)
            {
                T* __restrict o = dx + w * dx_step;
                const std::int64_t ow = window[w];
                if (ow < 0)
                {
                    for (std::int64_t j = 0; j < c; ++j)
                        o[j] = T{};
                    continue;
                }
                const T* __restrict gw = g + ow * g_step;
                const T* __restrict yw = Masked ? y + ow * idx_step : nullptr;
                const std::int64_t* __restrict iw = idx + ow * idx_step;
                const std::int64_t p = pos + w * dx_step;
                if constexpr (std::is_same_v<T, bfloat16_t>)
                {
                    // The same on the bits, so that the loop vectorises: y > 0 is a positive
                    // number (sign clear, not zero, not NaN); 0 + g is g with -0 made +0 and a
                    // NaN quieted.
                    for (std::int64_t j = 0; j < c; ++j)
                    {
                        const std::uint16_t gb = gw[j].bits, yb = Masked ? yw[j].bits : std::uint16_t{1};
                        const bool open = !Masked || (yb != 0 && yb <= 0x7f80u);
                        const std::uint16_t sum = gb == 0x8000u              ? std::uint16_t{0}
                                                  : (gb & 0x7fffu) > 0x7f80u ? std::uint16_t(gb | 0x40u)
                                                                             : gb;
                        o[j].bits = iw[j] == p + j && open ? sum : std::uint16_t{0};
                    }
                }
                else
                    for (std::int64_t j = 0; j < c; ++j)
                        o[j] = iw[j] == p + j && (!Masked || yw[j] > T(0)) ? T(0) + gw[j] : T(0);
            }
        }
    }

    template <class Arch, class T>
    void max_pool_grad_row_fn::operator()(Arch, T* dx, std::int64_t dx_step, const T* g, std::int64_t g_step,
                                          const std::int64_t* idx, std::int64_t idx_step, const T* y,
                                          const std::int64_t* window, std::int64_t pos, std::int64_t width,
                                          std::int64_t c) const noexcept
    {
        // Plain channel loops that the compiler vectorises at each level (a 64-bit compare
        // selecting between the term and zero, and with y a second compare); 0 + g keeps
        // put_add's sum, which turns -0 into +0.
        if (y)
            impl::max_pool_grad_row<true>(dx, dx_step, g, g_step, idx, idx_step, y, window, pos, width, c);
        else
            impl::max_pool_grad_row<false>(dx, dx_step, g, g_step, idx, idx_step, y, window, pos, width, c);
    }
}
