// The main of the fuzz targets built as plain programs (any compiler, no libFuzzer): replays
// input files through LLVMFuzzerTestOneInput, so the seed corpus and every saved crash input
// (tests/fuzz/regressions/<target>/) run in the ordinary Release and sanitizer builds.
//
//   fuzz_<target>_replay [--timeout=S] [--malloc-limit-mb=N] [--rss-limit-mb=N] PATH...
//
// A PATH is a file or a folder (its regular files, in name order; files starting with '.' and
// README files are skipped). What libFuzzer reports as a finding fails here too, naming the
// input: an exception the target does not expect (exit 1), a single allocation above
// --malloc-limit-mb (default 64; under AddressSanitizer its max_allocation_size_mb, 64
// unless ASAN_OPTIONS says otherwise), a peak resident size above
// --rss-limit-mb (default 2048), an input running longer than --timeout seconds (default 25),
// or a crash / sanitizer report (the process dies).
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <new>
#include <string>
#include <vector>

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define XGRAD_FUZZ_ASAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__)
#define XGRAD_FUZZ_ASAN 1
#endif

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size);

namespace
{
    std::size_t g_malloc_limit = std::size_t{64} << 20;
    bool g_limit_active = false;
    const char* g_current = "";

#ifndef XGRAD_FUZZ_ASAN
    [[noreturn]] void report_big_allocation(std::size_t n)
    {
        // No allocation here: print with the C library only.
        std::fprintf(stderr, "fuzz replay: allocation of %zu bytes exceeds --malloc-limit-mb (%zu MiB) on input %s\n",
                     n, g_malloc_limit >> 20, g_current);
        std::fflush(stderr);
        std::abort();
    }

    void* checked_alloc(std::size_t n, std::size_t align)
    {
        if (g_limit_active && n > g_malloc_limit)
            report_big_allocation(n);
        void* p = nullptr;
        if (align <= alignof(std::max_align_t))
            p = std::malloc(n == 0 ? 1 : n);
        else if (posix_memalign(&p, align, n == 0 ? align : n) != 0)
            p = nullptr;
        if (p == nullptr)
            throw std::bad_alloc();
        return p;
    }
#endif

    extern "C" void on_alarm(int)
    {
        static const char msg[] = "fuzz replay: timeout (the input ran longer than --timeout) on input ";
        (void)!write(2, msg, sizeof msg - 1);
        (void)!write(2, g_current, std::char_traits<char>::length(g_current));
        (void)!write(2, "\n", 1);
        _exit(70);
    }

    long peak_rss_mb()
    {
        rusage u{};
        getrusage(RUSAGE_SELF, &u);
        return u.ru_maxrss / 1024; // KiB on Linux
    }

    bool starts_with(const std::string& s, const char* prefix) { return s.rfind(prefix, 0) == 0; }
}

#ifdef XGRAD_FUZZ_ASAN
// Under AddressSanitizer its allocator enforces the limit (an allocation above it is reported
// as allocation-size-too-big, naming the stack); ASAN_OPTIONS set at run time still override.
extern "C" const char* __asan_default_options() { return "max_allocation_size_mb=64:allocator_may_return_null=0"; }
#else
// Replaced for this program only (the library calls them through its containers), so that an
// allocation sized by unchecked input fails at once with the input named.
void* operator new(std::size_t n) { return checked_alloc(n, alignof(std::max_align_t)); }
void* operator new[](std::size_t n) { return checked_alloc(n, alignof(std::max_align_t)); }
void* operator new(std::size_t n, std::align_val_t a) { return checked_alloc(n, static_cast<std::size_t>(a)); }
void* operator new[](std::size_t n, std::align_val_t a) { return checked_alloc(n, static_cast<std::size_t>(a)); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
#endif

int main(int argc, char** argv)
{
    unsigned timeout_s = 25;
    long rss_limit_mb = 2048;
    std::vector<std::filesystem::path> inputs;
    for (int i = 1; i < argc; ++i)
    {
        const std::string arg = argv[i];
        if (starts_with(arg, "--timeout="))
            timeout_s = static_cast<unsigned>(std::stoul(arg.substr(10)));
        else if (starts_with(arg, "--malloc-limit-mb="))
            g_malloc_limit = static_cast<std::size_t>(std::stoull(arg.substr(18))) << 20;
        else if (starts_with(arg, "--rss-limit-mb="))
            rss_limit_mb = std::stol(arg.substr(15));
        else if (std::filesystem::is_directory(arg))
        {
            std::vector<std::filesystem::path> files;
            for (const auto& entry : std::filesystem::directory_iterator(arg))
            {
                const std::string name = entry.path().filename().string();
                if (entry.is_regular_file() && name[0] != '.' && !starts_with(name, "README"))
                    files.push_back(entry.path());
            }
            std::sort(files.begin(), files.end());
            inputs.insert(inputs.end(), files.begin(), files.end());
        }
        else if (std::filesystem::is_regular_file(arg))
            inputs.emplace_back(arg);
        else
        {
            std::fprintf(stderr, "fuzz replay: %s is neither a file nor a folder\n", arg.c_str());
            return 2;
        }
    }

    std::signal(SIGALRM, on_alarm);
    for (const auto& path : inputs)
    {
        std::ifstream file(path, std::ios::binary);
        const std::vector<char> bytes((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
        if (!file.good() && !file.eof())
        {
            std::fprintf(stderr, "fuzz replay: cannot read %s\n", path.c_str());
            return 2;
        }
        const std::string name = path.string();
        g_current = name.c_str();
        alarm(timeout_s);
        g_limit_active = true;
        try
        {
            LLVMFuzzerTestOneInput(reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size());
        }
        catch (const std::exception& e)
        {
            g_limit_active = false;
            std::fprintf(stderr, "fuzz replay: unexpected exception on input %s: %s\n", g_current, e.what());
            return 1;
        }
        g_limit_active = false;
        alarm(0);
        if (peak_rss_mb() > rss_limit_mb)
        {
            std::fprintf(stderr,
                         "fuzz replay: peak resident size %ld MiB exceeds --rss-limit-mb (%ld) after input %s\n",
                         peak_rss_mb(), rss_limit_mb, g_current);
            return 1;
        }
    }
    std::printf("fuzz replay: %zu inputs, no finding\n", inputs.size());
    return 0;
}
