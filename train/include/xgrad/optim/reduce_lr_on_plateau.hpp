#pragma once
// optim::reduce_lr_on_plateau (train/src/optim/reduce_lr_on_plateau.cpp): PyTorch's
// ReduceLROnPlateau, the one schedule driven by a metric rather than by the step, so the one
// with state (checked against PyTorch's rates and counters in tests/data/torch/schedules.json).
//
// Each step(metric) is one epoch's metric (a validation loss, an accuracy): when it is better
// than the best so far (mode "min": metric < best (1 - threshold) with threshold_mode "rel",
// metric < best - threshold with "abs"; mode "max": metric > best (1 + threshold), metric > best
// + threshold) it becomes the best and the count of bad epochs restarts at 0, otherwise the
// count grows (a NaN metric is never better). During a cooldown (cooldown_counter > 0) the
// counter falls by one and bad epochs are not counted. When the count passes patience, the rate
// becomes max(lr factor, min_lr), unless that lowers it by eps or less, and a cooldown of
// `cooldown` epochs starts. The rate applies from the next epoch on: the caller gives lr() to
// optimizer::set_lr (the trainer does, trainer_options::plateau).
//
// State: lr, best, num_bad_epochs, cooldown_counter and last_epoch (PyTorch's names), which a
// checkpoint must hold for a resumed run to continue the same sequence: state_dict() writes them
// as text that reads back exactly (the trainer stores it as checkpoint metadata
// "lr_scheduler.<name>"), load_state_dict reads them.
//
// Errors (xgrad::invalid_argument naming reduce_lr_on_plateau and the option or entry): an lr or
// min_lr negative or not finite, mode other than "min"/"max", threshold_mode other than
// "rel"/"abs", factor outside [0, 1) (PyTorch: "Factor should be < 1.0"), threshold or eps
// negative or not finite, patience or cooldown negative; in load_state_dict, a missing, unknown
// or malformed entry, or a value out of its range (lr negative or not finite, best NaN or, in
// mode "min", -inf (in "max", +inf), counts negative, num_bad_epochs > patience,
// cooldown_counter > cooldown), with the object unchanged.
#include <cstdint>
#include <map>
#include <memory>
#include <string>

namespace xgrad::optim
{
    struct plateau_options
    {
        std::string mode = "min"; // "min": lower is better; "max": higher is better
        double factor = 0.1;      // new rate = rate * factor
        std::int64_t patience = 10;
        double threshold = 1e-4;
        std::string threshold_mode = "rel"; // "rel" or "abs"
        std::int64_t cooldown = 0;
        double min_lr = 0.0;
        double eps = 1e-8;
    };

    class reduce_lr_on_plateau
    {
    public:
        using state_dict_type = std::map<std::string, std::string>;

        /// `lr`: the rate before any reduction (the optimizer's learning rate).
        explicit reduce_lr_on_plateau(double lr, const plateau_options& options = {});

        /// One epoch's metric; returns the rate for the next epoch (lr()).
        double step(double metric);

        double lr() const noexcept { return m_lr; }
        /// The best metric so far (+inf in mode "min", -inf in "max", before the first step).
        double best() const noexcept { return m_best; }
        std::int64_t num_bad_epochs() const noexcept { return m_num_bad_epochs; }
        std::int64_t cooldown_counter() const noexcept { return m_cooldown_counter; }
        /// The number of steps taken.
        std::int64_t last_epoch() const noexcept { return m_last_epoch; }
        const plateau_options& options() const noexcept { return m_options; }

        /// {"lr", "best", "num_bad_epochs", "cooldown_counter", "last_epoch"}: decimal text
        /// that reads back to the same double ("inf", "-inf" for the best before any step).
        state_dict_type state_dict() const;
        /// Replaces the state with one state_dict() wrote, under the same options. Checks
        /// everything first (see the file comment); throws listing each problem, leaving the
        /// object unchanged.
        void load_state_dict(const state_dict_type& state);

    private:
        bool is_better(double metric) const;

        plateau_options m_options;
        double m_lr;
        double m_best;
        std::int64_t m_num_bad_epochs = 0;
        std::int64_t m_cooldown_counter = 0;
        std::int64_t m_last_epoch = 0;
    };

    /// "plateau" or "plateau:KEY=VALUE,...", KEY one of mode, factor, patience, threshold,
    /// threshold_mode, cooldown, min_lr, eps (defaults: plateau_options'), at rate `lr`. Throws
    /// xgrad::invalid_argument for another name (naming make_schedule's choices), and as
    /// make_schedule does for keys and values (lr_scheduler.hpp).
    std::unique_ptr<reduce_lr_on_plateau> make_plateau(const std::string& spec, double lr);
}
