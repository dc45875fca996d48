// Invalid input to the batch-norm ops: one test per rule of the contract's section 6, each
// asserting the exception type (xgrad::invalid_argument, a std::invalid_argument) and a message
// fragment, plus TensorFlow's security-advisory regression inputs. Every rejected call must
// leave nothing half-done: there is no output to inspect, only the exception.
#include <doctest/doctest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "tests/support/check_error.hpp"
#include "xgrad/xgrad.hpp"

using namespace xgrad;

// Every batch-norm rejection is an xgrad::invalid_argument.
#define CHECK_BN_ERROR(expr, ...) CHECK_ERROR(expr, xgrad::invalid_argument, __VA_ARGS__)

namespace
{
    batch_norm_attrs attrs(const char* format = "NHWC", bool training = true, float eps = 0.001f)
    {
        batch_norm_attrs a;
        a.data_format = format;
        a.is_training = training;
        a.epsilon = eps;
        return a;
    }

    batch_norm_grad_result grad(const tensor& dy, const tensor& x, const tensor& s, const tensor& m, const tensor& v,
                                const batch_norm_attrs& a)
    {
        return fused_batch_norm_grad(dy, x, s, m, v, a);
    }
}

TEST_CASE("the project's invalid-argument error is a std::invalid_argument")
{
    CHECK_THROWS_AS(grad(zeros({2, 3}), zeros({2, 3}), zeros({3}), zeros({3}), zeros({3}), attrs()),
                    std::invalid_argument);
}

TEST_CASE("grad rule 1: rank 4 or 5")
{
    CHECK_BN_ERROR(grad(zeros({2, 3}), zeros({2, 3}), zeros({3}), zeros({3}), zeros({3}), attrs()),
                   "4 or 5-dimensional", "[2, 3]");
    CHECK_BN_ERROR(grad(zeros({1, 2, 2, 3}), zeros({1, 2, 3}), zeros({3}), zeros({3}), zeros({3}), attrs()),
                   "x must be 4 or 5-dimensional", "[1, 2, 3]");
}

TEST_CASE("grad rule 2: the rank the data format implies, and known formats")
{
    const tensor x4 = zeros({1, 2, 2, 3}), x5 = zeros({1, 2, 2, 2, 3});
    CHECK_BN_ERROR(grad(x5, x5, zeros({3}), zeros({3}), zeros({3}), attrs("NHWC")), "NHWC", "rank 5");
    CHECK_BN_ERROR(grad(x4, x4, zeros({3}), zeros({3}), zeros({3}), attrs("NDHWC")), "NDHWC", "rank 4");
    CHECK_BN_ERROR(grad(x4, x4, zeros({3}), zeros({3}), zeros({3}), attrs("NWHC")), "NWHC");
}

TEST_CASE("grad rule 3: per-channel tensors are 1-D")
{
    const tensor x = zeros({1, 2, 2, 3});
    CHECK_BN_ERROR(grad(x, x, zeros({1, 3}), zeros({3}), zeros({3}), attrs()), "scale must be 1-dimensional", "[1, 3]");
    CHECK_BN_ERROR(grad(x, x, zeros({3}), zeros({3, 1}), zeros({3}), attrs()), "fused_batch_norm_grad: saved_mean",
                   "1-dimensional");
    CHECK_BN_ERROR(grad(x, x, zeros({3}), zeros({3}), zeros({}), attrs()), "saved_var", "1-dimensional", "[]");
}

TEST_CASE("grad rule 4: x and dy have the same shape")
{
    CHECK_BN_ERROR(grad(zeros({1, 2, 2, 3}), zeros({1, 2, 1, 3}), zeros({3}), zeros({3}), zeros({3}), attrs()),
                   "x and dy must have same shape", "[1, 2, 1, 3]", "[1, 2, 2, 3]");
}

TEST_CASE("grad rule 5: per-channel lengths equal C")
{
    const tensor x = zeros({1, 2, 2, 3});
    CHECK_BN_ERROR(grad(x, x, zeros({2}), zeros({3}), zeros({3}), attrs()),
                   "scale must have the same number of elements as the channels of x, got 2 and 3");
    CHECK_BN_ERROR(grad(x, x, zeros({3}), zeros({4}), zeros({3}), attrs()), "saved_mean", "got 4 and 3");
    CHECK_BN_ERROR(grad(x, x, zeros({3}), zeros({3}), zeros({1}), attrs()), "saved_var", "got 1 and 3");
}

TEST_CASE("grad rule 6: zero channels")
{
    const tensor x = zeros({1, 1, 1, 0});
    CHECK_BN_ERROR(grad(x, x, zeros({0}), zeros({0}), zeros({0}), attrs()), "zero channels", "[1, 1, 1, 0]");
}

