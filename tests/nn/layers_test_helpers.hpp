#pragma once
// Shared by the layer tests (tests/nn/test_layers_module.cpp and tests/nn/test_layers_batch_norm.cpp,
// one ctest executable test_layers): elementwise comparison with a relative tolerance, and
// the names of a module's named parameters or buffers.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <string>
#include <vector>

#include "xgrad/layers.hpp"
#include "xgrad/xgrad.hpp"

namespace layers_test
{
    using xgrad::tensor;
    using xgrad::to_vector;

    /// Elementwise |got - want| <= tol * max(1, |want|).
    inline void check_close(const std::vector<double>& got, const std::vector<double>& want, double tol)
    {
        REQUIRE(got.size() == want.size());
        double worst = 0;
        for (std::size_t i = 0; i < got.size(); ++i)
            worst = std::max(worst, std::abs(got[i] - want[i]) / std::max(1.0, std::abs(want[i])));
        CHECK_MESSAGE(worst <= tol, "worst relative difference " << worst << " > " << tol);
    }
    inline void check_close(const tensor& got, const std::vector<double>& want, double tol)
    {
        check_close(to_vector(got), want, tol);
    }
    inline void check_close(const tensor& got, const tensor& want, double tol)
    {
        REQUIRE(got.shape() == want.shape());
        check_close(to_vector(got), to_vector(want), tol);
    }

    /// The names of named parameters or buffers, in their order.
    inline std::vector<std::string> names_of(const xgrad::nn::module::named_tensors_type& named)
    {
        std::vector<std::string> out;
        for (const auto& [n, t] : named)
            out.push_back(n);
        return out;
    }
}
