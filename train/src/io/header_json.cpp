// parse_header_json: a checking pass, then the parse.
//
// nlohmann::json's parser with a callback (what the duplicate-key check used before) rescans
// the enclosing object for a discarded value each time an object ends: quadratic in the
// number of tensors (40,000 entries took 25 s). Its plain parse is linear, and its SAX
// interface lets a first pass look at every key, depth and entry without building anything,
// so a hostile header is refused before memory is spent on it (a 96 MB header of nested
// objects used to take 7.4 GB while it was built).
#include "header_json.hpp"

#include <string>
#include <unordered_set>
#include <vector>

#include "xgrad/io/safetensors.hpp"

namespace xgrad::io::detail
{
    namespace
    {
        using json = nlohmann::json;

        [[noreturn]] void fail(const std::filesystem::path& path, const std::string& what)
        {
            throw format_error(path.string() + ": " + what);
        }

        std::string in_quotes(const std::string& s) { return "'" + s + "'"; }

        /// The first pass: nlohmann::json's SAX interface, checking as events arrive.
        class header_check
        {
        public:
            explicit header_check(const std::filesystem::path& path) : m_path(path) {}

            bool null() { return true; }
            bool boolean(bool) { return true; }
            bool number_integer(json::number_integer_t) { return true; }
            bool number_unsigned(json::number_unsigned_t) { return true; }
            bool number_float(json::number_float_t, const std::string&) { return true; }
            bool string(std::string&) { return true; }
            bool binary(json::binary_t&) { return true; }
            bool start_object(std::size_t) { return open(true); }
            bool end_object() { return close(); }
            bool start_array(std::size_t) { return open(false); }
            bool end_array() { return close(); }

            bool key(std::string& k)
            {
                level& l = m_levels.back();
                if (m_levels.size() == 1 && ++m_entries > max_header_entries)
                    fail(m_path, "the header has more than " + std::to_string(max_header_entries) +
                                     " entries, the most a safetensors header may have here");
                if (!l.keys.insert(k).second)
                    fail(m_path, "duplicate key " + in_quotes(k) +
                                     (m_levels.size() == 1 ? std::string(" in the header")
                                                           : " in the header's entry " + in_quotes(l.owner)) +
                                     " (a later one would silently replace the earlier)");
                l.last_key = k;
                return true;
            }

            bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& e)
            {
                fail(m_path, std::string("header is not valid JSON: ") + e.what());
            }

        private:
            struct level
            {
                std::string owner;    // the key whose value this object is ("" for the header)
                std::string last_key; // of this object (objects only)
                std::unordered_set<std::string> keys;
            };

            bool open(bool object)
            {
                if (m_levels.size() + m_arrays >= max_header_depth)
                    fail(m_path, "the header nests objects and arrays more than " + std::to_string(max_header_depth) +
                                     " deep (a safetensors header has 3 levels)");
                if (!object)
                {
                    ++m_arrays;
                    m_array_at.push_back(m_levels.size());
                    return true;
                }
                m_levels.push_back({m_levels.empty() ? std::string() : m_levels.back().last_key, {}, {}});
                return true;
            }

            bool close()
            {
                // Arrays are only counted (their elements have no keys); an array closes when
                // the innermost open container is one.
                if (!m_array_at.empty() && m_array_at.back() == m_levels.size())
                {
                    m_array_at.pop_back();
                    --m_arrays;
                }
                else
                    m_levels.pop_back();
                return true;
            }

            const std::filesystem::path& m_path;
            std::vector<level> m_levels;
            std::vector<std::size_t> m_array_at; // m_levels.size() when each open array began
            std::size_t m_arrays = 0;
            std::size_t m_entries = 0;
        };
    }

    json parse_header_json(const std::string& text, const std::filesystem::path& path)
    {
        header_check check(path);
        json::sax_parse(text.begin(), text.end(), &check);
        try
        {
            return json::parse(text.begin(), text.end());
        }
        catch (const json::exception& e) // numbers beyond any C++ type
        {
            fail(path, std::string("header is not valid JSON: ") + e.what());
        }
    }
}
