// optim::reduce_lr_on_plateau (see reduce_lr_on_plateau.hpp): PyTorch's step() line for line,
// with one parameter group, and its state as exact text for checkpoint metadata.
#include "xgrad/optim/reduce_lr_on_plateau.hpp"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <string>
#include <vector>

#include "checks.hpp"

namespace xgrad::optim
{
    using namespace detail;

    namespace
    {
        constexpr const char* who = "reduce_lr_on_plateau";
        constexpr double inf = std::numeric_limits<double>::infinity();

        /// 17 significant digits read back to the same double; inf as "inf".
        std::string exact(double v)
        {
            char buffer[40];
            std::snprintf(buffer, sizeof buffer, "%.17g", v);
            return buffer;
        }

        bool parse_real(const std::string& s, double& out)
        {
            if (s.empty() || std::isspace(static_cast<unsigned char>(s[0])))
                return false;
            errno = 0;
            char* end = nullptr;
            out = std::strtod(s.c_str(), &end);
            return *end == '\0' && errno != ERANGE;
        }

        bool parse_count(const std::string& s, std::int64_t& out)
        {
            if (s.empty() || !std::isdigit(static_cast<unsigned char>(s[0])))
                return false;
            errno = 0;
            char* end = nullptr;
            out = std::strtoll(s.c_str(), &end, 10);
            return *end == '\0' && errno != ERANGE;
        }

        const plateau_options& checked(const plateau_options& o)
        {
            if (o.mode != "min" && o.mode != "max")
                fail_option(who, "mode must be 'min' or 'max', got '" + o.mode + "'");
            if (o.threshold_mode != "rel" && o.threshold_mode != "abs")
                fail_option(who, "threshold_mode must be 'rel' or 'abs', got '" + o.threshold_mode + "'");
            if (!(o.factor >= 0.0 && o.factor < 1.0))
                fail_option(who, "factor must be in [0, 1), got " + number(o.factor));
            check_non_negative(who, "threshold", o.threshold);
            check_non_negative(who, "min_lr", o.min_lr);
            check_non_negative(who, "eps", o.eps);
            check_at_least(who, "patience", o.patience, 0);
            check_at_least(who, "cooldown", o.cooldown, 0);
            return o;
        }
    }

    reduce_lr_on_plateau::reduce_lr_on_plateau(double lr, const plateau_options& options)
        : m_options(checked(options)), m_lr(lr), m_best(options.mode == "min" ? inf : -inf)
    {
        check_non_negative(who, "lr", lr);
    }

    bool reduce_lr_on_plateau::is_better(double metric) const
    {
        const plateau_options& o = m_options;
        // PyTorch's comparisons, so that the same metric is better or not in both; NaN never is.
        if (o.mode == "min")
            return o.threshold_mode == "rel" ? metric < m_best * (1.0 - o.threshold) : metric < m_best - o.threshold;
        return o.threshold_mode == "rel" ? metric > m_best * (o.threshold + 1.0) : metric > m_best + o.threshold;
    }

    double reduce_lr_on_plateau::step(double metric)
    {
        ++m_last_epoch;
        if (is_better(metric))
        {
            m_best = metric;
            m_num_bad_epochs = 0;
        }
        else
            ++m_num_bad_epochs;
        if (m_cooldown_counter > 0)
        {
            --m_cooldown_counter;
            m_num_bad_epochs = 0; // bad epochs in a cooldown are not counted
        }
        if (m_num_bad_epochs > m_options.patience)
        {
            const double reduced = std::max(m_lr * m_options.factor, m_options.min_lr);
            if (m_lr - reduced > m_options.eps)
                m_lr = reduced;
            m_cooldown_counter = m_options.cooldown;
            m_num_bad_epochs = 0;
        }
        return m_lr;
    }

    reduce_lr_on_plateau::state_dict_type reduce_lr_on_plateau::state_dict() const
    {
        return {{"lr", exact(m_lr)},
                {"best", exact(m_best)},
                {"num_bad_epochs", std::to_string(m_num_bad_epochs)},
                {"cooldown_counter", std::to_string(m_cooldown_counter)},
                {"last_epoch", std::to_string(m_last_epoch)}};
    }

    void reduce_lr_on_plateau::load_state_dict(const state_dict_type& state)
    {
        std::vector<std::string> problems;
        const auto text = [&](const char* key) -> const std::string* {
            const auto it = state.find(key);
            if (it == state.end())
                problems.push_back(std::string("'") + key + "' is missing");
            return it == state.end() ? nullptr : &it->second;
        };
        double lr = 0, best = 0;
        std::int64_t bad = 0, cooldown = 0, epoch = 0;
        if (const std::string* s = text("lr"); s && (!parse_real(*s, lr) || !(lr >= 0.0) || !std::isfinite(lr)))
            problems.push_back("'lr' must be a finite number >= 0, got '" + *s + "'");
        // The best may be the start's infinity of the mode, never the other one or NaN.
        const double worst_start = m_options.mode == "min" ? -inf : inf;
        if (const std::string* s = text("best");
            s && (!parse_real(*s, best) || std::isnan(best) || best == worst_start))
            problems.push_back("'best' must be a number (" + std::string(m_options.mode == "min" ? "-inf" : "inf") +
                               " is never the best in mode '" + m_options.mode + "'), got '" + *s + "'");
        if (const std::string* s = text("num_bad_epochs"); s && (!parse_count(*s, bad) || bad > m_options.patience))
            problems.push_back("'num_bad_epochs' must be an integer in [0, patience = " +
                               std::to_string(m_options.patience) + "], got '" + *s + "'");
        if (const std::string* s = text("cooldown_counter");
            s && (!parse_count(*s, cooldown) || cooldown > m_options.cooldown))
            problems.push_back("'cooldown_counter' must be an integer in [0, cooldown = " +
                               std::to_string(m_options.cooldown) + "], got '" + *s + "'");
        if (const std::string* s = text("last_epoch"); s && !parse_count(*s, epoch))
            problems.push_back("'last_epoch' must be an integer >= 0, got '" + *s + "'");
        for (const auto& entry : state)
            if (entry.first != "lr" && entry.first != "best" && entry.first != "num_bad_epochs" &&
                entry.first != "cooldown_counter" && entry.first != "last_epoch")
                problems.push_back("unknown entry '" + entry.first + "'");
        if (!problems.empty())
            fail_option(who, "load_state_dict: " + join(problems, "; "));
        m_lr = lr;
        m_best = best;
        m_num_bad_epochs = bad;
        m_cooldown_counter = cooldown;
        m_last_epoch = epoch;
    }
}
