// Command-line values (see cli.hpp). std::from_chars parses integers: it takes no spaces and
// no '+', reports values outside the type instead of saturating or wrapping as strtoull does
// for "-1", and needs no locale.
#include "cli.hpp"

#include <cctype>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <iostream>
#include <sstream>
#include <system_error>
#include <utility>

#include "xgrad/errors.hpp"

namespace xgrad::examples
{
    namespace
    {
        template <class T>
        [[noreturn]] void refuse(const std::string& flag, const std::string& value, T low, T high)
        {
            throw xgrad::invalid_argument(flag + " expects an integer in [" + std::to_string(low) + ", " +
                                          std::to_string(high) + "], got '" + value + "'");
        }

        template <class T>
        T parse_integer(const std::string& flag, const std::string& value, T low, T high)
        {
            T n{};
            const char* first = value.data();
            const char* last = first + value.size();
            const auto [end, ec] = std::from_chars(first, last, n);
            if (value.empty() || ec != std::errc() || end != last || n < low || n > high)
                refuse(flag, value, low, high);
            return n;
        }
    }

    std::int64_t parse_int_flag(const std::string& flag, const std::string& value, std::int64_t low, std::int64_t high)
    {
        return parse_integer<std::int64_t>(flag, value, low, high);
    }

    std::uint64_t parse_uint_flag(const std::string& flag, const std::string& value, std::uint64_t low,
                                  std::uint64_t high)
    {
        return parse_integer<std::uint64_t>(flag, value, low, high);
    }

    double parse_positive_flag(const std::string& flag, const std::string& value, double high)
    {
        // strtod skips leading spaces and accepts "inf" and "nan"; the first check and the range
        // check refuse them.
        char* end = nullptr;
        errno = 0;
        const double d = value.empty() || std::isspace(static_cast<unsigned char>(value[0]))
                             ? std::nan("")
                             : std::strtod(value.c_str(), &end);
        if (end != value.c_str() + value.size() || errno == ERANGE || !std::isfinite(d) || !(d > 0) || !(d <= high))
        {
            std::ostringstream range;
            range << "(0, " << high << "]";
            throw xgrad::invalid_argument(flag + " expects a number in " + range.str() + ", got '" + value + "'");
        }
        return d;
    }
}

namespace xgrad::examples
{
    namespace
    {
        template <class T>
        std::string number_text(T v)
        {
            std::ostringstream s;
            s << v;
            return s.str();
        }
    }

    arg_parser::arg_parser(std::string program, std::string summary)
        : m_program(std::move(program)), m_summary(std::move(summary))
    {
    }

    void arg_parser::add(option o)
    {
        if (o.name.rfind("--", 0) != 0 || find(o.name))
            throw xgrad::invalid_argument("arg_parser: option '" + o.name + "' is malformed or added twice");
        m_options.push_back(std::move(o));
    }

    const arg_parser::option* arg_parser::find(const std::string& name) const
    {
        for (const option& o : m_options)
            if (o.name == name)
                return &o;
        return nullptr;
    }

    void arg_parser::add_switch(const std::string& name, bool& target, const std::string& help)
    {
        add({name, "", help, "", [&target](const std::string&) { target = true; }});
    }

    void arg_parser::add_string(const std::string& name, std::string& target, const std::string& metavar,
                                const std::string& help)
    {
        add({name, metavar, help, target, [&target](const std::string& v) { target = v; }});
    }

    void arg_parser::add_path(const std::string& name, std::filesystem::path& target, const std::string& metavar,
                              const std::string& help)
    {
        add({name, metavar, help, target.string(), [&target](const std::string& v) { target = v; }});
    }

    void arg_parser::add_choice(const std::string& name, std::string& target, const std::vector<std::string>& choices,
                                const std::string& help)
    {
        std::string metavar;
        for (const auto& c : choices)
            metavar += (metavar.empty() ? "" : "|") + c;
        add({name, metavar, help, target, [name, choices, &target](const std::string& v) {
                 for (const auto& c : choices)
                     if (v == c)
                     {
                         target = v;
                         return;
                     }
                 std::string list;
                 for (const auto& c : choices)
                     list += (list.empty() ? "'" : ", '") + c + "'";
                 throw xgrad::invalid_argument(name + " expects one of " + list + ", got '" + v + "'");
             }});
    }

