#pragma once
// A scratch folder for the file-reading fuzz targets: each input is written to a file in it
// and the reader under test opens that file, as it would a real one. The folder is made once
// per process (mkdtemp under $TMPDIR or /tmp) and removed at exit, so parallel fuzzing jobs
// never share files.
//
// big_file_zeros: what a target appends (sparse) when its input asks for a big file: more than
// the replay and libFuzzer allocation limit (64 MiB), so a reader that loads a whole file before
// validating it is a finding, and less than the 100 MB safetensors header bound.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <system_error>
#include <vector>

namespace xgrad::fuzz
{
    inline constexpr std::uintmax_t big_file_zeros = std::uintmax_t{96} << 20;

    class scratch_folder
    {
    public:
        scratch_folder()
        {
            const char* tmp = std::getenv("TMPDIR");
            std::string pattern = std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") + "/xgrad-fuzz-XXXXXX";
            if (mkdtemp(pattern.data()) == nullptr)
            {
                std::perror("xgrad fuzz: mkdtemp");
                std::abort();
            }
            m_path = pattern;
        }
        ~scratch_folder()
        {
            std::error_code ec;
            std::filesystem::remove_all(m_path, ec);
        }
        scratch_folder(const scratch_folder&) = delete;
        scratch_folder& operator=(const scratch_folder&) = delete;

        /// Writes `bytes` to `name` in the folder (replacing it) and returns its path. With
        /// `zeros` > 0 the file then grows by that many zero bytes, as a sparse file (no disk
        /// space, no time): a big file that a reader must not load whole before checking it.
        std::filesystem::path write(const std::string& name, const std::uint8_t* bytes, std::size_t size,
                                    std::uintmax_t zeros = 0) const
        {
            const std::filesystem::path path = m_path / name;
            std::FILE* f = std::fopen(path.c_str(), "wb");
            if (f == nullptr || (size != 0 && std::fwrite(bytes, 1, size, f) != size) || std::fclose(f) != 0)
            {
                std::perror("xgrad fuzz: writing the input file");
                std::abort();
            }
            if (zeros > 0)
                std::filesystem::resize_file(path, size + zeros);
            return path;
        }
        std::filesystem::path write(const std::string& name, const std::vector<std::uint8_t>& bytes,
                                    std::uintmax_t zeros = 0) const
        {
            return write(name, bytes.data(), bytes.size(), zeros);
        }

    private:
        std::filesystem::path m_path;
    };

    /// The process's scratch folder.
    inline const scratch_folder& scratch()
    {
        static const scratch_folder folder;
        return folder;
    }
}
