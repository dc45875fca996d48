#pragma once
// Decoding PNG (libpng) and JPEG (libjpeg-turbo) files held in memory into samples, and the
// samples into the float tensors the image folder gives (train/src/data/image_png.cpp,
// image_jpeg.cpp, image_folder.cpp).
//
// Both decoders run the C library under its own error handling: libpng's error callback and
// libjpeg's error_exit copy the library's message and longjmp back to a setjmp in a small
// function of the decoder that holds no object with a destructor (so the jump skips none), and
// that function returns false; the caller, an ordinary C++ function, then throws. Every object
// with a destructor (the pixel buffer, the row pointers, the guard that frees the library's
// state) lives in that caller, outside the jump's reach.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "xgrad/data/image_folder.hpp"
#include "xgrad/tensor.hpp"

namespace xgrad::data::detail
{
    /// Samples as the file holds them after the decoder's expansions: rows of width * channels
    /// interleaved samples, channels 1 (gray), 2 (gray, alpha), 3 (RGB) or 4 (RGBA), each
    /// sample 1 byte or 2 (16-bit, big-endian as PNG stores it).
    struct decoded_image
    {
        std::int64_t height = 0, width = 0, channels = 0;
        int sample_bytes = 1;
        std::vector<unsigned char> samples;
    };

    /// What the decoders report; `what` is "PNG: <the decoder's message>" or the like, without
    /// the file's name (the caller adds it).
    struct decode_failure
    {
        std::string what;
    };

    /// Whether the bytes start with the PNG signature / a JPEG start-of-image marker.
    bool is_png(const unsigned char* data, std::size_t size) noexcept;
    bool is_jpeg(const unsigned char* data, std::size_t size) noexcept;

    /// Decodes a PNG: palettes expand to RGB, gray below 8 bits to 8, a tRNS chunk to an alpha
    /// channel; 16-bit samples stay 16-bit; no gamma correction (the file's values, as PIL
    /// gives them). Returns false and sets `failure` for anything the decoder rejects, a
    /// truncated file among them, and for an image of more than max_pixels pixels (checked
    /// before the pixels are allocated).
    bool decode_png(const unsigned char* data, std::size_t size, std::int64_t max_pixels, decoded_image& out,
                    decode_failure& failure);

    /// Decodes a baseline or progressive JPEG to gray (a one-component file) or RGB (any
    /// other; CMYK and YCCK files converted as PIL converts them, taking their samples as
    /// Adobe's inverted CMYK). libjpeg's warnings (corrupt data, a premature end) are failures,
    /// as PIL refuses a truncated JPEG; so is a progressive file of more than 500 scans (built to
    /// be slow). Errors as decode_png.
    bool decode_jpeg(const unsigned char* data, std::size_t size, std::int64_t max_pixels, decoded_image& out,
                     decode_failure& failure);

    /// Decodes PNG or JPEG bytes (told apart by their first bytes, not the file's name) into a
    /// float32 [channels, H, W] tensor in [0, 1] (xgrad/data/image_folder.hpp says how
    /// channels convert). Throws data_error "<name>: <what>" for bytes that are neither or that
    /// the decoder rejects.
    tensor decode_image(const unsigned char* data, std::size_t size, const std::string& name,
                        const image_options& options);
}
