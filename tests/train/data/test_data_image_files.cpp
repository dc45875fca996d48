// Image files (xgrad/data/image_folder.hpp): PNG files of every colour type and depth, read
// exactly; JPEG files within the codec's bound; the conversions to 1, 3 and 4 channels; files
// that are truncated, not images or too large, each an error naming the file.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "image_test_helpers.hpp"
#include "tests/support/check_error.hpp"
#include "tests/support/scratch_folder.hpp"
#include "xgrad/data/image_folder.hpp"
#include "xgrad/errors.hpp"
#include "xgrad/factories.hpp"

namespace fs = std::filesystem;
using namespace xgrad;
using namespace xgrad::data;
using image_test::write_jpeg;
using image_test::write_png;

namespace
{
    /// What the header says image i's [channels, H, W] values are, from interleaved samples of
    /// `source` channels (1 gray, 2 gray + alpha, 3 RGB, 4 RGBA) with maximum `max`.
    std::vector<float> expected(const std::vector<double>& samples, int source, double max, int channels)
    {
        const std::size_t plane = samples.size() / static_cast<std::size_t>(source);
        std::vector<float> out(plane * static_cast<std::size_t>(channels));
        for (std::size_t p = 0; p < plane; ++p)
        {
            const auto at = [&](int c) { return samples[p * static_cast<std::size_t>(source) + c] / max; };
            const bool colour = source >= 3;
            if (channels == 1)
                out[p] = static_cast<float>(colour ? 0.299 * at(0) + 0.587 * at(1) + 0.114 * at(2) : at(0));
            else
            {
                for (int c = 0; c < 3; ++c)
                    out[static_cast<std::size_t>(c) * plane + p] = static_cast<float>(at(colour ? c : 0));
                if (channels == 4)
                    out[3 * plane + p] = source == 2 || source == 4 ? static_cast<float>(at(source - 1)) : 1.0f;
            }
        }
        return out;
    }

    std::vector<float> values(const tensor& t)
    {
        REQUIRE(t.dtype() == dtype::float32);
        const float* d = t.contiguous().data<float>();
        return {d, d + t.numel()};
    }

    std::vector<unsigned char> bytes_of(const std::vector<double>& samples) { return {samples.begin(), samples.end()}; }

    /// Samples of a w x h image of c channels: a pattern that differs per channel and pixel.
    std::vector<double> pattern(int w, int h, int c, int max, int salt = 0)
    {
        std::vector<double> s;
        for (int i = 0; i < w * h * c; ++i)
            s.push_back(static_cast<double>((i * 37 + salt * 11 + (i % c) * 91) % (max + 1)));
        return s;
    }

    void check_all_channels(const fs::path& file, const std::vector<double>& samples, int source, double max, int w,
                            int h)
    {
        for (const int channels : {1, 3, 4})
        {
            CAPTURE(channels);
            image_options o;
            o.channels = channels;
            const tensor t = read_image(file, o);
            CHECK(t.shape() == shape_type{channels, h, w});
            CHECK(values(t) == expected(samples, source, max, channels));
        }
    }
}

