#!/usr/bin/env python3
"""PyTorch's values for xgrad's activation ops (tests/core/ops/test_torch_activations.cpp).

    python3 tools/torch_golden/activations.py tests/data/torch/activations.json

Each op runs in float64 on inputs that cover both sides of every kink and the saturated tails,
with every option xgrad's op takes; the gradient is of sum(y * grad_output) (common.py).
"""
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

SHAPE = [3, 4, 5]


def x_for(name):
    # N(0, 3): most elements in the curved middle, some in both tails.
    return common.randn(name, SHAPE, 3.0)


def cases():
    out = []

    def add(name, options, fn):
        out.append(common.case(name, name.split(" ")[0], options, {"x": x_for(name)}, fn))

    add("relu", {}, lambda x: F.relu(x))
    add("sigmoid", {}, lambda x: torch.sigmoid(x))
    add("tanh", {}, lambda x: torch.tanh(x))
    add("silu", {}, lambda x: F.silu(x))
    add("gelu", {"approximate": "none"}, lambda x: F.gelu(x))
    add("gelu tanh", {"approximate": "tanh"}, lambda x: F.gelu(x, approximate="tanh"))
    add("softplus", {"beta": 1.0}, lambda x: F.softplus(x, beta=1.0, threshold=1e9))
    add("softplus beta", {"beta": 2.5}, lambda x: F.softplus(x, beta=2.5, threshold=1e9))
    add("leaky_relu", {"negative_slope": 0.01}, lambda x: F.leaky_relu(x, 0.01))
    add("leaky_relu slope", {"negative_slope": 0.2}, lambda x: F.leaky_relu(x, 0.2))
    add("elu", {"alpha": 1.0}, lambda x: F.elu(x, 1.0))
    add("elu alpha", {"alpha": 0.5}, lambda x: F.elu(x, 0.5))
    add("hardswish", {}, lambda x: F.hardswish(x))
    add("hardsigmoid", {}, lambda x: F.hardsigmoid(x))
    # PyTorch's CPU hardsigmoid backward multiplies by float32(1/6) even in float64 (3e-8
    # relative off); the stored gradient is its formula with the exact 1/6 instead.
    hs = out[-1]
    x = torch.tensor(hs["inputs"]["x"]["data"], dtype=torch.float64)
    dy = torch.tensor(hs["inputs"]["grad_output"]["data"], dtype=torch.float64)
    exact = torch.where((x > -3) & (x < 3), dy / 6, torch.zeros_like(dy))
    hs["grads"]["x"] = common.tensor_json(exact.reshape(SHAPE))
    add("relu6", {}, lambda x: F.relu6(x))
    for dim in (0, 1, -1):
        add(f"softmax dim{dim}", {"dim": dim}, lambda x, d=dim: F.softmax(x, d))
        add(f"log_softmax dim{dim}", {"dim": dim}, lambda x, d=dim: F.log_softmax(x, d))
    return out


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    common.write(sys.argv[1], "tools/torch_golden/activations.py", cases())
