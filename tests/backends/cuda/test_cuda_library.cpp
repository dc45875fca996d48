// A CUDA-enabled libxgrad without its backend library (libxgrad_cuda.so), as on a machine
// without the CUDA libraries: ctest runs this with XGRAD_CUDA_LIBRARY naming a file that does
// not exist. The CPU works as ever; CUDA reports no device, and asking for one says why.
#include <doctest/doctest.h>

#include <cstdlib>
#include <stdexcept>
#include <string>

#include "xgrad/xgrad.hpp"

TEST_CASE("without the CUDA backend library, the CPU works and cuda:0 is refused with the reason")
{
    const char* path = std::getenv("XGRAD_CUDA_LIBRARY");
    REQUIRE(path != nullptr);
    CHECK(xgrad::cuda_is_built());
    CHECK(xgrad::cuda_device_count() == 0);
    CHECK(xgrad::cuda_runtime_name().empty());
    // The CPU is untouched.
    const xgrad::tensor x = xgrad::ones({2, 3});
    CHECK(xgrad::sum(x * 2.0).item() == 12.0);
    std::string message = "(no exception)";
    try
    {
        (void)x.to(xgrad::parse_device("cuda:0"));
    }
    catch (const std::runtime_error& e)
    {
        message = e.what();
    }
    CHECK_MESSAGE(message.find("cannot use device cuda:0") != std::string::npos, message);
    CHECK_MESSAGE(message.find("CUDA backend library could not be loaded") != std::string::npos, message);
    CHECK_MESSAGE(message.find(path) != std::string::npos, message);
}
