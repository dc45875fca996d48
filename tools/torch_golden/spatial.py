#!/usr/bin/env python3
"""PyTorch's values for xgrad's transposed convolution and upsampling
(tests/core/ops/test_torch_spatial.cpp).

    python3 tools/torch_golden/spatial.py tests/data/torch/spatial.json

Inputs are NCHW; the C++ test also runs each case channels-last (permuting x and the results).
Every option xgrad's ops take: conv_transpose2d with stride, padding, output_padding (also
beyond the stride, where the dilation allows it), dilation, groups, with and without bias;
upsample nearest and bilinear (align_corners both ways), by size and by scale factor, up and
down, with whole and fractional ratios.
"""
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402


def conv_transpose_cases():
    out = []
    specs = [
        # name, N, C_in, H, W, C_out, kernel, stride, padding, output_padding, dilation, groups, bias
        ("conv_transpose2d basic", 2, 3, 4, 5, 2, (3, 3), (1, 1), (0, 0), (0, 0), (1, 1), 1, True),
        ("conv_transpose2d stride2", 2, 3, 4, 3, 4, (3, 2), (2, 2), (1, 0), (1, 0), (1, 1), 1, True),
        ("conv_transpose2d stride3 output_padding", 1, 2, 3, 3, 3, (2, 3), (3, 2), (0, 1), (2, 1), (1, 1), 1, False),
        ("conv_transpose2d dilation", 2, 2, 3, 4, 2, (3, 2), (1, 2), (1, 1), (0, 1), (2, 1), 1, True),
        ("conv_transpose2d output_padding beyond stride", 1, 2, 3, 3, 2, (2, 2), (1, 1), (0, 0), (1, 1), (2, 2), 1, True),
        ("conv_transpose2d groups", 2, 4, 3, 3, 6, (3, 3), (2, 1), (1, 1), (1, 0), (1, 1), 2, True),
        ("conv_transpose2d depthwise", 1, 3, 4, 4, 3, (2, 2), (2, 2), (0, 0), (0, 0), (1, 1), 3, False),
    ]
    for name, n, cin, h, w, cout, k, s, p, op, d, g, bias in specs:
        inputs = {"x": common.randn(name + "/x", [n, cin, h, w]),
                  "weight": common.randn(name + "/weight", [cin, cout // g, k[0], k[1]], 0.5)}
        if bias:
            inputs["bias"] = common.randn(name + "/bias", [cout])
        options = {"stride": list(s), "padding": list(p), "output_padding": list(op), "dilation": list(d),
                   "groups": g}

        def fn(x, weight, bias=None, s=s, p=p, op=op, d=d, g=g):
            return F.conv_transpose2d(x, weight, bias, stride=s, padding=p, output_padding=op, groups=g, dilation=d)

        out.append(common.case(name, "conv_transpose2d", options, inputs, fn, ("x", "weight", "bias")))
    return out


def upsample_cases():
    out = []
    specs = [
        # name, shape, mode, align_corners, size, scale_factor
        ("upsample nearest x2", [2, 3, 4, 5], "nearest", None, None, (2.0, 2.0)),
        ("upsample nearest size", [1, 2, 5, 3], "nearest", None, (7, 8), None),
        ("upsample nearest down", [1, 2, 7, 9], "nearest", None, (3, 4), None),
        ("upsample nearest fractional factor", [1, 2, 5, 6], "nearest", None, None, (1.7, 2.5)),
        ("upsample bilinear x2", [2, 3, 4, 5], "bilinear", False, None, (2.0, 2.0)),
        ("upsample bilinear size", [1, 2, 5, 3], "bilinear", False, (7, 8), None),
        ("upsample bilinear down", [1, 2, 7, 9], "bilinear", False, (3, 4), None),
        ("upsample bilinear fractional factor", [1, 2, 5, 6], "bilinear", False, None, (1.7, 0.6)),
        ("upsample bilinear align_corners size", [2, 2, 4, 5], "bilinear", True, (7, 9), None),
        ("upsample bilinear align_corners factor", [1, 3, 3, 4], "bilinear", True, None, (2.0, 1.5)),
        ("upsample bilinear align_corners to one", [1, 2, 4, 3], "bilinear", True, (1, 5), None),
    ]
    for name, shape, mode, align, size, factor in specs:
        options = {"mode": mode, "align_corners": bool(align)}
        if size is not None:
            options["size"] = list(size)
        if factor is not None:
            options["scale_factor"] = list(factor)

        def fn(x, mode=mode, align=align, size=size, factor=factor):
            return F.interpolate(x, size=size, scale_factor=factor, mode=mode, align_corners=align)

        out.append(common.case(name, "upsample", options, {"x": common.randn(name + "/x", shape)}, fn))
    return out


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    common.write(sys.argv[1], "tools/torch_golden/spatial.py", conv_transpose_cases() + upsample_cases())
