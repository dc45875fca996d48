// The doctest main of test_cuda: without a CUDA device the tests cannot run, and the
// executable says so and exits with 77, which ctest reports as skipped (SKIP_RETURN_CODE).
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <iostream>

#include "xgrad/cuda.hpp"
#include "xgrad/dtype.hpp"

int main(int argc, char** argv)
{
    if (xgrad::cuda_device_count() == 0)
    {
        std::cout << "test_cuda: skipped: no CUDA device is available (no GPU, or no NVIDIA driver); these tests "
                     "compare every op on cuda:0 with the CPU backend and need a device. The XGRAD_CUDA_ON_CPU "
                     "build runs them on the CPU (ctest -L cuda_cpu).\n";
        return 77;
    }
    std::cout << "test_cuda: cuda:0 on " << xgrad::cuda_runtime_name() << "\n";
    doctest::Context context(argc, argv);
    return context.run();
}