TEST_CASE("read_image: PNG files of every colour type, read exactly and converted as PIL converts")
{
    test_support::scratch_folder dir("xgrad_png_");
    const int w = 5, h = 3;
    struct kind
    {
        const char* name;
        int color_type, source, depth;
    };
    for (const kind k : {kind{"gray", PNG_COLOR_TYPE_GRAY, 1, 8}, kind{"gray_alpha", PNG_COLOR_TYPE_GRAY_ALPHA, 2, 8},
                         kind{"rgb", PNG_COLOR_TYPE_RGB, 3, 8}, kind{"rgba", PNG_COLOR_TYPE_RGB_ALPHA, 4, 8}})
    {
        CAPTURE(k.name);
        const auto samples = pattern(w, h, k.source, 255);
        const fs::path file = dir / (std::string(k.name) + ".png");
        REQUIRE(write_png(file, w, h, k.color_type, 8, bytes_of(samples)));
        check_all_channels(file, samples, k.source, 255.0, w, h);
    }
    // 16 bits a sample, big-endian in the file: value / 65535, all 16 bits kept.
    for (const kind k : {kind{"gray16", PNG_COLOR_TYPE_GRAY, 1, 16}, kind{"rgba16", PNG_COLOR_TYPE_RGB_ALPHA, 4, 16}})
    {
        CAPTURE(k.name);
        std::vector<double> samples;
        std::vector<unsigned char> bytes;
        for (int i = 0; i < w * h * k.source; ++i)
        {
            const int v = (i * 4099 + 257) % 65536;
            samples.push_back(v);
            bytes.push_back(static_cast<unsigned char>(v >> 8));
            bytes.push_back(static_cast<unsigned char>(v & 0xFF));
        }
        const fs::path file = dir / (std::string(k.name) + ".png");
        REQUIRE(write_png(file, w, h, k.color_type, 16, bytes));
        check_all_channels(file, samples, k.source, 65535.0, w, h);
    }
    // Gray of 1 and 2 bits: libpng scales to 8 bits (v * 255 / (2^bits - 1)), so v / max.
    for (const int depth : {1, 2, 4})
    {
        CAPTURE(depth);
        const auto samples = pattern(w, h, 1, (1 << depth) - 1);
        const fs::path file = dir / ("gray" + std::to_string(depth) + ".png");
        REQUIRE(write_png(file, w, h, PNG_COLOR_TYPE_GRAY, depth, bytes_of(samples)));
        check_all_channels(file, samples, 1, (1 << depth) - 1, w, h);
    }
    // A palette with a tRNS chunk for its first two entries: RGB from the palette, alpha from
    // the chunk (opaque beyond it).
    const std::vector<png_color> palette{{10, 20, 30}, {200, 100, 0}, {255, 255, 255}, {7, 77, 177}};
    const std::vector<unsigned char> alpha{0, 128};
    std::vector<unsigned char> indices;
    std::vector<double> rgba;
    for (int i = 0; i < w * h; ++i)
    {
        const auto e = static_cast<unsigned char>((i * 3) % 4);
        indices.push_back(e);
        rgba.insert(rgba.end(), {static_cast<double>(palette[e].red), static_cast<double>(palette[e].green),
                                 static_cast<double>(palette[e].blue), e < alpha.size() ? alpha[e] : 255.0});
    }
    REQUIRE(write_png(dir / "palette.png", w, h, PNG_COLOR_TYPE_PALETTE, 8, indices, palette, alpha));
    check_all_channels(dir / "palette.png", rgba, 4, 255.0, w, h);
    // Interlaced (Adam7): the same pixels.
    const auto rgb = pattern(w, h, 3, 255, 4);
    REQUIRE(write_png(dir / "interlaced.png", w, h, PNG_COLOR_TYPE_RGB, 8, bytes_of(rgb), {}, {}, true));
    check_all_channels(dir / "interlaced.png", rgb, 3, 255.0, w, h);
    // The format comes from the bytes: a PNG named .jpg reads as PNG.
    fs::copy_file(dir / "interlaced.png", dir / "really_png.jpg");
    CHECK(values(read_image(dir / "really_png.jpg")) == expected(rgb, 3, 255.0, 3));
}

