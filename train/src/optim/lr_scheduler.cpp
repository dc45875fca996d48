// Learning-rate schedules (see lr_scheduler.hpp for the contract), each checked at construction
// so that lr_at and chain can only fail on the step. lr_at is the closed form (PyTorch's
// _get_closed_form_lr); chain is PyTorch's get_lr, written with the same operations in the same
// order, so that a chained_lr rounds as ChainedScheduler does. A schedule alone is stepped by
// PyTorch through get_lr: the two forms differ by the rounding of one multiplication per step
// (~1e-16 relative each), which the golden test's 1e-12 bounds over its few dozen steps.
#include "xgrad/optim/lr_scheduler.hpp"

#include <algorithm>
#include <cmath>
#include <utility>

#include "checks.hpp"
#include "xgrad/errors.hpp"

namespace xgrad::optim
{
    using namespace detail;

    namespace
    {
        const double pi = std::acos(-1.0); // math.pi
    }

    lr_schedule::~lr_schedule() = default;

    // --- step_lr ----------------------------------------------------------------------------

    step_lr::step_lr(double base_lr, std::int64_t step_size, double gamma)
        : m_base_lr(base_lr), m_step_size(step_size), m_gamma(gamma)
    {
        check_non_negative("step_lr", "base_lr", base_lr);
        check_at_least("step_lr", "step_size", step_size, 1);
        check_positive("step_lr", "gamma", gamma);
    }

    double step_lr::lr_at(std::int64_t epoch) const
    {
        check_step("step_lr", "lr_at", epoch);
        // Integer division: the rate changes only at multiples of step_size.
        return m_base_lr * std::pow(m_gamma, static_cast<double>(epoch / m_step_size));
    }

    double step_lr::chain(double lr, std::int64_t t) const
    {
        check_step("step_lr", "chain", t);
        return t == 0 || t % m_step_size != 0 ? lr : lr * m_gamma;
    }

    // --- multi_step_lr ----------------------------------------------------------------------

    multi_step_lr::multi_step_lr(double base_lr, std::vector<std::int64_t> milestones, double gamma)
        : m_base_lr(base_lr), m_milestones(std::move(milestones)), m_gamma(gamma)
    {
        check_non_negative("multi_step_lr", "base_lr", base_lr);
        check_milestones("multi_step_lr", m_milestones);
        check_positive("multi_step_lr", "gamma", gamma);
    }

    double multi_step_lr::lr_at(std::int64_t t) const
    {
        check_step("multi_step_lr", "lr_at", t);
        const auto passed = std::upper_bound(m_milestones.begin(), m_milestones.end(), t) - m_milestones.begin();
        return m_base_lr * std::pow(m_gamma, static_cast<double>(passed));
    }

    double multi_step_lr::chain(double lr, std::int64_t t) const
    {
        check_step("multi_step_lr", "chain", t);
        return std::binary_search(m_milestones.begin(), m_milestones.end(), t) ? lr * m_gamma : lr;
    }

    // --- exponential_lr ---------------------------------------------------------------------

    exponential_lr::exponential_lr(double base_lr, double gamma) : m_base_lr(base_lr), m_gamma(gamma)
    {
        check_non_negative("exponential_lr", "base_lr", base_lr);
        check_positive("exponential_lr", "gamma", gamma);
    }

    double exponential_lr::lr_at(std::int64_t t) const
    {
        check_step("exponential_lr", "lr_at", t);
        return m_base_lr * std::pow(m_gamma, static_cast<double>(t));
    }

    double exponential_lr::chain(double lr, std::int64_t t) const
    {
        check_step("exponential_lr", "chain", t);
        return t == 0 ? lr : lr * m_gamma;
    }

    // --- linear_lr --------------------------------------------------------------------------

    linear_lr::linear_lr(double base_lr, double start_factor, double end_factor, std::int64_t total_iters)
        : m_base_lr(base_lr), m_start(start_factor), m_end(end_factor), m_total(total_iters)
    {
        check_non_negative("linear_lr", "base_lr", base_lr);
        // start_factor 0 would divide by zero in the chainable form's first step (as PyTorch
        // 1.13's does), so the start is a positive factor.
        if (!(start_factor > 0.0 && start_factor <= 1.0))
            fail_option("linear_lr", "start_factor must be in (0, 1], got " + number(start_factor));
        if (!(end_factor >= 0.0 && end_factor <= 1.0))
            fail_option("linear_lr", "end_factor must be in [0, 1], got " + number(end_factor));
        check_at_least("linear_lr", "total_iters", total_iters, 1);
    }

    double linear_lr::lr_at(std::int64_t t) const
    {
        check_step("linear_lr", "lr_at", t);
        const auto done = static_cast<double>(std::min(t, m_total));
        return m_base_lr * (m_start + (m_end - m_start) * done / static_cast<double>(m_total));
    }

    double linear_lr::chain(double lr, std::int64_t t) const
    {
        check_step("linear_lr", "chain", t);
        if (t == 0)
            return lr * m_start;
        if (t > m_total)
            return lr;
        // The ratio of the factors of steps t and t - 1; the denominator is total_iters times
        // the factor of step t - 1, positive for every t <= total_iters (start_factor > 0).
        const double slope = m_end - m_start;
        return lr * (1.0 + slope / (static_cast<double>(m_total) * m_start + static_cast<double>(t - 1) * slope));
    }

    // --- cosine_lr --------------------------------------------------------------------------

