#pragma once
// Transforms of one example's input, composable in a list, for a data_loader to apply on its
// background thread (train/src/data/transforms.cpp).
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
// image, a normalisation with another channel count).
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
}
