#pragma once
// The check behind test_docs: what a Markdown document of the project names must exist in the
// tree. Header-only, so the test can run it on the real documents and on planted ones.
//
// From each document's code spans (`...`) and link targets ([text](target)), outside fenced
// code blocks, it takes:
//   - paths: words ending in a file extension, ending in '/', or starting with a top-level
//     folder of the tree or "xgrad/" (a public header); each must exist relative to the
//     repository root, to the document's folder, to an include folder (xgrad/...), or as the
//     tail of a path in the tree ("optim/sgd.hpp"). Placeholders (<name>, *, $VAR) and build
//     outputs (build/..., fashion_mnist_run/...) are not paths of the tree and are skipped;
//   - test names: words test_<name> (without an extension), which a CMakeLists.txt registers;
//   - labels: the word after -L / -LE, and a span right after the word "label(s)";
//   - identifiers: snake_case names with an underscore or a namespace (`bn_moments`,
//     `nn::fuse`, `set_fused(false)`), whose last part must be a word of the code (a file's
//     name, a test's and a few other projects' names are accepted as such);
// and from the whole text every XGRAD_* name (a CMake option, an environment variable, a
// macro), which a file outside the documents must contain.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace docs_check
{
    namespace fs = std::filesystem;

    /// What the tree holds, gathered once.
    struct tree
    {
        fs::path root;
        std::vector<fs::path> include_dirs;  // where "xgrad/..." resolves
        std::set<std::string> paths;         // every file and folder, relative to root, '/'-separated
        std::set<std::string> file_stems;    // every file's name without its extension
        std::set<std::string> words;         // identifiers in the code (every non-document file)
        std::set<std::string> tests, labels; // registered in the CMakeLists.txt files
        std::vector<fs::path> documents;     // every *.md
    };

    inline std::string read_file(const fs::path& p)
    {
        std::ifstream in(p, std::ios::binary);
        std::ostringstream s;
        s << in.rdbuf();
        return s.str();
    }

    inline bool skipped_dir(const std::string& name)
    {
        return name.rfind("build", 0) == 0 || name == ".git" || name == "fashion_mnist_run" || name == "runs" ||
               name == "out" || name == "__pycache__";
    }

    inline bool is_code_file(const fs::path& p)
    {
        static const std::set<std::string> ext = {".cpp", ".hpp", ".h", ".cu", ".cmake", ".txt", ".sh", ".py", ".in"};
        const std::string e = p.extension().string();
        if (ext.count(e))
            return true;
        // Scripts without an extension (bench/run, .ci/run, ...).
        const std::string parent = p.parent_path().filename().string();
        return e.empty() && (parent == "bench" || parent == "tools" || parent == ".ci");
    }

    inline void add_words(const std::string& text, std::set<std::string>& words)
    {
        std::string w;
        for (const char c : text + " ")
        {
            if (std::isalnum(static_cast<unsigned char>(c)) || c == '_')
                w += c;
            else if (!w.empty())
            {
                words.insert(w);
                w.clear();
            }
        }
    }

    /// Test names and labels from a CMakeLists.txt: xgrad_add_test(<name> LABELS ...),
    /// xgrad_add_mpi_test(<name> ...) (also as <name>_np2), add_test(NAME <name> ...), and every
    /// word after LABELS or in a cuda label variable.
    inline void add_cmake_tests(const std::string& text, tree& t)
    {
        static const std::regex add(R"((xgrad_add_test|xgrad_add_mpi_test)\(\s*([A-Za-z0-9_]+))");
        static const std::regex plain(R"(add_test\(\s*NAME\s+([A-Za-z0-9_]+))");
        static const std::regex labels(R"(LABELS\s+"?([a-z_;\s]+))");
        static const std::regex cuda_label(R"(set\(_xgrad_cuda_label\s+([a-z_]+)\))");
        for (std::sregex_iterator it(text.begin(), text.end(), add), end; it != end; ++it)
        {
            t.tests.insert((*it)[2]);
            if ((*it)[1] == "xgrad_add_mpi_test")
                t.tests.insert(std::string((*it)[2]) + "_np2");
        }
        for (std::sregex_iterator it(text.begin(), text.end(), plain), end; it != end; ++it)
            t.tests.insert((*it)[1]);
        for (const std::regex* r : {&labels, &cuda_label})
            for (std::sregex_iterator it(text.begin(), text.end(), *r), end; it != end; ++it)
            {
                std::string list = (*it)[1];
                std::replace(list.begin(), list.end(), ';', ' ');
                std::istringstream words(list);
                for (std::string w; words >> w;)
                    if (w != "SOURCES" && w != "GLOB" && w != "ENVIRONMENT")
                        t.labels.insert(w);
            }
    }

    /// The tests a build registered, with their labels (its CTestTestfile.cmake files): the
    /// exact names, including those a CMakeLists.txt makes in a loop.
    inline void add_built_tests(const fs::path& binary_dir, tree& t)
    {
        static const std::regex test(R"(add_test\(\[=\[([A-Za-z0-9_]+)\]=\])");
        static const std::regex labels(R"re(LABELS "([a-z_;]+)")re");
        for (auto it = fs::recursive_directory_iterator(binary_dir); it != fs::recursive_directory_iterator(); ++it)
        {
            if (it->path().filename() != "CTestTestfile.cmake")
                continue;
            const std::string text = read_file(it->path());
            for (std::sregex_iterator m(text.begin(), text.end(), test), end; m != end; ++m)
                t.tests.insert((*m)[1]);
            for (std::sregex_iterator m(text.begin(), text.end(), labels), end; m != end; ++m)
            {
                std::string list = (*m)[1];
                std::replace(list.begin(), list.end(), ';', ' ');
                std::istringstream words(list);
                for (std::string w; words >> w;)
                    t.labels.insert(w);
            }
        }
    }

    /// Names of other projects that the documents compare with (OpenBLAS's kernels, Keras's
    /// batch-norm variables): not xgrad's, so not in its code.
    inline const std::set<std::string>& foreign_names()
    {
        static const std::set<std::string> names = {"sgemm_oncopy", "cblas_sbgemm", "moving_mean", "moving_variance"};
        return names;
    }

    inline tree scan(const fs::path& root, std::vector<fs::path> include_dirs, const fs::path& binary_dir = {})
    {
        tree t;
        if (!binary_dir.empty())
            add_built_tests(binary_dir, t);
        t.root = root;
        t.include_dirs = std::move(include_dirs);
        for (auto it = fs::recursive_directory_iterator(root); it != fs::recursive_directory_iterator(); ++it)
        {
            const fs::path& p = it->path();
            if (it->is_directory() && skipped_dir(p.filename().string()))
            {
                it.disable_recursion_pending();
                continue;
            }
            const std::string rel = fs::relative(p, root).generic_string();
            t.paths.insert(rel);
            if (!it->is_regular_file())
                continue;
            t.file_stems.insert(p.stem().string());
            const bool data = rel.rfind("tests/fuzz/corpus/", 0) == 0 || rel.rfind("tests/fuzz/regressions/", 0) == 0 ||
                              rel.rfind("tests/data/", 0) == 0;
            if (data && p.extension() != ".md")
                continue; // inputs, not code
            if (p.extension() == ".md")
                t.documents.push_back(p);
            else if (is_code_file(p) && rel.rfind("tests/docs/test_docs", 0) != 0)
            {
                // (test_docs.cpp names the planted mistakes: they must not count as code.)
                const std::string text = read_file(p);
                add_words(text, t.words);
                if (p.filename() == "CMakeLists.txt")
                    add_cmake_tests(text, t);
            }
        }
        std::sort(t.documents.begin(), t.documents.end());
        return t;
    }

    struct problem
    {
        std::string document;
        int line = 0;
        std::string what;
    };

    inline bool has_extension(const std::string& w)
    {
        static const std::regex ext(R"(\.(cpp|hpp|h|cu|md|txt|cmake|py|sh|json|svg|csv|in|supp)$)");
        return std::regex_search(w, ext);
    }

    inline bool starts_with_top_folder(const std::string& w)
    {
        static const char* const tops[] = {"base/",  "backends/", "core/",  "nn/",   "train/", "examples/",
                                           "bench/", "tools/",    "tests/", "docs/", "cmake/", ".ci/"};
        return std::any_of(std::begin(tops), std::end(tops), [&](const char* t) { return w.rfind(t, 0) == 0; });
    }

    /// Whether path-like word w names something of the tree (see the file comment).
    inline bool path_exists(const tree& t, const fs::path& doc_dir, std::string w)
    {
        if (w.rfind("./", 0) == 0)
            w = w.substr(2);
        while (w.size() > 1 && w.back() == '/')
            w.pop_back();
        if (t.paths.count(w) || fs::exists(t.root / w) || fs::exists(doc_dir / w))
            return true;
        // A program of the tree, named after its source ("examples/evaluate", "bench/bn_bench").
        if (t.paths.count(w + ".cpp"))
            return true;
        if (w.rfind("xgrad/", 0) == 0)
            for (const fs::path& d : t.include_dirs)
                if (fs::exists(d / w))
                    return true;
        const std::string tail = "/" + w;
        return std::any_of(t.paths.begin(), t.paths.end(), [&](const std::string& p) {
            return p.size() > tail.size() && p.compare(p.size() - tail.size(), tail.size(), tail) == 0;
        });
    }

    inline bool is_placeholder_or_output(const std::string& w)
    {
        static const char* const outputs[] = {"build", "fashion_mnist_run", "runs/", "out/", "/", "~", "$", "-",
                                              "http"};
        if (w.find_first_of("<>*{}$%=:,;|\"'()[]") != std::string::npos)
            return true;
        return std::any_of(std::begin(outputs), std::end(outputs), [&](const char* o) { return w.rfind(o, 0) == 0; });
    }

    /// The problems of one document's text (path: where it lives, for relative paths and the
    /// report).
    inline std::vector<problem> check_document(const tree& t, const fs::path& path, const std::string& text)
    {
        static const std::regex span("`([^`]+)`");
        static const std::regex link(R"(\]\(([^)\s#]+)(#[^)]*)?\))");
        static const std::regex option(R"(\bXGRAD_[A-Z0-9_]+\b)");
        static const std::regex test_name("^test_[a-z0-9_]+$");
        static const std::regex label_word("^[a-z_]+$");
        static const std::regex identifier(R"(^([a-z_][a-z0-9_]*(::[a-z_][a-z0-9_]*)*)(\(.*\))?$)");
        const std::string doc = fs::relative(path, t.root).generic_string();
        const fs::path dir = path.parent_path();
        std::vector<problem> out;
        std::istringstream lines(text);
        std::string line;
        int n = 0;
        bool fenced = false;
        while (std::getline(lines, line))
        {
            ++n;
            const auto report = [&](const std::string& what) { out.push_back({doc, n, what}); };
            for (std::sregex_iterator it(line.begin(), line.end(), option), end; it != end; ++it)
                if (!t.words.count(it->str()))
                    report("option or variable " + it->str() + " appears nowhere in the code");
            if (line.rfind("```", 0) == 0 || line.find("    ```") == 0)
            {
                fenced = !fenced;
                continue;
            }
            if (fenced)
                continue;
            for (std::sregex_iterator it(line.begin(), line.end(), link), end; it != end; ++it)
            {
                const std::string target = (*it)[1];
                if (target.find("://") == std::string::npos && target.rfind("mailto:", 0) != 0 &&
                    !path_exists(t, dir, target))
                    report("link to " + target + ", which does not exist");
            }
            for (std::sregex_iterator it(line.begin(), line.end(), span), end; it != end; ++it)
            {
                const std::string code = (*it)[1];
                const std::string before = line.substr(0, static_cast<std::size_t>(it->position()));
                std::vector<std::string> words;
                std::istringstream ws(code);
                for (std::string w; ws >> w;)
                    words.push_back(w);
                for (std::size_t i = 0; i < words.size(); ++i)
                {
                    const std::string& w = words[i];
                    if ((w == "-L" || w == "-LE") && i + 1 < words.size() && !t.labels.count(words[i + 1]) &&
                        !is_placeholder_or_output(words[i + 1]))
                        report("label " + words[i + 1] + " is no label of any test");
                    if (is_placeholder_or_output(w))
                        continue;
                    // A bare name with a data or system-header extension is a file a program writes
                    // ("metrics.csv") or a system header ("mpi.h"), not one of the tree's.
                    static const std::regex bare_outside(R"(^[^/]+\.(csv|svg|json|h|txt)$)");
                    if (std::regex_match(w, bare_outside))
                        continue;
                    const bool folder = w.back() == '/' && w.find('/') != w.size() - 1; // "a/b/", not "torch/"
                    if (has_extension(w) || folder || starts_with_top_folder(w) || w.rfind("xgrad/", 0) == 0)
                    {
                        if (!path_exists(t, dir, w))
                            report("path " + w + " does not exist");
                        continue;
                    }
                    if (std::regex_match(w, test_name))
                    {
                        if (!t.tests.count(w) && !t.file_stems.count(w))
                            report("test " + w + " is registered by no CMakeLists.txt and names no file");
                        continue;
                    }
                }
                // A span of a list right after "label" / "labels" ("label `unit`", "labels `a`,
                // `b` and `c`") is a label.
                std::string lower = before;
                std::transform(lower.begin(), lower.end(), lower.begin(), ::tolower);
                static const std::regex label_list(R"(^s?:?\s*(`[a-z_]+`\s*(,|and|or)?\s*)*$)");
                const std::size_t at = lower.rfind("label");
                if (at != std::string::npos && std::regex_match(before.substr(at + 5), label_list) &&
                    std::regex_match(code, label_word) && !t.labels.count(code))
                    report("label " + code + " is no label of any test");
                // One identifier: snake_case with '_' or '::'; its last part must be in the code.
                std::smatch m;
                if (words.size() == 1 && std::regex_match(code, m, identifier))
                {
                    const std::string name = m[1];
                    const std::string last = name.substr(name.rfind(':') == std::string::npos ? 0
                                                                                              : name.rfind(':') + 1);
                    // Not identifiers of the code: fragments ("_t1", "m_"), the benchmarks' case names
                    // ("grad_train_nchw_f32_256x32x14x14_t1"), test names and other projects' names.
                    static const std::regex case_name(R"(\d+x\d+)");
                    const bool fragment = name.front() == '_' || name.back() == '_';
                    const bool skip = fragment || std::regex_search(name, case_name) || t.tests.count(name) ||
                                      t.file_stems.count(name) || foreign_names().count(last) ||
                                      std::regex_match(code, test_name);
                    if ((name.find('_') != std::string::npos || name.find("::") != std::string::npos) &&
                        !t.words.count(last) && !skip)
                        report("identifier " + code + ": no code names " + last);
                }
            }
        }
        return out;
    }
}