    cosine_lr::cosine_lr(double base_lr, std::int64_t total_epochs, double min_lr)
        : m_base_lr(base_lr), m_total(total_epochs), m_min_lr(min_lr)
    {
        check_non_negative("cosine_lr", "base_lr", base_lr);
        check_at_least("cosine_lr", "total_epochs", total_epochs, 1);
        if (!(min_lr >= 0.0) || !(min_lr <= base_lr))
            fail_option("cosine_lr",
                        "min_lr must be in [0, base_lr] = [0, " + number(base_lr) + "], got " + number(min_lr));
    }

    double cosine_lr::lr_at(std::int64_t epoch) const
    {
        check_step("cosine_lr", "lr_at", epoch);
        // Past the end the rate stays at min_lr (cos(pi) is exactly -1 in double) rather than
        // climbing back up the next half period.
        const double x = static_cast<double>(std::min(epoch, m_total)) / static_cast<double>(m_total);
        return m_min_lr + (m_base_lr - m_min_lr) * (1.0 + std::cos(pi * x)) / 2.0;
    }

    double cosine_lr::chain(double lr, std::int64_t t) const
    {
        check_step("cosine_lr", "chain", t);
        // Past total the rate is left as it is, as lr_at holds min_lr there. Up to total the
        // denominator is 1 + cos(pi (t - 1) / total) > 0.
        if (t == 0 || t > m_total)
            return lr;
        const auto total = static_cast<double>(m_total);
        return (1.0 + std::cos(pi * static_cast<double>(t) / total)) /
                   (1.0 + std::cos(pi * static_cast<double>(t - 1) / total)) * (lr - m_min_lr) +
               m_min_lr;
    }

    // --- constant_lr ------------------------------------------------------------------------

    constant_lr::constant_lr(double base_lr) : m_base_lr(base_lr)
    {
        check_non_negative("constant_lr", "base_lr", base_lr);
    }

    double constant_lr::lr_at(std::int64_t epoch) const
    {
        check_step("constant_lr", "lr_at", epoch);
        return m_base_lr;
    }

    double constant_lr::chain(double lr, std::int64_t t) const
    {
        check_step("constant_lr", "chain", t);
        return lr;
    }

    // --- one_cycle_lr -----------------------------------------------------------------------

    one_cycle_lr::one_cycle_lr(const one_cycle_options& options) : m_options(options)
    {
        const one_cycle_options& o = m_options;
        check_positive("one_cycle_lr", "max_lr", o.max_lr);
        check_at_least("one_cycle_lr", "total_steps", o.total_steps, 1);
        if (!(o.pct_start >= 0.0 && o.pct_start <= 1.0))
            fail_option("one_cycle_lr", "pct_start must be in [0, 1], got " + number(o.pct_start));
        if (o.anneal_strategy != "cos" && o.anneal_strategy != "linear")
            fail_option("one_cycle_lr", "anneal_strategy must be 'cos' or 'linear', got '" + o.anneal_strategy + "'");
        check_positive("one_cycle_lr", "div_factor", o.div_factor);
        check_positive("one_cycle_lr", "final_div_factor", o.final_div_factor);
        m_initial = o.max_lr / o.div_factor;
        m_min = m_initial / o.final_div_factor;
        // PyTorch's phase ends, in its order of operations; they need not be whole steps.
        const auto total = static_cast<double>(o.total_steps);
        m_phase_end.push_back(o.pct_start * total - 1.0);
        if (o.three_phase)
            m_phase_end.push_back(2.0 * o.pct_start * total - 2.0);
        m_phase_end.push_back(total - 1.0);
        // Every phase must hold steps: a rise ending at step 0 divides 0 by 0 in PyTorch, and a
        // rise (and fall) reaching the last step leaves none to anneal to the minimum.
        if (!(m_phase_end[0] > 0.0))
            fail_option("one_cycle_lr", "pct_start * total_steps must be > 1 so that the rise holds a step, got " +
                                            number(o.pct_start) + " * " + std::to_string(o.total_steps));
        const double last_inner = m_phase_end[m_phase_end.size() - 2];
        if (!(last_inner < total - 1.0))
            fail_option("one_cycle_lr", std::string("pct_start ") + number(o.pct_start) + " leaves no step after the " +
                                            (o.three_phase ? "rise and fall" : "rise") + ": it ends at step " +
                                            number(last_inner) + ", the last step is " + number(total - 1.0));
    }

    double one_cycle_lr::lr_at(std::int64_t t) const
    {
        check_step("one_cycle_lr", "lr_at", t);
        if (t >= m_options.total_steps)
            fail_option("one_cycle_lr", "lr_at: step " + std::to_string(t) + " is past the cycle of total_steps " +
                                            std::to_string(m_options.total_steps) + " (steps 0 to " +
                                            std::to_string(m_options.total_steps - 1) + ")");
        const double three[] = {m_initial, m_options.max_lr, m_initial, m_min};
        const double two[] = {m_initial, m_options.max_lr, m_min};
        const double* rate = m_options.three_phase ? three : two; // phase i from rate[i] to rate[i + 1]
        const auto step = static_cast<double>(t);
        double start_step = 0.0;
        for (std::size_t i = 0; i < m_phase_end.size(); ++i)
        {
            const double end_step = m_phase_end[i];
            if (step <= end_step || i + 1 == m_phase_end.size())
            {
                const double pct = (step - start_step) / (end_step - start_step);
                const double start = rate[i], end = rate[i + 1];
                if (m_options.anneal_strategy == "cos")
                    return end + (start - end) / 2.0 * (std::cos(pi * pct) + 1.0);
                return (end - start) * pct + start;
            }
            start_step = end_step;
        }
        return m_min; // not reached: the last phase takes every remaining step
    }

    double one_cycle_lr::chain(double, std::int64_t t) const { return lr_at(t); }
}
