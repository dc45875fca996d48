// Tied parameters: one tensor registered under two names (weight tying) is stepped once per
// step, by the fused and the composite rules alike, exactly as the same model with one name.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "xgrad/autograd.hpp"
#include "xgrad/factories.hpp"
#include "xgrad/nn/module.hpp"
#include "xgrad/ops/elementwise.hpp"
#include "xgrad/ops/matmul.hpp"
#include "xgrad/ops/reduce.hpp"
#include "xgrad/optim/optimizer.hpp"

using namespace xgrad;

namespace
{
    /// loss = sum((x a)^2) + 0.1 sum((x b)^3), with b either a tensor of its own or a
    /// itself (tied): both uses then accumulate into the one gradient.
    class twin final : public nn::module
    {
    public:
        explicit twin(bool tied)
        {
            generator gen(3);
            register_parameter("a", randn({3, 3}, gen, dtype::float64));
            register_parameter("b", randn({3, 3}, gen, dtype::float64));
            if (tied)
                set_parameter("b", parameter("a"));
        }
        tensor loss(const tensor& x) const
        {
            const tensor ya = matmul(x, parameter("a")), yb = matmul(x, parameter("b"));
            return sum(ya * ya) + sum(yb * yb * yb) * 0.1;
        }
        std::string_view type_name() const noexcept override { return "twin"; }
    };

    /// The same function of one parameter, used twice.
    class single final : public nn::module
    {
    public:
        single()
        {
            generator gen(3);
            register_parameter("a", randn({3, 3}, gen, dtype::float64));
        }
        tensor loss(const tensor& x) const
        {
            const tensor y = matmul(x, parameter("a"));
            return sum(y * y) + sum(y * y * y) * 0.1;
        }
        std::string_view type_name() const noexcept override { return "single"; }
    };

    template <class M>
    std::vector<double> train(M& m, const std::string& which, bool fused)
    {
        auto opt = optim::make_optimizer(which, m, 0.01);
        opt->set_fused(fused);
        generator gen(9);
        for (int step = 0; step < 4; ++step)
        {
            const tensor x = randn({5, 3}, gen, dtype::float64);
            opt->zero_grad();
            backward({m.loss(x)});
            opt->step();
        }
        return to_vector(m.parameter("a"));
    }
}

TEST_CASE("a tied parameter is stepped once per step, fused or composite, as the model with one name")
{
    for (const char* which : {"sgd", "adam", "adamw", "rmsprop", "adagrad"})
        for (const bool fused : {true, false})
        {
            CAPTURE(which);
            CAPTURE(fused);
            twin tied(true);
            REQUIRE(tied.parameter("a").is_same(tied.parameter("b")));
            single reference;
            const std::vector<double> got = train(tied, which, fused), want = train(reference, which, fused);
            // The tied model sums the two uses' gradients in the accumulator, the reference
            // inside the graph: the same terms, added in another order, so the values agree to
            // float64 rounding (~1e-16 relative per step, four steps). A second update per step
            // moves them by the size of a step, 1e-3 or more.
            REQUIRE(got.size() == want.size());
            for (std::size_t i = 0; i < got.size(); ++i)
                CHECK(std::abs(got[i] - want[i]) <= 1e-12 * std::max(1.0, std::abs(want[i])));
            CHECK(tied.parameter("b").is_same(tied.parameter("a"))); // still tied
        }
}

TEST_CASE("a tied parameter's optimizer state is kept once, under its first name, and loads back")
{
    twin tied(true);
    auto opt = optim::make_optimizer("adam", tied, 0.01);
    generator gen(4);
    backward({tied.loss(randn({5, 3}, gen, dtype::float64))});
    opt->step();
    const auto state = opt->state_dict();
    bool has_a = false, has_b = false;
    for (const auto& [key, t] : state)
    {
        has_a = has_a || key.rfind("a.", 0) == 0;
        has_b = has_b || key.rfind("b.", 0) == 0;
    }
    CHECK(has_a);
    CHECK(!has_b);
    twin again(true);
    auto opt2 = optim::make_optimizer("adam", again, 0.01);
    CHECK_NOTHROW(opt2->load_state_dict(state));
    CHECK(opt2->state_dict().size() == state.size());
}
