// two_moons: fit a small MLP classifier to two interleaved half-moons with xgrad's autodiff.
//
// Shows the core of the framework end to end: seeded data, a model written with tensor ops,
// cross-entropy, gradients by backward(), a plain SGD-with-momentum update, and a second-order
// quantity (the curvature of the loss along its gradient, g^T H g / g^T g, from a
// Hessian-vector product computed by differentiating the gradient).
//
//   two_moons [--epochs N] [--lr X] [--hidden N] [--seed N] [--threads N] [--samples N]
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "common/cli.hpp"

#include <xgrad/errors.hpp>
#include <xgrad/train/evaluate.hpp>
#include <xgrad/xgrad.hpp>

using namespace xgrad;

namespace
{
    struct options
    {
        int epochs = 300;
        double lr = 0.5;
        std::int64_t hidden = 32;
        std::uint64_t seed = 1;
        int threads = 0;
        std::int64_t samples = 512;
    };

    options parse(int argc, char** argv)
    {
        options o;
        examples::arg_parser p("two_moons",
                               "Trains a small MLP on two interleaved half circles (synthetic data) and prints the "
                               "loss and\nthe train and test accuracy.");
        p.add_int("--epochs", o.epochs, 1, 1000000, "N", "full-batch steps");
        p.add_positive("--lr", o.lr, 1000, "X", "learning rate");
        p.add_int("--hidden", o.hidden, 1, 4096, "N", "width of the two hidden layers");
        p.add_uint("--seed", o.seed, 0, UINT64_MAX, "N", "seed of the data and the weights");
        p.add_int("--threads", o.threads, 0, 65536, "N", "CPU threads (0: xgrad's default)");
        p.add_int("--samples", o.samples, 2, 1000000, "N", "training (and test) points");
        p.parse(argc, argv);
        return o;
    }

    /// n points on two interleaved half circles with Gaussian noise; labels 0 and 1.
    void make_moons(std::int64_t n, generator& gen, tensor& x, tensor& y)
    {
        std::vector<double> pts(static_cast<std::size_t>(2 * n));
        std::vector<std::int64_t> labels(static_cast<std::size_t>(n));
        for (std::int64_t i = 0; i < n; ++i)
        {
            const bool upper = i % 2 == 0;
            const double t = 3.14159265358979323846 * gen.uniform();
            const double px = upper ? std::cos(t) : 1 - std::cos(t);
            const double py = upper ? std::sin(t) : 0.5 - std::sin(t);
            pts[static_cast<std::size_t>(2 * i)] = px + 0.1 * gen.normal();
            pts[static_cast<std::size_t>(2 * i + 1)] = py + 0.1 * gen.normal();
            labels[static_cast<std::size_t>(i)] = upper ? 0 : 1;
        }
        x = from_host(pts.data(), {n, 2}, dtype::float64).to(dtype::float32);
        y = from_host(labels.data(), {n}, dtype::int64);
    }

    struct mlp
    {
        std::vector<tensor> params; // w1, b1, w2, b2, w3, b3

        mlp(std::int64_t hidden, generator& gen)
        {
            auto layer = [&](std::int64_t in, std::int64_t out) {
                // Xavier/Glorot scaling keeps tanh activations in their linear range at start.
                const double scale = std::sqrt(2.0 / static_cast<double>(in + out));
                params.push_back((randn({in, out}, gen) * scale).detach().requires_grad_());
                params.push_back(zeros({out}).requires_grad_());
            };
            layer(2, hidden);
            layer(hidden, hidden);
            layer(hidden, 2);
        }

        tensor forward(const tensor& x) const
        {
            tensor h = tanh(matmul(x, params[0]) + params[1]);
            h = tanh(matmul(h, params[2]) + params[3]);
            return matmul(h, params[4]) + params[5];
        }
    };
}

int main(int argc, char** argv)
{
    try
    {
        const options opt = parse(argc, argv);
        if (opt.threads > 0)
            set_num_threads(opt.threads);
        generator gen(opt.seed);
        tensor x_train, y_train, x_test, y_test;
        make_moons(opt.samples, gen, x_train, y_train);
        make_moons(opt.samples, gen, x_test, y_test);
        mlp model(opt.hidden, gen);
        std::vector<tensor> velocity;
        for (const auto& p : model.params)
            velocity.push_back(zeros_like(p));
        const double momentum = 0.9;

        std::printf(
            "two_moons: %lld training points, MLP 2-%lld-%lld-2 (tanh), SGD lr %.3g momentum %.2g, %d threads\n",
            static_cast<long long>(opt.samples), static_cast<long long>(opt.hidden), static_cast<long long>(opt.hidden),
            opt.lr, momentum, get_num_threads());
        for (int epoch = 1; epoch <= opt.epochs; ++epoch)
        {
            const tensor loss = cross_entropy(model.forward(x_train), y_train);
            loss.backward();
            {
                no_grad guard;
                for (std::size_t i = 0; i < model.params.size(); ++i)
                {
                    velocity[i] = velocity[i] * momentum + model.params[i].grad();
                    model.params[i] = (model.params[i] - velocity[i] * opt.lr).detach().requires_grad_();
                }
            }
            if (epoch == 1 || epoch % 50 == 0 || epoch == opt.epochs)
            {
                no_grad guard;
                const tensor test_logits = model.forward(x_test);
                std::printf("epoch %4d  train loss %.4f  test loss %.4f  test accuracy %.1f%%\n", epoch, loss.item(),
                            cross_entropy(test_logits, y_test).item(), 100 * train::accuracy(test_logits, y_test));
            }
        }

        // Second order: curvature along the gradient, g^T H g / g^T g, where H g is the gradient
        // of (g . stop_gradient(g)) -- a Hessian-vector product by double backward.
        const tensor loss = cross_entropy(model.forward(x_train), y_train);
        const std::vector<tensor> g = grad({loss}, model.params, {}, true, true);
        tensor gg = zeros({}), g_dot_v = zeros({});
        for (const auto& gi : g)
        {
            gg = gg + sum(gi * gi.detach());
            g_dot_v = g_dot_v + sum(gi.detach() * gi.detach());
        }
        const std::vector<tensor> hg = grad({gg}, model.params);
        double ghg = 0;
        for (std::size_t i = 0; i < g.size(); ++i)
            ghg += sum(hg[i] * g[i].detach()).item();
        std::printf("final train loss %.4f, |grad| %.3e, curvature along the gradient g'Hg/g'g = %.4f\n", loss.item(),
                    std::sqrt(g_dot_v.item()), ghg / g_dot_v.item());
        return 0;
    }
    catch (const std::exception& e)
    {
        std::fprintf(stderr, "two_moons: error: %s\n", e.what());
        return 1;
    }
}
