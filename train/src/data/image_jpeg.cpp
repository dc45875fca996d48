// JPEG decoding through libjpeg-turbo (see image_decode.hpp for the error handling).
#include <cstdio> // jpeglib.h needs FILE and size_t declared first

#include <jpeglib.h>

#include <csetjmp>
#include <cstring>
#include <string>

#include "image_decode.hpp"
#include "xgrad/checked.hpp"

namespace xgrad::data::detail
{
    namespace
    {
        /// libjpeg's error manager with the jump back and the message. Plain data: it is
        /// touched on both sides of a longjmp.
        struct jpeg_failure
        {
            jpeg_error_mgr manager; // first: libjpeg's pointer to it is a pointer to this
            std::jmp_buf jump;
            char message[JMSG_LENGTH_MAX];
        };

        /// error_exit: keeps libjpeg's message and jumps back; never returns to libjpeg.
        void on_error(j_common_ptr info)
        {
            auto* failure = reinterpret_cast<jpeg_failure*>(info->err);
            (*info->err->format_message)(info, failure->message);
            std::longjmp(failure->jump, 1);
        }

        /// emit_message: level -1 is a warning, which libjpeg gives for corrupt data, a
        /// premature end of the file among them (it would fill the rest with gray): a failure
        /// here. Trace messages (levels >= 0) are ignored.
        void on_message(j_common_ptr info, int level)
        {
            if (level < 0)
                on_error(info);
        }

        /// At most this many scans: a progressive file may hold thousands of tiny scans, each a
        /// pass over the whole image's coefficients, so a small file could take minutes; real
        /// files have about ten (libjpeg-turbo's own tools suggest a limit of this order).
        constexpr int max_scans = 500;

        /// progress_monitor: refuses a file past max_scans, as a failure.
        void on_progress(j_common_ptr info)
        {
            const auto* d = reinterpret_cast<j_decompress_ptr>(info);
            if (d->input_scan_number > max_scans)
            {
                auto* failure = reinterpret_cast<jpeg_failure*>(info->err);
                std::snprintf(failure->message, sizeof failure->message,
                              "more than %d scans (a progressive file built to be slow)", max_scans);
                std::longjmp(failure->jump, 1);
            }
        }

        /// Starts the decompressor, reads the header and chooses the output colour space; false
        /// on an error. setjmp's frame: nothing here has a destructor.
        bool read_header(jpeg_decompress_struct& info, jpeg_failure& failure, jpeg_progress_mgr& progress,
                         const unsigned char* data, std::size_t size)
        {
            if (setjmp(failure.jump))
                return false;
            jpeg_create_decompress(&info);
            info.progress = &progress;
            jpeg_mem_src(&info, data, static_cast<unsigned long>(size));
            jpeg_read_header(&info, TRUE);
            switch (info.jpeg_color_space)
            {
            case JCS_GRAYSCALE: info.out_color_space = JCS_GRAYSCALE; break;
            case JCS_CMYK:
            case JCS_YCCK: info.out_color_space = JCS_CMYK; break;
            default: info.out_color_space = JCS_RGB; break;
            }
            jpeg_calc_output_dimensions(&info);
            return true;
        }

        /// Decodes the scanlines into `out` (rows of row_bytes); false on an error. setjmp's
        /// frame, as read_header's.
        bool read_pixels(jpeg_decompress_struct& info, jpeg_failure& failure, unsigned char* out, std::size_t row_bytes)
        {
            if (setjmp(failure.jump))
                return false;
            jpeg_start_decompress(&info);
            while (info.output_scanline < info.output_height)
            {
                JSAMPROW row = out + static_cast<std::size_t>(info.output_scanline) * row_bytes;
                jpeg_read_scanlines(&info, &row, 1);
            }
            jpeg_finish_decompress(&info);
            return true;
        }

        /// Frees libjpeg's state however decode_jpeg ends (a zeroed or half-made decompressor
        /// too: libjpeg frees what its memory manager holds, if it has one).
        struct jpeg_state
        {
            jpeg_decompress_struct info;
            jpeg_failure failure;
            jpeg_progress_mgr progress;
            ~jpeg_state() { jpeg_destroy_decompress(&info); }
        };

        /// CMYK samples (as Adobe writes them, inverted: 255 - ink) to RGB in place, as PIL's
        /// JPEG reader ("CMYK;I") and its CMYK-to-RGB conversion do: R = (255 - C)(255 - K) / 255
        /// with C, K the inks, that is stored C times stored K over 255, rounded.
        void cmyk_to_rgb(decoded_image& image)
        {
            const std::size_t pixels = static_cast<std::size_t>(image.height * image.width);
            unsigned char* d = image.samples.data();
            for (std::size_t p = 0; p < pixels; ++p)
            {
                const unsigned k = d[4 * p + 3];
                for (std::size_t c = 0; c < 3; ++c)
                    d[3 * p + c] = static_cast<unsigned char>((d[4 * p + c] * k + 127) / 255);
            }
            image.channels = 3;
            image.samples.resize(pixels * 3);
        }
    }

    bool is_jpeg(const unsigned char* data, std::size_t size) noexcept
    {
        return size >= 3 && data[0] == 0xFF && data[1] == 0xD8 && data[2] == 0xFF;
    }

    bool decode_jpeg(const unsigned char* data, std::size_t size, std::int64_t max_pixels, decoded_image& out,
                     decode_failure& failure)
    {
        jpeg_state state;
        std::memset(&state.info, 0, sizeof state.info);
        state.info.err = jpeg_std_error(&state.failure.manager);
        state.failure.manager.error_exit = on_error;
        state.failure.manager.emit_message = on_message;
        state.failure.message[0] = '\0';
        state.progress = {};
        state.progress.progress_monitor = on_progress;
        if (!read_header(state.info, state.failure, state.progress, data, size))
        {
            failure.what = std::string("JPEG: ") + state.failure.message;
            return false;
        }
        // libjpeg has checked the header (sides up to 65500); the pixel count is bounded before
        // the decompressor allocates its buffers (jpeg_start_decompress) or this one is.
        const auto width = static_cast<std::int64_t>(state.info.output_width);
        const auto height = static_cast<std::int64_t>(state.info.output_height);
        const std::int64_t pixels = checked_mul(width, height, "JPEG: width * height");
        if (pixels > max_pixels)
        {
            failure.what = "JPEG: the image is " + std::to_string(width) + "x" + std::to_string(height) + ", " +
                           std::to_string(pixels) + " pixels, more than the " + std::to_string(max_pixels) +
                           " allowed (image_options::max_pixels)";
            return false;
        }
        const std::int64_t components = state.info.output_components;
        const std::int64_t row_bytes = checked_mul(width, components, "JPEG: bytes per row");
        out.height = height;
        out.width = width;
        out.channels = components;
        out.sample_bytes = 1;
        out.samples.resize(static_cast<std::size_t>(checked_mul(row_bytes, height, "JPEG: bytes of the image")));
        if (!read_pixels(state.info, state.failure, out.samples.data(), static_cast<std::size_t>(row_bytes)))
        {
            failure.what = std::string("JPEG: ") + state.failure.message;
            return false;
        }
        if (state.info.out_color_space == JCS_CMYK)
            cmyk_to_rgb(out);
        return true;
    }
}
