#pragma once
// Transforms of one example's input, composable in a list, for a data_loader to apply on its
// background thread, as torchvision's (train/src/data/transforms.cpp: compose, normalize, the
// random crop, flip and erasing; transforms_geometry.cpp: resizing and cropping to a size;
// transforms_color.cpp: colour jitter and grayscale).
//
// A transform takes a floating [C, H, W] CPU tensor and a generator and returns the
// transformed tensor (float32, or float64 for a float64 input; contiguous). The loader gives
// every example its own generator, seeded from (loader seed, epoch, example index) alone, so the
// random choices of an example do not depend on the thread, the batch it lands in, prefetching
// or the examples before it: a run is reproducible, and a resumed run draws what the
// uninterrupted one drew. Random transforms draw from the generator even when they leave the
// input as it is, so the draws of later transforms do not depend on earlier outcomes.
//
// Errors: the factories throw xgrad::invalid_argument naming the transform and the value for
// bad arguments; a transform throws xgrad::invalid_argument naming itself and the shape for an
// input that is not [C, H, W] floating (or does not fit it: a crop larger than the padded
// image, a normalisation with another channel count, a colour transform of other than 1 or 3
// channels).
//
// Colour transforms expect pixel values in [0, 1] (an image_folder's images; a loader over an
// image_dataset hands its transforms byte / 255 and normalises after them) and clamp to it, as
// torchvision's do on float images; put them before a normalize.
#include <cstdint>
#include <functional>
#include <vector>

#include "xgrad/factories.hpp"
#include "xgrad/tensor.hpp"

namespace xgrad::data
{
    using transform = std::function<tensor(const tensor& input, generator& gen)>;

    /// Applies the transforms in order (an empty list is the identity).
    transform compose(std::vector<transform> transforms);

    /// (x - mean[c]) / std[c] per channel; one value each applies to every channel. std > 0,
    /// all finite.
    transform normalize(std::vector<double> mean, std::vector<double> std);

    /// Pads every side by `padding` with `fill`, then takes a size[0] x size[1] window at a
    /// random position (every position equally likely), as torchvision's RandomCrop(size,
    /// padding). padding >= 0, sizes >= 1.
    transform random_crop(std::int64_t height, std::int64_t width, std::int64_t padding = 0, double fill = 0.0);

    /// Mirrors the columns (the W axis) with probability p in [0, 1].
    transform random_horizontal_flip(double p = 0.5);

    /// With probability p, sets a random rectangle to `value` (Zhong et al., as torchvision's
    /// RandomErasing): its area a uniform fraction in [scale_lo, scale_hi] of the image's, its
    /// aspect ratio log-uniform in [ratio_lo, ratio_hi]; up to 10 draws for one that fits, else
    /// nothing is erased. 0 < scale_lo <= scale_hi <= 1, 0 < ratio_lo <= ratio_hi.
    transform random_erasing(double p = 0.5, double scale_lo = 0.02, double scale_hi = 0.33, double ratio_lo = 0.3,
                             double ratio_hi = 3.3, double value = 0.0);

    // Geometry to a size (transforms_geometry.cpp). Interpolation is bilinear, as torchvision's
    // default, on pixel centres (align_corners false). With antialias (the default, as
    // torchvision's since 0.17 for tensors, and PIL's resize, which ImageFolder's images go
    // through), a downscale averages over the source pixels under a triangle filter stretched
    // by the scale factor (PyTorch's antialiased interpolate, from PIL); upscaling is the same
    // either way. Without it each output pixel mixes only the 2x2 nearest source pixels, as
    // interpolate(mode="bilinear", antialias=False). Computed in float64.

    /// Resizes to height x width (torchvision's Resize((height, width))). Sizes >= 1.
    transform resize(std::int64_t height, std::int64_t width, bool antialias = true);

    /// Resizes so that the shorter side is `size`, the longer int(size * long / short) (rounded
    /// down), keeping the aspect ratio (torchvision's Resize(size, max_size)); with max_size > 0,
    /// if the longer side would exceed it, the longer side becomes max_size and the shorter
    /// int(max_size * short / long) instead. size >= 1; max_size 0 or > size. An image whose
    /// size would not change is returned as it is.
    transform resize_shorter_side(std::int64_t size, std::int64_t max_size = 0, bool antialias = true);

    /// The centred height x width window (torchvision's CenterCrop): the offset of an odd
    /// difference rounds half to even, as Python's round; a window larger than the image pads
    /// it with 0 (the extra row or column of an odd padding at the bottom, right). Sizes >= 1.
    transform center_crop(std::int64_t height, std::int64_t width);

    /// A random window resized to height x width (torchvision's RandomResizedCrop): up to 10
    /// draws of an area fraction uniform in [scale_lo, scale_hi] and an aspect ratio (width /
    /// height) log-uniform in [ratio_lo, ratio_hi], giving w = round(sqrt(area * ratio)), h =
    /// round(sqrt(area / ratio)) (half to even); the first that fits the image is placed
    /// uniformly at random. If none fits, the central crop of the whole image clamped to the
    /// ratio range. 0 < scale_lo <= scale_hi, 0 < ratio_lo <= ratio_hi (finite), sizes >= 1.
    transform random_resized_crop(std::int64_t height, std::int64_t width, double scale_lo = 0.08,
                                  double scale_hi = 1.0, double ratio_lo = 3.0 / 4.0, double ratio_hi = 4.0 / 3.0,
                                  bool antialias = true);

    // Colour (transforms_color.cpp), on 1 or 3 channels in [0, 1]. The gray of an RGB pixel is
    // its ITU-R 601-2 luma 0.299 R + 0.587 G + 0.114 B, as PIL's (torchvision's tensor
    // functions use 0.2989 for red).

    /// torchvision's ColorJitter: each factor uniform in [max(0, 1 - v), 1 + v] for brightness,
    /// contrast and saturation (v >= 0; 0 leaves that adjustment out), the hue shift uniform in
    /// [-hue, hue] (hue in [0, 0.5]), applied in a random order (a random permutation of the
    /// four, drawn first, then the factors of those enabled, in the order brightness, contrast,
    /// saturation, hue):
    ///   brightness f: clamp(f x, 0, 1);
    ///   contrast f: clamp(f x + (1 - f) m, 0, 1), m the mean of the image's gray;
    ///   saturation f: clamp(f x + (1 - f) gray, 0, 1), per pixel (a 1-channel image is left);
    ///   hue h: to HSV, H + h modulo 1, back to RGB, as torchvision's tensor functions (a
    ///   1-channel image is left).
    transform color_jitter(double brightness = 0.0, double contrast = 0.0, double saturation = 0.0, double hue = 0.0);

    /// The gray of each pixel in num_output_channels (1 or 3) channels (torchvision's
    /// Grayscale); a 1-channel input is its own gray.
    transform grayscale(std::int64_t num_output_channels = 1);

    /// With probability p in [0, 1], the gray of the image in as many channels as it has
    /// (torchvision's RandomGrayscale).
    transform random_grayscale(double p = 0.1);
}
