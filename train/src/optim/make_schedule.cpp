// make_schedule and make_plateau (see lr_scheduler.hpp, reduce_lr_on_plateau.hpp): schedules
// from a command line's "NAME:KEY=VALUE,..." text. One parser for both, which refuses what it
// does not understand (an unknown key, a value with trailing characters, a key given twice)
// rather than ignoring it: a typo in a flag must not train with a default silently.
#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "checks.hpp"
#include "xgrad/optim/lr_scheduler.hpp"
#include "xgrad/optim/reduce_lr_on_plateau.hpp"

namespace xgrad::optim
{
    using namespace detail;

    namespace
    {
        const char* const choices = "'constant', 'step', 'multistep', 'exponential', 'linear', 'cosine', "
                                    "'onecycle', 'plateau'";

        /// A parsed spec: its name and KEY=VALUE pairs, read by type with a default.
        class spec_args
        {
        public:
            spec_args(const char* who, const std::string& spec) : m_who(who)
            {
                const auto colon = spec.find(':');
                m_name = spec.substr(0, colon);
                if (colon == std::string::npos)
                    return;
                const std::string rest = spec.substr(colon + 1);
                std::size_t begin = 0;
                while (begin <= rest.size())
                {
                    const auto comma = std::min(rest.find(',', begin), rest.size());
                    const std::string item = rest.substr(begin, comma - begin);
                    const auto eq = item.find('=');
                    if (eq == std::string::npos || eq == 0)
                        fail("'" + item + "' is not KEY=VALUE (the parameters are NAME:KEY=VALUE,KEY=VALUE)");
                    const std::string key = item.substr(0, eq);
                    if (!m_values.emplace(key, item.substr(eq + 1)).second)
                        fail(key + " is given twice");
                    begin = comma + 1;
                }
            }

            const std::string& name() const noexcept { return m_name; }

            /// Refuses a key outside `keys`, naming the ones this schedule takes.
            void allow(const std::vector<std::string>& keys) const
            {
                const std::set<std::string> known(keys.begin(), keys.end());
                for (const auto& entry : m_values)
                    if (!known.count(entry.first))
                        fail("unknown parameter '" + entry.first + "'; " + m_name + " takes " +
                             (keys.empty() ? std::string("none") : join(keys, ", ")));
            }

            double real(const std::string& key, double fallback) const
            {
                const std::string* v = find(key);
                if (!v)
                    return fallback;
                errno = 0;
                char* end = nullptr;
                const double d = std::strtod(v->c_str(), &end);
                if (v->empty() || std::isspace(static_cast<unsigned char>((*v)[0])) || *end != '\0' || errno == ERANGE)
                    fail(key + ": '" + *v + "' is not a number");
                return d;
            }

            std::int64_t integer(const std::string& key, std::int64_t fallback) const
            {
                const std::string* v = find(key);
                return v ? parse_integer(key, *v) : fallback;
            }

            std::vector<std::int64_t> integers(const std::string& key, std::vector<std::int64_t> fallback) const
            {
                const std::string* v = find(key);
                if (!v)
                    return fallback;
                std::vector<std::int64_t> out;
                std::size_t begin = 0;
                while (begin <= v->size())
                {
                    const auto slash = std::min(v->find('/', begin), v->size());
                    out.push_back(parse_integer(key, v->substr(begin, slash - begin)));
                    begin = slash + 1;
                }
                return out;
            }

            std::string word(const std::string& key, const std::string& fallback) const
            {
                const std::string* v = find(key);
                return v ? *v : fallback;
            }

            bool flag(const std::string& key, bool fallback) const
            {
                const std::string* v = find(key);
                if (!v)
                    return fallback;
                if (*v == "1" || *v == "true")
                    return true;
                if (*v == "0" || *v == "false")
                    return false;
                fail(key + ": '" + *v + "' is not 0, 1, true or false");
            }

            [[noreturn]] void fail(const std::string& what) const { fail_option(m_who, m_name + ": " + what); }

        private:
            const std::string* find(const std::string& key) const
            {
                const auto it = m_values.find(key);
                return it == m_values.end() ? nullptr : &it->second;
            }

            std::int64_t parse_integer(const std::string& key, const std::string& v) const
            {
                errno = 0;
                char* end = nullptr;
                const long long i = std::strtoll(v.c_str(), &end, 10);
                if (v.empty() || !(std::isdigit(static_cast<unsigned char>(v[0])) || v[0] == '-') || *end != '\0' ||
                    errno == ERANGE)
                    fail(key + ": '" + v + "' is not an integer");
                return i;
            }

            const char* m_who;
            std::string m_name;
            std::map<std::string, std::string> m_values;
        };

