// sequential_lr and chained_lr (see lr_scheduler.hpp): schedules made of schedules.
//
// sequential_lr is closed-form per segment: PyTorch restarts each later schedule at its
// milestone from its closed form at 0 and then steps its chainable form, which is the closed
// form up to rounding. chained_lr has no closed form in general (cosine's chainable form is
// affine in the rate, one_cycle's sets it), so it replays PyTorch's steps, caching the last
// one so that consecutive steps cost one step each.
#include <algorithm>
#include <string>
#include <utility>

#include "checks.hpp"
#include "xgrad/optim/lr_scheduler.hpp"

namespace xgrad::optim
{
    using namespace detail;

    namespace
    {
        void check_children(const char* who, const std::vector<std::shared_ptr<const lr_schedule>>& schedules)
        {
            if (schedules.empty())
                fail_option(who, "needs at least one schedule, got none");
            for (std::size_t i = 0; i < schedules.size(); ++i)
                if (!schedules[i])
                    fail_option(who, "schedule " + std::to_string(i) + " is null");
        }
    }

    // --- sequential_lr ----------------------------------------------------------------------

    sequential_lr::sequential_lr(std::vector<std::shared_ptr<const lr_schedule>> schedules,
                                 std::vector<std::int64_t> milestones)
        : m_schedules(std::move(schedules)), m_milestones(std::move(milestones))
    {
        check_children("sequential_lr", m_schedules);
        if (m_milestones.size() != m_schedules.size() - 1)
            fail_option("sequential_lr", "needs one milestone fewer than schedules, got " +
                                             std::to_string(m_schedules.size()) + " schedules and " +
                                             std::to_string(m_milestones.size()) + " milestones");
        check_milestones("sequential_lr", m_milestones);
    }

    std::size_t sequential_lr::segment(std::int64_t t) const
    {
        // PyTorch's bisect_right: the schedule whose milestone is the last one <= t.
        return static_cast<std::size_t>(std::upper_bound(m_milestones.begin(), m_milestones.end(), t) -
                                        m_milestones.begin());
    }

    double sequential_lr::lr_at(std::int64_t t) const
    {
        check_step("sequential_lr", "lr_at", t);
        const std::size_t k = segment(t);
        return m_schedules[k]->lr_at(k == 0 ? t : t - m_milestones[k - 1]);
    }

    double sequential_lr::chain(double lr, std::int64_t t) const
    {
        check_step("sequential_lr", "chain", t);
        const std::size_t k = segment(t);
        if (k == 0)
            return m_schedules[0]->chain(lr, t);
        const std::int64_t local = t - m_milestones[k - 1];
        return local == 0 ? m_schedules[k]->lr_at(0) : m_schedules[k]->chain(lr, local);
    }

    // --- chained_lr -------------------------------------------------------------------------

    chained_lr::chained_lr(std::vector<std::shared_ptr<const lr_schedule>> schedules)
        : m_schedules(std::move(schedules))
    {
        check_children("chained_lr", m_schedules);
    }

    double chained_lr::chain(double lr, std::int64_t t) const
    {
        check_step("chained_lr", "chain", t);
        for (const auto& s : m_schedules)
            lr = s->chain(lr, t);
        return lr;
    }

    double chained_lr::lr_at(std::int64_t t) const
    {
        check_step("chained_lr", "lr_at", t);
        const std::lock_guard<std::mutex> lock(m_mutex);
        std::int64_t from = 1;
        double lr = 0.0;
        if (m_cached_t >= 0 && m_cached_t <= t)
        {
            from = m_cached_t + 1;
            lr = m_cached_lr;
        }
        else
            lr = chain(base_lr(), 0); // the constructors' steps, in order
        for (std::int64_t k = from; k <= t; ++k)
            lr = chain(lr, k);
        m_cached_t = t;
        m_cached_lr = lr;
        return lr;
    }
}
