// Writes the seed corpus of the fuzz targets: xgrad_fuzz_make_seeds <tests/fuzz/corpus>.
// The output is deterministic (fixed seeds), so rerunning it after a change of the input
// layouts rewrites the same files except where the layouts changed. Commit the result.
//
//   batch_norm, shape, conv_pool: each value of the first byte (the op selector of batch_norm
//     and conv_pool, the rank of shape) with a few sets of small attribute and
//     extent bytes (below the hostile range of fuzz_input, so each seed is a request that the
//     op accepts or rejects for an ordinary reason; the fuzzer finds the hostile values).
//   safetensors: real files from save_safetensors (each dtype, empty tensors, metadata) and
//     checkpoints from save_checkpoint of the target's model, without and with optimizer state.
//   idx: real IDX files from write_idx (ranks 1 and 3, plain and gzip), in the target's four
//     modes.
//   image: small PNG files of each colour type and depth (palette, 16-bit, interlaced) and
//     JPEG files (gray, RGB, CMYK), written by libpng and libjpeg, for each channel count.
#include <zlib.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "tests/train/data/image_test_helpers.hpp"
#include "xgrad/autograd.hpp"
#include "xgrad/data/idx.hpp"
#include "xgrad/factories.hpp"
#include "xgrad/io/safetensors.hpp"
#include "xgrad/nn/batch_norm.hpp"
#include "xgrad/nn/conv.hpp"
#include "xgrad/nn/sequential.hpp"
#include "xgrad/ops/reduce.hpp"
#include "xgrad/optim/optimizer.hpp"

namespace
{
    namespace fs = std::filesystem;
    using bytes = std::vector<std::uint8_t>;

    void write(const fs::path& dir, const std::string& name, const bytes& b)
    {
        fs::create_directories(dir);
        std::ofstream f(dir / name, std::ios::binary | std::ios::trunc);
        f.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
        if (!f)
            throw std::runtime_error("cannot write " + (dir / name).string());
    }

    bytes read(const fs::path& p)
    {
        std::ifstream f(p, std::ios::binary);
        return bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    }

    /// Byte-coded requests: the op selector, then bytes below 200 (small values everywhere).
    void byte_seeds(const fs::path& dir, unsigned ops, unsigned per_op, unsigned length)
    {
        xgrad::generator gen(7);
        for (unsigned op = 0; op < ops; ++op)
            for (unsigned k = 0; k < per_op; ++k)
            {
                bytes b{static_cast<std::uint8_t>(op)};
                for (unsigned i = 1; i < length; ++i)
                    b.push_back(static_cast<std::uint8_t>(gen.below(k == 0 ? 4 : 200)));
                char name[32];
                std::snprintf(name, sizeof name, "op%02u_%u", op, k);
                write(dir, name, b);
            }
    }

    /// `head` followed by `rest` (copied into a buffer of the final size: g++ 12 warns,
    /// wrongly, about inserting into a vector made from an initializer list).
    bytes concat(const bytes& head, const bytes& rest)
    {
        bytes b(head.size() + rest.size());
        std::copy(head.begin(), head.end(), b.begin());
        std::copy(rest.begin(), rest.end(), b.begin() + static_cast<std::ptrdiff_t>(head.size()));
        return b;
    }

    bytes prefixed(std::uint8_t first, const bytes& rest) { return concat(bytes(1, first), rest); }

    void safetensors_seeds(const fs::path& dir, const fs::path& tmp)
    {
        xgrad::generator gen(3);
        const fs::path file = tmp / "seed.safetensors";
        xgrad::io::tensor_map tensors{
            {"f32", xgrad::randn({2, 3}, gen)},
            {"f64", xgrad::randn({3}, gen, xgrad::dtype::float64)},
            {"f16", xgrad::randn({2, 2}, gen, xgrad::dtype::float16)},
            {"bf16", xgrad::randn({1, 2, 1}, gen, xgrad::dtype::bfloat16)},
            {"i64", xgrad::zeros({2}, xgrad::dtype::int64)},
            {"empty", xgrad::zeros({0, 4})},
            {"scalar", xgrad::ones({})},
        };
        xgrad::io::save_safetensors(file, tensors, {{"note", "seed"}});
        write(dir, "tensors", prefixed(0, read(file)));
        xgrad::io::save_safetensors(file, {{"a", xgrad::ones({1})}});
        write(dir, "one_tensor", prefixed(0, read(file)));
        xgrad::io::save_safetensors(file, {});
        write(dir, "no_tensors", prefixed(0, read(file)));

        // Checkpoints of the target's model: selector 1 (no optimizer), 3 (sgd), 5 (adam).
        for (unsigned kind = 0; kind < 3; ++kind)
        {
            xgrad::generator g(1);
            xgrad::nn::sequential model;
            model.add("conv", std::make_shared<xgrad::nn::conv2d>(xgrad::nn::conv2d_options(1, 2, 3), g));
            model.add("bn", std::make_shared<xgrad::nn::batch_norm2d>(2));
            std::unique_ptr<xgrad::optim::optimizer> opt;
            if (kind == 1)
            {
                xgrad::optim::sgd_options o;
                o.momentum = 0.9;
                opt = std::make_unique<xgrad::optim::sgd>(model, o);
            }
            else if (kind == 2)
                opt = std::make_unique<xgrad::optim::adam>(model, xgrad::optim::adam_options{});
            if (opt)
            {
                // One step, so that the optimizer has state to save.
                xgrad::sum(model.forward(xgrad::randn({2, 1, 4, 4}, g))).backward();
                opt->step();
            }
            xgrad::io::save_checkpoint(file, model, opt.get(), 1 + kind, {{"seed", "yes"}});
            write(dir, "checkpoint_" + std::to_string(kind),
                  prefixed(static_cast<std::uint8_t>(1 + 2 * kind), read(file)));
        }
        fs::remove(file);
    }

