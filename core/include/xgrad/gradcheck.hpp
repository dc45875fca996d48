#pragma once
// Finite-difference gradient checks in float64 (core/src/gradcheck.cpp).
//
// gradcheck compares, element by element, the Jacobian that backward computes (one
// vector-Jacobian product per output element, with a unit vector) with the Jacobian from
// central differences, (f(x + eps e_j) - f(x - eps e_j)) / (2 eps). The truncation error of
// central differences is O(eps^2 f'''), the rounding error O(ulp(f) / eps); eps = 1e-6 balances
// them near 1e-10 relative for smooth functions of O(1) values, far inside the default
// tolerance |analytic - numeric| <= atol + rtol |numeric| with atol = 1e-5, rtol = 1e-3.
//
// gradgradcheck checks the second order: it gradchecks the function
// (x, v) -> grad(f(x), x, v, create_graph = true), i.e. the backward pass itself, for a
// random v. Together they check first and second derivatives of every op.
#include <functional>
#include <string>
#include <vector>

#include "xgrad/tensor.hpp"

namespace xgrad
{
    struct gradcheck_options
    {
        double eps = 1e-6;
        double atol = 1e-5;
        double rtol = 1e-3;
        /// Throw std::runtime_error with the report instead of returning a failed result.
        bool throw_on_failure = false;
        /// Seed for the random grad_outputs of gradgradcheck.
        std::uint64_t seed = 0;
    };

    struct gradcheck_result
    {
        bool ok = true;
        /// On failure: which input, output and elements, analytic and numeric values.
        std::string message;
        std::size_t input = 0, output = 0;
        std::int64_t input_element = -1, output_element = -1; // row-major flat indices
        double analytic = 0, numeric = 0;
        explicit operator bool() const noexcept { return ok; }
    };

    using gradcheck_function = std::function<std::vector<tensor>(const std::vector<tensor>&)>;

    /// Inputs must be float64; the checked ones are those with requires_grad. f must be a pure
    /// function of its inputs (deterministic).
    gradcheck_result gradcheck(const gradcheck_function& f, const std::vector<tensor>& inputs,
                               const gradcheck_options& options = {});
    gradcheck_result gradgradcheck(const gradcheck_function& f, const std::vector<tensor>& inputs,
                                   const gradcheck_options& options = {});
}
