// The float16 conversion of the fast batch-norm kernels (declared in convert.hpp):
// float16 rows widened to float before the SIMD functors read them, and float results rounded
// back once. Kept out of kernels.cpp so the F16C calls live with the one concern that uses
// them. Built with the default flags; the hardware path (detail::f16_to_f32_hw /
// f32_to_f16_hw: F16C, or AVX-512 at that level) runs only when use_f16c() (the caller's flag)
// is true, else
// backends/common/convert.hpp's scalar conversions. (bfloat16 is converted in registers by the SIMD
// functors themselves, simd_impl.hpp.)
#include <cstdint>

#include "backends/common/convert.hpp"
#include "backends/cpu/batch_norm/convert.hpp"
#include "backends/cpu/dispatch.hpp"

namespace xgrad::cpu::bn_detail
{
    namespace
    {
        /// d[j] = s[j] as float, j < n (exact).
        void widen_run(float* d, const float16_t* s, std::int64_t n, bool f16c)
        {
            if (f16c)
                return cpu::detail::f16_to_f32_hw(d, reinterpret_cast<const std::uint16_t*>(s), n);
            for (std::int64_t j = 0; j < n; ++j)
                d[j] = detail::widen<float>(s[j]);
        }

        /// d[j] = s[j] rounded to float16 (nearest even; backends/common/convert.hpp's rules), j < n.
        void narrow_run(float16_t* d, const float* s, std::int64_t n, bool f16c)
        {
            if (f16c)
                return cpu::detail::f32_to_f16_hw(reinterpret_cast<std::uint16_t*>(d), s, n);
            for (std::int64_t j = 0; j < n; ++j)
                d[j] = detail::convert<float16_t>(s[j]);
        }
    }

    void widen_rows(float* dst, const float16_t* src, std::int64_t rows, std::int64_t n, std::int64_t stride, bool f16c)
    {
        if (stride == n)
            return widen_run(dst, src, rows * n, f16c);
        for (std::int64_t r = 0; r < rows; ++r)
            widen_run(dst + r * n, src + r * stride, n, f16c);
    }

    void narrow_rows(float16_t* dst, const float* src, std::int64_t rows, std::int64_t n, std::int64_t stride,
                     bool f16c)
    {
        if (stride == n)
            return narrow_run(dst, src, rows * n, f16c);
        for (std::int64_t r = 0; r < rows; ++r)
            narrow_run(dst + r * stride, src + r * n, n, f16c);
    }
}
