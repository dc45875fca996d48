// nn::linear: checks its options once, registers its parameters, and calls one GEMM op.
#include "xgrad/nn/linear.hpp"

#include <string>

#include "layer_checks.hpp"
#include "xgrad/nn/init.hpp"
#include "xgrad/ops/elementwise.hpp"
#include "xgrad/ops/matmul.hpp"
#include "xgrad/ops/shape.hpp"

namespace xgrad::nn
{
    using namespace detail;

    linear::linear(const options_type& options, generator& gen) : m_options(options)
    {
        if (options.in_features < 1 || options.out_features < 1)
            fail("in_features and out_features must be at least 1, got " + std::to_string(options.in_features) +
                 " and " + std::to_string(options.out_features));
        if (!is_floating(options.dtype))
            fail("dtype must be floating point, got " + std::string(name(options.dtype)));
        if (options.compute_dtype && !is_floating(*options.compute_dtype))
            fail("compute_dtype must be floating point, got " + std::string(name(*options.compute_dtype)));
        register_parameter("weight", zeros({options.out_features, options.in_features}, options.dtype));
        if (options.bias)
            register_parameter("bias", zeros({options.out_features}, options.dtype));
        reset_parameters(gen);
    }

    void linear::reset_parameters(generator& gen)
    {
        const shape_type wshape{m_options.out_features, m_options.in_features};
        set_parameter("weight", init::initialize(m_options.weight_init, wshape, gen, m_options.dtype));
        if (m_options.bias)
            set_parameter("bias",
                          init::fan_in_uniform({m_options.out_features}, m_options.in_features, gen, m_options.dtype));
    }

    tensor linear::forward(const tensor& x)
    {
        if (!x.defined() || x.dim() < 1 || x.size(-1) != m_options.in_features)
            fail("expected an input of shape [..., " + std::to_string(m_options.in_features) + "], got " +
                 (x.defined() ? shape_to_string(x.shape()) : std::string("an undefined tensor")));
        // matmul reads the transposed weight in place (no copy); the bias joins in the GEMM.
        const auto& cdt = m_options.compute_dtype;
        const tensor xc = in_compute_dtype(x, cdt), wt = in_compute_dtype(parameter("weight"), cdt).transpose(0, 1);
        const tensor b = m_options.bias ? in_compute_dtype(parameter("bias"), cdt) : tensor();
        if (m_options.bias && x.dim() >= 2)
            return matmul_add(xc, wt, b);
        tensor y = matmul(xc, wt);
        return m_options.bias ? y + b : y;
    }

    std::string linear::describe() const
    {
        return "linear(" + std::to_string(m_options.in_features) + ", " + std::to_string(m_options.out_features) +
               ", bias=" + (m_options.bias ? "true" : "false") +
               (m_options.compute_dtype ? ", compute_dtype=" + std::string(name(*m_options.compute_dtype)) : "") + ")";
    }
}
