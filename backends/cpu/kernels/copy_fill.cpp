// The fast copy (any pair of dtypes, converting) and fill kernels: typed loops over the runs
// of the normalised layout (layout.hpp), threaded over the flat element range; memcpy where
// both sides are contiguous and of one dtype, and the F16C bulk conversions of
// simd/kernels.hpp for contiguous float16 <-> float32 copies when the processor has F16C
// (use_f16c). Element conversions are those of convert.hpp, shared with the reference kernels.
// At simd_level::scalar the dispatch serves their xgrad::cpu::reference twins instead.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "backends/common/convert.hpp"
#include "backends/common/layout.hpp"
#include "backends/cpu/cpu_kernels.hpp"
#include "backends/cpu/dispatch.hpp"
#include "backends/cpu/simd/kernels.hpp"
#include "xgrad/thread_pool.hpp"

namespace xgrad::cpu
{
    namespace
    {
        using detail::for_each_run;
        using detail::grain;
        using detail::make_space;
        using detail::use_f16c;

        // ---------------------------------------------------------------------------------
        // copy / fill

        template <class O, class X>
        void copy_impl(O* out, const std::int64_t* out_strides, const X* x, const std::int64_t* x_strides, int ndim,
                       const std::int64_t* shape)
        {
            const auto sp = make_space<2>(ndim, shape, {out_strides, x_strides});
            const bool f16c = use_f16c();
            const bool avx512 = simd_level_in_use() == simd_level::avx512;
            parallel_for(0, sp.numel, grain, [&](std::int64_t begin, std::int64_t end) {
                for_each_run(sp, begin, end, [&](const auto& off, const auto& st, std::int64_t n) {
                    O* o = out + off[0];
                    const X* in = x + off[1];
                    if (st[0] == 1 && st[1] == 1)
                    {
                        if constexpr (std::is_same_v<O, X>)
                            std::memcpy(o, in, static_cast<std::size_t>(n) * sizeof(O));
                        else if constexpr (std::is_same_v<O, float16_t> && std::is_same_v<X, float>)
                        {
                            if (f16c)
                                return detail::f32_to_f16_hw(reinterpret_cast<std::uint16_t*>(o), in, n);
                        }
                        else if constexpr (std::is_same_v<O, float> && std::is_same_v<X, float16_t>)
                        {
                            if (f16c)
                                return detail::f16_to_f32_hw(o, reinterpret_cast<const std::uint16_t*>(in), n);
                        }
                        else if constexpr (std::is_same_v<O, bfloat16_t> && std::is_same_v<X, float>)
                        {
                            if (avx512)
                                return simd::f32_to_bf16_avx512(reinterpret_cast<std::uint16_t*>(o), in, n);
                            // to_bfloat16 without its branch, so that the loop vectorises: the
                            // rounded bits, or the quieted NaN.
                            for (std::int64_t j = 0; j < n; ++j)
                            {
                                std::uint32_t u;
                                std::memcpy(&u, in + j, 4);
                                const std::uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
                                const std::uint32_t nan = (u >> 16) | 0x40u;
                                o[j].bits = static_cast<std::uint16_t>((u & 0x7fffffffu) > 0x7f800000u ? nan : rounded);
                            }
                            return;
                        }
                        else if constexpr (std::is_same_v<O, float> && std::is_same_v<X, bfloat16_t>)
                        {
                            if (avx512)
                                return simd::bf16_to_f32_avx512(o, reinterpret_cast<const std::uint16_t*>(in), n);
                            for (std::int64_t j = 0; j < n; ++j)
                            {
                                const std::uint32_t u = std::uint32_t{in[j].bits} << 16;
                                std::memcpy(o + j, &u, 4);
                            }
                            return;
                        }
                        if constexpr (!std::is_same_v<O, X>)
                            for (std::int64_t j = 0; j < n; ++j)
                                o[j] = detail::convert<O>(in[j]);
                    }
                    else if (st[0] == 1 && st[1] == 0)
                        std::fill_n(o, n, detail::convert<O>(in[0]));
                    else
                        for (std::int64_t j = 0; j < n; ++j)
                            o[j * st[0]] = detail::convert<O>(in[j * st[1]]);
                });
            });
        }

        template <class T>
        void fill_impl(T* out, const std::int64_t* out_strides, int ndim, const std::int64_t* shape, T value)
        {
            const auto sp = make_space<1>(ndim, shape, {out_strides});
            parallel_for(0, sp.numel, grain, [&](std::int64_t begin, std::int64_t end) {
                for_each_run(sp, begin, end, [&](const auto& off, const auto& st, std::int64_t n) {
                    if (st[0] == 1)
                        std::fill_n(out + off[0], n, value);
                    else
                        for (std::int64_t j = 0; j < n; ++j)
                            out[off[0] + j * st[0]] = value;
                });
            });
        }
    }

    void fill(void* out, const std::int64_t* out_strides, dtype dt, int ndim, const std::int64_t* shape, double value)
    {
        detail::visit_dtype(dt, [&](auto tag) {
            using T = decltype(tag);
            fill_impl(static_cast<T*>(out), out_strides, ndim, shape, detail::convert<T>(value));
        });
    }

    void copy(void* out, const std::int64_t* out_strides, dtype out_dt, const void* x, const std::int64_t* x_strides,
              dtype x_dt, int ndim, const std::int64_t* shape)
    {
        detail::visit_dtype(out_dt, [&](auto out_tag) {
            detail::visit_dtype(x_dt, [&](auto x_tag) {
                using O = decltype(out_tag);
                using X = decltype(x_tag);
                copy_impl(static_cast<O*>(out), out_strides, static_cast<const X*>(x), x_strides, ndim, shape);
            });
        });
    }
}
