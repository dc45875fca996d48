// The fused batch-norm ops on cuda:0 against the CPU: the forward (training and inference,
// with a running-average factor), the gradient V2/V3 in every format, the fused ReLU pair, and
// the second-order op directly and through autograd. The kernels under them are tested one by
// one in test_cuda_batch_norm.cpp, whose header argues the tolerances; here cuda_test's.
#include "tests/backends/cuda/cuda_test_helpers.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "backends/cpu/cpu_kernels.hpp"
#include "core/src/dispatch.hpp"
#include "tests/support/batch_norm_edges.hpp"
#include "xgrad/ops/batch_norm.hpp"

using namespace cuda_test;

namespace
{
    shape_type shape_for(const std::string& fmt)
    {
        if (fmt == "NHWC")
            return {2, 5, 6, 7};
        if (fmt == "NCHW")
            return {2, 7, 5, 6};
        if (fmt == "NDHWC")
            return {2, 3, 4, 3, 7};
        return {2, 7, 3, 4, 3}; // NCDHW
    }
}

TEST_CASE("cuda batch norm ops: a channel holding +-Inf has mean +-Inf (the contract's formula)")
{
    for (const char* format : {"NHWC", "NCHW"})
        for (const dtype dt : {dtype::float32, dtype::float64, dtype::float16, dtype::bfloat16})
            for (const std::int64_t C : {std::int64_t{8}, std::int64_t{19}})
            {
                CAPTURE(std::string(format));
                CAPTURE(dt);
                CAPTURE(C);
                batch_norm_edges::check_edges(format, dt, C, gpu);
            }
}

TEST_CASE("cuda batch norm ops: forward, gradient and ReLU fusion match the CPU")
{
    for (const dtype dt : float_dtypes)
        for (const std::string fmt : {"NHWC", "NCHW", "NDHWC", "NCDHW"})
            for (const bool training : {true, false})
            {
                CAPTURE(dt);
                CAPTURE(fmt);
                CAPTURE(training);
                const dtype sdt = stats_of(dt);
                const tensor x = random_cpu(shape_for(fmt), dt, 1, -1, 3), dy = random_cpu(shape_for(fmt), dt, 2);
                const tensor scale = random_cpu({7}, sdt, 3), offset = random_cpu({7}, sdt, 4);
                const tensor mean = random_cpu({7}, sdt, 5), var = random_cpu({7}, sdt, 6, 0.1, 2);
                batch_norm_attrs at;
                at.data_format = fmt;
                at.is_training = training;
                at.exponential_avg_factor = 0.3f;
                const auto dev = [](const tensor& t) { return t.to(gpu); };
                for (const bool relu : {false, true})
                {
                    const auto op = relu ? fused_batch_norm_relu : fused_batch_norm;
                    const auto c = op(x, scale, offset, mean, var, at);
                    const auto d = op(dev(x), dev(scale), dev(offset), dev(mean), dev(var), at);
                    check_close(c.y, d.y, "y");
                    check_close(c.batch_mean, d.batch_mean, "batch_mean");
                    check_close(c.batch_variance, d.batch_variance, "batch_variance");
                    check_close(c.reserve_space_1, d.reserve_space_1, "reserve_space_1");
                    check_close(c.reserve_space_2, d.reserve_space_2, "reserve_space_2");
                    // the gradient at these statistics
                    const auto cg =
                        relu ? fused_batch_norm_relu_grad(dy, x, c.y, scale, c.reserve_space_1, c.reserve_space_2, at)
                             : fused_batch_norm_grad(dy, x, scale, c.reserve_space_1, c.reserve_space_2, tensor(), at);
                    const auto dg = relu
                                        ? fused_batch_norm_relu_grad(dev(dy), dev(x), dev(c.y), dev(scale),
                                                                     dev(c.reserve_space_1), dev(c.reserve_space_2), at)
                                        : fused_batch_norm_grad(dev(dy), dev(x), dev(scale), dev(c.reserve_space_1),
                                                                dev(c.reserve_space_2), tensor(), at);
                    check_close(cg.x_backprop, dg.x_backprop, "x_backprop");
                    check_close(cg.scale_backprop, dg.scale_backprop, "scale_backprop");
                    check_close(cg.offset_backprop, dg.offset_backprop, "offset_backprop");
                }
                if (fmt == "NHWC" || fmt == "NCHW") // V2 takes the 4-D formats
                {
                    const auto cg = fused_batch_norm_grad(dy, x, scale, mean, var, tensor(), at,
                                                          batch_norm_grad_version::v2);
                    const auto dg = fused_batch_norm_grad(dev(dy), dev(x), dev(scale), dev(mean), dev(var), tensor(),
                                                          at, batch_norm_grad_version::v2);
                    check_close(cg.x_backprop, dg.x_backprop, "V2 x_backprop");
                    check_close(cg.scale_backprop, dg.scale_backprop, "V2 scale_backprop");
                    check_close(cg.offset_backprop, dg.offset_backprop, "V2 offset_backprop");
                }
            }
}

