"""What every PyTorch golden-data generator of tools/torch_golden shares: the file format, the
seeded inputs and the atomic write. The format (tests/data/torch/README.md):

  {"generator": ..., "torch_version": ..., "cases": [
      {"name": ..., "op": ..., "options": {...},
       "inputs":  {NAME: TENSOR, ...},     # float64 or int64
       "outputs": {NAME: TENSOR, ...},     # the op's results
       "grads":   {NAME: TENSOR, ...}}]}   # d(sum(output * grad_output))/d(input NAME)

A TENSOR is {"dtype": "float64" | "int64", "shape": [...], "data": [flat, row-major]}; every
float is written with repr(), which round-trips float64 exactly. Cases whose op has a gradient
carry the cotangent as the input "grad_output" (random, so every element of the gradient
matters).
"""
import json
import os
import sys
import tempfile
import zlib

import torch


def generator(name):
    """A torch.Generator seeded by the CRC32 of the case name: a case's inputs do not move when
    cases are added or reordered."""
    g = torch.Generator()
    g.manual_seed(zlib.crc32(name.encode()))
    return g


def randn(name, shape, scale=1.0):
    return torch.randn(shape, generator=generator(name), dtype=torch.float64) * scale


def tensor_json(t):
    t = t.detach().contiguous()
    if t.dtype == torch.int64:
        return {"dtype": "int64", "shape": list(t.shape), "data": [int(v) for v in t.flatten().tolist()]}
    t = t.to(torch.float64)
    return {"dtype": "float64", "shape": list(t.shape), "data": [float(v) for v in t.flatten().tolist()]}


def case(name, op, options, inputs, fn, differentiable=("x",)):
    """Runs fn(**inputs) (a tensor or a dict of tensors) and, for the inputs named in
    differentiable, the gradient of sum(output * grad_output)."""
    ins = {k: (v.clone().requires_grad_(k in differentiable) if v.is_floating_point() else v)
           for k, v in inputs.items()}
    out = fn(**ins)
    outs = out if isinstance(out, dict) else {"y": out}
    doc = {"name": name, "op": op, "options": options,
           "inputs": {k: tensor_json(v) for k, v in inputs.items()},
           "outputs": {k: tensor_json(v) for k, v in outs.items()}}
    wrt = [k for k in differentiable if k in ins]
    if wrt:
        y = outs["y"]
        dy = randn(name + "/grad_output", y.shape)
        grads = torch.autograd.grad(y, [ins[k] for k in wrt], dy, allow_unused=True)
        doc["inputs"]["grad_output"] = tensor_json(dy)
        doc["grads"] = {k: tensor_json(g if g is not None else torch.zeros_like(ins[k]))
                        for k, g in zip(wrt, grads)}
    return doc


def write(path, generator_name, cases):
    doc = {"generator": generator_name, "torch_version": torch.__version__, "cases": cases}
    text = json.dumps(doc, indent=None, separators=(",", ":")) + "\n"
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".tmp-")
    with os.fdopen(fd, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)
    print(f"{path}: {len(cases)} cases", file=sys.stderr)