TEST_CASE("grad rule 7: dtypes")
{
    const tensor x = zeros({1, 2, 2, 3});
    CHECK_BN_ERROR(grad(zeros({1, 2, 2, 3}), x.to(dtype::float16), zeros({3}), zeros({3}), zeros({3}), attrs()),
                   "float32", "float16");
    CHECK_BN_ERROR(grad(x, x, zeros({3}, dtype::float64), zeros({3}), zeros({3}), attrs()), "scale", "float64",
                   "float32");
    CHECK_BN_ERROR(grad(x.to(dtype::float64), x.to(dtype::float64), zeros({3}), zeros({3}), zeros({3}), attrs()),
                   "scale", "float32", "float64");
    CHECK_BN_ERROR(grad(x.to(dtype::int64), x.to(dtype::int64), zeros({3}), zeros({3}), zeros({3}), attrs()), "int64");
}

TEST_CASE("grad rule 8: epsilon")
{
    const tensor x = zeros({1, 2, 2, 3});
    CHECK_BN_ERROR(grad(x, x, zeros({3}), zeros({3}), zeros({3}), attrs("NHWC", true, -1e-3f)), "epsilon");
    CHECK_BN_ERROR(
        grad(x, x, zeros({3}), zeros({3}), zeros({3}), attrs("NHWC", true, std::numeric_limits<float>::quiet_NaN())),
        "epsilon");
    CHECK_BN_ERROR(
        grad(x, x, zeros({3}), zeros({3}), zeros({3}), attrs("NHWC", true, std::numeric_limits<float>::infinity())),
        "epsilon");
}

TEST_CASE("grad rule 9: devices")
{
    // Without a CUDA device a CUDA tensor cannot even be created, and says so; with one,
    // tensors of two devices never meet in the gradient.
    if (cuda_device_count() == 0)
    {
        CHECK_THROWS_WITH_AS(zeros({3}, dtype::float32, parse_device("cuda:0")), doctest::Contains("cuda:0"),
                             std::runtime_error);
        return;
    }
    const device gpu = parse_device("cuda:0");
    const tensor x = ones({1, 1, 2, 3}), c = ones({3});
    CHECK_THROWS_WITH_AS(fused_batch_norm_grad(x.to(gpu), x, c, c, c), doctest::Contains("cuda:0"),
                         std::invalid_argument);
}

TEST_CASE("forward rules")
{
    const tensor x = zeros({1, 2, 2, 3}), c = zeros({3}), e = zeros({0});
    CHECK_BN_ERROR(fused_batch_norm(zeros({2, 3}), c, c, c, c, attrs()), "4 or 5-dimensional", "[2, 3]");
    CHECK_BN_ERROR(fused_batch_norm(x, c, c, c, c, attrs("NCDHW")), "NCDHW", "rank 4");
    CHECK_BN_ERROR(fused_batch_norm(x, zeros({2}), c, c, c, attrs()), "scale", "got 2 and 3");
    CHECK_BN_ERROR(fused_batch_norm(x, c, zeros({4}), c, c, attrs()), "offset", "got 4 and 3");
    CHECK_BN_ERROR(fused_batch_norm(x, c, c, zeros({3, 1}), c, attrs()), "mean must be 1-dimensional");
    CHECK_BN_ERROR(
        fused_batch_norm(x, c, c, zeros({2}), c, attrs("NHWC", false)),
        "When is_training=false, mean must have the same number of elements as the channels of x, got 2 and 3");
    CHECK_BN_ERROR(fused_batch_norm(x, c, c, c, e, attrs("NHWC", false)), "variance", "got 0 and 3");
    batch_norm_attrs f = attrs();
    f.exponential_avg_factor = 0.5f;
    CHECK_BN_ERROR(fused_batch_norm(x, c, c, e, e, f), "exponential_avg_factor", "mean", "got 0 and 3");
    f.exponential_avg_factor = 1.5f;
    CHECK_BN_ERROR(fused_batch_norm(x, c, c, c, c, f), "exponential_avg_factor", "1.5");
    f.exponential_avg_factor = std::numeric_limits<float>::quiet_NaN();
    CHECK_BN_ERROR(fused_batch_norm(x, c, c, c, c, f), "exponential_avg_factor");
    CHECK_BN_ERROR(fused_batch_norm(x.to(dtype::float16), zeros({3}, dtype::float16), c, e, e, attrs()), "scale",
                   "float16", "float32");
    CHECK_BN_ERROR(fused_batch_norm(x, c, c, e, e, attrs("NHWC", true, -1.0f)), "epsilon");
    // Training with factor 1 does not read mean/variance: empty ones are fine.
    CHECK(fused_batch_norm(x, c, c, e, e, attrs()).y.shape() == x.shape());
}

