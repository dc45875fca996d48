#pragma once
// Learning-rate schedules (train/src/optim/lr_scheduler.cpp, lr_composite.cpp,
// make_schedule.cpp), with the rates of PyTorch's torch.optim.lr_scheduler classes (checked to
// 1e-12 against tests/data/torch/schedules.json):
//
//   step_lr        StepLR               multi_step_lr  MultiStepLR
//   exponential_lr ExponentialLR        linear_lr      LinearLR
//   cosine_lr      CosineAnnealingLR    one_cycle_lr   OneCycleLR (the rate; cycle_momentum=False)
//   sequential_lr  SequentialLR         chained_lr     ChainedScheduler
//   constant_lr    a constant rate (not PyTorch's ConstantLR, which scales the first iterations)
//
// and ReduceLROnPlateau, which a metric drives, in reduce_lr_on_plateau.hpp.
//
// A schedule is a pure function of the step (or epoch) number t: lr_at(t) is the rate of step
// t, which the caller gives to optimizer::set_lr before that step (the trainer does, by step or
// by epoch; xgrad/train/trainer.hpp). A resumed run therefore computes the same rates as an
// uninterrupted one with no scheduler state in its checkpoint. In PyTorch's terms, lr_at(t) is
// the optimizer's lr after the constructor and t calls of scheduler.step().
//
// Where xgrad's rates differ from PyTorch's (each deliberate; the golden data stays inside):
// - cosine_lr holds min_lr from total_epochs on; CosineAnnealingLR rises again after T_max (a
//   cosine of period 2 T_max).
// - one_cycle_lr refuses t >= total_steps; OneCycleLR computes one more rate, for the step()
//   after the last batch, which no batch uses (past the cycle's end: rising again for "cos",
//   negative for "linear").
// - The children of a sequential_lr or chained_lr each have their own base_lr. PyTorch's
//   children share the optimizer's initial_lr, which OneCycleLR overwrites with max_lr /
//   div_factor when it is constructed (so PyTorch's sequence equals xgrad's when the children's
//   base_lr are that value).
// - Milestones must be strictly increasing and >= 1 (PyTorch takes any list: MultiStepLR counts
//   a repeated milestone twice, and SequentialLR never restarts a schedule at milestone 0).
//
// SequentialLR's quirk, which sequential_lr reproduces: at its milestone a schedule starts from
// its own first value, lr_at(0) (PyTorch steps it with the deprecated step(0), which takes its
// closed form at 0), and counts its steps from there; the schedule before it never reaches the
// value it would have had at the milestone. A linear warm-up over total_iters = milestone = N
// steps thus ends at base_lr (s + (1 - s)(N - 1) / N) at step N - 1, and the next schedule
// starts at its own first rate at step N.
//
// Errors: a base_lr, min_lr or max_lr that is negative, NaN or infinite, and every parameter out
// of its range below throw xgrad::invalid_argument naming the schedule and the parameter with
// its value; lr_at(t) and chain(lr, t) with t < 0 name the schedule and t.
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace xgrad::optim
{
    class lr_schedule
    {
    public:
        virtual ~lr_schedule();
        /// The learning rate of step (or epoch) t, t >= 0.
        virtual double lr_at(std::int64_t t) const = 0;
        /// The rate the schedule scales (PyTorch's base_lrs, the group's initial_lr).
        virtual double base_lr() const noexcept = 0;
        /// PyTorch's chainable form (get_lr): the rate after the step to t when the rate before
        /// it was `lr`; t = 0 is the step PyTorch's constructor makes. Chaining one schedule
        /// alone from base_lr() gives lr_at(t) up to rounding; chained_lr composes schedules
        /// through it. one_cycle_lr is not chainable (it returns lr_at(t), whatever `lr` is).
        virtual double chain(double lr, std::int64_t t) const = 0;
        /// The class's name, for messages ("step_lr").
        virtual const char* name() const noexcept = 0;
    };

    /// base_lr * gamma^(t / step_size) (integer division). PyTorch's StepLR.
    class step_lr final : public lr_schedule
    {
    public:
        /// step_size >= 1; gamma a finite number > 0.
        step_lr(double base_lr, std::int64_t step_size, double gamma = 0.1);
        double lr_at(std::int64_t epoch) const override;
        double base_lr() const noexcept override { return m_base_lr; }
        double chain(double lr, std::int64_t t) const override;
        const char* name() const noexcept override { return "step_lr"; }

    private:
        double m_base_lr;
        std::int64_t m_step_size;
        double m_gamma;
    };

    /// base_lr * gamma^(number of milestones <= t). PyTorch's MultiStepLR.
    class multi_step_lr final : public lr_schedule
    {
    public:
        /// milestones strictly increasing, each >= 1 (none: a constant rate); gamma a finite
        /// number > 0.
        multi_step_lr(double base_lr, std::vector<std::int64_t> milestones, double gamma = 0.1);
        double lr_at(std::int64_t t) const override;
        double base_lr() const noexcept override { return m_base_lr; }
        double chain(double lr, std::int64_t t) const override;
        const char* name() const noexcept override { return "multi_step_lr"; }

    private:
        double m_base_lr;
        std::vector<std::int64_t> m_milestones;
        double m_gamma;
    };

    /// base_lr * gamma^t. PyTorch's ExponentialLR.
    class exponential_lr final : public lr_schedule
    {
    public:
        /// gamma a finite number > 0.
        exponential_lr(double base_lr, double gamma);
        double lr_at(std::int64_t t) const override;
        double base_lr() const noexcept override { return m_base_lr; }
        double chain(double lr, std::int64_t t) const override;
        const char* name() const noexcept override { return "exponential_lr"; }

    private:
        double m_base_lr;
        double m_gamma;
    };

    /// base_lr (s + (e - s) min(t, total_iters) / total_iters), s = start_factor, e = end_factor:
    /// a linear warm-up (s < e) or decay (s > e) over total_iters steps, then constant. PyTorch's
    /// LinearLR, with its defaults.
    class linear_lr final : public lr_schedule
    {
    public:
        /// start_factor in (0, 1], end_factor in [0, 1], total_iters >= 1.
        linear_lr(double base_lr, double start_factor = 1.0 / 3.0, double end_factor = 1.0,
                  std::int64_t total_iters = 5);
        double lr_at(std::int64_t t) const override;
        double base_lr() const noexcept override { return m_base_lr; }
        double chain(double lr, std::int64_t t) const override;
        const char* name() const noexcept override { return "linear_lr"; }

    private:
        double m_base_lr;
        double m_start, m_end;
        std::int64_t m_total;
    };

    /// min_lr + (base_lr - min_lr) (1 + cos(pi min(t, total) / total)) / 2: base_lr at t = 0,
    /// min_lr from t = total on. PyTorch's CosineAnnealingLR (T_max = total, eta_min = min_lr)
    /// up to T_max (see the file comment).
    class cosine_lr final : public lr_schedule
    {
    public:
        /// total_epochs >= 1; min_lr in [0, base_lr].
        cosine_lr(double base_lr, std::int64_t total_epochs, double min_lr = 0.0);
        double lr_at(std::int64_t epoch) const override;
        double base_lr() const noexcept override { return m_base_lr; }
        double chain(double lr, std::int64_t t) const override;
        const char* name() const noexcept override { return "cosine_lr"; }

    private:
        double m_base_lr;
        std::int64_t m_total;
        double m_min_lr;
    };

    /// Constant base_lr (chained: leaves the rate as it is).
    class constant_lr final : public lr_schedule
    {
    public:
        explicit constant_lr(double base_lr);
        double lr_at(std::int64_t epoch) const override;
        double base_lr() const noexcept override { return m_base_lr; }
        double chain(double lr, std::int64_t t) const override;
        const char* name() const noexcept override { return "constant_lr"; }

    private:
        double m_base_lr;
    };

    struct one_cycle_options
    {
        double max_lr = 0.1;
        std::int64_t total_steps = 1;
        double pct_start = 0.3;              // the share of the steps spent rising
        std::string anneal_strategy = "cos"; // "cos" or "linear"
        double div_factor = 25.0;            // initial rate max_lr / div_factor
        double final_div_factor = 1e4;       // last rate initial / final_div_factor
        bool three_phase = false;
    };

    /// The 1cycle policy, PyTorch's OneCycleLR step for step: with initial = max_lr / div_factor
    /// and min = initial / final_div_factor, the rate anneals ("cos": end + (start - end)(1 +
    /// cos(pi p)) / 2; "linear": start + (end - start) p) from initial to max_lr over the steps
    /// [0, pct_start total_steps - 1], then from max_lr to min up to step total_steps - 1; with
    /// three_phase, from max_lr back to initial over as many steps as the rise, then to min. Each
    /// phase starts where the previous one ended (PyTorch's phase boundaries, which need not be
    /// whole steps). t in [0, total_steps). base_lr() is the initial rate.
    class one_cycle_lr final : public lr_schedule
    {
    public:
        /// max_lr, div_factor and final_div_factor finite numbers > 0; total_steps >= 1;
        /// anneal_strategy "cos" or "linear"; pct_start in [0, 1], and such that every phase
        /// holds steps: pct_start total_steps > 1, and the rise (with three_phase, the rise and
        /// fall) ends before step total_steps - 1.
        explicit one_cycle_lr(const one_cycle_options& options);
        double lr_at(std::int64_t t) const override;
        double base_lr() const noexcept override { return m_initial; }
        /// lr_at(t): the rate is set, not scaled (PyTorch: "This scheduler is not chainable").
        double chain(double lr, std::int64_t t) const override;
        const char* name() const noexcept override { return "one_cycle_lr"; }
        const one_cycle_options& options() const noexcept { return m_options; }

    private:
        one_cycle_options m_options;
        double m_initial, m_min;
        std::vector<double> m_phase_end; // PyTorch's end_step of each phase
    };

    /// schedules[0] up to milestones[0], then schedules[k] from milestones[k - 1] on, counting
    /// its steps from there: lr_at(t) = schedules[k]->lr_at(t - milestones[k - 1]). PyTorch's
    /// SequentialLR (see the file comment for its quirk).
    class sequential_lr final : public lr_schedule
    {
    public:
        /// At least one schedule, none null; milestones.size() == schedules.size() - 1,
        /// strictly increasing, each >= 1.
        sequential_lr(std::vector<std::shared_ptr<const lr_schedule>> schedules, std::vector<std::int64_t> milestones);
        double lr_at(std::int64_t t) const override;
        double base_lr() const noexcept override { return m_schedules.front()->base_lr(); }
        /// SequentialLR.step(): at a milestone the next schedule's lr_at(0), otherwise the
        /// current schedule's chain(lr, its own step).
        double chain(double lr, std::int64_t t) const override;
        const char* name() const noexcept override { return "sequential_lr"; }

    private:
        /// The schedule of step t and the step it started at.
        std::size_t segment(std::int64_t t) const;
        std::vector<std::shared_ptr<const lr_schedule>> m_schedules;
        std::vector<std::int64_t> m_milestones;
    };

    /// Every schedule's chainable form applied in order at each step, starting from
    /// schedules[0]->base_lr(): PyTorch's ChainedScheduler over schedules constructed in this
    /// order on one optimizer (each constructor makes its step 0). For schedules whose chainable
    /// forms are factors (all but cosine_lr with min_lr > 0 and one_cycle_lr) the rate is
    /// base_lr times the product of their factors. lr_at(t) replays the steps from the last rate
    /// it computed (from step 0 when t is earlier), so a run that asks for t = 0, 1, 2, ... costs
    /// one step each, and a resumed run t steps once; safe to call from several threads.
    class chained_lr final : public lr_schedule
    {
    public:
        /// At least one schedule, none null.
        explicit chained_lr(std::vector<std::shared_ptr<const lr_schedule>> schedules);
        double lr_at(std::int64_t t) const override;
        double base_lr() const noexcept override { return m_schedules.front()->base_lr(); }
        double chain(double lr, std::int64_t t) const override;
        const char* name() const noexcept override { return "chained_lr"; }

    private:
        std::vector<std::shared_ptr<const lr_schedule>> m_schedules;
        mutable std::mutex m_mutex;
        mutable std::int64_t m_cached_t = -1; // the last step lr_at computed, and its rate
        mutable double m_cached_lr = 0.0;
    };

    /// A schedule named on a command line, over a run of total_steps steps (or epochs) at rate
    /// base_lr: "NAME" or "NAME:KEY=VALUE,KEY=VALUE,...". Names, their keys and defaults:
    ///   constant
    ///   step         step_size (max(1, total / 3)), gamma (0.1)
    ///   multistep    milestones (A/B/...; total / 2 and total - total / 4), gamma (0.1)
    ///   exponential  gamma (0.01^(1 / total): a hundredth of base_lr at the end)
    ///   linear       start_factor (1), end_factor (0), total_iters (total): a decay to 0
    ///   cosine       min_lr (0), over total
    ///   onecycle     max_lr (base_lr), pct_start (0.3), anneal (cos | linear), div_factor
    ///                (25), final_div_factor (1e4), three_phase (0 | 1), over total
    /// and, for all but onecycle, warmup (0) and warmup_factor (0.1): warmup = N > 0 is
    /// sequential_lr({linear_lr(base_lr, warmup_factor, 1, N), the schedule over total - N}, {N}),
    /// the defaults then counted from total - N. "plateau" (reduce_lr_on_plateau.hpp) is made by
    /// make_plateau. Throws xgrad::invalid_argument naming the name and the choices for an
    /// unknown name; naming the schedule and the key for an unknown key, a malformed value or a
    /// key given twice; for total_steps < 1, or warmup >= total_steps; and the schedules' own
    /// errors for values out of range.
    std::unique_ptr<lr_schedule> make_schedule(const std::string& spec, double base_lr, std::int64_t total_steps);

    /// The NAME part of such a spec ("cosine" of "cosine:min_lr=0.01").
    std::string schedule_name(const std::string& spec);
}
