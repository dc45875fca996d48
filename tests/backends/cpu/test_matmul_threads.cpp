// The CPU GEMM threads itself over xgrad's pool with OpenBLAS single-threaded
// (backends/cpu/kernels/matmul.cpp): OpenBLAS reports one thread once libxgrad is loaded, whatever the
// environment asks (ctest runs this with OPENBLAS_NUM_THREADS=2), and a matmul at 2, 3 or 4
// threads equals the one at 1 thread: bit for bit when batches are split over the threads,
// within the rounding of a k-term dot product when one product is split into blocks.
#include <doctest/doctest.h>

#include <cblas.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "backends/cpu/simd/level.hpp"
#include "xgrad/xgrad.hpp"

using namespace xgrad;

namespace
{
    /// Restores the thread count of the pool at the end of a scope.
    struct thread_count_restore
    {
        int saved = get_num_threads();
        ~thread_count_restore() { set_num_threads(saved); }
    };

    struct case_type
    {
        std::string name;
        tensor a, b;
        bool batches_split; // at 2 threads: the batch entries go to the threads whole
    };

    /// The bound on |got - want| of one element of a @ b: 2 k eps sum_p |a_ip| |b_pj| (two
    /// computations of the same dot product, each within k eps of the exact value).
    std::vector<double> error_bounds(const tensor& a, const tensor& b, dtype dt)
    {
        const double eps = dt == dtype::float32 ? std::numeric_limits<float>::epsilon()
                                                : std::numeric_limits<double>::epsilon();
        const double k = static_cast<double>(a.size(-1));
        return to_vector(matmul(abs(a), abs(b)) * (2 * k * eps));
    }
}

TEST_CASE("OpenBLAS runs single-threaded once libxgrad is loaded, also after a matmul")
{
    if (cpu::simd_supported() == cpu::simd_level::scalar)
    {
        MESSAGE("XGRAD_SIMD=scalar build: matmul is the reference loop, xgrad never calls OpenBLAS");
        return;
    }
    CHECK(openblas_get_num_threads() == 1);
    thread_count_restore restore;
    set_num_threads(2);
    generator gen(1);
    const tensor c = matmul(randn({256, 256}, gen), randn({256, 256}, gen));
    CHECK(c.size(0) == 256);
    CHECK(openblas_get_num_threads() == 1);
}

TEST_CASE("a matmul at 2, 3 and 4 threads equals the one at 1 thread")
{
    thread_count_restore restore;
    for (const dtype dt : {dtype::float32, dtype::float64})
    {
        generator gen(7);
        const auto r = [&](const shape_type& s) { return randn(s, gen, dt); };
        std::vector<case_type> cases = {
            {"rows split", r({300, 200}), r({200, 150}), false},
            {"columns split", r({20, 300}), r({300, 2000}), false},
            {"transposed operands", r({200, 300}).transpose(0, 1), r({150, 200}).transpose(0, 1), false},
            {"packed (broadcast) operand", r({300, 1}).expand({300, 200}), r({200, 150}), false},
            {"batches", r({8, 64, 64}), r({8, 64, 64}), true},
            {"few batches", r({3, 96, 128}), r({3, 128, 80}), true},
        };
        for (const auto& c : cases)
        {
            CAPTURE(c.name);
            CAPTURE(dt);
            set_num_threads(1);
            const std::vector<double> want = to_vector(matmul(c.a, c.b));
            const std::vector<double> bound = error_bounds(c.a, c.b, dt);
            for (const int threads : {2, 3, 4})
            {
                CAPTURE(threads);
                set_num_threads(threads);
                const std::vector<double> got = to_vector(matmul(c.a, c.b));
                REQUIRE(got.size() == want.size());
                std::size_t outside = 0, differing = 0;
                for (std::size_t i = 0; i < got.size(); ++i)
                {
                    differing += got[i] != want[i];
                    outside += !(std::fabs(got[i] - want[i]) <= bound[i]);
                }
                CHECK(outside == 0);
                // 3 batches over 3 or 4 threads are split within products; over 2 threads, whole.
                if (c.batches_split && (threads == 2 || c.a.size(0) >= threads))
                    CHECK(differing == 0);
            }
        }
    }
}
