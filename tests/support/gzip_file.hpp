#pragma once
// Writing gzip test files whose inflated size is far larger than what the test holds (the IDX
// reader's and the examples' memory tests). Needs zlib (ZLIB::ZLIB) linked into the test.
#include <doctest/doctest.h>
#include <zlib.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <vector>

namespace test_support
{
    /// A gzip file of `head` followed by `zeros` zero bytes, deflated a MiB at a time (so the
    /// test never holds the inflated size), at level 9: 128 MiB of zeros take about 130 kB.
    inline void write_gzip(const std::filesystem::path& path, std::vector<std::uint8_t> head, std::size_t zeros)
    {
        z_stream z{};
        REQUIRE(deflateInit2(&z, 9, Z_DEFLATED, 16 + MAX_WBITS, 9, Z_DEFAULT_STRATEGY) == Z_OK);
        std::ofstream out(path, std::ios::binary);
        std::vector<std::uint8_t> in = std::move(head), buf(1 << 20);
        for (bool last = false; !last;)
        {
            const std::size_t more = std::min(zeros, std::size_t{1} << 20);
            in.resize(in.size() + more, 0);
            zeros -= more;
            last = zeros == 0;
            z.next_in = in.data();
            z.avail_in = static_cast<uInt>(in.size());
            do
            {
                z.next_out = buf.data();
                z.avail_out = static_cast<uInt>(buf.size());
                deflate(&z, last ? Z_FINISH : Z_NO_FLUSH);
                out.write(reinterpret_cast<const char*>(buf.data()),
                          static_cast<std::streamsize>(buf.size() - z.avail_out));
            } while (z.avail_out == 0);
            in.clear();
        }
        deflateEnd(&z);
        REQUIRE(out.good());
    }
}
