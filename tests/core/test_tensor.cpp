// Tensor basics: dtypes, devices, factories, views, conversions, interop, printing.
#include <doctest/doctest.h>

#include <cmath>
#include <sstream>

#include <xtensor/xmath.hpp>

#include "xgrad/xgrad.hpp"

using namespace xgrad;

TEST_CASE("dtype and device tags")
{
    CHECK(itemsize(dtype::float32) == 4);
    CHECK(itemsize(dtype::float64) == 8);
    CHECK(itemsize(dtype::float16) == 2);
    CHECK(itemsize(dtype::bfloat16) == 2);
    CHECK(itemsize(dtype::int64) == 8);
    CHECK(name(dtype::bfloat16) == "bfloat16");
    CHECK(compute_dtype(dtype::float16) == dtype::float32);
    CHECK(compute_dtype(dtype::float64) == dtype::float64);
    CHECK(parse_device("cpu") == cpu_device);
    CHECK(parse_device("cuda:2") == device{device_type::cuda, 2});
    CHECK(to_string(parse_device("cuda")) == "cuda:0");
    CHECK_THROWS_WITH_AS(parse_device("gpu"), doctest::Contains("gpu"), std::invalid_argument);
    CHECK_THROWS_AS(parse_device("cuda:-1"), std::invalid_argument);
    CHECK_THROWS_AS(parse_device("cuda:1x"), std::invalid_argument);
}

TEST_CASE("factories")
{
    const tensor z = zeros({2, 3});
    CHECK(z.shape() == shape_type{2, 3});
    CHECK(z.dtype() == dtype::float32);
    CHECK(to_vector(z) == std::vector<double>(6, 0.0));
    CHECK(to_vector(full({2}, 2.5, dtype::bfloat16)) == std::vector<double>{2.5, 2.5});
    CHECK(to_vector(arange(0, 5)) == std::vector<double>{0, 1, 2, 3, 4});
    CHECK(to_vector(arange(5, 0, -2, dtype::int64)) == std::vector<double>{5, 3, 1});
    CHECK(arange(0, 0).numel() == 0);
    CHECK_THROWS_AS(arange(0, 1, 0), std::invalid_argument);
    CHECK(zeros({0, 4}).numel() == 0);
}

TEST_CASE("seeded random tensors are reproducible and distributed as stated")
{
    generator g1(42), g2(42), g3(43);
    const auto a = to_vector(randn({1000}, g1, dtype::float64));
    CHECK(a == to_vector(randn({1000}, g2, dtype::float64)));
    CHECK(a != to_vector(randn({1000}, g3, dtype::float64)));
    // Moments of n = 200000 draws: the sample mean of N(0,1) has standard deviation
    // 1/sqrt(n) ~ 0.0022, the sample variance sqrt(2/n) ~ 0.0032; 5 sigma bounds.
    generator g(7);
    const auto v = to_vector(randn({200000}, g, dtype::float64));
    double m = 0, s2 = 0;
    for (double x : v)
        m += x;
    m /= static_cast<double>(v.size());
    for (double x : v)
        s2 += (x - m) * (x - m);
    s2 /= static_cast<double>(v.size());
    CHECK(std::abs(m) < 5 * 0.0023);
    CHECK(std::abs(s2 - 1) < 5 * 0.0032);
    const auto u = to_vector(rand({200000}, g, dtype::float64, cpu_device, -1.0, 3.0));
    double um = 0;
    for (double x : u)
    {
        REQUIRE(x >= -1.0);
        REQUIRE(x < 3.0);
        um += x;
    }
    // uniform(-1, 3): mean 1, standard deviation 4/sqrt(12); 5 sigma of the mean.
    CHECK(std::abs(um / 200000 - 1.0) < 5 * (4 / std::sqrt(12.0)) / std::sqrt(200000.0));
    for (int i = 0; i < 1000; ++i)
        REQUIRE(g.below(7) < 7);
}

TEST_CASE("views share storage; contiguous copies only when needed")
{
    const tensor x = arange(0, 24).reshape({2, 3, 4});
    CHECK(x.is_contiguous());
    CHECK(x.reshape({6, 4}).data_ptr() == x.data_ptr());
    const tensor p = x.permute({2, 0, 1});
    CHECK(p.shape() == shape_type{4, 2, 3});
    CHECK(p.strides() == strides_type{1, 12, 4});
    CHECK_FALSE(p.is_contiguous());
    CHECK(p.data_ptr() == x.data_ptr());
    const tensor pc = p.contiguous();
    CHECK(pc.is_contiguous());
    CHECK(pc.data_ptr() != x.data_ptr());
    CHECK(to_vector(pc.slice(0, 1, 2)) == std::vector<double>{1, 5, 9, 13, 17, 21});
    const tensor s = x.slice(2, 1, 4, 2); // columns 1 and 3
    CHECK(s.shape() == shape_type{2, 3, 2});
    CHECK(to_vector(s.slice(0, 0, 1).slice(1, 0, 1)) == std::vector<double>{1, 3});
    const tensor e = full({3, 1}, 2.0).expand({2, 3, 4});
    CHECK(e.strides() == strides_type{0, 1, 0});
    CHECK(to_vector(e) == std::vector<double>(24, 2.0));
    // Reshaping a non-contiguous view copies but keeps the element order.
    CHECK(to_vector(p.reshape({-1})) == to_vector(pc));
    CHECK(to_vector(x.transpose(0, 2).transpose(0, 2)) == to_vector(x));
}