    bytes gzip_bytes(const bytes& raw)
    {
        z_stream zs{};
        deflateInit2(&zs, Z_BEST_COMPRESSION, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY);
        bytes out(deflateBound(&zs, static_cast<uLong>(raw.size())) + 32);
        zs.next_in = const_cast<Bytef*>(raw.data());
        zs.avail_in = static_cast<uInt>(raw.size());
        zs.next_out = out.data();
        zs.avail_out = static_cast<uInt>(out.size());
        deflate(&zs, Z_FINISH);
        out.resize(zs.total_out);
        deflateEnd(&zs);
        return out;
    }

    void idx_seeds(const fs::path& dir, const fs::path& tmp)
    {
        const fs::path images = tmp / "seed-images.idx", labels = tmp / "seed-labels.idx";
        xgrad::data::idx_array im{{3, 2, 2}, bytes(12)};
        for (std::size_t i = 0; i < im.data.size(); ++i)
            im.data[i] = static_cast<std::uint8_t>(i * 20);
        const xgrad::data::idx_array lb{{3}, {0, 4, 9}};
        xgrad::data::write_idx(images, im);
        xgrad::data::write_idx(labels, lb);
        const bytes im_bytes = read(images), lb_bytes = read(labels);

        auto mode = [](std::uint8_t selector, std::uint8_t rank, const bytes& payload) {
            return concat(bytes{selector, rank}, payload);
        };
        write(dir, "plain_images", mode(0, 3, im_bytes));
        write(dir, "plain_labels", mode(0, 1, lb_bytes));
        write(dir, "plain_any_rank", mode(0, 0, lb_bytes));
        write(dir, "gzip_images", mode(1, 3, gzip_bytes(im_bytes)));
        write(dir, "gzip_labels", mode(1, 0, gzip_bytes(lb_bytes)));
        write(dir, "compressed_images", mode(2, 3, im_bytes));
        write(dir, "compressed_labels", mode(2, 1, lb_bytes));
        // Dataset: classes byte 9 (-> 10), limit 0, split = size of the images file.
        const bytes ds_head{3,
                            0,
                            9,
                            0,
                            static_cast<std::uint8_t>(im_bytes.size() & 0xff),
                            static_cast<std::uint8_t>(im_bytes.size() >> 8)};
        write(dir, "dataset", concat(concat(ds_head, im_bytes), lb_bytes));
        fs::remove(images);
        fs::remove(labels);
    }

    void image_seeds(const fs::path& dir, const fs::path& tmp)
    {
        const fs::path file = tmp / "seed-image";
        std::vector<unsigned char> samples(4 * 3 * 4 * 2);
        for (std::size_t i = 0; i < samples.size(); ++i)
            samples[i] = static_cast<unsigned char>(i * 29);
        struct png_kind
        {
            const char* name;
            int color_type, depth, channels;
            bool interlaced;
        };
        const std::vector<png_color> palette{{10, 20, 30}, {200, 100, 0}, {255, 255, 255}};
        const std::vector<unsigned char> indices{0, 1, 2, 1, 0, 2, 2, 1, 0, 0, 1, 2};
        std::uint8_t selector = 0;
        for (const png_kind k : {png_kind{"png_gray", PNG_COLOR_TYPE_GRAY, 8, 1, false},
                                 png_kind{"png_gray_alpha", PNG_COLOR_TYPE_GRAY_ALPHA, 8, 2, false},
                                 png_kind{"png_rgb_interlaced", PNG_COLOR_TYPE_RGB, 8, 3, true},
                                 png_kind{"png_rgba16", PNG_COLOR_TYPE_RGB_ALPHA, 16, 8, false},
                                 png_kind{"png_palette", PNG_COLOR_TYPE_PALETTE, 8, 1, false}})
        {
            const bool indexed = k.color_type == PNG_COLOR_TYPE_PALETTE;
            const std::vector<unsigned char> pixels =
                indexed ? indices : std::vector<unsigned char>(samples.begin(), samples.begin() + 4 * 3 * k.channels);
            if (!image_test::write_png(
                    file, 4, 3, k.color_type, k.depth, pixels, indexed ? palette : std::vector<png_color>{},
                    indexed ? std::vector<unsigned char>{0, 128} : std::vector<unsigned char>{}, k.interlaced))
                throw std::runtime_error("cannot write a PNG seed");
            write(dir, k.name, concat(bytes{selector++}, read(file)));
        }
        for (const int components : {1, 3, 4})
        {
            if (!image_test::write_jpeg(
                    file, 4, 3, components,
                    std::vector<unsigned char>(samples.begin(), samples.begin() + 4 * 3 * components), 90))
                throw std::runtime_error("cannot write a JPEG seed");
            write(dir, "jpeg_" + std::to_string(components), concat(bytes{selector++}, read(file)));
        }
        fs::remove(file);
    }
}

int main(int argc, char** argv)
{
    if (argc != 2)
    {
        std::fprintf(stderr, "usage: xgrad_fuzz_make_seeds <tests/fuzz/corpus>\n");
        return 2;
    }
    const fs::path root = argv[1];
    const fs::path tmp = fs::temp_directory_path();
    byte_seeds(root / "batch_norm", 11, 3, 96);
    byte_seeds(root / "shape", 9, 3, 64);
    byte_seeds(root / "conv_pool", 7, 3, 96);
    safetensors_seeds(root / "safetensors", tmp);
    idx_seeds(root / "idx", tmp);
    image_seeds(root / "image", tmp);
    std::printf("seeds written under %s\n", root.c_str());
    return 0;
}
