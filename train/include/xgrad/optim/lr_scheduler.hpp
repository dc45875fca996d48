#pragma once
// Learning-rate schedules (train/src/optim/lr_scheduler.cpp): pure functions of the epoch
// (or step) number, so that a resumed run computes the same rate as an uninterrupted one
// without saving any scheduler state. A schedule does not touch an optimizer: the caller
// passes lr_at(epoch) to optimizer::set_lr.
//
// Errors: a negative, NaN or infinite learning rate, a step size or total below 1, a gamma
// that is not a finite number > 0, a min_lr outside [0, base_lr], and a negative epoch throw
// xgrad::invalid_argument naming the schedule and the value.
#include <cstdint>
#include <memory>
#include <string>

namespace xgrad::optim
{
    class lr_schedule
    {
    public:
        virtual ~lr_schedule();
        /// The learning rate for epoch `epoch` (0-based, >= 0).
        virtual double lr_at(std::int64_t epoch) const = 0;
    };

    /// base_lr * gamma^(epoch / step_size).
    class step_lr final : public lr_schedule
    {
    public:
        step_lr(double base_lr, std::int64_t step_size, double gamma = 0.1);
        double lr_at(std::int64_t epoch) const override;

    private:
        double m_base_lr;
        std::int64_t m_step_size;
        double m_gamma;
    };

    /// min_lr + (base_lr - min_lr) (1 + cos(pi min(epoch, total) / total)) / 2: base_lr at
    /// epoch 0, min_lr from epoch total on.
    class cosine_lr final : public lr_schedule
    {
    public:
        cosine_lr(double base_lr, std::int64_t total_epochs, double min_lr = 0.0);
        double lr_at(std::int64_t epoch) const override;

    private:
        double m_base_lr;
        std::int64_t m_total;
        double m_min_lr;
    };

    /// Constant base_lr.
    class constant_lr final : public lr_schedule
    {
    public:
        explicit constant_lr(double base_lr);
        double lr_at(std::int64_t epoch) const override;

    private:
        double m_base_lr;
    };

    /// "constant", "step" (step_size = max(1, total/3), gamma 0.1) or "cosine" (to 0 at
    /// total_epochs). Throws xgrad::invalid_argument naming the name and the choices otherwise,
    /// or when total_epochs < 1.
    std::unique_ptr<lr_schedule> make_schedule(const std::string& name, double base_lr, std::int64_t total_epochs);
}
