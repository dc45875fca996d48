#pragma once
// The hyperparameters of one optimizer step as single passes (xgrad::sgd_step, adam_step in
// xgrad/ops/optim.hpp): plain numbers, in base because the backends' kernels take the same
// structs (backends/common/optimizer_math.hpp writes the formulas below once for every backend).

namespace xgrad
{
    /// SGD with momentum, PyTorch's rule: d = g + weight_decay p (when weight_decay != 0);
    /// with momentum != 0, b = d on the first step (no buffer yet), else
    /// b = momentum b + (1 - dampening) d (the factor skipped when dampening is 0), and
    /// d = nesterov ? d + momentum b : b; then p -= lr d.
    struct sgd_step_params
    {
        double lr = 0.0;
        double weight_decay = 0.0;
        double momentum = 0.0;
        double dampening = 0.0;
        bool nesterov = false;
    };

    /// Adam (decoupled = false) and AdamW (decoupled = true), PyTorch's rule with the bias
    /// corrections c1 = 1 - beta1^t, c2 = 1 - beta2^t of step t given as numbers:
    ///   adam:  g += weight_decay p;      adamw: base = (1 - lr weight_decay) p (else base = p)
    ///   m = beta1 m + (1 - beta1) g;     v = beta2 v + (1 - beta2) g^2  (m = v = 0 before)
    ///   p = base - lr (m / c1) / (sqrt(v) / sqrt(c2) + eps)
    struct adam_step_params
    {
        double lr = 0.0;
        double beta1 = 0.9;
        double beta2 = 0.999;
        double eps = 1e-8;
        double weight_decay = 0.0;
        bool decoupled = false;
        double bias_correction1 = 1.0;
        double bias_correction2 = 1.0;
    };
}
