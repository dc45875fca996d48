// The gradient checks of every differentiable op (tests/support/gradcheck_cases.hpp, the table
// test_gradcheck.cpp runs on the CPU) with the inputs on cuda:0: first- and second-order
// gradients computed by the CUDA backend's kernels against central finite differences, in
// float64, with gradcheck's own tolerances.
#include "tests/backends/cuda/cuda_test_helpers.hpp"
#include "tests/support/gradcheck_cases.hpp"

using namespace gradcheck_cases;

TEST_CASE("cuda gradcheck: first-order gradients of every op on cuda:0 match finite differences")
{
    for (const auto& c : cases)
    {
        INFO("op: " << std::string(c.name));
        const auto inputs = make_inputs(c, 1, cuda_test::gpu);
        REQUIRE(inputs[0].device() == cuda_test::gpu);
        const gradcheck_result r = gradcheck(wrap(c), inputs);
        CHECK_MESSAGE(r.ok, r.message);
    }
}

TEST_CASE("cuda gradcheck: second-order gradients of every op on cuda:0 match finite differences")
{
    for (const auto& c : cases)
    {
        INFO("op: " << std::string(c.name));
        const gradcheck_result r = gradgradcheck(wrap(c), make_inputs(c, 2, cuda_test::gpu));
        CHECK_MESSAGE(r.ok, r.message);
    }
}
