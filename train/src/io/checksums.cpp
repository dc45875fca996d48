// Per-tensor CRC-32 in safetensors metadata (see checksums.hpp). zlib is already a dependency
// (gzip datasets); its crc32 runs at several GB/s, so checking costs a small part of reading.
#include "checksums.hpp"

#include <zlib.h>

#include <algorithm>
#include <cstdio>
#include <limits>

#include "xgrad/factories.hpp"
#include "xgrad/io/safetensors.hpp"

namespace xgrad::io::detail
{
    std::uint32_t crc32_of(const void* data, std::size_t n, std::uint32_t crc)
    {
        // crc32_z takes z_size_t; feed it at most 1 GiB at a time so any size_t fits.
        const auto* p = static_cast<const unsigned char*>(data);
        uLong c = crc;
        while (n > 0)
        {
            const std::size_t chunk = std::min<std::size_t>(n, std::size_t{1} << 30);
            c = crc32_z(c, p, static_cast<z_size_t>(chunk));
            p += chunk;
            n -= chunk;
        }
        return static_cast<std::uint32_t>(c);
    }

    std::string crc_text(std::uint32_t crc)
    {
        char s[9];
        std::snprintf(s, sizeof s, "%08x", static_cast<unsigned>(crc));
        return s;
    }

    std::map<std::string, std::uint32_t> take_checksums(std::map<std::string, std::string>& metadata,
                                                        const std::filesystem::path& path)
    {
        std::map<std::string, std::uint32_t> out;
        for (auto it = metadata.lower_bound(std::string(checksum_prefix));
             it != metadata.end() && it->first.compare(0, checksum_prefix.size(), checksum_prefix) == 0;)
        {
            const std::string& v = it->second;
            const bool hex = v.size() == 8 && std::all_of(v.begin(), v.end(), [](char c) {
                                 return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
                             });
            if (!hex)
                throw format_error(path.string() + ": metadata '" + it->first + "' is '" + v.substr(0, 40) +
                                   "', not a checksum (8 lowercase hex digits)");
            out.emplace(it->first.substr(checksum_prefix.size()),
                        static_cast<std::uint32_t>(std::stoul(v, nullptr, 16)));
            it = metadata.erase(it);
        }
        return out;
    }

    bool check_checksum_names(const std::filesystem::path& path, const std::map<std::string, std::uint32_t>& checksums,
                              const std::vector<std::string>& names)
    {
        if (checksums.empty())
            return false;
        for (const std::string& name : names)
            if (checksums.count(name) == 0)
                throw format_error(path.string() + ": tensor '" + name +
                                   "' has no checksum, though the file's other tensors do");
        if (names.size() != checksums.size())
            for (const auto& entry : checksums)
                if (std::find(names.begin(), names.end(), entry.first) == names.end())
                    throw format_error(path.string() + ": metadata holds a checksum for '" + entry.first +
                                       "', which is not a tensor of the file");
        return true;
    }

    const unsigned char* stored_bytes(const std::filesystem::path& path, const std::string& name, const tensor& t,
                                      std::vector<unsigned char>& buffer)
    {
        if (t.device() == cpu_device && t.is_contiguous())
            return static_cast<const unsigned char*>(t.data_ptr());
        buffer.resize(static_cast<std::size_t>(t.numel()) * itemsize(t.dtype()));
        try
        {
            to_host(t, buffer.data(), t.dtype());
        }
        catch (const std::exception& e)
        {
            throw format_error(path.string() + ": cannot copy tensor '" + name + "' to the host: " + e.what());
        }
        return buffer.data();
    }

    std::uint32_t stored_crc(const std::filesystem::path& path, const std::string& name, const tensor& t,
                             std::vector<unsigned char>& buffer)
    {
        return crc32_of(stored_bytes(path, name, t, buffer), static_cast<std::size_t>(t.numel()) * itemsize(t.dtype()));
    }
}
