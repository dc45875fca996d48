// PNG decoding through libpng's classic API (see image_decode.hpp for the error handling).
//
// The classic API rather than libpng's simplified png_image one: the simplified API converts
// 16-bit and gray-to-RGB data through linear light (gamma decoding), which changes the values,
// whereas PIL and torchvision give the file's values as they are; the classic API applies only
// the expansions asked for here.
#include <png.h>

#include <csetjmp>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "image_decode.hpp"
#include "xgrad/checked.hpp"

namespace xgrad::data::detail
{
    namespace
    {
        /// The bytes libpng reads from, and the message of its last error. Plain data: it is
        /// touched on both sides of a longjmp.
        struct png_reader
        {
            const unsigned char* data = nullptr;
            std::size_t size = 0, offset = 0;
            char message[256] = "";
        };

        struct png_header
        {
            png_uint_32 width = 0, height = 0;
            int channels = 0, bit_depth = 0;
            std::size_t row_bytes = 0;
        };

        // libpng's callbacks. Each error ends in a longjmp through libpng's frames (C) and these
        // functions, which hold no object with a destructor.
        void on_error(png_structp png, png_const_charp message)
        {
            auto* reader = static_cast<png_reader*>(png_get_error_ptr(png));
            std::snprintf(reader->message, sizeof reader->message, "%s", message);
            png_longjmp(png, 1);
        }

        /// Warnings (an unknown chunk, a bad profile) do not stop decoding, as in PIL; they are
        /// not printed either.
        void on_warning(png_structp, png_const_charp) {}

        void read_bytes(png_structp png, png_bytep out, std::size_t n)
        {
            auto* reader = static_cast<png_reader*>(png_get_io_ptr(png));
            if (n > reader->size - reader->offset)
                png_error(png, "the file ends early (truncated)");
            std::memcpy(out, reader->data + reader->offset, n);
            reader->offset += n;
        }

        /// Reads the header and sets the expansions; false on an error (in reader.message).
        /// setjmp's frame: nothing here has a destructor.
        bool read_header(png_structp png, png_infop info, png_header& header)
        {
            if (setjmp(png_jmpbuf(png)))
                return false;
            png_read_info(png, info);
            const int color = png_get_color_type(png, info);
            if (color == PNG_COLOR_TYPE_PALETTE)
                png_set_palette_to_rgb(png);
            if (color == PNG_COLOR_TYPE_GRAY && png_get_bit_depth(png, info) < 8)
                png_set_expand_gray_1_2_4_to_8(png);
            if (png_get_valid(png, info, PNG_INFO_tRNS))
                png_set_tRNS_to_alpha(png);
            png_set_interlace_handling(png);
            png_read_update_info(png, info);
            header.width = png_get_image_width(png, info);
            header.height = png_get_image_height(png, info);
            header.channels = png_get_channels(png, info);
            header.bit_depth = png_get_bit_depth(png, info);
            header.row_bytes = png_get_rowbytes(png, info);
            return true;
        }

        /// Reads the pixels into `rows` and the chunks after them (a file cut after its pixels is
        /// still truncated); false on an error. setjmp's frame, as read_header's.
        bool read_pixels(png_structp png, png_bytepp rows)
        {
            if (setjmp(png_jmpbuf(png)))
                return false;
            png_read_image(png, rows);
            png_read_end(png, nullptr);
            return true;
        }

        /// Frees libpng's state however decode_png ends.
        struct png_state
        {
            png_structp png = nullptr;
            png_infop info = nullptr;
            ~png_state() { png_destroy_read_struct(&png, info ? &info : nullptr, nullptr); }
        };
    }

    bool is_png(const unsigned char* data, std::size_t size) noexcept
    {
        return size >= 8 && png_sig_cmp(data, 0, 8) == 0;
    }

    bool decode_png(const unsigned char* data, std::size_t size, std::int64_t max_pixels, decoded_image& out,
                    decode_failure& failure)
    {
        png_reader reader;
        reader.data = data;
        reader.size = size;
        png_state state;
        state.png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &reader, on_error, on_warning);
        if (state.png)
            state.info = png_create_info_struct(state.png);
        if (!state.png || !state.info)
        {
            failure.what = "PNG: libpng could not start (out of memory)";
            return false;
        }
        png_set_read_fn(state.png, &reader, read_bytes);
        png_header header;
        if (!read_header(state.png, state.info, header))
        {
            failure.what = std::string("PNG: ") + reader.message;
            return false;
        }
        // libpng has checked the header (width and height in [1, 2^31 - 1], at most a million
        // each by default); the pixel count is bounded before the buffer is allocated.
        const auto width = static_cast<std::int64_t>(header.width), height = static_cast<std::int64_t>(header.height);
        const std::int64_t pixels = checked_mul(width, height, "PNG: width * height");
        if (pixels > max_pixels)
        {
            failure.what = "PNG: the image is " + std::to_string(width) + "x" + std::to_string(height) + ", " +
                           std::to_string(pixels) + " pixels, more than the " + std::to_string(max_pixels) +
                           " allowed (image_options::max_pixels)";
            return false;
        }
        const std::int64_t row_bytes = checked_product({width, header.channels, header.bit_depth / 8},
                                                       "PNG: bytes per row");
        if (header.row_bytes != static_cast<std::size_t>(row_bytes) ||
            (header.bit_depth != 8 && header.bit_depth != 16))
        {
            failure.what = "PNG: unexpected layout after expansion (" + std::to_string(header.channels) +
                           " channels of " + std::to_string(header.bit_depth) + " bits, " +
                           std::to_string(header.row_bytes) + " bytes per row)";
            return false;
        }
        out.height = height;
        out.width = width;
        out.channels = header.channels;
        out.sample_bytes = header.bit_depth / 8;
        out.samples.resize(static_cast<std::size_t>(checked_mul(row_bytes, height, "PNG: bytes of the image")));
        std::vector<png_bytep> rows(static_cast<std::size_t>(height));
        for (std::int64_t r = 0; r < height; ++r)
            rows[static_cast<std::size_t>(r)] = out.samples.data() + r * row_bytes;
        if (!read_pixels(state.png, rows.data()))
        {
            failure.what = std::string("PNG: ") + reader.message;
            return false;
        }
        return true;
    }
}
