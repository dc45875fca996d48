#!/usr/bin/env python3
"""PyTorch's values for xgrad's layer, group and instance normalisation
(tests/core/ops/test_torch_norms.cpp).

    python3 tools/torch_golden/norms.py tests/data/torch/norms.json

Each op in float64 with and without its affine parameters and with non-default eps; the
gradients are with respect to the input and to the parameters.
"""
import os
import sys

import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402


def cases():
    out = []

    def add(name, op, options, shapes, fn):
        inputs = {k: common.randn(name + "/" + k, shape, 2.0 if k == "x" else 1.0) for k, shape in shapes.items()}
        # A mean far from 0 in x: the normalisation must remove it exactly.
        inputs["x"] = inputs["x"] + 3.0
        out.append(common.case(name, op, options, inputs, fn, tuple(shapes)))

    add("layer_norm last", "layer_norm", {"normalized_shape": [5], "eps": 1e-5},
        {"x": [3, 4, 5], "weight": [5], "bias": [5]},
        lambda x, weight, bias: F.layer_norm(x, [5], weight, bias, 1e-5))
    add("layer_norm two dims", "layer_norm", {"normalized_shape": [4, 5], "eps": 1e-3},
        {"x": [3, 4, 5], "weight": [4, 5], "bias": [4, 5]},
        lambda x, weight, bias: F.layer_norm(x, [4, 5], weight, bias, 1e-3))
    add("layer_norm no affine", "layer_norm", {"normalized_shape": [4, 5], "eps": 1e-5},
        {"x": [2, 4, 5]}, lambda x: F.layer_norm(x, [4, 5], None, None, 1e-5))
    add("group_norm", "group_norm", {"num_groups": 3, "eps": 1e-5},
        {"x": [2, 6, 3, 4], "weight": [6], "bias": [6]},
        lambda x, weight, bias: F.group_norm(x, 3, weight, bias, 1e-5))
    add("group_norm one group", "group_norm", {"num_groups": 1, "eps": 1e-2},
        {"x": [2, 4, 3, 3], "weight": [4], "bias": [4]},
        lambda x, weight, bias: F.group_norm(x, 1, weight, bias, 1e-2))
    add("group_norm no affine 1d", "group_norm", {"num_groups": 2, "eps": 1e-5},
        {"x": [3, 4, 7]}, lambda x: F.group_norm(x, 2, None, None, 1e-5))
    add("instance_norm", "instance_norm", {"eps": 1e-5},
        {"x": [2, 3, 4, 5], "weight": [3], "bias": [3]},
        lambda x, weight, bias: F.instance_norm(x, weight=weight, bias=bias, eps=1e-5))
    add("instance_norm no affine", "instance_norm", {"eps": 1e-3},
        {"x": [2, 3, 6]}, lambda x: F.instance_norm(x, eps=1e-3))
    return out


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    common.write(sys.argv[1], "tools/torch_golden/norms.py", cases())
