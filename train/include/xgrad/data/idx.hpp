#pragma once
// Reading MNIST-format (IDX) files, plain or gzip-compressed (through zlib)
// (train/src/data/idx.cpp), into the image_dataset of xgrad/data/dataset.hpp.
//
// IDX: a big-endian header — two zero bytes, a type byte (0x08 unsigned byte is the only type
// MNIST-format datasets use, and the only one accepted), the number of dimensions, then one
// 32-bit big-endian extent per dimension — followed by the row-major data. A file whose name
// ends in ".gz" is decompressed; otherwise it is read as is.
//
// Reading validates before it allocates: the header is parsed from the first bytes of the
// stream (inflated on the fly for ".gz") and checked (magic, type, rank, extents), a plain
// file's size must be exactly what the header announces, and a gzip stream is inflated into
// the destination only as far as the announced size (and a few bytes more, to tell its end
// from trailing data), so neither a header announcing more than the file holds nor a small
// .gz that inflates to gigabytes costs more memory than the bytes really read.
//
// Errors: xgrad::data::data_error (a std::runtime_error) whose message starts with the file's
// path and says what is wrong: cannot open (with the system's reason), not a regular file (a
// FIFO, a folder: refused at once, never waited on), not gzip / corrupt or truncated gzip
// stream, bad magic number (quoting the 4 bytes found in hex), unsupported type byte, rank not
// what was expected, truncated header or data (bytes needed and found), trailing bytes or
// trailing decompressed data, extents whose product overflows, a label out of range (its index
// and value), image and label counts that differ (naming both files and both counts), images
// of another size than required, fewer images than required. Arguments that are wrong whatever
// the files hold (a shape that does not match the data, classes < 1) raise
// xgrad::invalid_argument.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "xgrad/data/dataset.hpp" // image_dataset, dataset_options, data_error

namespace xgrad::data
{
    /// The decoded contents of one IDX file of unsigned bytes.
    struct idx_array
    {
        std::vector<std::int64_t> shape;
        std::vector<std::uint8_t> data; // row-major, product(shape) bytes
    };

    /// Reads the whole file (decompressing it when its name ends in ".gz"; concatenated gzip
    /// members are read as one stream). More than `max_bytes` (decompressed) is a data_error,
    /// raised after reading max_bytes + 1 bytes; memory grows only with the bytes read.
    std::vector<std::uint8_t> read_file_bytes(const std::filesystem::path& path,
                                              std::size_t max_bytes = std::size_t{1} << 30);
    /// Parses an IDX file of unsigned bytes; `expected_rank` (if > 0) must match. The file must
    /// hold exactly the header and product(shape) bytes.
    idx_array read_idx(const std::filesystem::path& path, int expected_rank = 0);
    /// Writes an IDX file of unsigned bytes (gzip-compressed when the name ends in ".gz"),
    /// atomically (a temporary file in the same folder, then a rename; the temporary file is
    /// removed when anything fails). For tests and tools. Throws xgrad::invalid_argument when
    /// data.size() != product(shape), an extent is outside [0, 2^32 - 1] or the rank exceeds
    /// 255; data_error, starting with `path`, when the file cannot be written.
    void write_idx(const std::filesystem::path& path, const idx_array& array);

    /// Reads an images file (rank 3) and a labels file (rank 1). Both headers are checked first,
    /// against each other (the same count) and `options` (image size, min_size), before the data
    /// of either is read; then every label is checked against `options.classes`. Throws
    /// xgrad::invalid_argument for options outside their ranges, data_error naming the file and
    /// the values found and expected otherwise.
    image_dataset load_idx_dataset(const std::filesystem::path& images, const std::filesystem::path& labels,
                                   const dataset_options& options);
    /// The same with default options but `classes` and `limit`.
    image_dataset load_idx_dataset(const std::filesystem::path& images, const std::filesystem::path& labels,
                                   std::int64_t classes = 10, std::int64_t limit = 0);

    /// MNIST / Fashion-MNIST: `dir`/{train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz]
    /// (the .gz name is tried first; the first name that exists is taken, and refused if it is
    /// not a regular file). Throws data_error naming the folder and the files tried.
    image_dataset load_mnist(const std::filesystem::path& dir, bool train, const dataset_options& options);
    /// The same with default options but `limit`.
    image_dataset load_mnist(const std::filesystem::path& dir, bool train, std::int64_t limit = 0);

    /// Where Debian's dataset-fashion-mnist package puts the files.
    inline const char* default_fashion_mnist_dir = "/usr/share/datasets/fashion-mnist";
}