TEST_CASE("cuda batch norm ops: second order, directly and through autograd, matches the CPU")
{
    for (const dtype dt : {dtype::float32, dtype::float64})
        for (const std::string fmt : {"NHWC", "NCHW"})
            for (const bool training : {true, false})
            {
                CAPTURE(dt);
                CAPTURE(fmt);
                CAPTURE(training);
                const dtype sdt = stats_of(dt);
                const tensor x = random_cpu(shape_for(fmt), dt, 11, -1, 3), dy = random_cpu(shape_for(fmt), dt, 12);
                const tensor A = random_cpu(shape_for(fmt), dt, 13);
                const tensor scale = random_cpu({7}, sdt, 14), a = random_cpu({7}, sdt, 15),
                             b = random_cpu({7}, sdt, 16);
                const tensor mean = random_cpu({7}, sdt, 17), var = random_cpu({7}, sdt, 18, 0.1, 2);
                batch_norm_attrs at;
                at.data_format = fmt;
                at.is_training = training;
                const auto dev = [](const tensor& t) { return t.to(gpu); };
                const auto c = fused_batch_norm_grad_grad(A, a, b, dy, x, scale, mean, var, at);
                const auto d = fused_batch_norm_grad_grad(dev(A), dev(a), dev(b), dev(dy), dev(x), dev(scale),
                                                          dev(mean), dev(var), at);
                check_close(c.d_y_backprop, d.d_y_backprop, "d_y_backprop");
                check_close(c.d_x, d.d_x, "d_x");
                check_close(c.d_scale, d.d_scale, "d_scale");

                // autograd: d/d(dy, x, scale) of sum(A * x_backprop) + sum(a * scale_backprop),
                // x_backprop from fused_batch_norm_grad, on each device
                const auto second = [&](const device& on) {
                    // detach: on the CPU, to() returns the very tensor, which must stay a plain input
                    tensor dyv = dy.to(on).detach(), xv = x.to(on).detach(), sv = scale.to(on).detach();
                    dyv.requires_grad_(true);
                    xv.requires_grad_(true);
                    sv.requires_grad_(true);
                    const auto g = fused_batch_norm_grad(dyv, xv, sv, mean.to(on), var.to(on), tensor(), at);
                    const tensor loss = sum(g.x_backprop * A.to(on)) + sum(g.scale_backprop * a.to(on));
                    return grad({loss}, {dyv, xv, sv}, {}, std::nullopt, true);
                };
                const auto gc = second(cpu_device), gd = second(gpu);
                check_close(gc[0], gd[0], "autograd d/dy_backprop");
                check_close(gc[1], gd[1], "autograd d/dx");
                check_close(gc[2], gd[2], "autograd d/dscale");
            }
}
