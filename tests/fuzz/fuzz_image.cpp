// Fuzz target: image files (xgrad/data/image_folder.hpp's read_image: libpng and libjpeg-turbo
// under xgrad's error handling).
//
// Input: a selector byte, then the file's bytes, written to "input.img" (the decoder is chosen
// by the bytes, not the name). By selector % 3 the image is asked for in 1, 3 or 4 channels;
// max_pixels is 2^18 (a 1 MiB float RGBA tensor), so a header announcing more is refused
// before the pixels are allocated, and a selector >= 0x80 appends 96 MiB of zeros (sparse): a
// file beyond what any image of max_pixels takes, refused before it is read.
// Expected outcomes: success and data::data_error. Checked on success: the tensor is float32
// [channels, H, W] with H * W <= max_pixels and every value in [0, 1].
#include <string>

#include "tests/fuzz/fuzz_input.hpp"
#include "tests/fuzz/fuzz_temp_file.hpp"
#include "xgrad/data/image_folder.hpp"

namespace
{
    using namespace xgrad;
    constexpr const char* target = "image";

    void run(fuzz::fuzz_input& in)
    {
        const std::uint8_t selector = in.byte();
        data::image_options options;
        options.channels = selector % 3 == 0 ? 1 : selector % 3 == 1 ? 3 : 4;
        options.max_pixels = std::int64_t{1} << 18;
        const std::uintmax_t zeros = selector >= 0x80 ? fuzz::big_file_zeros : 0;
        const std::vector<std::uint8_t> bytes = in.rest();
        const tensor t = data::read_image(fuzz::scratch().write("input.img", bytes.data(), bytes.size(), zeros),
                                          options);
        XGRAD_FUZZ_CHECK(target, t.dtype() == dtype::float32 && t.dim() == 3 && t.size(0) == options.channels,
                         "got " + shape_to_string(t.shape()) + " for " + std::to_string(options.channels) +
                             " channels");
        XGRAD_FUZZ_CHECK(target, t.size(1) * t.size(2) <= options.max_pixels,
                         "an image of " + shape_to_string(t.shape()) + " beyond max_pixels");
        const float* v = t.data<float>();
        for (std::int64_t i = 0; i < t.numel(); ++i)
            XGRAD_FUZZ_CHECK(target, v[i] >= 0.0f && v[i] <= 1.0f, "value " + std::to_string(v[i]) + " outside [0, 1]");
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
    return 0;
}