TEST_CASE("dtype conversions round to nearest even and keep values that fit")
{
    const tensor x = from_host(std::vector<double>{1.0, -2.5, 1.0 + 1.0 / 2048, 65504, 1e6}.data(), {5},
                               dtype::float64);
    const auto h = to_vector(x.to(dtype::float16));
    CHECK(h[0] == 1.0);
    CHECK(h[1] == -2.5);
    CHECK(h[2] == 1.0); // tie between 1 and 1 + 2^-10 goes to the even one
    CHECK(h[3] == 65504);
    CHECK(std::isinf(h[4]));
    const auto b = to_vector(x.to(dtype::bfloat16));
    CHECK(b[1] == -2.5);
    CHECK(b[4] == 999424); // nearest bfloat16 to 1e6
    CHECK(to_vector(from_host(std::vector<double>{2.9, -2.9}.data(), {2}, dtype::float64).to(dtype::int64)) ==
          std::vector<double>{2, -2});
}

TEST_CASE("xtensor interop round-trips every dtype")
{
    xt::xarray<double> a = {{1.0, 2.0, 3.0}, {4.0, 5.0, 6.5}};
    const tensor t = from_xarray(a);
    CHECK(t.dtype() == dtype::float64);
    CHECK(t.shape() == shape_type{2, 3});
    CHECK(to_xarray<double>(t) == a);
    CHECK(to_xarray<float>(t)(1, 2) == 6.5f);
    xt::xarray<std::int64_t> l = {3, 1, 4};
    CHECK(to_xarray<std::int64_t>(from_xarray(l)) == l);
    CHECK(to_xarray<double>(from_xarray(xt::xarray<float>(a))) == a);
    const auto h = to_xarray<float16_t>(t);
    CHECK(to_float(h(1, 2)) == 6.5f);
    CHECK(to_xarray<double>(from_xarray(h)) == a);
    // A transposed view comes out in its logical order.
    CHECK(to_xarray<double>(t.transpose(0, 1)) == xt::transpose(a));
}

TEST_CASE("item and printing")
{
    CHECK(full({1, 1}, 3.5).item() == 3.5);
    CHECK(full({}, 7, dtype::int64).item<std::int64_t>() == 7);
    CHECK_THROWS_WITH_AS(zeros({2}).item(), doctest::Contains("[2]"), std::invalid_argument);
    const std::string s = arange(0, 6).reshape({2, 3}).to_string();
    CHECK(s == "tensor([[0.0000, 1.0000, 2.0000],\n        [3.0000, 4.0000, 5.0000]], shape=[2, 3], dtype=float32)");
    std::ostringstream os;
    os << arange(0, 3, 1, dtype::int64);
    CHECK(os.str() == "tensor([0, 1, 2], shape=[3], dtype=int64)");
    // int64 values print exactly, including those a double cannot hold.
    const std::int64_t extremes[3] = {INT64_MAX, -3, (std::int64_t{1} << 53) + 1};
    CHECK(from_host(extremes, {3}, dtype::int64).to_string() ==
          "tensor([9223372036854775807,                  -3,    9007199254740993], shape=[3], dtype=int64)");
    const std::string big = arange(0, 5000).to_string();
    CHECK(big.find("...") != std::string::npos);
    CHECK(big.size() < 200);
    const tensor r = full({2}, 1.0).requires_grad_();
    CHECK(r.to_string().find("requires_grad") != std::string::npos);
    CHECK((r * 2.0).to_string().find("grad_fn=<mul>") != std::string::npos);
    CHECK(tensor().to_string() == "tensor(undefined)");
}

TEST_CASE("devices: a CUDA tensor exists only where a CUDA device does, and otherwise says why")
{
    CHECK(zeros({2}).device() == cpu_device);
    CHECK(zeros({2}).to(cpu_device).device() == cpu_device);
    if (cuda_device_count() == 0)
        CHECK_THROWS_WITH_AS(zeros({2}, dtype::float32, parse_device("cuda:0")), doctest::Contains("cuda:0"),
                             std::runtime_error);
    else // the device tests themselves are in test_cuda
        CHECK(zeros({2}, dtype::float32, parse_device("cuda:0")).device() == parse_device("cuda:0"));
    // A device index beyond the count is refused whatever the build, naming the device.
    CHECK_THROWS_WITH_AS(zeros({2}, dtype::float32, parse_device("cuda:99")), doctest::Contains("cuda:99"),
                         std::runtime_error);
}
