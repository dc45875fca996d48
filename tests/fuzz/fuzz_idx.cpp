// Fuzz target: the IDX reader (xgrad/data/idx.hpp), plain and gzip-compressed.
//
// Input: a selector byte, an expected-rank byte, then the payload. A selector >= 0x80 appends
// 96 MiB of zeros (a sparse file) to the plain files of modes 0 and 3: a reader that loads a
// whole file before checking its header against its size is a finding. By selector % 4:
//   0: the payload is a plain IDX file ("input.idx"), read with read_idx;
//   1: the payload is a gzip file as is ("input.idx.gz": the gzip layer's own checks, and
//      small files that inflate to much more, e.g. a bad header followed by megabytes of
//      zeros, which must be refused without inflating everything first);
//   2: the payload is an IDX file that the target gzip-compresses before writing
//      "input.idx.gz" (mutations then act on the IDX bytes behind the gzip layer);
//   3: load_idx_dataset over two plain files: the payload split at its first two bytes
//      (a little-endian length) into images and labels, with classes and limit from the
//      table (out-of-range ones included).
// Expected outcomes: success, data::data_error, io::file_error and std::invalid_argument.
// Checked on success: the data has product(shape) bytes, the rank matches expected_rank
// (when > 0), a dataset's labels are below classes and its sizes agree.
#include <zlib.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "tests/fuzz/fuzz_input.hpp"
#include "tests/fuzz/fuzz_temp_file.hpp"
#include "xgrad/data/idx.hpp"
#include "xgrad/io/atomic_file.hpp"

namespace
{
    using namespace xgrad;
    constexpr const char* target = "idx";

    std::vector<std::uint8_t> gzip(const std::vector<std::uint8_t>& raw)
    {
        z_stream zs{};
        if (deflateInit2(&zs, Z_BEST_SPEED, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK)
            fuzz::fail(target, "deflateInit2 failed");
        std::vector<std::uint8_t> out(deflateBound(&zs, static_cast<uLong>(raw.size())) + 32);
        zs.next_in = const_cast<Bytef*>(raw.data());
        zs.avail_in = static_cast<uInt>(raw.size());
        zs.next_out = out.data();
        zs.avail_out = static_cast<uInt>(out.size());
        if (deflate(&zs, Z_FINISH) != Z_STREAM_END)
            fuzz::fail(target, "deflate did not finish");
        out.resize(zs.total_out);
        deflateEnd(&zs);
        return out;
    }

    void check_array(const data::idx_array& a, int expected_rank)
    {
        const auto n = fuzz::exact_numel(a.shape);
        XGRAD_FUZZ_CHECK(target, n.has_value() && static_cast<std::uint64_t>(*n) == a.data.size(),
                         "shape " + fuzz::shape_string(a.shape) + " but " + std::to_string(a.data.size()) + " bytes");
        XGRAD_FUZZ_CHECK(target, expected_rank <= 0 || static_cast<int>(a.shape.size()) == expected_rank,
                         "rank " + std::to_string(a.shape.size()) + " but expected " + std::to_string(expected_rank));
    }

    void run(fuzz::fuzz_input& in)
    {
        const std::uint8_t selector = in.byte();
        const int expected_rank = in.byte() % 5;
        const auto& dir = fuzz::scratch();
        const std::uintmax_t zeros = selector >= 0x80 ? fuzz::big_file_zeros : 0;
        switch (selector % 4)
        {
        case 0:
            check_array(data::read_idx(dir.write("input.idx", in.rest(), zeros), expected_rank), expected_rank);
            break;
        case 1: check_array(data::read_idx(dir.write("input.idx.gz", in.rest()), expected_rank), expected_rank); break;
        case 2:
            check_array(data::read_idx(dir.write("input.idx.gz", gzip(in.rest())), expected_rank), expected_rank);
            break;
        default:
        {
            const std::int64_t classes = in.integer_in(1, 12);
            const std::int64_t limit = in.integer(3);
            std::size_t split = in.byte();
            split |= std::size_t{in.byte()} << 8;
            std::vector<std::uint8_t> payload = in.rest();
            split = std::min(split, payload.size());
            const std::vector<std::uint8_t> images(payload.begin(),
                                                   payload.begin() + static_cast<std::ptrdiff_t>(split));
            const std::vector<std::uint8_t> labels(payload.begin() + static_cast<std::ptrdiff_t>(split), payload.end());
            const auto ds = data::load_idx_dataset(dir.write("images.idx", images, zeros),
                                                   dir.write("labels.idx", labels), classes, limit);
            XGRAD_FUZZ_CHECK(target, ds.labels.size() == static_cast<std::size_t>(ds.size), "labels vs size");
            XGRAD_FUZZ_CHECK(target,
                             static_cast<unsigned __int128>(ds.images.size()) ==
                                 static_cast<unsigned __int128>(ds.size) * ds.rows * ds.cols,
                             "images vs size x rows x cols");
            for (const std::uint8_t l : ds.labels)
                XGRAD_FUZZ_CHECK(target, l < classes, "label " + std::to_string(l) + " >= classes");
            break;
        }
        }
    }
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size)
{
    fuzz::fuzz_input in(data, size);
    try
    {
        run(in);
    }
    catch (const data::data_error&)
    {
    }
    catch (const io::file_error&)
    {
    }
    catch (const std::invalid_argument&)
    {
    }
    return 0;
}