        std::unique_ptr<lr_schedule> make_one_cycle(const spec_args& a, double base_lr, std::int64_t total)
        {
            a.allow({"max_lr", "pct_start", "anneal", "div_factor", "final_div_factor", "three_phase"});
            one_cycle_options o;
            o.max_lr = a.real("max_lr", base_lr);
            o.total_steps = total;
            o.pct_start = a.real("pct_start", o.pct_start);
            o.anneal_strategy = a.word("anneal", o.anneal_strategy);
            o.div_factor = a.real("div_factor", o.div_factor);
            o.final_div_factor = a.real("final_div_factor", o.final_div_factor);
            o.three_phase = a.flag("three_phase", o.three_phase);
            return std::make_unique<one_cycle_lr>(o);
        }

        /// The schedule `name` over `total` steps, its defaults counted from that total.
        std::unique_ptr<lr_schedule> make_main(const spec_args& a, double base_lr, std::int64_t total)
        {
            const std::string& name = a.name();
            if (name == "constant")
                return std::make_unique<constant_lr>(base_lr);
            if (name == "step")
                return std::make_unique<step_lr>(base_lr, a.integer("step_size", std::max<std::int64_t>(1, total / 3)),
                                                 a.real("gamma", 0.1));
            if (name == "multistep")
            {
                const std::int64_t half = std::max<std::int64_t>(1, total / 2);
                const std::int64_t three_quarters = std::max(half + 1, total - total / 4);
                return std::make_unique<multi_step_lr>(base_lr, a.integers("milestones", {half, three_quarters}),
                                                       a.real("gamma", 0.1));
            }
            if (name == "exponential")
                return std::make_unique<exponential_lr>(
                    base_lr, a.real("gamma", std::pow(0.01, 1.0 / static_cast<double>(total))));
            if (name == "linear")
                return std::make_unique<linear_lr>(base_lr, a.real("start_factor", 1.0), a.real("end_factor", 0.0),
                                                   a.integer("total_iters", total));
            return std::make_unique<cosine_lr>(base_lr, total, a.real("min_lr", 0.0));
        }
    }

    std::string schedule_name(const std::string& spec) { return spec.substr(0, spec.find(':')); }

    std::unique_ptr<lr_schedule> make_schedule(const std::string& spec, double base_lr, std::int64_t total_steps)
    {
        const spec_args a("make_schedule", spec);
        const std::string& name = a.name();
        static const std::map<std::string, std::vector<std::string>> keys = {
            {"constant", {}},
            {"step", {"step_size", "gamma"}},
            {"multistep", {"milestones", "gamma"}},
            {"exponential", {"gamma"}},
            {"linear", {"start_factor", "end_factor", "total_iters"}},
            {"cosine", {"min_lr"}},
        };
        if (name == "plateau")
            fail_option("make_schedule", "'plateau' is driven by a metric, not by the step: make_plateau makes it "
                                         "(xgrad/optim/reduce_lr_on_plateau.hpp)");
        if (name != "onecycle" && !keys.count(name))
            fail_option("make_schedule", "unknown schedule '" + name + "'; the choices are " + choices);
        check_at_least("make_schedule", "total_steps", total_steps, 1);
        if (name == "onecycle")
            return make_one_cycle(a, base_lr, total_steps);
        std::vector<std::string> allowed = keys.at(name);
        allowed.push_back("warmup");
        allowed.push_back("warmup_factor");
        a.allow(allowed);
        const std::int64_t warmup = a.integer("warmup", 0);
        const double warmup_factor = a.real("warmup_factor", 0.1);
        if (warmup < 0 || warmup >= total_steps)
            a.fail("warmup must be in [0, total_steps) = [0, " + std::to_string(total_steps) + "), got " +
                   std::to_string(warmup));
        if (!(warmup_factor > 0.0 && warmup_factor <= 1.0))
            a.fail("warmup_factor must be in (0, 1], got " + number(warmup_factor));
        std::unique_ptr<lr_schedule> main = make_main(a, base_lr, total_steps - warmup);
        if (warmup == 0)
            return main;
        std::vector<std::shared_ptr<const lr_schedule>> parts{
            std::make_shared<const linear_lr>(base_lr, warmup_factor, 1.0, warmup), std::move(main)};
        return std::make_unique<sequential_lr>(std::move(parts), std::vector<std::int64_t>{warmup});
    }

    std::unique_ptr<reduce_lr_on_plateau> make_plateau(const std::string& spec, double lr)
    {
        const spec_args a("make_plateau", spec);
        if (a.name() != "plateau")
            fail_option("make_plateau", "the schedule is '" + a.name() +
                                            "', not 'plateau' (make_schedule makes the others: " + choices + ")");
        a.allow({"mode", "factor", "patience", "threshold", "threshold_mode", "cooldown", "min_lr", "eps"});
        plateau_options o;
        o.mode = a.word("mode", o.mode);
        o.factor = a.real("factor", o.factor);
        o.patience = a.integer("patience", o.patience);
        o.threshold = a.real("threshold", o.threshold);
        o.threshold_mode = a.word("threshold_mode", o.threshold_mode);
        o.cooldown = a.integer("cooldown", o.cooldown);
        o.min_lr = a.real("min_lr", o.min_lr);
        o.eps = a.real("eps", o.eps);
        return std::make_unique<reduce_lr_on_plateau>(lr, o);
    }
}
