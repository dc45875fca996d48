#pragma once
// Shared by the tests of the batch-norm API (tests/core/ops/test_batch_norm_api.cpp) and of the
// TensorFlow compatibility layer over it (tests/core/compat/test_compat_tensorflow.cpp): bit-identity
// of two results, attributes in one call, and the random inputs of one case.
#include <doctest/doctest.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "xgrad/xgrad.hpp"

namespace bn_api_test
{
    using namespace xgrad;

    /// Same shape, dtype, device and bytes (contiguous copies are compared).
    inline void check_same_bits(const tensor& a, const tensor& b, const char* what)
    {
        INFO(what);
        REQUIRE(a.defined());
        REQUIRE(b.defined());
        REQUIRE(a.shape() == b.shape());
        REQUIRE(a.dtype() == b.dtype());
        CHECK(a.device() == b.device());
        const tensor ac = a.detach().contiguous(), bc = b.detach().contiguous();
        const std::size_t nbytes = static_cast<std::size_t>(a.numel()) * itemsize(a.dtype());
        CHECK(std::memcmp(ac.data_ptr(), bc.data_ptr(), nbytes) == 0);
    }

    inline batch_norm_attrs make_attrs(const char* format, bool training, float eps = 0.0001f, float factor = 1.0f)
    {
        batch_norm_attrs a;
        a.data_format = format;
        a.is_training = training;
        a.epsilon = eps;
        a.exponential_avg_factor = factor;
        return a;
    }

    /// Inputs of one case: x of `shape` with C channels, per-channel tensors of length C.
    struct bn_inputs
    {
        tensor x, dy, scale, offset, mean, variance;
    };

    inline bn_inputs make_inputs(const shape_type& shape, std::int64_t C, std::uint64_t seed)
    {
        generator gen(seed);
        bn_inputs in;
        in.x = randn(shape, gen) * 2.0 + 0.5;
        in.dy = randn(shape, gen);
        in.scale = rand({C}, gen, dtype::float32, cpu_device, 0.5, 1.5);
        in.offset = randn({C}, gen);
        in.mean = randn({C}, gen) * 0.1;
        in.variance = rand({C}, gen, dtype::float32, cpu_device, 0.5, 2.0);
        return in;
    }
}
