#pragma once
// What the optimizers' sources share: the text of their messages and the checks of their
// options (the comparisons are written so that NaN fails them).
#include <cmath>
#include <cstdint>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "xgrad/errors.hpp"
#include "xgrad/tensor.hpp"

namespace xgrad::optim::detail
{
    inline std::string quoted(const std::string& s) { return "'" + s + "'"; }

    inline std::string number(double v)
    {
        std::ostringstream os;
        os << v;
        return os.str();
    }

    /// "shape [3], dtype float32, device cpu"
    inline std::string describe(const tensor& t)
    {
        return "shape " + shape_to_string(t.shape()) + ", dtype " + std::string(name(t.dtype())) + ", device " +
               to_string(t.device());
    }

    inline std::string join(const std::vector<std::string>& parts, const std::string& sep)
    {
        std::string s;
        for (const auto& p : parts)
            s += (s.empty() ? "" : sep) + p;
        return s;
    }

    [[noreturn]] inline void fail_option(std::string_view who, const std::string& what)
    {
        throw xgrad::invalid_argument(std::string(who) + ": " + what);
    }

    inline void check_non_negative(std::string_view who, const char* option, double v)
    {
        if (!(v >= 0.0) || !std::isfinite(v))
            fail_option(who, std::string(option) + " must be a finite number >= 0, got " + number(v));
    }

    inline void check_unit_interval(std::string_view who, const char* option, double v, bool closed)
    {
        if (!(v >= 0.0) || (closed ? !(v <= 1.0) : !(v < 1.0)))
            fail_option(who, std::string(option) + " must be in [0, 1" + (closed ? "]" : ")") + ", got " + number(v));
    }

    /// The checks of the schedules' arguments (lr_scheduler.hpp), naming the schedule.
    inline void check_positive(std::string_view who, const char* option, double v)
    {
        if (!(v > 0.0) || !std::isfinite(v))
            fail_option(who, std::string(option) + " must be a finite number > 0, got " + number(v));
    }

    inline void check_at_least(std::string_view who, const char* option, std::int64_t v, std::int64_t least)
    {
        if (v < least)
            fail_option(who,
                        std::string(option) + " must be >= " + std::to_string(least) + ", got " + std::to_string(v));
    }

    /// A step (or epoch) number given to lr_at or chain.
    inline void check_step(std::string_view who, const char* function, std::int64_t t)
    {
        if (t < 0)
            fail_option(who, std::string(function) + ": the step (or epoch) must be >= 0, got " + std::to_string(t));
    }

    /// Milestones: strictly increasing, each >= 1.
    inline void check_milestones(std::string_view who, const std::vector<std::int64_t>& milestones)
    {
        for (std::size_t i = 0; i < milestones.size(); ++i)
        {
            if (milestones[i] < 1)
                fail_option(who, "milestones must be >= 1, got " + std::to_string(milestones[i]) + " at index " +
                                     std::to_string(i));
            if (i > 0 && milestones[i] <= milestones[i - 1])
                fail_option(who, "milestones must be strictly increasing, got " + std::to_string(milestones[i - 1]) +
                                     " then " + std::to_string(milestones[i]) + " at index " + std::to_string(i));
        }
    }

    /// Empty when t has the shape, dtype and device of p; otherwise what differs.
    inline std::string mismatch(const tensor& t, const tensor& p)
    {
        if (!t.defined())
            return "the tensor is undefined";
        if (t.shape() != p.shape() || t.dtype() != p.dtype() || t.device() != p.device())
            return "has " + describe(t) + ", the parameter has " + describe(p);
        return {};
    }
}
