#pragma once
// Internal to the CPU backend (and its tests): the AMX bfloat16 tile kernels behind the
// channels-last bfloat16 convolutions (kernels/conv.cpp), in amx/amx.cpp, the one file built
// with -mamx-tile -mamx-bf16.
//
// AMX multiplies tiles of up to 16 rows of 64 bytes: A (16 x 32 bfloat16) times B (16 pairs of
// rows x 16 columns x 2, "VNNI" order) into C (16 x 16 float32), each product exact and summed
// in float32. Its bfloat16 dot products treat subnormal inputs as zero and flush subnormal
// results (Intel's AMX specification, TDPBF16PS), as oneDNN's and PyTorch's bfloat16 kernels on
// the same hardware do; the scalar reference (convert to float32, sum in float32) keeps them, so
// the two agree except below 2^-126 in magnitude.
//
// Every pointer is a plain array; bfloat16 is xgrad::bfloat16_t (its bits). Both kernels work on
// whole tiles: their callers pad rows and channels with zeros (see each contract).
#include <cstdint>

#include "xgrad/half.hpp"

namespace xgrad::cpu
{
    /// Whether the processor has AMX-TILE and AMX-BF16 and the OS lets this process use the
    /// tile registers (Linux grants them on request, arch_prctl ARCH_REQ_XCOMP_PERM, made once
    /// here). False in a scalar build and off x86-64.
    bool amx_supported() noexcept;
    /// amx_supported(), the SIMD level in use is avx512 (so XGRAD_SIMD and limit_simd_level
    /// below it turn AMX off too), and limit_amx has not turned it off.
    bool amx_in_use() noexcept;
    /// Turns the AMX kernels off (false) or back on (true) for later calls, process-wide: the
    /// tests compare them with the AVX-512 path this way. Not meant to change while kernels run.
    void limit_amx(bool enabled) noexcept;
}

namespace xgrad::cpu::amx
{
    /// Rows of a tile (positions of a forward chunk, output channels of a weight-gradient tile).
    constexpr std::int64_t tile_rows = 16;
    /// bfloat16 elements in one tile row (64 bytes): the depth of one A tile.
    constexpr std::int64_t tile_depth = 32;
    /// bfloat16 elements of one packed B tile (16 pairs of rows x 16 columns x 2).
    constexpr std::int64_t tile_elements = 512;

    /// The forward of a channels-last convolution over `rows` output rows of `ow` positions:
    ///   y[r * y_row + p * o + q] = bf16(bias[q] + sum over taps t and channels c < cp of
    ///                                  band[r * band_row + p * pos_step + taps[t] + c] * w(t, c, q))
    /// for r < rows, p < ow, q < o, the sum in float32, rounded once to nearest even. ASSIGNS y.
    /// band: the input, channels padded with zeros to cp (a multiple of tile_depth), readable
    /// for 15 * pos_step elements past the start of every row's last position (positions past
    /// ow are computed in a tile's spare rows and dropped). w: packed by pack_forward_weights
    /// for (ntaps, cp, o). bias: o floats, or null for none.
    void conv_forward(bfloat16_t* y, std::int64_t y_row, const bfloat16_t* band, std::int64_t band_row,
                      std::int64_t pos_step, const std::int64_t* taps, std::int64_t ntaps, std::int64_t cp,
                      const bfloat16_t* w, const float* bias, std::int64_t rows, std::int64_t ow, std::int64_t o);

    /// The weight gradient's product over a chunk of mp positions (mp a multiple of tile_depth):
    ///   acc[q * ldacc + kk] += sum over m < mp of dyt[q * mp + m] * x(m, kk)
    /// for q < 16 * o16, kk < 16 * k16, summed in float32. ACCUMULATES into acc (ldacc >= 16 * k16).
    /// dyt: bfloat16 [16 * o16][mp] (dy transposed, zero past the real channels and positions).
    /// xp: k16 column tiles of mp / 2 pairs of positions x 16 columns x 2 (VNNI order), each
    /// tile's mp * 16 elements contiguous, zero past the real positions and columns.
    void conv_weight_grad(float* acc, std::int64_t ldacc, const bfloat16_t* dyt, const bfloat16_t* xp, std::int64_t o16,
                          std::int64_t k16, std::int64_t mp);

    /// One column tile of the weight gradient's xp operand: for positions m < npos,
    ///   xp[(m / 2) * 32 + j * 2 + m % 2] = base[at[m] + j] for j < cols (at most 16), else 0,
    /// and zeros for the positions npos <= m < mp (mp even). ASSIGNS mp * 16 elements of xp.
    void pack_position_pairs(bfloat16_t* xp, const bfloat16_t* base, const std::int64_t* at, std::int64_t npos,
                             std::int64_t mp, std::int64_t cols);

    /// dy transposed for the weight gradient: dyt[q * mp + m] = dy[m * o + q] for m < npos,
    /// q < o, and 0 for npos <= m < mp or o <= q < rows. ASSIGNS rows * mp elements of dyt.
    void transpose_positions(bfloat16_t* dyt, const bfloat16_t* dy, std::int64_t npos, std::int64_t o, std::int64_t mp,
                             std::int64_t rows);
}
