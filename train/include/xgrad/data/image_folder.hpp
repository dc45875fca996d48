#pragma once
// Image files: one PNG or JPEG file as a tensor, and a folder of them laid out by class as
// torchvision's ImageFolder reads it (train/src/data/image_folder.cpp; the decoders are
// Debian's libpng and libjpeg-turbo, train/src/data/image_png.cpp and image_jpeg.cpp).
//
// An image is a float32 [C, H, W] CPU tensor with values in [0, 1]: each sample divided by
// its maximum, 255, or 65535 for a 16-bit PNG, whose 16 bits are kept (PIL keeps the top 8 of
// 16-bit RGB, and its conversion of 16-bit gray to RGB clips at 255 rather than scaling). C is
// image_options::channels, whatever the file holds, converted as PIL's Image.convert does:
//   3 (RGB, the default: torchvision's loader converts every image to RGB): gray is copied
//     to R, G and B; an alpha channel is dropped (not composited);
//   1 (gray): RGB becomes its ITU-R 601-2 luma 0.299 R + 0.587 G + 0.114 B (PIL's "L",
//     computed in float rather than rounded to 8 bits); gray stays as it is;
//   4 (RGBA): as 3, with the file's alpha, or 1 where it has none.
// Palette PNGs expand to RGB (their tRNS chunk to alpha), gray of 1, 2 or 4 bits to 8 bits.
// No gamma or colour-profile correction is applied: the file's values, as PIL and torchvision
// give them. A file is PNG or JPEG by its first bytes, not by its name.
//
// Errors: data_error whose message starts with the file's path, then the problem: a file
// that cannot be read, neither PNG nor JPEG ("not a PNG or JPEG image"), or that the decoder
// rejects, with the decoder's message (a truncated file, a bad CRC, corrupt JPEG data: libjpeg's
// warnings count as errors, as PIL refuses a truncated JPEG; a progressive JPEG of more than
// 500 scans is refused as built to be slow), or an image of more than max_pixels pixels
// (checked before anything is allocated for its pixels).
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "xgrad/data/dataset.hpp"
#include "xgrad/tensor.hpp"

namespace xgrad::data
{
    struct image_options
    {
        /// Channels of every image: 1, 3 or 4 (see above).
        std::int64_t channels = 3;
        /// The largest image accepted, in pixels (width * height), >= 1. The default is PIL's
        /// limit beyond which it refuses an image as a decompression bomb (2 * 89478485).
        std::int64_t max_pixels = 178956970;
    };

    /// Reads one PNG or JPEG file (see above). Throws xgrad::invalid_argument for options out
    /// of range, data_error for the file.
    tensor read_image(const std::filesystem::path& path, const image_options& options = {});

    /// The images of `root`/<class>/... as torchvision's ImageFolder finds them: the classes are
    /// the names of root's subfolders (symbolic links followed), sorted, class i having label
    /// i; an example is every regular file under a class folder, at any depth, whose name ends
    /// in .png, .jpg or .jpeg (case-insensitive), in the order of torchvision's sorted walk
    /// (folder by folder, each folder's files sorted by name; names compare by their bytes,
    /// which for UTF-8 is code point order, as Python sorts them). Files are listed when the
    /// dataset is made and decoded by get(i), which returns read_image(files()[i]) and its
    /// class (so get throws what read_image throws, naming the file); get is const and safe to
    /// call from several threads at once.
    ///
    /// The constructor throws xgrad::invalid_argument for options out of range, and data_error
    /// naming the folder when root is not a folder, has no class folder, a class folder holds
    /// no image file (as torchvision refuses it), or a folder cannot be listed.
    class image_folder final : public dataset
    {
    public:
        explicit image_folder(std::filesystem::path root, const image_options& options = {});
        std::int64_t size() const override { return static_cast<std::int64_t>(m_files.size()); }
        example get(std::int64_t index) const override;

        /// The class names, sorted; label i is classes()[i].
        const std::vector<std::string>& classes() const noexcept { return m_classes; }
        /// Example i's file and label.
        const std::vector<std::filesystem::path>& files() const noexcept { return m_files; }
        const std::vector<std::int64_t>& labels() const noexcept { return m_labels; }
        const image_options& options() const noexcept { return m_options; }

    private:
        std::filesystem::path m_root;
        image_options m_options;
        std::vector<std::string> m_classes;
        std::vector<std::filesystem::path> m_files;
        std::vector<std::int64_t> m_labels;
    };
}
