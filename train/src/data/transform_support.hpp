#pragma once
// What the transforms (transforms.cpp, transforms_geometry.cpp, transforms_color.cpp) and the
// image decoder share: argument errors, the [C, H, W] input check, typed access to a buffer,
// and the luma of an RGB pixel.
#include <cstdint>
#include <cstring>
#include <string>

#include "xgrad/errors.hpp"
#include "xgrad/factories.hpp"
#include "xgrad/tensor.hpp"

namespace xgrad::data::detail
{
    [[noreturn]] inline void fail(const char* who, const std::string& what)
    {
        throw xgrad::invalid_argument(std::string(who) + ": " + what);
    }

    /// The input as a contiguous CPU tensor of its compute dtype (float64 stays, any other
    /// floating dtype becomes float32), checked to be [C, H, W].
    inline tensor chw(const tensor& x, const char* who)
    {
        if (!x.defined() || x.dim() != 3 || !is_floating(x.dtype()) || x.device() != cpu_device)
            fail(who, "expected a floating [C, H, W] CPU tensor, got " +
                          (x.defined() ? shape_to_string(x.shape()) + " " + std::string(name(x.dtype())) + " on " +
                                             to_string(x.device())
                                       : std::string("an undefined tensor")));
        const dtype dt = x.dtype() == dtype::float64 ? dtype::float64 : dtype::float32;
        return x.to(dt).contiguous();
    }

    /// Calls f(pointer) with the tensor's data as float or double.
    template <class F>
    void with_data(const tensor& t, F&& f)
    {
        if (t.dtype() == dtype::float64)
            f(t.data<double>());
        else
            f(t.data<float>());
    }

    /// A fresh copy of a contiguous tensor, to write into (tensor data is never written in place).
    inline tensor copy_of(const tensor& t)
    {
        tensor out = xgrad::empty(t.shape(), t.dtype());
        std::memcpy(out.data_ptr(), t.data_ptr(), static_cast<std::size_t>(t.numel()) * itemsize(t.dtype()));
        return out;
    }

    inline void check_probability(const char* who, double p)
    {
        if (!(p >= 0.0 && p <= 1.0))
            fail(who, "p must be in [0, 1], got " + std::to_string(p));
    }

    /// ITU-R 601-2 luma, the weights of PIL's convert("L") (torchvision's tensor functions use
    /// 0.2989 for red, the same weight cut to four digits).
    inline double luma(double r, double g, double b) noexcept { return 0.299 * r + 0.587 * g + 0.114 * b; }
}
