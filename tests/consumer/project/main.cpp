// Uses an installed xgrad through <xgrad/xgrad.hpp>: d/dx sum(x * x) must equal 2x.
#include <xgrad/layers.hpp>
#include <xgrad/xgrad.hpp>

#include <cmath>
#include <cstddef>
#include <iostream>

int main()
{
    xgrad::generator gen(1);
    auto x = xgrad::randn({3, 4}, gen).requires_grad_();
    auto y = xgrad::sum(x * x);
    auto g = xgrad::grad({y}, {x})[0];

    auto xs = xgrad::to_xarray<float>(x);
    auto gs = xgrad::to_xarray<float>(g);
    if (xs.size() != 12 || gs.size() != xs.size())
    {
        std::cerr << "unexpected sizes: x has " << xs.size() << ", grad has " << gs.size() << "\n";
        return 1;
    }
    for (std::size_t i = 0; i < xs.size(); ++i)
    {
        const float want = 2.0f * xs.flat(i);
        const float got = gs.flat(i);
        if (!(std::fabs(got - want) <= 1e-5f * (1.0f + std::fabs(want))))
        {
            std::cerr << "grad mismatch at " << i << ": got " << got << ", want " << want << "\n";
            return 1;
        }
    }
    // The installed layers: a batch-norm layer's output has zero mean per channel in training.
    xgrad::nn::batch_norm2d bn(3);
    const auto h = bn(xgrad::randn({2, 3, 4, 4}, gen));
    const double m = xgrad::mean(h.slice(1, 0, 1)).item();
    if (!(std::fabs(m) < 1e-5))
    {
        std::cerr << "batch_norm2d output mean " << m << ", want 0\n";
        return 1;
    }
    std::cout << "xgrad consumer OK\n";
    return 0;
}
