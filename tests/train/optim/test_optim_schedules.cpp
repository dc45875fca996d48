// Learning-rate schedules (xgrad/optim/lr_scheduler.hpp): the values of step_lr, cosine_lr and
// constant_lr against the header's formulas, make_schedule by name, and every argument error.
// The optimizers are tested in test_optim_optimizers.cpp and test_optim_state.cpp (same
// executable, test_optim).
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "tests/support/check_error.hpp"
#include "xgrad/errors.hpp"
#include "xgrad/optim/lr_scheduler.hpp"

using namespace xgrad;

TEST_CASE("optim: learning-rate schedules")
{
    // Expected values worked out by hand from the header's formulas.
    const optim::step_lr step(0.1, 3, 0.5);
    const std::vector<double> step_want{0.1, 0.1, 0.1, 0.05, 0.05, 0.05, 0.025};
    for (std::size_t e = 0; e < step_want.size(); ++e)
        CHECK(step.lr_at(static_cast<std::int64_t>(e)) == doctest::Approx(step_want[e]).epsilon(1e-15));

    const optim::cosine_lr cosine(0.1, 10, 0.01);
    CHECK(cosine.lr_at(0) == 0.1);
    CHECK(cosine.lr_at(5) == doctest::Approx(0.055).epsilon(1e-14)); // midpoint: (0.1 + 0.01) / 2
    CHECK(cosine.lr_at(10) == 0.01);
    CHECK(cosine.lr_at(11) == 0.01);
    CHECK(cosine.lr_at(1000) == 0.01);
    for (std::int64_t e = 1; e <= 10; ++e)
        CHECK(cosine.lr_at(e) < cosine.lr_at(e - 1));
    // A quarter of the way: cos(pi / 4) = sqrt(2) / 2.
    const optim::cosine_lr quarter(1.0, 4);
    CHECK(quarter.lr_at(1) == doctest::Approx((1.0 + std::sqrt(0.5)) / 2.0).epsilon(1e-14));

    const optim::constant_lr constant(0.3);
    CHECK(constant.lr_at(0) == 0.3);
    CHECK(constant.lr_at(123) == 0.3);

    // By name: "step" divides by 10 every total / 3 epochs (at least every epoch).
    const auto s9 = optim::make_schedule("step", 0.1, 9);
    CHECK(s9->lr_at(2) == 0.1);
    CHECK(s9->lr_at(3) == doctest::Approx(0.01).epsilon(1e-15));
    const auto s2 = optim::make_schedule("step", 0.1, 2);
    CHECK(s2->lr_at(1) == doctest::Approx(0.01).epsilon(1e-15));
    const auto c = optim::make_schedule("cosine", 0.2, 8);
    CHECK(c->lr_at(0) == 0.2);
    CHECK(c->lr_at(4) == doctest::Approx(0.1).epsilon(1e-14));
    CHECK(c->lr_at(8) == 0.0);
    CHECK(optim::make_schedule("constant", 0.4, 5)->lr_at(4) == 0.4);
}

TEST_CASE("optim: schedule errors")
{
    CHECK_ERROR(optim::make_schedule("linear", 0.1, 10), xgrad::invalid_argument, "unknown schedule 'linear'",
                "'constant'", "'step'", "'cosine'");
    CHECK_ERROR(optim::make_schedule("cosine", 0.1, 0), xgrad::invalid_argument, "total_epochs", "got 0");
    CHECK_ERROR(optim::step_lr(0.1, 0), xgrad::invalid_argument, "step_lr", "step_size", "got 0");
    CHECK_ERROR(optim::step_lr(0.1, 2, 0.0), xgrad::invalid_argument, "step_lr", "gamma");
    CHECK_ERROR(optim::step_lr(-0.1, 2), xgrad::invalid_argument, "step_lr", "base_lr", "-0.1");
    CHECK_ERROR(optim::cosine_lr(0.1, -3), xgrad::invalid_argument, "cosine_lr", "total_epochs", "-3");
    CHECK_ERROR(optim::cosine_lr(0.1, 10, 0.2), xgrad::invalid_argument, "cosine_lr", "min_lr", "0.2");
    CHECK_ERROR(optim::constant_lr(std::numeric_limits<double>::quiet_NaN()), xgrad::invalid_argument, "constant_lr",
                "base_lr");
    CHECK_ERROR(optim::constant_lr(0.1).lr_at(-1), xgrad::invalid_argument, "epoch", "-1");
    CHECK_ERROR(optim::cosine_lr(0.1, 5).lr_at(-2), xgrad::invalid_argument, "epoch", "-2");
}
