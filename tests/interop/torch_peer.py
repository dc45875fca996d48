#!/usr/bin/env python3
"""PyTorch's side of the interop test (tests/interop/test_interop.cpp).

The Fashion-MNIST model of examples/common/fashion_model.cpp, written in torch.nn with the
same names, and two commands:

  torch_peer.py check CHECKPOINT BATCH
      Loads an xgrad checkpoint into the PyTorch model (the two lines docs/interop.md gives:
      strip the "model." prefix, load_state_dict(strict=True)) and compares its logits on the
      batch's "x" (NCHW) with xgrad's, in eval mode ("logits_eval") and in training mode, where
      batch norm uses the batch's statistics ("logits_train"). Exits 1 beyond the tolerance.

  torch_peer.py make FOLDER
      Trains the PyTorch model a few steps from a fixed seed (so the running statistics and
      num_batches_tracked are not the initial ones), saves its state_dict as FOLDER/
      torch_model.safetensors, and a batch with its eval-mode logits as FOLDER/
      torch_batch.safetensors, for xgrad to load and compare.

Files are read and written with the safetensors package when it is installed
(`pip install safetensors`), and otherwise with the few lines below that speak the format
(Debian packages PyTorch but not safetensors).
"""
import collections
import json
import struct
import sys

import torch

# Logits are O(1-10); both frameworks compute in float32 and sum the 3136-long dot products and
# the convolutions in different orders, which moves a logit by a few float32 ulps of the
# partial sums (about 1e-6 here). A wrong name, layout or statistic moves logits by O(0.1-1).
TOLERANCE = 1e-4

DTYPES = {"F32": torch.float32, "F64": torch.float64, "F16": torch.float16,
          "BF16": torch.bfloat16, "I64": torch.int64}


def load_file(path):
    try:
        from safetensors.torch import load_file as st_load
        return st_load(path)
    except ImportError:
        pass
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    data = raw[8 + n:]
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        begin, end = e["data_offsets"]
        dt = DTYPES[e["dtype"]]
        buf = bytearray(data[begin:end])
        t = torch.frombuffer(buf, dtype=dt) if buf else torch.empty(0, dtype=dt)
        out[name] = t.reshape(e["shape"]).clone()
    return out


def save_file(tensors, path):
    try:
        from safetensors.torch import save_file as st_save
        return st_save(tensors, path)
    except ImportError:
        pass
    codes = {v: k for k, v in DTYPES.items()}
    header, blobs, offset = {}, [], 0
    for name in sorted(tensors):
        t = tensors[name].detach().contiguous().cpu()
        blob = t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b""
        header[name] = {"dtype": codes[t.dtype], "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
    text = json.dumps(header, separators=(",", ":"))
    text += " " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text.encode() + b"".join(blobs))


def fashion_model():
    nn = torch.nn
    return nn.Sequential(collections.OrderedDict([
        ("conv1", nn.Conv2d(1, 32, 3, padding=1)),
        ("bn1", nn.BatchNorm2d(32)),
        ("relu1", nn.ReLU()),
        ("pool1", nn.MaxPool2d(2)),
        ("conv2", nn.Conv2d(32, 64, 3, padding=1)),
        ("bn2", nn.BatchNorm2d(64)),
        ("relu2", nn.ReLU()),
        ("pool2", nn.MaxPool2d(2)),
        ("flatten", nn.Flatten()),
        ("fc1", nn.Linear(64 * 7 * 7, 128)),
        ("relu3", nn.ReLU()),
        ("fc2", nn.Linear(128, 10)),
    ]))


def compare(what, ours, theirs):
    diff = (ours - theirs).abs().max().item()
    scale = theirs.abs().max().item()
    ok = diff <= TOLERANCE * max(1.0, scale)
    print(f"{what}: max abs difference {diff:.3g} (logits up to {scale:.3g}, tolerance "
          f"{TOLERANCE:g} x max(1, that)): {'ok' if ok else 'FAILED'}")
    return ok


def check(checkpoint, batch_path):
    model = fashion_model()
    # The two lines of docs/interop.md.
    state = load_file(checkpoint)
    model.load_state_dict({k[len("model."):]: v for k, v in state.items() if k.startswith("model.")})
    batch = load_file(batch_path)
    x = batch["x"]
    ok = True
    with torch.no_grad():
        model.eval()
        ok &= compare("eval logits", model(x), batch["logits_eval"])
        model.train()
        ok &= compare("training-mode logits", model(x), batch["logits_train"])
    return 0 if ok else 1


def make(folder):
    torch.manual_seed(0)
    model = fashion_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    for _ in range(3):
        x = torch.randn(8, 1, 28, 28)
        y = torch.randint(0, 10, (8,))
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
    save_file(model.state_dict(), f"{folder}/torch_model.safetensors")
    x = torch.randn(8, 1, 28, 28)
    model.eval()
    with torch.no_grad():
        logits = model(x)
    save_file({"x": x, "logits_eval": logits}, f"{folder}/torch_batch.safetensors")
    print(f"torch {torch.__version__}: wrote {folder}/torch_model.safetensors")
    return 0


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "check":
        sys.exit(check(sys.argv[2], sys.argv[3]))
    if len(sys.argv) == 3 and sys.argv[1] == "make":
        sys.exit(make(sys.argv[2]))
    print(__doc__, file=sys.stderr)
    sys.exit(2)
