// Learning-rate schedules (see lr_scheduler.hpp for the contract). Each is a closed-form
// function of the epoch, checked at construction so that lr_at can only fail on the epoch.
#include "xgrad/optim/lr_scheduler.hpp"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "xgrad/errors.hpp"

namespace xgrad::optim
{
    namespace
    {
        std::string number(double v)
        {
            std::ostringstream os;
            os << v;
            return os.str();
        }

        [[noreturn]] void fail(const char* who, const std::string& what)
        {
            throw xgrad::invalid_argument(std::string(who) + ": " + what);
        }

        void check_lr(const char* who, const char* what, double lr)
        {
            // Written so that NaN fails.
            if (!(lr >= 0.0) || !std::isfinite(lr))
                fail(who, std::string(what) + " must be a finite number >= 0, got " + number(lr));
        }

        void check_epoch(const char* who, std::int64_t epoch)
        {
            if (epoch < 0)
                fail(who, "lr_at: epoch must be >= 0, got " + std::to_string(epoch));
        }
    }

    lr_schedule::~lr_schedule() = default;

    // --- step_lr ----------------------------------------------------------------------------

    step_lr::step_lr(double base_lr, std::int64_t step_size, double gamma)
        : m_base_lr(base_lr), m_step_size(step_size), m_gamma(gamma)
    {
        check_lr("step_lr", "base_lr", base_lr);
        if (step_size < 1)
            fail("step_lr", "step_size must be >= 1, got " + std::to_string(step_size));
        if (!(gamma > 0.0) || !std::isfinite(gamma))
            fail("step_lr", "gamma must be a finite number > 0, got " + number(gamma));
    }

    double step_lr::lr_at(std::int64_t epoch) const
    {
        check_epoch("step_lr", epoch);
        // Integer division: the rate changes only at multiples of step_size.
        return m_base_lr * std::pow(m_gamma, static_cast<double>(epoch / m_step_size));
    }

    // --- cosine_lr --------------------------------------------------------------------------

    cosine_lr::cosine_lr(double base_lr, std::int64_t total_epochs, double min_lr)
        : m_base_lr(base_lr), m_total(total_epochs), m_min_lr(min_lr)
    {
        check_lr("cosine_lr", "base_lr", base_lr);
        if (total_epochs < 1)
            fail("cosine_lr", "total_epochs must be >= 1, got " + std::to_string(total_epochs));
        if (!(min_lr >= 0.0) || !(min_lr <= base_lr))
            fail("cosine_lr", "min_lr must be in [0, base_lr] = [0, " + number(base_lr) + "], got " + number(min_lr));
    }

    double cosine_lr::lr_at(std::int64_t epoch) const
    {
        check_epoch("cosine_lr", epoch);
        // Past the end the rate stays at min_lr (cos(pi) is exactly -1 in double) rather than
        // climbing back up the next half period.
        const double x = static_cast<double>(std::min(epoch, m_total)) / static_cast<double>(m_total);
        const double pi = std::acos(-1.0);
        return m_min_lr + (m_base_lr - m_min_lr) * (1.0 + std::cos(pi * x)) / 2.0;
    }

    // --- constant_lr ------------------------------------------------------------------------

    constant_lr::constant_lr(double base_lr) : m_base_lr(base_lr) { check_lr("constant_lr", "base_lr", base_lr); }

    double constant_lr::lr_at(std::int64_t epoch) const
    {
        check_epoch("constant_lr", epoch);
        return m_base_lr;
    }

    // --- by name ----------------------------------------------------------------------------

    std::unique_ptr<lr_schedule> make_schedule(const std::string& name, double base_lr, std::int64_t total_epochs)
    {
        if (name != "constant" && name != "step" && name != "cosine")
            throw xgrad::invalid_argument("make_schedule: unknown schedule '" + name +
                                          "'; the choices are 'constant', 'step', 'cosine'");
        if (total_epochs < 1)
            throw xgrad::invalid_argument("make_schedule: total_epochs must be >= 1, got " +
                                          std::to_string(total_epochs));
        if (name == "constant")
            return std::make_unique<constant_lr>(base_lr);
        if (name == "step")
            return std::make_unique<step_lr>(base_lr, std::max<std::int64_t>(1, total_epochs / 3), 0.1);
        return std::make_unique<cosine_lr>(base_lr, total_epochs, 0.0);
    }
}
