// batch_norm_tour: the fused batch-norm ops as code ported from TensorFlow's C++ API would call
// them, through the TensorFlow compatibility layer (xgrad/compat/tensorflow.hpp, namespace
// xgrad::compat::tensorflow), end to end on a small NCHW tensor. The layer's classes are thin
// wrappers of xgrad's own snake_case functions (fused_batch_norm, fused_batch_norm_grad in
// xgrad/ops/batch_norm.hpp), with the same results bit for bit; new code can call those directly.
//
//   1. FusedBatchNormV3 in training mode: y, the batch statistics and the running statistics;
//   2. FusedBatchNormGradV3: x_backprop, scale_backprop, offset_backprop;
//   3. the same gradients by autograd through the forward's y (they agree bit for bit);
//   4. a second-order quantity, d/dx [sum(x_backprop^2) + sum(scale_backprop^2)], in training
//      and in inference mode, by the gradient op's own graph and by double backward with
//      grad(..., create_graph = true), checked against a finite difference in float64.
//
// The formulas behind every number: docs/batch_norm.md.
#include <cmath>
#include <cstdio>
#include <exception>
#include <iostream>
#include <optional>
#include <vector>

#include "common/cli.hpp"
#include <xgrad/compat/tensorflow.hpp>
#include <xgrad/xgrad.hpp>

using namespace xgrad;
namespace tf = xgrad::compat::tensorflow;

namespace
{
    double max_abs_diff(const tensor& a, const tensor& b)
    {
        const std::vector<double> va = to_vector(a), vb = to_vector(b);
        double m = 0.0;
        for (std::size_t i = 0; i < va.size(); ++i)
            m = std::max(m, std::abs(va[i] - vb[i]));
        return m;
    }

    double dot(const tensor& a, const tensor& b)
    {
        const std::vector<double> va = to_vector(a), vb = to_vector(b);
        double s = 0.0;
        for (std::size_t i = 0; i < va.size(); ++i)
            s += va[i] * vb[i];
        return s;
    }

    void show(const char* label, const tensor& t) { std::cout << "  " << label << " = " << t << "\n"; }

    /// The inputs of the tour, all float32, NCHW with C = 3.
    struct inputs
    {
        tensor x, scale, offset, running_mean, running_variance, dy;
    };

    constexpr float epsilon = 1e-3f;

    /// sum(x_backprop^2) + sum(scale_backprop^2) for the given inputs, through the grad op. In
    /// training mode the reserve spaces come from a forward on x, so they move with x.
    tensor second_order_loss(const tf::Scope& scope, const inputs& in, const tensor& x, bool training)
    {
        tensor mean = in.running_mean, variance = in.running_variance;
        if (training)
        {
            const auto attrs = tf::ops::FusedBatchNormV3::DataFormat("NCHW").Epsilon(epsilon);
            const tf::ops::FusedBatchNormV3 bn(scope, x, in.scale, in.offset, in.running_mean, in.running_variance,
                                               attrs);
            mean = bn.reserve_space_1;
            variance = bn.reserve_space_2;
        }
        const auto attrs = tf::ops::FusedBatchNormGradV3::DataFormat("NCHW").Epsilon(epsilon).IsTraining(training);
        const tf::ops::FusedBatchNormGradV3 g(scope, in.dy, x, in.scale, mean, variance, tensor(), attrs);
        return sum(square(g.x_backprop)) + sum(square(g.scale_backprop));
    }

    inputs to_float64(const inputs& in)
    {
        const auto f64 = [](const tensor& t) { return t.detach().to(dtype::float64); };
        return {f64(in.x), f64(in.scale), f64(in.offset), f64(in.running_mean), f64(in.running_variance), f64(in.dy)};
    }

