// Image files and folders of them (see xgrad/data/image_folder.hpp): finding the files as
// torchvision's ImageFolder does, reading one, and turning decoded samples into the tensor.
#include "xgrad/data/image_folder.hpp"

#include <algorithm>
#include <cctype>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "../io/input_file.hpp"
#include "image_decode.hpp"
#include "transform_support.hpp"
#include "xgrad/checked.hpp"
#include "xgrad/errors.hpp"
#include "xgrad/factories.hpp"

namespace fs = std::filesystem;

namespace xgrad::data
{
    namespace
    {
        void check_options(const image_options& options, const char* who)
        {
            if (options.channels != 1 && options.channels != 3 && options.channels != 4)
                detail::fail(who, "channels must be 1, 3 or 4, got " + std::to_string(options.channels));
            if (options.max_pixels < 1)
                detail::fail(who, "max_pixels must be >= 1, got " + std::to_string(options.max_pixels));
        }

        /// Sample s of a decoded image in [0, 1].
        double sample(const detail::decoded_image& image, std::size_t s) noexcept
        {
            const unsigned char* d = image.samples.data();
            return image.sample_bytes == 2 ? ((d[2 * s] << 8) | d[2 * s + 1]) / 65535.0 : d[s] / 255.0;
        }

        /// The decoded samples as [channels, H, W] float32, converted as the header says.
        tensor to_tensor(const detail::decoded_image& image, std::int64_t channels)
        {
            const std::int64_t plane = image.height * image.width, source = image.channels;
            const bool colour = source >= 3, alpha = source == 2 || source == 4;
            tensor out = xgrad::empty({channels, image.height, image.width}, dtype::float32);
            float* o = out.data<float>();
            for (std::int64_t p = 0; p < plane; ++p)
            {
                const auto at = [&](std::int64_t c) { return sample(image, static_cast<std::size_t>(p * source + c)); };
                if (channels == 1)
                    o[p] = static_cast<float>(colour ? detail::luma(at(0), at(1), at(2)) : at(0));
                else
                {
                    for (std::int64_t c = 0; c < 3; ++c)
                        o[c * plane + p] = static_cast<float>(at(colour ? c : 0));
                    if (channels == 4)
                        o[3 * plane + p] = alpha ? static_cast<float>(at(source - 1)) : 1.0f;
                }
            }
            return out;
        }

        bool has_image_extension(const fs::path& path)
        {
            std::string ext = path.extension().string();
            std::transform(ext.begin(), ext.end(), ext.begin(),
                           [](unsigned char ch) { return static_cast<char>(std::tolower(ch)); });
            return ext == ".png" || ext == ".jpg" || ext == ".jpeg";
        }

        /// The image files under a class folder in the order of Python's sorted(os.walk(...)):
        /// folder by folder, the folders in the order of their paths, each one's files sorted.
        std::vector<fs::path> image_files(const fs::path& folder)
        {
            std::vector<std::pair<std::string, std::string>> found; // (folder, file name)
            const auto options = fs::directory_options::follow_directory_symlink;
            for (auto it = fs::recursive_directory_iterator(folder, options); it != fs::recursive_directory_iterator();
                 ++it)
                if (it->is_regular_file() && has_image_extension(it->path()))
                    found.emplace_back(it->path().parent_path().string(), it->path().filename().string());
            std::sort(found.begin(), found.end());
            std::vector<fs::path> files;
            files.reserve(found.size());
            for (const auto& [dir, name] : found)
                files.push_back(fs::path(dir) / name);
            return files;
        }
    }

    namespace detail
    {
        tensor decode_image(const unsigned char* data, std::size_t size, const std::string& name,
                            const image_options& options)
        {
            decoded_image image;
            decode_failure failure;
            bool ok = false;
            if (is_png(data, size))
                ok = decode_png(data, size, options.max_pixels, image, failure);
            else if (is_jpeg(data, size))
                ok = decode_jpeg(data, size, options.max_pixels, image, failure);
            else
            {
                std::string start;
                for (std::size_t i = 0; i < std::min<std::size_t>(size, 4); ++i)
                    start += (i ? " " : "") + std::to_string(data[i]);
                throw data_error(name + ": not a PNG or JPEG image (" +
                                 (size == 0 ? std::string("the file is empty") : "it starts with bytes " + start) +
                                 ")");
            }
            if (!ok)
                throw data_error(name + ": " + failure.what);
            return to_tensor(image, options.channels);
        }
    }

    tensor read_image(const fs::path& path, const image_options& options)
    {
        check_options(options, "read_image");
        std::vector<unsigned char> bytes;
        try
        {
            io::detail::input_file in(path);
            // The file is read whole, so its size is bounded first: no image of max_pixels
            // pixels takes more than 8 bytes a pixel (16-bit RGBA) even stored uncompressed,
            // plus a byte a row and the chunks' framing; 64 MiB more leave room for metadata.
            const std::int64_t limit =
                checked_add(checked_mul(options.max_pixels, 9, "read_image: the file size limit"),
                            std::int64_t{64} << 20, "read_image: the file size limit");
            if (in.size() > static_cast<std::uint64_t>(limit))
                throw data_error(path.string() + ": is " + std::to_string(in.size()) +
                                 " bytes, more than any image of max_pixels (" + std::to_string(options.max_pixels) +
                                 ") pixels takes");
            bytes.resize(static_cast<std::size_t>(in.size()));
            in.read_exact(bytes.data(), bytes.size(), "the image");
        }
        catch (const io::file_error& e)
        {
            throw data_error(e.what());
        }
        return detail::decode_image(bytes.data(), bytes.size(), path.string(), options);
    }

    image_folder::image_folder(fs::path root, const image_options& options)
        : m_root(std::move(root)), m_options(options)
    {
        check_options(options, "image_folder");
        try
        {
            if (!fs::is_directory(m_root))
                throw data_error(m_root.string() + ": not a folder (image_folder reads <root>/<class>/<image files>)");
            for (const fs::directory_entry& entry : fs::directory_iterator(m_root))
                if (entry.is_directory())
                    m_classes.push_back(entry.path().filename().string());
            std::sort(m_classes.begin(), m_classes.end());
            if (m_classes.empty())
                throw data_error(m_root.string() +
                                 ": no class folder (image_folder reads <root>/<class>/<image files>)");
            for (std::size_t label = 0; label < m_classes.size(); ++label)
            {
                const fs::path folder = m_root / m_classes[label];
                std::vector<fs::path> files = image_files(folder);
                if (files.empty())
                    throw data_error(folder.string() + ": class folder '" + m_classes[label] +
                                     "' holds no .png, .jpg or .jpeg file");
                m_labels.insert(m_labels.end(), files.size(), static_cast<std::int64_t>(label));
                m_files.insert(m_files.end(), std::make_move_iterator(files.begin()),
                               std::make_move_iterator(files.end()));
            }
        }
        catch (const fs::filesystem_error& e)
        {
            throw data_error(e.path1().string() + ": cannot be listed (" + e.code().message() + ")");
        }
    }

    example image_folder::get(std::int64_t index) const
    {
        if (index < 0 || index >= size())
            throw xgrad::invalid_argument("image_folder: index " + std::to_string(index) + " is outside [0, " +
                                          std::to_string(size()) + ")");
        const auto i = static_cast<std::size_t>(index);
        return {read_image(m_files[i], m_options), m_labels[i]};
    }
}