TEST_CASE("read_image: JPEG files within the codec's bound")
{
    // Images of whole 8x8 blocks of one colour, at quality 100 (every quantisation step 1)
    // without chroma subsampling: a constant block has only a DC coefficient, 8 (v - 128) for
    // level v, which libjpeg's integer DCT keeps exact at step 1, so a gray or CMYK file (no
    // colour conversion) decodes to the values written: tolerance half a level, i.e. exact.
    // An RGB file goes through YCbCr: Y, Cb and Cr are each rounded to an integer (0.5) and the
    // inverse rounds R, G and B again, so R = Y + 1.402 Cr' is off by at most 0.5 + 1.402 * 0.5
    // + 0.5, B = Y + 1.772 Cb' by 0.5 + 0.886 + 0.5 = 1.886 levels: tolerance 2 levels.
    test_support::scratch_folder dir("xgrad_jpeg_");
    const int w = 16, h = 8; // two blocks side by side
    const auto block_image = [&](const std::vector<std::vector<double>>& colours) {
        std::vector<double> s;
        for (int r = 0; r < h; ++r)
            for (int q = 0; q < w; ++q)
                for (double v : colours[static_cast<std::size_t>(q / 8)])
                    s.push_back(v);
        return s;
    };
    const auto check_close = [](const std::vector<float>& got, const std::vector<float>& want, double levels) {
        REQUIRE(got.size() == want.size());
        for (std::size_t i = 0; i < got.size(); ++i)
        {
            CAPTURE(i);
            CHECK(std::abs(static_cast<double>(got[i]) - want[i]) <= levels / 255.0 + 1e-6);
        }
    };

    const auto gray = block_image({{37}, {200}});
    REQUIRE(write_jpeg(dir / "gray.jpg", w, h, 1, bytes_of(gray)));
    for (const int channels : {1, 3, 4})
    {
        image_options o;
        o.channels = channels;
        check_close(values(read_image(dir / "gray.jpg", o)), expected(gray, 1, 255.0, channels), 0.5);
    }
    const auto rgb = block_image({{250, 30, 90}, {12, 180, 240}});
    REQUIRE(write_jpeg(dir / "rgb.jpeg", w, h, 3, bytes_of(rgb)));
    check_close(values(read_image(dir / "rgb.jpeg")), expected(rgb, 3, 255.0, 3), 2.0);
    // Progressive: the same coefficients in several scans, so the same bound.
    REQUIRE(write_jpeg(dir / "progressive.jpg", w, h, 3, bytes_of(rgb), 100, image_test::progression::simple));
    check_close(values(read_image(dir / "progressive.jpg")), expected(rgb, 3, 255.0, 3), 2.0);
    // Gray from RGB: the luma of values each within 2 levels is within 2 levels.
    image_options one;
    one.channels = 1;
    check_close(values(read_image(dir / "rgb.jpeg", one)), expected(rgb, 3, 255.0, 1), 2.0);

    // CMYK, taken as Adobe's inverted samples, as PIL does: R = C K / 255 of the stored values,
    // rounded to a level.
    const std::vector<std::vector<double>> cmyk{{255, 128, 0, 200}, {40, 90, 250, 255}};
    REQUIRE(write_jpeg(dir / "cmyk.jpg", w, h, 4, bytes_of(block_image(cmyk))));
    std::vector<std::vector<double>> as_rgb;
    for (const auto& c : cmyk)
        as_rgb.push_back({std::round(c[0] * c[3] / 255), std::round(c[1] * c[3] / 255), std::round(c[2] * c[3] / 255)});
    check_close(values(read_image(dir / "cmyk.jpg")), expected(block_image(as_rgb), 3, 255.0, 3), 0.5);
}

