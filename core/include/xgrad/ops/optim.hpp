#pragma once
// The optimizer updates as single passes (core/src/ops/optim.cpp): one SGD or Adam step over a
// parameter and its buffers, run by the backend's sgd_step / adam_step kernel. The optimizers
// of xgrad::optim call them; their composite rules (the same update written with elementwise
// ops) are the kernels' oracle, which gives the same bits.
//
// Not recorded: an optimizer step is not differentiated. Every tensor is contiguous, of one
// floating dtype (16-bit values are widened to float32 and rounded once on store) and one
// device, with param's shape. An output may be its own input (param_out the same tensor as
// param, a buffer's output its buffer: an update in place, each element read before it is
// written); otherwise no operand may share storage with an output. Errors: xgrad::invalid_argument
// naming the function and the tensor (undefined, shape, dtype, device, not contiguous, overlap),
// before anything is written.
#include "xgrad/optim_params.hpp"
#include "xgrad/tensor.hpp"

namespace xgrad
{
    /// One SGD step: writes param_out and, when p.momentum != 0, momentum_out (else it must be
    /// undefined). momentum: the buffer of the previous step, undefined on the first (or when
    /// p.momentum == 0).
    void sgd_step(const tensor& param_out, const tensor& momentum_out, const tensor& param, const tensor& grad,
                  const tensor& momentum, const sgd_step_params& p);

    /// One Adam step: writes param_out, exp_avg_out and exp_avg_sq_out. exp_avg and exp_avg_sq:
    /// the buffers of the previous step, both undefined on the first.
    void adam_step(const tensor& param_out, const tensor& exp_avg_out, const tensor& exp_avg_sq_out,
                   const tensor& param, const tensor& grad, const tensor& exp_avg, const tensor& exp_avg_sq,
                   const adam_step_params& p);
}
