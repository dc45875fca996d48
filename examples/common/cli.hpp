#pragma once
// Command-line values of the example programs, parsed whole and range-checked
// (examples/common/cli.cpp), so that a value no flag accepts is refused with a message naming
// the flag, the value and the range instead of wrapping or being cut short.
//
// Each function throws xgrad::invalid_argument "<flag> expects <what> in <range>, got
// '<value>'" for anything but a plain decimal number in the range: an empty value, spaces, a
// '+' sign, trailing characters, a value outside the range or outside the type altogether
// (9223372036854775807 for a flag whose range ends at 1000000), a '-' for an unsigned flag
// (so --seed -1 is refused rather than read as 2^64 - 1). arg_parser, below, prints the message
// and exits with status 2.
#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

namespace xgrad::examples
{
    /// `value` as an integer in [low, high].
    std::int64_t parse_int_flag(const std::string& flag, const std::string& value, std::int64_t low, std::int64_t high);
    /// `value` as an unsigned integer in [low, high]; no sign is accepted.
    std::uint64_t parse_uint_flag(const std::string& flag, const std::string& value, std::uint64_t low,
                                  std::uint64_t high);
    /// `value` as a finite number in (0, high]: decimal or exponent notation ("2e-3").
    double parse_positive_flag(const std::string& flag, const std::string& value, double high);

    /// The one command-line parser of the example programs. Each program registers its
    /// options, each bound to a variable whose value at registration is the default shown by
    /// --help, then calls parse:
    ///
    ///   - "--name value" and "--name=value" both work; a switch takes no value
    ///     ("--no-prefetch=1" is refused);
    ///   - "-h" / "--help" prints the help (the summary, every option with its description,
    ///     range and default) to stdout and exits 0;
    ///   - a usage error prints "<program>: <what>" and "Try '<program> --help'." to stderr and
    ///     exits 2: an unknown option ("unknown option '--x'"), an option without its value
    ///     ("--epochs needs a value"), a value for a switch, an argument that is not an
    ///     option, a number outside its range (the messages of the parse_*_flag functions
    ///     above), a value not among an option's choices.
    ///
    /// A repeated option takes its last value, as most tools do.
    class arg_parser
    {
    public:
        arg_parser(std::string program, std::string summary);

        /// A switch: present sets `target` to true.
        void add_switch(const std::string& name, bool& target, const std::string& help);
        /// Any text.
        void add_string(const std::string& name, std::string& target, const std::string& metavar,
                        const std::string& help);
        void add_path(const std::string& name, std::filesystem::path& target, const std::string& metavar,
                      const std::string& help);
        /// One of `choices`.
        void add_choice(const std::string& name, std::string& target, const std::vector<std::string>& choices,
                        const std::string& help);
        /// Integers in [low, high] (parse_int_flag / parse_uint_flag).
        void add_int(const std::string& name, std::int64_t& target, std::int64_t low, std::int64_t high,
                     const std::string& metavar, const std::string& help);
        void add_int(const std::string& name, int& target, int low, int high, const std::string& metavar,
                     const std::string& help);
        void add_uint(const std::string& name, std::uint64_t& target, std::uint64_t low, std::uint64_t high,
                      const std::string& metavar, const std::string& help);
        /// A number in (0, high] (parse_positive_flag).
        void add_positive(const std::string& name, double& target, double high, const std::string& metavar,
                          const std::string& help);

        /// Text printed after the options in --help.
        void set_epilog(std::string text) { m_epilog = std::move(text); }

        /// Parses argv[1..argc), setting the targets; exits as described above.
        void parse(int argc, const char* const* argv) const;
        /// The --help text.
        std::string help() const;
        /// Prints "<program>: <message>" and the --help hint to stderr and exits 2: for checks a
        /// program makes after parsing (two options that exclude each other).
        [[noreturn]] void usage_error(const std::string& message) const;

    private:
        struct option
        {
            std::string name;
            std::string metavar; // empty for a switch
            std::string help;
            std::string default_text; // empty: no default shown
            std::function<void(const std::string&)> set;
        };
        void add(option o);
        const option* find(const std::string& name) const;

        std::string m_program;
        std::string m_summary;
        std::string m_epilog;
        std::vector<option> m_options;
    };
}
