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
                    check_close(c.running_mean, d.running_mean, "running_mean");
                    check_close(c.running_var, d.running_var, "running_var");
                    check_close(c.saved_mean, d.saved_mean, "saved_mean");
                    check_close(c.saved_var, d.saved_var, "saved_var");
                    // the gradient at these statistics
                    const auto cg = relu ? fused_batch_norm_relu_grad(dy, x, c.y, scale, c.saved_mean, c.saved_var, at)
                                         : fused_batch_norm_grad(dy, x, scale, c.saved_mean, c.saved_var, at);
                    const auto dg = relu ? fused_batch_norm_relu_grad(dev(dy), dev(x), dev(c.y), dev(scale),
                                                                      dev(c.saved_mean), dev(c.saved_var), at)
                                         : fused_batch_norm_grad(dev(dy), dev(x), dev(scale), dev(c.saved_mean),
                                                                 dev(c.saved_var), at);
                    check_close(cg.dx, dg.dx, "dx");
                    check_close(cg.dscale, dg.dscale, "dscale");
                    check_close(cg.doffset, dg.doffset, "doffset");
                }
                {
                    // The gradient with the given statistics (the caller's own, not the forward's).
                    const auto cg = fused_batch_norm_grad(dy, x, scale, mean, var, at);
                    const auto dg = fused_batch_norm_grad(dev(dy), dev(x), dev(scale), dev(mean), dev(var), at);
                    check_close(cg.dx, dg.dx, "given statistics: dx");
                    check_close(cg.dscale, dg.dscale, "given statistics: dscale");
                    check_close(cg.doffset, dg.doffset, "given statistics: doffset");
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
                check_close(c.d_dy, d.d_dy, "d_dy");
                check_close(c.d_x, d.d_x, "d_x");
                check_close(c.d_scale, d.d_scale, "d_scale");

                // autograd: d/d(dy, x, scale) of sum(A * dx) + sum(a * dscale),
                // dx from fused_batch_norm_grad, on each device
                const auto second = [&](const device& on) {
                    // detach: on the CPU, to() returns the very tensor, which must stay a plain input
                    tensor dyv = dy.to(on).detach(), xv = x.to(on).detach(), sv = scale.to(on).detach();
                    dyv.requires_grad_(true);
                    xv.requires_grad_(true);
                    sv.requires_grad_(true);
                    const auto g = fused_batch_norm_grad(dyv, xv, sv, mean.to(on), var.to(on), at);
                    const tensor loss = sum(g.dx * A.to(on)) + sum(g.dscale * a.to(on));
                    return grad({loss}, {dyv, xv, sv}, {}, std::nullopt, true);
                };
                const auto gc = second(cpu_device), gd = second(gpu);
                check_close(gc[0], gd[0], "autograd d/ddy");
                check_close(gc[1], gd[1], "autograd d/dx");
                check_close(gc[2], gd[2], "autograd d/dscale");
            }
}
