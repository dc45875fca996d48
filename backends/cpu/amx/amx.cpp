// The AMX bfloat16 tile kernels (contracts: amx/amx.hpp). This file alone is built with the
// AMX flags, and uses only intrinsics and its own code: an inline function of a shared header
// compiled here could be kept by the linker in its AMX/AVX-512 encoding for every caller (see
// the note on optimisation in backends/cpu/CMakeLists.txt), so the float -> bfloat16 rounding
// is written with intrinsics below rather than taken from xgrad/half.hpp.
//
// Tile registers: 0-3 accumulate C (up to four 16 x 16 float32 tiles side by side), 4 holds
// the A tile, 5-7 the B tiles. A group of G C tiles shares each A load, so a multiply costs
// 1 + 1/G tile loads; G = 4 is the most the eight registers allow with one A.
#include <immintrin.h>

#include "backends/cpu/amx/amx.hpp"

namespace xgrad::cpu::amx
{
    namespace
    {
        /// The tile configuration (palette 1): every tile 16 rows of 64 bytes.
        struct alignas(64) tile_config
        {
            std::uint8_t palette = 1;
            std::uint8_t start_row = 0;
            std::uint8_t reserved[14] = {};
            std::uint16_t colsb[16] = {};
            std::uint8_t rows[16] = {};
        };

        void configure() noexcept
        {
            tile_config c;
            for (int t = 0; t < 8; ++t)
            {
                c.colsb[t] = 64;
                c.rows[t] = 16;
            }
            _tile_loadconfig(&c);
        }

        /// Releases the tile state: a thread that keeps it makes every context switch save
        /// 8 KiB more.
        struct tile_scope
        {
            tile_scope() noexcept { configure(); }
            ~tile_scope() { _tile_release(); }
            tile_scope(const tile_scope&) = delete;
            tile_scope& operator=(const tile_scope&) = delete;
        };