    void second_order(const tf::Scope& scope, const inputs& in, bool training)
    {
        std::cout << "\n4" << (training ? "a" : "b") << ". Second order, " << (training ? "training" : "inference")
                  << " mode: d/dx [sum(x_backprop^2) + sum(scale_backprop^2)]\n";
        const auto fwd_attrs = tf::ops::FusedBatchNormV3::DataFormat("NCHW").Epsilon(epsilon).IsTraining(training);
        const auto grad_attrs = tf::ops::FusedBatchNormGradV3::DataFormat("NCHW").Epsilon(epsilon).IsTraining(training);
        const tf::ops::FusedBatchNormV3 bn(scope, in.x, in.scale, in.offset, in.running_mean, in.running_variance,
                                           fwd_attrs);

        // (a) The gradient op's outputs are recorded (the scope records gradients), so they
        //     are differentiated like any other tensor.
        const tf::ops::FusedBatchNormGradV3 g(scope, in.dy, in.x, in.scale, bn.reserve_space_1, bn.reserve_space_2,
                                              bn.reserve_space_3, grad_attrs);
        const tensor via_op = grad({sum(square(g.x_backprop)) + sum(square(g.scale_backprop))}, {in.x})[0];

        // (b) Double backward: the first gradient with create_graph = true, then its gradient.
        const std::vector<tensor> first = grad({bn.y}, {in.x, in.scale}, {in.dy}, std::nullopt, /*create_graph=*/true);
        const tensor via_double_backward = grad({sum(square(first[0])) + sum(square(first[1]))}, {in.x})[0];

        show("d/dx", via_op);
        std::printf("  max |grad-op graph - double backward| = %.3g\n", max_abs_diff(via_op, via_double_backward));
        if (!training)
            std::cout << "  (in inference x_backprop = dy*scale*r does not depend on x: only the\n"
                         "   scale_backprop term, r*sum(dy*(x - mean)), contributes)\n";

        // (c) A directional finite difference in float64, with the batch statistics recomputed
        //     from x in training mode (they are functions of x).
        const tf::Scope quiet = scope.WithGradientRecording(false);
        const inputs in64 = to_float64(in);
        generator gen(7);
        const tensor v = randn(in.x.shape(), gen, dtype::float64);
        const double h = 1e-4;
        const double lp = second_order_loss(quiet, in64, in64.x + v * h, training).item();
        const double lm = second_order_loss(quiet, in64, in64.x - v * h, training).item();
        const double fd = (lp - lm) / (2 * h);
        const double ad = dot(via_op, v);
        std::printf("  along a random direction v: <d/dx, v> = %.6f, finite difference = %.6f (rel. diff %.1e)\n", ad,
                    fd, std::abs(ad - fd) / std::max(std::abs(fd), 1e-12));
    }

    int tour()
    {
        const tf::Scope scope = tf::Scope::NewRootScope(); // CPU, gradient recording on
        generator gen(2024);
        inputs in;
        in.x = randn({2, 3, 2, 2}, gen) * 2.0 + 1.0; // N = 2, C = 3, H = W = 2
        in.scale = from_host(std::vector<float>{1.0f, 0.5f, 2.0f}.data(), {3}, dtype::float32);
        in.offset = from_host(std::vector<float>{0.0f, 1.0f, -1.0f}.data(), {3}, dtype::float32);
        in.running_mean = zeros({3});
        in.running_variance = ones({3});
        in.dy = randn({2, 3, 2, 2}, gen);
        in.x.requires_grad_();
        in.scale.requires_grad_();
        in.offset.requires_grad_();

        std::cout << "x (NCHW) = " << in.x << "\n";

        std::cout << "\n1. FusedBatchNormV3, training, epsilon 1e-3, exponential_avg_factor 0.1\n";
        const tf::ops::FusedBatchNormV3 bn(
            scope, in.x, in.scale, in.offset, in.running_mean, in.running_variance,
            tf::ops::FusedBatchNormV3::DataFormat("NCHW").Epsilon(epsilon).IsTraining(true).ExponentialAvgFactor(0.1f));
        show("y", bn.y);
        show("reserve_space_1 (batch mean)", bn.reserve_space_1);
        show("reserve_space_2 (batch variance, biased)", bn.reserve_space_2);
        show("batch_mean (running: 0.9 old + 0.1 batch)", bn.batch_mean);
        show("batch_variance (running, Bessel-corrected)", bn.batch_variance);

        std::cout << "\n2. FusedBatchNormGradV3 with the forward's reserve spaces\n";
        show("y_backprop", in.dy);
        const tf::ops::FusedBatchNormGradV3 g(scope, in.dy, in.x, in.scale, bn.reserve_space_1, bn.reserve_space_2,
                                              bn.reserve_space_3,
                                              tf::ops::FusedBatchNormGradV3::DataFormat("NCHW").Epsilon(epsilon));
        show("x_backprop", g.x_backprop);
        show("scale_backprop", g.scale_backprop);
        show("offset_backprop", g.offset_backprop);

        std::cout << "\n3. The same gradients by autograd through y\n";
        const std::vector<tensor> ag = grad({bn.y}, {in.x, in.scale, in.offset}, {in.dy});
        std::printf("  max |difference|: x %.3g, scale %.3g, offset %.3g\n", max_abs_diff(g.x_backprop, ag[0]),
                    max_abs_diff(g.scale_backprop, ag[1]), max_abs_diff(g.offset_backprop, ag[2]));

        // Inference uses the running statistics that training produced.
        in.running_mean = bn.batch_mean.detach();
        in.running_variance = bn.batch_variance.detach();
        second_order(scope, in, /*training=*/true);
        second_order(scope, in, /*training=*/false);
        return 0;
    }
}

int main(int argc, char** argv)
{
    // No options: --help describes the program, anything else is a usage error (exit 2).
    xgrad::examples::arg_parser p("batch_norm_tour",
                                  "Runs TensorFlow-style FusedBatchNormV3 / FusedBatchNormGradV3 code through xgrad's "
                                  "compatibility\nlayer on a small NCHW tensor and prints the results, the same "
                                  "gradients by autograd, and a\nsecond-order quantity checked against a finite "
                                  "difference (docs/batch_norm.md).");
    p.parse(argc, argv);
    try
    {
        return tour();
    }
    catch (const std::exception& e)
    {
        std::fprintf(stderr, "batch_norm_tour: error: %s\n", e.what());
        return 1;
    }
}
