#pragma once
// Writing small PNG and JPEG files for the image tests (test_data_image_*.cpp), with libpng and
// libjpeg-turbo, the libraries the reader uses (a different writer would be better still; none
// is installed, and the values checked come from the samples written, not from the reader).
#include <cstdio> // jpeglib.h needs FILE and size_t declared first

#include <jpeglib.h>
#include <png.h>

#include <csetjmp>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

namespace image_test
{
    /// A PNG file of interleaved samples (bit_depth 16: two bytes each, big-endian, as given).
    /// color_type is PNG_COLOR_TYPE_*; a palette image takes `palette` (RGB triples) and, when
    /// not empty, `alpha` as its tRNS chunk. Returns false if libpng fails.
    inline bool write_png(const std::filesystem::path& path, int width, int height, int color_type, int bit_depth,
                          const std::vector<unsigned char>& samples, const std::vector<png_color>& palette = {},
                          const std::vector<unsigned char>& alpha = {}, bool interlaced = false)
    {
        std::FILE* file = std::fopen(path.c_str(), "wb");
        if (!file)
            return false;
        png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, nullptr, nullptr, nullptr);
        png_infop info = png ? png_create_info_struct(png) : nullptr;
        bool ok = png && info;
        // Only plain data lives between setjmp and a longjmp from libpng.
        if (ok && setjmp(png_jmpbuf(png)) == 0)
        {
            png_init_io(png, file);
            png_set_IHDR(png, info, static_cast<png_uint_32>(width), static_cast<png_uint_32>(height), bit_depth,
                         color_type, interlaced ? PNG_INTERLACE_ADAM7 : PNG_INTERLACE_NONE,
                         PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
            if (color_type == PNG_COLOR_TYPE_PALETTE)
                png_set_PLTE(png, info, palette.data(), static_cast<int>(palette.size()));
            if (!alpha.empty())
                png_set_tRNS(png, info, alpha.data(), static_cast<int>(alpha.size()), nullptr);
            png_write_info(png, info);
            if (bit_depth < 8)
                png_set_packing(png); // samples are given one a byte
            const std::size_t row = samples.size() / static_cast<std::size_t>(height);
            const int passes = png_set_interlace_handling(png);
            for (int pass = 0; pass < passes; ++pass)
                for (int r = 0; r < height; ++r)
                    png_write_row(png, samples.data() + static_cast<std::size_t>(r) * row);
            png_write_end(png, nullptr);
        }
        else
            ok = false;
        png_destroy_write_struct(&png, &info);
        std::fclose(file);
        return ok;
    }

    enum class progression
    {
        baseline,
        simple,    // libjpeg's default progressive script (about ten scans)
        many_scans // a valid script of a scan per band, component and bit: 1 + components * 63 * 3
    };

    /// A JPEG file of interleaved 8-bit samples: components 1 (gray), 3 (RGB) or 4 (CMYK),
    /// at `quality`, without chroma subsampling. Returns false if libjpeg fails.
    inline bool write_jpeg(const std::filesystem::path& path, int width, int height, int components,
                           const std::vector<unsigned char>& samples, int quality = 100,
                           progression scans = progression::baseline)
    {
        struct failure
        {
            jpeg_error_mgr manager;
            std::jmp_buf jump;
        };
        std::FILE* file = std::fopen(path.c_str(), "wb");
        if (!file)
            return false;
        jpeg_compress_struct info{};
        failure err{};
        info.err = jpeg_std_error(&err.manager);
        err.manager.error_exit = [](j_common_ptr c) { std::longjmp(reinterpret_cast<failure*>(c->err)->jump, 1); };
        bool ok = false;
        std::vector<jpeg_scan_info> script;
        if (scans == progression::many_scans)
        {
            // The DC coefficients of every component at once, then each AC coefficient of each
            // component alone: its top bits from bit 2, then bits 1 and 0 as refinements.
            jpeg_scan_info dc{components, {0, 1, 2, 3}, 0, 0, 0, 0};
            script.push_back(dc);
            for (int c = 0; c < components; ++c)
                for (int k = 1; k < 64; ++k)
                    for (const auto& [ah, al] : {std::pair<int, int>{0, 2}, {2, 1}, {1, 0}})
                        script.push_back(jpeg_scan_info{1, {c, 0, 0, 0}, k, k, ah, al});
        }
        if (setjmp(err.jump) == 0)
        {
            jpeg_create_compress(&info);
            jpeg_stdio_dest(&info, file);
            info.image_width = static_cast<JDIMENSION>(width);
            info.image_height = static_cast<JDIMENSION>(height);
            info.input_components = components;
            info.in_color_space = components == 1 ? JCS_GRAYSCALE : components == 3 ? JCS_RGB : JCS_CMYK;
            jpeg_set_defaults(&info);
            jpeg_set_quality(&info, quality, TRUE);
            for (int c = 0; c < info.num_components; ++c)
                info.comp_info[c].h_samp_factor = info.comp_info[c].v_samp_factor = 1;
            if (scans == progression::simple)
                jpeg_simple_progression(&info);
            if (scans == progression::many_scans)
            {
                info.scan_info = script.data();
                info.num_scans = static_cast<int>(script.size());
            }
            jpeg_start_compress(&info, TRUE);
            while (info.next_scanline < info.image_height)
            {
                auto* row = const_cast<JSAMPLE*>(samples.data() + static_cast<std::size_t>(info.next_scanline) *
                                                                      static_cast<std::size_t>(width * components));
                jpeg_write_scanlines(&info, &row, 1);
            }
            jpeg_finish_compress(&info);
            ok = true;
        }
        jpeg_destroy_compress(&info);
        std::fclose(file);
        return ok;
    }

    inline std::string read_bytes(const std::filesystem::path& path)
    {
        std::ifstream in(path, std::ios::binary);
        return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
    }

    /// Writes the first `keep` bytes of `from` to `to`.
    inline void write_prefix(const std::filesystem::path& from, const std::filesystem::path& to, std::size_t keep)
    {
        const std::string bytes = read_bytes(from);
        std::ofstream(to, std::ios::binary) << bytes.substr(0, keep);
    }
}
