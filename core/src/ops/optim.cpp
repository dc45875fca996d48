// The optimizer updates (xgrad/ops/optim.hpp): the checks, then one kernel call. The kernels
// trust their operands (the kernel contract), so everything about them is checked here.
#include "xgrad/ops/optim.hpp"

#include <string>
#include <utility>
#include <vector>

#include "../detail.hpp"
#include "core/src/profiler/record.hpp"
#include "xgrad/errors.hpp"

namespace xgrad
{
    namespace
    {
        using named_tensor = std::pair<const char*, tensor>;

        [[noreturn]] void fail(const char* op, const std::string& what)
        {
            throw xgrad::invalid_argument(std::string(op) + ": " + what);
        }

        /// The checks of the module comment. outputs and inputs are (name, tensor) pairs, the
        /// first input the parameter, each output named after its input ("param_out").
        void check_step(const char* op, const std::vector<named_tensor>& outputs,
                        const std::vector<named_tensor>& inputs)
        {
            const tensor& param = inputs.front().second;
            if (!param.defined())
                fail(op, "param is undefined");
            if (!is_floating(param.dtype()))
                fail(op, "param must be floating point, got " + std::string(name(param.dtype())));
            const auto check_one = [&](const named_tensor& nt) {
                const auto& [what, t] = nt;
                if (!t.defined())
                    fail(op, std::string(what) + " is undefined");
                if (t.shape() != param.shape() || t.dtype() != param.dtype() || t.device() != param.device())
                    fail(op, std::string(what) + " is " + shape_to_string(t.shape()) + " " +
                                 std::string(name(t.dtype())) + " on " + to_string(t.device()) + ", param " +
                                 shape_to_string(param.shape()) + " " + std::string(name(param.dtype())) + " on " +
                                 to_string(param.device()));
                if (!t.is_contiguous())
                    fail(op, std::string(what) + " must be contiguous");
            };
            for (const auto& nt : outputs)
                check_one(nt);
            for (const auto& nt : inputs)
                check_one(nt);
            // An output shares storage only with its own input (the same elements).
            for (std::size_t o = 0; o < outputs.size(); ++o)
            {
                const tensor& out = outputs[o].second;
                const auto shares = [&](const tensor& t) { return t.impl()->m_storage == out.impl()->m_storage; };
                for (std::size_t k = 0; k < outputs.size(); ++k)
                    if (k != o && shares(outputs[k].second))
                        fail(op, std::string(outputs[o].first) + " and " + outputs[k].first + " share storage");
                for (std::size_t i = 0; i < inputs.size(); ++i)
                {
                    const tensor& in = inputs[i].second;
                    // "param" is param_out's own input, "momentum" momentum_out's, ...; both are
                    // contiguous with one shape, so the same first element is the same elements.
                    const bool own = std::string(inputs[i].first) + "_out" == outputs[o].first &&
                                     in.data_ptr() == out.data_ptr();
                    if (shares(in) && !own)
                        fail(op, std::string(outputs[o].first) + " shares storage with " + inputs[i].first +
                                     " (only an update of a tensor in place, output and input the same elements, "
                                     "may)");
                }
            }
        }

        /// The defined ones of `ts`.
        std::vector<named_tensor> given(std::vector<named_tensor> ts)
        {
            std::vector<named_tensor> out;
            for (auto& t : ts)
                if (t.second.defined())
                    out.push_back(std::move(t));
            return out;
        }

        const void* ptr_or_null(const tensor& t) { return t.defined() ? t.data_ptr() : nullptr; }
    }

    void sgd_step(const tensor& param_out, const tensor& momentum_out, const tensor& param, const tensor& grad,
                  const tensor& momentum, const sgd_step_params& p)
    {
        XGRAD_PROFILE_OP("sgd_step");
        constexpr const char* op = "sgd_step";
        const bool keeps_buffer = p.momentum != 0.0;
        if (keeps_buffer && !momentum_out.defined())
            fail(op, "momentum is " + std::to_string(p.momentum) + ": momentum_out is needed");
        if (!keeps_buffer && (momentum_out.defined() || momentum.defined()))
            fail(op, "momentum is 0: the rule keeps no buffer, momentum_out and momentum must be undefined");
        check_step(op, given({{"param_out", param_out}, {"momentum_out", momentum_out}}),
                   given({{"param", param}, {"grad", grad}, {"momentum", momentum}}));
        detail::backend_for(param.device())
            .sgd_step(param_out.data_ptr(), keeps_buffer ? momentum_out.data_ptr() : nullptr, param.data_ptr(),
                      grad.data_ptr(), ptr_or_null(momentum), param.dtype(), param.numel(), p);
    }

    void adam_step(const tensor& param_out, const tensor& exp_avg_out, const tensor& exp_avg_sq_out,
                   const tensor& param, const tensor& grad, const tensor& exp_avg, const tensor& exp_avg_sq,
                   const adam_step_params& p)
    {
        XGRAD_PROFILE_OP("adam_step");
        constexpr const char* op = "adam_step";
        if (exp_avg.defined() != exp_avg_sq.defined())
            fail(op, "exp_avg and exp_avg_sq must both be given, or both be undefined (the first step)");
        check_step(op, {{"param_out", param_out}, {"exp_avg_out", exp_avg_out}, {"exp_avg_sq_out", exp_avg_sq_out}},
                   given({{"param", param}, {"grad", grad}, {"exp_avg", exp_avg}, {"exp_avg_sq", exp_avg_sq}}));
        detail::backend_for(param.device())
            .adam_step(param_out.data_ptr(), exp_avg_out.data_ptr(), exp_avg_sq_out.data_ptr(), param.data_ptr(),
                       grad.data_ptr(), ptr_or_null(exp_avg), ptr_or_null(exp_avg_sq), param.dtype(), param.numel(), p);
    }
}