        /// Rounds 16 floats to bfloat16 (nearest even; NaN quieted with its sign and top
        /// payload kept), as xgrad::to_bfloat16 does, and stores the first lanes of `mask`.
        void store_bf16(bfloat16_t* dst, __m512 v, __mmask16 mask) noexcept
        {
            const __m512i u = _mm512_castps_si512(v);
            const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
            __m512i r = _mm512_srli_epi32(_mm512_add_epi32(u, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff))), 16);
            const __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
            r = _mm512_mask_or_epi32(r, nan, _mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x40));
            _mm256_mask_storeu_epi16(dst, mask, _mm512_cvtepi32_epi16(r));
        }

        __mmask16 lanes(std::int64_t n) noexcept { return n >= 16 ? __mmask16(0xffff) : __mmask16((1u << n) - 1u); }

        // The building blocks of both kernels' groups (tile numbers must be constants, hence
        // one line per tile): C tiles 0..G-1 side by side at c, c + 16, ... floats, their rows
        // `stride` bytes apart; the A tile in 4; B tiles b, b + b_step, ... through 5, 6, 7, 5.

        template <int G>
        void load_c(const float* c, std::int64_t stride) noexcept
        {
            _tile_loadd(0, c, stride);
            if constexpr (G > 1)
                _tile_loadd(1, c + 16, stride);
            if constexpr (G > 2)
                _tile_loadd(2, c + 32, stride);
            if constexpr (G > 3)
                _tile_loadd(3, c + 48, stride);
        }

        template <int G>
        void store_c(float* c, std::int64_t stride) noexcept
        {
            _tile_stored(0, c, stride);
            if constexpr (G > 1)
                _tile_stored(1, c + 16, stride);
            if constexpr (G > 2)
                _tile_stored(2, c + 32, stride);
            if constexpr (G > 3)
                _tile_stored(3, c + 48, stride);
        }

        /// C tile j += A (tile 4) x B tile j, for j < G.
        template <int G>
        void multiply(const bfloat16_t* b, std::int64_t b_step) noexcept
        {
            _tile_loadd(5, b, 64);
            _tile_dpbf16ps(0, 4, 5);
            if constexpr (G > 1)
            {
                _tile_loadd(6, b + b_step, 64);
                _tile_dpbf16ps(1, 4, 6);
            }
            if constexpr (G > 2)
            {
                _tile_loadd(7, b + 2 * b_step, 64);
                _tile_dpbf16ps(2, 4, 7);
            }
            if constexpr (G > 3)
            {
                _tile_loadd(5, b + 3 * b_step, 64);
                _tile_dpbf16ps(3, 4, 5);
            }
        }

        /// G output-channel tiles of one chunk of 16 positions: the products into tiles 0..G-1,
        /// then out[p * 64 + j * 16 + q] (a 16 x 64 float staging area).
        template <int G>
        void forward_group(float* out, const bfloat16_t* a, std::int64_t a_stride, const std::int64_t* taps,
                           std::int64_t ntaps, std::int64_t ncc, const bfloat16_t* w, std::int64_t w_step) noexcept
        {
            _tile_zero(0);
            if constexpr (G > 1)
                _tile_zero(1);
            if constexpr (G > 2)
                _tile_zero(2);
            if constexpr (G > 3)
                _tile_zero(3);
            for (std::int64_t t = 0; t < ntaps; ++t)
                for (std::int64_t cc = 0; cc < ncc; ++cc)
                {
                    _tile_loadd(4, a + taps[t] + cc * tile_depth, a_stride);
                    multiply<G>(w + (t * ncc + cc) * tile_elements, w_step);
                }
            store_c<G>(out, 256);
        }

        /// G column tiles of acc (one row tile): loaded, the mp positions added, stored.
        template <int G>
        void weight_grad_group(float* acc, std::int64_t ldacc, const bfloat16_t* a, const bfloat16_t* xp,
                               std::int64_t mp) noexcept
        {
            load_c<G>(acc, ldacc * 4);
            for (std::int64_t m = 0; m < mp; m += tile_depth)
            {
                _tile_loadd(4, a + m, mp * 2);
                multiply<G>(xp + m * 16, mp * 16);
            }
            store_c<G>(acc, ldacc * 4);
        }
    }

    void conv_forward(bfloat16_t* y, std::int64_t y_row, const bfloat16_t* band, std::int64_t band_row,
                      std::int64_t pos_step, const std::int64_t* taps, std::int64_t ntaps, std::int64_t cp,
                      const bfloat16_t* w, const float* bias, std::int64_t rows, std::int64_t ow, std::int64_t o)
    {
        const tile_scope scope;
        const std::int64_t ncc = cp / tile_depth, o16 = (o + 15) / 16, w_step = ntaps * ncc * tile_elements;
        alignas(64) float out[16 * 64];
        for (std::int64_t r = 0; r < rows; ++r)
            for (std::int64_t p0 = 0; p0 < ow; p0 += tile_rows)
            {
                const std::int64_t valid = ow - p0 < tile_rows ? ow - p0 : tile_rows;
                const bfloat16_t* a = band + r * band_row + p0 * pos_step;
                for (std::int64_t og = 0; og < o16; og += 4)
                {
                    const std::int64_t g = o16 - og < 4 ? o16 - og : 4;
                    const bfloat16_t* wg = w + og * w_step;
                    const std::int64_t a_stride = pos_step * 2;
                    switch (g)
                    {
                    case 1: forward_group<1>(out, a, a_stride, taps, ntaps, ncc, wg, w_step); break;
                    case 2: forward_group<2>(out, a, a_stride, taps, ntaps, ncc, wg, w_step); break;
                    case 3: forward_group<3>(out, a, a_stride, taps, ntaps, ncc, wg, w_step); break;
                    default: forward_group<4>(out, a, a_stride, taps, ntaps, ncc, wg, w_step); break;
                    }
                    for (std::int64_t j = 0; j < g; ++j)
                    {
                        const std::int64_t q0 = (og + j) * 16;
                        const __mmask16 mask = lanes(o - q0);
                        const __m512 b = bias != nullptr ? _mm512_maskz_loadu_ps(mask, bias + q0) : _mm512_setzero_ps();
                        bfloat16_t* dst = y + r * y_row + p0 * o + q0;
                        for (std::int64_t p = 0; p < valid; ++p)
                            store_bf16(dst + p * o, _mm512_add_ps(_mm512_load_ps(out + p * 64 + j * 16), b), mask);
                    }
                }
            }
    }

    void conv_weight_grad(float* acc, std::int64_t ldacc, const bfloat16_t* dyt, const bfloat16_t* xp, std::int64_t o16,
                          std::int64_t k16, std::int64_t mp)
    {
        const tile_scope scope;
        for (std::int64_t qt = 0; qt < o16; ++qt)
        {
            const bfloat16_t* a = dyt + qt * 16 * mp;
            for (std::int64_t kg = 0; kg < k16; kg += 4)
            {
                float* c = acc + qt * 16 * ldacc + kg * 16;
                const bfloat16_t* b = xp + kg * mp * 16;
                switch (k16 - kg < 4 ? k16 - kg : 4)
                {
                case 1: weight_grad_group<1>(c, ldacc, a, b, mp); break;
                case 2: weight_grad_group<2>(c, ldacc, a, b, mp); break;
                case 3: weight_grad_group<3>(c, ldacc, a, b, mp); break;
                default: weight_grad_group<4>(c, ldacc, a, b, mp); break;
                }
            }
        }
    }

    void pack_position_pairs(bfloat16_t* xp, const bfloat16_t* base, const std::int64_t* at, std::int64_t npos,
                             std::int64_t mp, std::int64_t cols)
    {
        // Two positions' 16 channels side by side in one register, then interleaved:
        // lane 2j takes channel j of the first, lane 2j + 1 channel j of the second.
        alignas(64) static constexpr std::uint16_t order[32] = {0,  16, 1,  17, 2,  18, 3,  19, 4,  20, 5,
                                                                21, 6,  22, 7,  23, 8,  24, 9,  25, 10, 26,
                                                                11, 27, 12, 28, 13, 29, 14, 30, 15, 31};
        const __m512i idx = _mm512_load_si512(order);
        const __mmask16 mask = lanes(cols);
        std::int64_t m = 0;
        for (; m + 1 < npos; m += 2)
        {
            const __m256i a = _mm256_maskz_loadu_epi16(mask, base + at[m]);
            const __m256i b = _mm256_maskz_loadu_epi16(mask, base + at[m + 1]);
            const __m512i pair = _mm512_inserti64x4(_mm512_castsi256_si512(a), b, 1);
            _mm512_storeu_si512(xp + m * 16, _mm512_permutexvar_epi16(idx, pair));
        }
        if (m < npos) // a last position without its pair
        {
            const __m256i a = _mm256_maskz_loadu_epi16(mask, base + at[m]);
            _mm512_storeu_si512(xp + m * 16,
                                _mm512_maskz_permutexvar_epi16(0x55555555u, idx, _mm512_zextsi256_si512(a)));
            m += 2;
        }
        for (; m < mp; m += 2)
            _mm512_storeu_si512(xp + m * 16, _mm512_setzero_si512());
    }

    void transpose_positions(bfloat16_t* dyt, const bfloat16_t* dy, std::int64_t npos, std::int64_t o, std::int64_t mp,
                             std::int64_t rows)
    {
        // Blocks of 16 positions x 16 channels: each position's channels are gathered into the
        // block's rows through a 16 x 16 staging area in L1 (a plain loop the compiler turns
        // into wide moves), then stored as 16 rows of 16 positions.
        alignas(64) std::uint16_t block[16][16];
        for (std::int64_t q0 = 0; q0 < rows; q0 += 16)
            for (std::int64_t m0 = 0; m0 < mp; m0 += 16)
            {
                for (std::int64_t i = 0; i < 16; ++i) // position m0 + i
                {
                    const std::int64_t m = m0 + i;
                    const std::int64_t nq = m < npos ? (o - q0 < 16 ? (o - q0 > 0 ? o - q0 : 0) : 16) : 0;
                    const __m256i v = nq > 0 ? _mm256_maskz_loadu_epi16(lanes(nq), dy + m * o + q0)
                                             : _mm256_setzero_si256();
                    _mm256_store_si256(reinterpret_cast<__m256i*>(block[i]), v);
                }
                for (std::int64_t j = 0; j < 16; ++j) // channel q0 + j
                {
                    if (q0 + j >= rows)
                        break;
                    alignas(32) std::uint16_t row[16];
                    for (std::int64_t i = 0; i < 16; ++i)
                        row[i] = block[i][j];
                    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dyt + (q0 + j) * mp + m0),
                                        _mm256_load_si256(reinterpret_cast<const __m256i*>(row)));
                }
            }
    }
}