    void arg_parser::add_int(const std::string& name, std::int64_t& target, std::int64_t low, std::int64_t high,
                             const std::string& metavar, const std::string& help)
    {
        // A default outside the range is a "not given" marker the description explains.
        add({name, metavar, help + " [" + number_text(low) + ", " + number_text(high) + "]",
             target >= low && target <= high ? number_text(target) : std::string(),
             [name, low, high, &target](const std::string& v) { target = parse_int_flag(name, v, low, high); }});
    }

    void arg_parser::add_int(const std::string& name, int& target, int low, int high, const std::string& metavar,
                             const std::string& help)
    {
        add({name, metavar, help + " [" + number_text(low) + ", " + number_text(high) + "]",
             target >= low && target <= high ? number_text(target) : std::string(),
             [name, low, high, &target](const std::string& v) {
                 target = static_cast<int>(parse_int_flag(name, v, low, high));
             }});
    }

    void arg_parser::add_uint(const std::string& name, std::uint64_t& target, std::uint64_t low, std::uint64_t high,
                              const std::string& metavar, const std::string& help)
    {
        add({name, metavar, help + " [" + number_text(low) + ", " + number_text(high) + "]", number_text(target),
             [name, low, high, &target](const std::string& v) { target = parse_uint_flag(name, v, low, high); }});
    }

    void arg_parser::add_positive(const std::string& name, double& target, double high, const std::string& metavar,
                                  const std::string& help)
    {
        add({name, metavar, help + " (0, " + number_text(high) + "]", number_text(target),
             [name, high, &target](const std::string& v) { target = parse_positive_flag(name, v, high); }});
    }

    std::string arg_parser::help() const
    {
        // Descriptions start in one column and are wrapped at 80; a long head gets its own line.
        constexpr std::size_t column = 26, width = 80;
        const auto describe = [&](std::ostringstream& s, const std::string& head, const std::string& text) {
            s << head;
            std::size_t at = head.size();
            if (at + 2 > column)
            {
                s << "\n";
                at = 0;
            }
            s << std::string(column - at, ' ');
            at = column;
            std::istringstream words(text);
            std::string word;
            bool first = true;
            while (words >> word)
            {
                if (!first && at + 1 + word.size() > width)
                {
                    s << "\n" << std::string(column, ' ');
                    at = column;
                    first = true;
                }
                s << (first ? "" : " ") << word;
                at += (first ? 0 : 1) + word.size();
                first = false;
            }
            s << "\n";
        };
        std::ostringstream s;
        s << "usage: " << m_program << " [options]\n" << m_summary << "\n\noptions:\n";
        for (const option& o : m_options)
            describe(s, "  " + o.name + (o.metavar.empty() ? "" : " " + o.metavar),
                     o.help + (o.metavar.empty() || o.default_text.empty() ? "" : " (default " + o.default_text + ")"));
        describe(s, "  -h, --help", "print this help and exit");
        if (!m_epilog.empty())
            s << "\n" << m_epilog;
        return s.str();
    }

    void arg_parser::usage_error(const std::string& message) const
    {
        std::cerr << m_program << ": " << message << "\nTry '" << m_program << " --help'.\n";
        std::exit(2);
    }

    void arg_parser::parse(int argc, const char* const* argv) const
    {
        for (int i = 1; i < argc; ++i)
        {
            const std::string arg = argv[i];
            if (arg == "-h" || arg == "--help")
            {
                std::cout << help();
                std::exit(0);
            }
            if (arg.rfind("--", 0) != 0 || arg.size() == 2)
                usage_error("unexpected argument '" + arg + "' (options start with --)");
            const auto eq = arg.find('=');
            const std::string name = arg.substr(0, eq);
            const option* o = find(name);
            if (!o)
                usage_error("unknown option '" + name + "'");
            std::string value;
            if (o->metavar.empty())
            {
                if (eq != std::string::npos)
                    usage_error(name + " takes no value, got '" + arg.substr(eq + 1) + "'");
            }
            else if (eq != std::string::npos)
                value = arg.substr(eq + 1);
            else if (i + 1 < argc)
                value = argv[++i];
            else
                usage_error(name + " needs a value (" + o->metavar + ")");
            try
            {
                o->set(value);
            }
            catch (const xgrad::invalid_argument& e)
            {
                usage_error(e.what());
            }
        }
    }
}
