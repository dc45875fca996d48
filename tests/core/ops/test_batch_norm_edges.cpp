// The batch-norm training forward's statistics at +-Inf and NaN (tests/support/batch_norm_edges.hpp
// says what is expected) through the op, in both layouts, every x dtype, every SIMD level this
// machine has (the scalar level runs the reference kernels), and for a channel count that fills
// a SIMD register and one that leaves a tail.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "backends/cpu/simd/level.hpp"
#include "tests/support/batch_norm_edges.hpp"
#include "tests/support/cpu_kernels_helpers.hpp"

using namespace xgrad;

TEST_CASE("batch-norm forward: a channel holding +-Inf has mean +-Inf, on every level, layout and dtype")
{
    std::vector<cpu::simd_level> levels = cpu_kernels_test::simd_levels();
    levels.push_back(cpu::simd_level::scalar);
    for (const auto level : levels)
        for (const char* format : {"NHWC", "NCHW"})
            for (const dtype dt : {dtype::float32, dtype::float64, dtype::float16, dtype::bfloat16})
                for (const std::int64_t C : {std::int64_t{8}, std::int64_t{19}})
                {
                    CAPTURE(cpu_kernels_test::level_name(level));
                    CAPTURE(std::string(format));
                    CAPTURE(std::string(name(dt)));
                    CAPTURE(C);
                    cpu::limit_simd_level(level);
                    batch_norm_edges::check_edges(format, dt, C, cpu_device);
                }
    cpu::limit_simd_level(cpu::simd_supported());
}
