#pragma once
// A fresh folder under the system's temporary directory, removed with its contents when the
// object goes (the file tests' working space).
#include <atomic>
#include <filesystem>
#include <random>
#include <string>
#include <system_error>

namespace test_support
{
    class scratch_folder
    {
    public:
        /// Creates <tmp>/<prefix><random>_<counter>.
        explicit scratch_folder(const std::string& prefix)
        {
            static std::atomic<int> counter{0};
            std::random_device rd;
            path = std::filesystem::temp_directory_path() /
                   (prefix + std::to_string(rd()) + "_" + std::to_string(counter.fetch_add(1)));
            std::filesystem::create_directories(path);
        }
        ~scratch_folder()
        {
            std::error_code ec;
            std::filesystem::remove_all(path, ec);
        }
        scratch_folder(const scratch_folder&) = delete;
        scratch_folder& operator=(const scratch_folder&) = delete;

        std::filesystem::path operator/(const std::string& name) const { return path / name; }

        std::filesystem::path path;
    };
}