TEST_CASE("read_image: a truncated, corrupt, empty or non-image file is an error naming it")
{
    test_support::scratch_folder dir("xgrad_bad_images_");
    const int w = 24, h = 24;
    const auto noise = pattern(w, h, 3, 255, 9);
    REQUIRE(write_png(dir / "good.png", w, h, PNG_COLOR_TYPE_RGB, 8, bytes_of(noise)));
    REQUIRE(write_jpeg(dir / "good.jpg", w, h, 3, bytes_of(noise), 90));
    const auto png_size = fs::file_size(dir / "good.png"), jpeg_size = fs::file_size(dir / "good.jpg");

    image_test::write_prefix(dir / "good.png", dir / "cut.png", png_size / 2);
    const std::string cut_png = (dir / "cut.png").string();
    CHECK_ERROR(read_image(cut_png), data_error, cut_png.c_str(), ": PNG: ", "truncated");
    // Cut after the pixels, before the end chunk: still truncated.
    image_test::write_prefix(dir / "good.png", dir / "no_end.png", png_size - 6);
    CHECK_ERROR(read_image(dir / "no_end.png"), data_error, "no_end.png: PNG: ", "truncated");
    // Only the signature and part of the header.
    image_test::write_prefix(dir / "good.png", dir / "header.png", 12);
    CHECK_ERROR(read_image(dir / "header.png"), data_error, "header.png: PNG: ");
    // A flipped bit in the header chunk's checksum (bytes 29 to 32: signature 8, length 4, type
    // 4, data 13), then one in the compressed pixels: libpng's messages name the chunk.
    std::string bytes = image_test::read_bytes(dir / "good.png");
    bytes[30] = static_cast<char>(bytes[30] ^ 0x10);
    std::ofstream(dir / "crc.png", std::ios::binary) << bytes;
    CHECK_ERROR(read_image(dir / "crc.png"), data_error, "crc.png: PNG: IHDR: CRC error");
    bytes = image_test::read_bytes(dir / "good.png");
    const auto idat = bytes.find("IDAT");
    REQUIRE(idat != std::string::npos);
    bytes[idat + 10] = static_cast<char>(bytes[idat + 10] ^ 0x55);
    std::ofstream(dir / "corrupt.png", std::ios::binary) << bytes;
    CHECK_ERROR(read_image(dir / "corrupt.png"), data_error, "corrupt.png: PNG: IDAT: ");

    image_test::write_prefix(dir / "good.jpg", dir / "cut.jpg", jpeg_size / 2);
    const std::string cut_jpg = (dir / "cut.jpg").string();
    // libjpeg's own warning, which it would have answered with gray pixels.
    CHECK_ERROR(read_image(cut_jpg), data_error, cut_jpg.c_str(), ": JPEG: ", "Premature end of JPEG file");
    // A valid progressive file of 568 scans, each a pass over the image: refused past 500.
    REQUIRE(write_jpeg(dir / "scans.jpg", w, h, 3, bytes_of(noise), 90, image_test::progression::many_scans));
    CHECK_ERROR(read_image(dir / "scans.jpg"), data_error, "scans.jpg: JPEG: more than 500 scans");
    image_test::write_prefix(dir / "good.jpg", dir / "header.jpg", 4);
    CHECK_ERROR(read_image(dir / "header.jpg"), data_error, "header.jpg: JPEG: ");

    std::ofstream(dir / "text.png") << "not an image at all";
    const std::string text = (dir / "text.png").string();
    CHECK_ERROR(read_image(text), data_error, text.c_str(), "not a PNG or JPEG image", "110 111 116 32");
    std::ofstream(dir / "empty.jpg").flush();
    CHECK_ERROR(read_image(dir / "empty.jpg"), data_error, "empty.jpg: not a PNG or JPEG image", "empty");
    CHECK_ERROR(read_image(dir / "missing.png"), data_error, "missing.png");
    CHECK_ERROR(read_image(dir.path), data_error, "not a regular file");

    // Too many pixels: refused from the header, before the pixels are allocated.
    image_options small;
    small.max_pixels = 575;
    CHECK_ERROR(read_image(dir / "good.png", small), data_error, "good.png: PNG: ", "24x24, 576 pixels",
                "more than the 575");
    CHECK_ERROR(read_image(dir / "good.jpg", small), data_error, "good.jpg: JPEG: ", "576 pixels");
    small.max_pixels = 576;
    CHECK(read_image(dir / "good.png", small).shape() == shape_type{3, 24, 24});
    // A file far larger than any image of max_pixels pixels is refused before it is read.
    small.max_pixels = 1;
    std::ofstream(dir / "huge.png", std::ios::binary) << std::string((64u << 20) + 10, 'x');
    CHECK_ERROR(read_image(dir / "huge.png", small), data_error, "huge.png: is 67108874 bytes");
    fs::remove(dir / "huge.png");

    image_options bad;
    bad.channels = 2;
    CHECK_ERROR(read_image(dir / "good.png", bad), xgrad::invalid_argument, "read_image", "channels", "2");
    bad.channels = 3;
    bad.max_pixels = 0;
    CHECK_ERROR(read_image(dir / "good.png", bad), xgrad::invalid_argument, "read_image", "max_pixels");
}
