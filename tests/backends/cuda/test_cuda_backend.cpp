// Device tensors on the CUDA backend: its kernel table, copies between devices, the caching
// allocator, and the errors when a device is missing or two devices meet in one op.
#include "tests/backends/cuda/cuda_test_helpers.hpp"

#include <set>
#include <stdexcept>
#include <string>

#include "backends/cuda/cuda_kernels.hpp"
#include "core/src/dispatch.hpp"

using namespace cuda_test;

TEST_CASE("the CUDA kernel table has every kernel of the list, and the dispatch serves it for cuda:0")
{
    // The table the dispatch serves (from the backend's own library in a shared build).
    const xgrad::kernels::kernel_table& table = xgrad::detail::backend_for(gpu);
    CHECK(&table != &xgrad::detail::backend_for(xgrad::cpu_device));
    std::set<std::string> names;
    for (int i = 0; i < xgrad::kernels::kernel_count; ++i)
    {
        INFO("kernel ", xgrad::kernels::kernel_names[i]);
        CHECK(xgrad::kernels::is_set(table, static_cast<xgrad::kernels::kernel_id>(i)));
        CHECK(names.insert(xgrad::kernels::kernel_names[i]).second);
    }
}

TEST_CASE("to(device) copies both ways and keeps every dtype's bits")
{
    for (const dtype dt : {dtype::float32, dtype::float64, dtype::float16, dtype::bfloat16})
    {
        CAPTURE(dt);
        const tensor h = random_cpu({3, 5, 7}, dt, 11, -1e3, 1e3);
        const tensor d = h.to(gpu);
        CHECK(d.device() == gpu);
        CHECK(d.dtype() == dt);
        CHECK(d.shape() == h.shape());
        check_same_bits(h, d, "round trip");
        // a strided view crosses devices as its values
        const tensor v = h.permute({2, 0, 1}).slice(1, 1, 3);
        check_same_bits(v, v.to(gpu), "strided view");
    }
    const std::vector<double> labels{0, 3, -7, 1e15};
    const tensor l = from_host(labels.data(), {4}, dtype::float64).to(dtype::int64);
    check_same_bits(l, l.to(gpu), "int64");
    CHECK(l.to(gpu).to(cpu_device).device() == cpu_device);
}

TEST_CASE("results of device ops stay on the device; item() and printing read them back")
{
    const tensor a = random_cpu({4, 3}, dtype::float32, 1).to(gpu);
    const tensor s = sum(a * a);
    CHECK(s.device() == gpu);
    const tensor ref = sum(a.to(cpu_device) * a.to(cpu_device));
    CHECK(s.item() == doctest::Approx(ref.item()).epsilon(1e-5));
    CHECK(s.to_string().find("cuda:0") != std::string::npos);
}

TEST_CASE("tensors on different devices in one op are refused, naming both devices")
{
    const tensor a = ones({2, 2}), b = ones({2, 2}).to(gpu);
    CHECK_THROWS_WITH_AS(a + b, doctest::Contains("cuda:0"), std::invalid_argument);
    CHECK_THROWS_WITH_AS(matmul(a, b), doctest::Contains("cpu"), std::invalid_argument);
}

TEST_CASE("a device that does not exist is refused, naming it")
{
    const device missing{device_type::cuda, cuda_device_count()};
    const std::string name = to_string(missing);
    CHECK_THROWS_WITH_AS(zeros({2}, dtype::float32, missing), doctest::Contains(name.c_str()), std::runtime_error);
    CHECK_THROWS_WITH_AS(ones({2}).to(missing), doctest::Contains(name.c_str()), std::runtime_error);
    CHECK_THROWS_AS(cuda_memory(cpu_device), std::invalid_argument);
}

// Under AddressSanitizer (g++ says so with __SANITIZE_ADDRESS__, clang with __has_feature) every
// block goes back, so that ASan sees a use after free (backends/cuda/allocator.cpp).
#if defined(__SANITIZE_ADDRESS__)
constexpr bool allocator_caches = false;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr bool allocator_caches = false;
#else
constexpr bool allocator_caches = true;
#endif
#else
constexpr bool allocator_caches = true;
#endif

TEST_CASE("a training loop's steady state allocates no device memory")
{
    // A small MLP step: forward, loss, backward, update. After the first iterations every
    // tensor of a step reuses a cached block of its size class.
    generator gen(3);
    tensor w1 = randn({32, 64}, gen).to(gpu), w2 = randn({64, 10}, gen).to(gpu);
    w1.requires_grad_(true);
    w2.requires_grad_(true);
    const tensor x = randn({16, 32}, gen).to(gpu);
    const auto step = [&] {
        const tensor h = relu(matmul(x, w1));
        const tensor loss = mean(matmul(h, w2) * matmul(h, w2));
        loss.backward();
        no_grad guard;
        w1 = (w1.detach() - 0.01 * w1.grad()).requires_grad_(true);
        w2 = (w2.detach() - 0.01 * w2.grad()).requires_grad_(true);
    };
    for (int i = 0; i < 3; ++i)
        step();
    cuda_synchronize(gpu);
    const cuda_memory_stats before = cuda_memory(gpu);
    for (int i = 0; i < 10; ++i)
        step();
    const cuda_memory_stats after = cuda_memory(gpu);
    CHECK(after.allocated_bytes >= 0);
    CHECK(after.reserved_bytes >= after.allocated_bytes);
    if (allocator_caches)
    {
        CHECK(after.device_allocations == before.device_allocations);
        CHECK(after.cache_hits > before.cache_hits + 10);
    }
    else
        CHECK(after.cache_hits == before.cache_hits);
    cuda_empty_cache(gpu);
    CHECK(cuda_memory(gpu).reserved_bytes == cuda_memory(gpu).allocated_bytes);
}
