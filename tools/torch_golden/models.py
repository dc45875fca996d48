#!/usr/bin/env python3
"""Two small PyTorch models built from the newer layers, for tests/nn/test_layers_models.cpp:
the C++ test builds the same models with xgrad's modules (the same parameter names), loads
these state dicts, and compares the outputs, the losses and every parameter's gradient.

    python3 tools/torch_golden/models.py tests/data/torch/models.json

  resnet_gn_silu   a stem (conv, GroupNorm, SiLU), one residual block of two convolutions with
                   GroupNorm and SiLU, global average pooling and a linear classifier;
                   cross-entropy loss.
  encoder_decoder  a strided convolution down, GroupNorm and SiLU, a transposed convolution
                   up, bilinear upsampling and a convolution to one channel; MSE loss.

Each case: "state" (the state_dict, float64), "inputs" x and target, "outputs" y and loss,
"grads" d loss / d parameter for every parameter.
"""
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402


class Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.conv1 = nn.Conv2d(c, c, 3, padding=1, bias=False)
        self.gn1 = nn.GroupNorm(2, c)
        self.conv2 = nn.Conv2d(c, c, 3, padding=1, bias=False)
        self.gn2 = nn.GroupNorm(2, c)

    def forward(self, x):
        return F.silu(x + self.gn2(self.conv2(F.silu(self.gn1(self.conv1(x))))))


def resnet():
    return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1, bias=False), nn.GroupNorm(2, 8), nn.SiLU(), Block(8),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 4))


def encoder_decoder():
    return nn.Sequential(nn.Conv2d(1, 4, 3, stride=2, padding=1), nn.GroupNorm(2, 4), nn.SiLU(),
                         nn.ConvTranspose2d(4, 4, 3, stride=2, padding=1, output_padding=1), nn.SiLU(),
                         nn.Upsample(scale_factor=2, mode="bilinear", align_corners=False),
                         nn.Conv2d(4, 1, 3, padding=1))


def model_case(name, model, x, target, loss_fn):
    torch.manual_seed(0)
    model = model.double()
    with torch.no_grad():
        # Non-trivial affine parameters (GroupNorm starts at ones and zeros).
        for pname, p in model.named_parameters():
            p.copy_(common.randn(name + "/" + pname, list(p.shape), 0.5) + (1.0 if pname.endswith("gn1.weight") else 0.0))
    y = model(x)
    loss = loss_fn(y, target)
    params = dict(model.named_parameters())
    grads = torch.autograd.grad(loss, list(params.values()))
    return {"name": name, "op": name, "options": {},
            "state": {k: common.tensor_json(v) for k, v in model.state_dict().items()},
            "inputs": {"x": common.tensor_json(x), "target": common.tensor_json(target)},
            "outputs": {"y": common.tensor_json(y), "loss": common.tensor_json(loss)},
            "grads": {k: common.tensor_json(g) for k, g in zip(params, grads)}}


def cases():
    x = common.randn("resnet_gn_silu/x", [2, 3, 6, 6])
    labels = torch.tensor([1, 3], dtype=torch.int64)
    a = model_case("resnet_gn_silu", resnet(), x, labels, F.cross_entropy)
    x2 = common.randn("encoder_decoder/x", [2, 1, 8, 8])
    t2 = common.randn("encoder_decoder/target", [2, 1, 16, 16])
    b = model_case("encoder_decoder", encoder_decoder(), x2, t2, F.mse_loss)
    return [a, b]


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    common.write(sys.argv[1], "tools/torch_golden/models.py", cases())
