#!/usr/bin/env python3
"""PyTorch's optimizer trajectories for xgrad's optimizers (tests/train/optim/test_optim_torch_optimizers.cpp).

    python3 tools/torch_golden/optimizers.py tests/data/torch/optimizers.json

Each case steps torch.optim's class in float64 on one parameter of shape [2, 3] from the input
"param", with the gradient inputs "grads" [steps, 2, 3] (given, not computed) and the learning
rate "lrs" [steps] set on the optimizer's group before each step (so a changing rate meets the
rule's own factors, such as Adagrad's lr_decay). Outputs, after each step: "param" [steps, 2, 3]
and each state buffer under PyTorch's name ("sum", "square_avg", "momentum_buffer", "grad_avg").
"""
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

SHAPE = [2, 3]
STEPS = 6
# Rates of the steps, relative to the option lr: changes in both directions and a zero step.
LR_SCALE = [1.0, 1.0, 0.5, 2.0, 0.0, 1.0]


def trajectory(name, op, options, make, buffers):
    param = common.randn(name + "/param", SHAPE)
    grads = common.randn(name + "/grads", [STEPS] + SHAPE)
    lrs = torch.tensor([options["lr"] * s for s in LR_SCALE], dtype=torch.float64)
    p = param.clone().requires_grad_(True)
    opt = make([p])
    rows = {"param": []}
    rows.update({b: [] for b in buffers})
    for k in range(STEPS):
        opt.param_groups[0]["lr"] = float(lrs[k])
        p.grad = grads[k].clone()
        opt.step()
        rows["param"].append(p.detach().clone())
        for b in buffers:
            rows[b].append(opt.state[p][b].clone())
    return {"name": name, "op": op, "options": options,
            "inputs": {"param": common.tensor_json(param), "grads": common.tensor_json(grads),
                       "lrs": common.tensor_json(lrs)},
            "outputs": {k: common.tensor_json(torch.stack(v)) for k, v in rows.items()}}


def cases():
    out = []

    def adagrad(name, **kw):
        o = dict(lr=0.1, lr_decay=0.0, weight_decay=0.0, initial_accumulator_value=0.0, eps=1e-10, maximize=False)
        o.update(kw)
        out.append(trajectory(name, "adagrad", o, lambda ps: torch.optim.Adagrad(ps, **o), ["sum"]))

    adagrad("adagrad")
    adagrad("adagrad lr_decay", lr_decay=0.3)
    adagrad("adagrad weight_decay", weight_decay=0.2)
    adagrad("adagrad initial_accumulator_value", initial_accumulator_value=0.5)
    adagrad("adagrad eps", eps=0.25)
    adagrad("adagrad maximize", maximize=True)
    adagrad("adagrad all", lr=0.05, lr_decay=0.1, weight_decay=0.1, initial_accumulator_value=0.3, eps=1e-6,
            maximize=True)

    def rmsprop(name, **kw):
        o = dict(lr=0.01, alpha=0.99, eps=1e-8, weight_decay=0.0, momentum=0.0, centered=False)
        o.update(kw)
        buffers = ["square_avg"] + (["momentum_buffer"] if o["momentum"] != 0 else []) + \
            (["grad_avg"] if o["centered"] else [])
        out.append(trajectory(name, "rmsprop", o, lambda ps: torch.optim.RMSprop(ps, **o), buffers))

    rmsprop("rmsprop")
    rmsprop("rmsprop momentum", alpha=0.9, momentum=0.8)
    rmsprop("rmsprop centered", lr=0.005, alpha=0.95, eps=1e-6, centered=True)
    rmsprop("rmsprop weight_decay", weight_decay=0.1)
    rmsprop("rmsprop all", lr=0.02, alpha=0.9, eps=1e-7, weight_decay=0.1, momentum=0.5, centered=True)
    return out


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    common.write(sys.argv[1], "tools/torch_golden/optimizers.py", cases())