TEST_CASE("regression inputs from TensorFlow's security advisories")
{
    // Zero channels, empty parameters, inference (CVE-2021-29555).
    CHECK_BN_ERROR(
        fused_batch_norm(zeros({1, 1, 1, 0}), zeros({0}), zeros({0}), zeros({0}), zeros({0}), attrs("NHWC", false)),
        "zero channels");
    // 1-element parameters for 6 channels, inference, epsilon 0 (CVE-2021-29583).
    const tensor one = zeros({1});
    CHECK_BN_ERROR(fused_batch_norm(zeros({10, 10, 10, 6}), one, one, one, one, attrs("NHWC", false, 0.0f)),
                   "got 1 and 6");
    // Empty parameters for 1 channel.
    const tensor none = zeros({0});
    CHECK_BN_ERROR(fused_batch_norm(zeros({10, 10, 10, 1}), none, none, none, none, attrs("NHWC", false, 0.0f)),
                   "got 0 and 1");
    // Mismatched grad shapes and ranks, NCHW training (CVE-2021-41223).
    CHECK_BN_ERROR(
        grad(zeros({1, 1, 3, 3}), zeros({1, 1, 1, 2}), zeros({1, 1}), zeros({1, 1}), zeros({1, 1, 1}), attrs("NCHW")),
        "1-dimensional");
    // Empty scale while C = 2, NHWC and NCHW; 5-D NCDHW with an empty scale.
    CHECK_BN_ERROR(grad(zeros({1, 2, 2, 2}), zeros({1, 2, 2, 2}), none, zeros({2}), zeros({2}), attrs("NHWC")), "scale",
                   "got 0 and 2");
    CHECK_BN_ERROR(grad(zeros({1, 2, 2, 2}), zeros({1, 2, 2, 2}), none, zeros({2}), zeros({2}), attrs("NCHW")), "scale",
                   "got 0 and 2");
    CHECK_BN_ERROR(grad(zeros({1, 2, 2, 2, 2}), zeros({1, 2, 2, 2, 2}), none, zeros({2}), zeros({2}), attrs("NCDHW")),
                   "scale", "got 0 and 2");
}

TEST_CASE("second-order op validates its cotangents")
{
    const tensor x = zeros({1, 2, 2, 3}), c = ones({3});
    CHECK_BN_ERROR(fused_batch_norm_grad_grad(zeros({1, 2, 2, 2}), c, c, x, x, c, c, c, attrs()), "A", "[1, 2, 2, 3]");
    CHECK_BN_ERROR(fused_batch_norm_grad_grad(x, zeros({2}), c, x, x, c, c, c, attrs()), "a", "got 2 and 3");
}

TEST_CASE("NaN and Inf propagate; they are not errors")
{
    const tensor x = from_host(std::vector<float>{1, NAN, 3, 4}.data(), {1, 1, 4, 1}, dtype::float32);
    const auto r = fused_batch_norm(x, ones({1}), zeros({1}), zeros({0}), zeros({0}), attrs());
    for (double v : to_vector(r.y))
        CHECK(std::isnan(v));
}

TEST_CASE("every error names the function called, in xgrad's own words")
{
    const tensor x = zeros({1, 2, 2, 3}), bad = zeros({4});
    const tensor c = ones({3});
    CHECK_BN_ERROR(fused_batch_norm(x, bad, c, c, c, attrs()), "fused_batch_norm: ", "scale");
    CHECK_BN_ERROR(fused_batch_norm_relu(x, bad, c, c, c, attrs()), "fused_batch_norm_relu: ", "scale");
    CHECK_BN_ERROR(fused_batch_norm_grad(x, x, c, bad, c, attrs()), "fused_batch_norm_grad: ", "saved_mean");
    CHECK_BN_ERROR(fused_batch_norm_grad(zeros({1, 2, 2, 4}), x, c, c, c, attrs()),
                   "fused_batch_norm_grad: ", "x and dy must have same shape");
    CHECK_BN_ERROR(fused_batch_norm_relu_grad(x, x, x, c, c, bad, attrs()),
                   "fused_batch_norm_relu_grad: ", "saved_var");
    CHECK_BN_ERROR(batch_norm_grad_reduce(x, x, bad, attrs()), "batch_norm_grad_reduce: ", "saved_mean");
    CHECK_BN_ERROR(fused_batch_norm_grad_grad(x, c, c, x, x, c, c, bad, attrs()),
                   "fused_batch_norm_grad_grad: ", "saved_var");
    // TensorFlow's op names and argument names belong to the compatibility layer alone.
    for (const auto& run : std::vector<std::function<void()>>{
             [&] { fused_batch_norm(x, bad, c, c, c, attrs()); },
             [&] { fused_batch_norm_grad(x, x, c, bad, c, attrs()); },
             [&] {
                 fused_batch_norm_grad(zeros({1, 2, 2, 4}), x, c, c, c, attrs());
             },
         })
    {
        std::string msg;
        try
        {
            run();
        }
        catch (const xgrad::invalid_argument& e)
        {
            msg = e.what();
        }
        CHECK(!msg.empty());
        for (const char* tf_word : {"FusedBatchNorm", "reserve_space", "y_backprop", "backprop"})
            CHECK_MESSAGE(msg.find(tf_word) == std::string::npos, msg);
    }
}
