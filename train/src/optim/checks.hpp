#pragma once
// What the optimizers' sources share: the text of their messages and the checks of their
// options (the comparisons are written so that NaN fails them).
#include <cmath>
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
