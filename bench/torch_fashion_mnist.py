#!/usr/bin/python3
"""PyTorch (CPU) peer of examples/train_fashion_mnist, for speed comparisons (bench/train_compare).

Trains the same CNN on the same data with the same optimizer and batch size, and times the
training loop only (the data set is read from disk and normalised before the clock starts).
Prints one line per epoch and, last, a machine-readable line:

    summary peer=pytorch version=<torch version> format=<NCHW|channels_last> precision=<f32|bf16> images_per_s=<x> train_loss=<y> test_acc=<z>

images_per_s covers every epoch's training loop; train_loss is the last epoch's mean training
loss; test_acc is the accuracy (a fraction in [0, 1]) on the test set after the last epoch.
--channels-last runs the model and its inputs in torch.channels_last (NHWC in memory);
--autocast-bf16 runs the forward passes under torch.autocast("cpu", dtype=torch.bfloat16)
(bfloat16 convolutions and linear layers, float32 weights and optimizer).

Debian's python3-torch lives in the system Python: run it with /usr/bin/python3; the current
release from PyPI in a virtual environment (bench/train_compare makes one) runs it the same way.
"""

import argparse
import gzip
import os
import struct
import sys
import time

import numpy as np
import torch
from torch import nn

MEAN = 0.2860
STD = 0.3530


def read_idx(path, magic):
    """Reads one IDX file (.gz or plain) into a numpy uint8 array."""
    opener = gzip.open if path.endswith(".gz") else open
    try:
        with opener(path, "rb") as f:
            data = f.read()
    except OSError as error:
        sys.exit(f"torch_fashion_mnist: cannot read {path}: {error}")
    if len(data) < 8:
        sys.exit(f"torch_fashion_mnist: {path} is too short for an IDX header")
    found, count = struct.unpack(">II", data[:8])
    if found != magic:
        sys.exit(f"torch_fashion_mnist: {path}: IDX magic {found} is not the expected {magic}")
    dims = [count]
    offset = 8
    if magic == 2051:
        dims += list(struct.unpack(">II", data[8:16]))
        offset = 16
    expected = int(np.prod(dims))
    if len(data) - offset != expected:
        sys.exit(f"torch_fashion_mnist: {path}: expected {expected} bytes of data, found {len(data) - offset}")
    return np.frombuffer(data, dtype=np.uint8, offset=offset).reshape(dims)


def find_file(folder, stem):
    for name in (stem + ".gz", stem):
        path = os.path.join(folder, name)
        if os.path.exists(path):
            return path
    sys.exit(f"torch_fashion_mnist: neither {stem}.gz nor {stem} is in {folder}")


def load_split(folder, train, limit):
    prefix = "train" if train else "t10k"
    images = read_idx(find_file(folder, f"{prefix}-images-idx3-ubyte"), 2051)
    labels = read_idx(find_file(folder, f"{prefix}-labels-idx1-ubyte"), 2049)
    if len(images) != len(labels):
        sys.exit(f"torch_fashion_mnist: {prefix}: {len(images)} images but {len(labels)} labels")
    if limit > 0:
        images, labels = images[:limit], labels[:limit]
    x = torch.from_numpy((images.astype(np.float32) / 255.0 - MEAN) / STD).unsqueeze(1).contiguous()
    y = torch.from_numpy(labels.astype(np.int64))
    return x, y


def make_model():
    return nn.Sequential(
        nn.Conv2d(1, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(64 * 7 * 7, 128), nn.ReLU(),
        nn.Linear(128, 10),
    )


def make_optimizer(name, params, lr):
    if name == "adamw":
        return torch.optim.AdamW(params, lr=lr, weight_decay=0.01)
    if name == "adam":
        return torch.optim.Adam(params, lr=lr)
    return torch.optim.SGD(params, lr=lr, momentum=0.9)


def evaluate(model, x, y, batch_size):
    model.eval()
    correct = 0
    loss_sum = 0.0
    with torch.no_grad():
        for start in range(0, len(x), batch_size):
            logits = model(x[start:start + batch_size]).float()
            target = y[start:start + batch_size]
            loss_sum += nn.functional.cross_entropy(logits, target, reduction="sum").item()
            correct += (logits.argmax(dim=1) == target).sum().item()
    return loss_sum / len(x), correct / len(x)


def positive(text):
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data-dir", default="/usr/share/datasets/fashion-mnist",
                        help="folder with the four Fashion-MNIST IDX files (.gz or not)")
    parser.add_argument("--epochs", type=positive, default=1)
    parser.add_argument("--batch-size", type=positive, default=64)
    parser.add_argument("--threads", type=positive, default=None,
                        help="torch.set_num_threads (default: PyTorch's choice)")
    parser.add_argument("--optimizer", choices=("adamw", "sgd", "adam"), default="adamw")
    parser.add_argument("--lr", type=float, default=None,
                        help="learning rate (default 1e-3 for adam/adamw, 0.05 for sgd)")
    parser.add_argument("--limit", type=int, default=0, help="train on the first N images only")
    parser.add_argument("--test-limit", type=int, default=0, help="evaluate on the first N test images only")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--channels-last", action="store_true", help="torch.channels_last memory format")
    parser.add_argument("--autocast-bf16", action="store_true", help="CPU autocast to bfloat16")
    args = parser.parse_args()
    lr = args.lr if args.lr is not None else (0.05 if args.optimizer == "sgd" else 1e-3)

    if args.threads is not None:
        torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)

    x_train, y_train = load_split(args.data_dir, True, args.limit)
    x_test, y_test = load_split(args.data_dir, False, args.test_limit)
    memory_format = torch.channels_last if args.channels_last else torch.contiguous_format
    x_train = x_train.contiguous(memory_format=memory_format)
    x_test = x_test.contiguous(memory_format=memory_format)
    model = make_model().to(memory_format=memory_format)
    optimizer = make_optimizer(args.optimizer, model.parameters(), lr)
    generator = torch.Generator().manual_seed(args.seed)
    layout = "channels_last" if args.channels_last else "NCHW"
    precision = "bf16" if args.autocast_bf16 else "f32"
    print(f"pytorch {torch.__version__}: {len(x_train)} training and {len(x_test)} test images, "
          f"batch {args.batch_size}, {args.optimizer} lr {lr}, threads {torch.get_num_threads()}, {layout}, "
          f"{precision}", flush=True)

    total_images = 0
    total_seconds = 0.0
    train_loss = float("nan")
    test_acc = float("nan")
    for epoch in range(1, args.epochs + 1):
        order = torch.randperm(len(x_train), generator=generator)
        model.train()
        loss_sum = 0.0
        seen = 0
        start = time.perf_counter()
        for first in range(0, len(order), args.batch_size):
            index = order[first:first + args.batch_size]
            xb, yb = x_train[index].contiguous(memory_format=memory_format), y_train[index]
            optimizer.zero_grad(set_to_none=True)
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.autocast_bf16):
                logits = model(xb)
            loss = nn.functional.cross_entropy(logits.float(), yb)
            loss.backward()
            optimizer.step()
            loss_sum += loss.item() * len(index)
            seen += len(index)
        seconds = time.perf_counter() - start
        total_images += seen
        total_seconds += seconds
        train_loss = loss_sum / seen
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.autocast_bf16):
            test_loss, test_acc = evaluate(model, x_test, y_test, 1000)
        print(f"epoch {epoch}/{args.epochs}: train loss {train_loss:.4f}, test loss {test_loss:.4f}, "
              f"test accuracy {100 * test_acc:.2f}%, {seconds:.1f}s, {seen / seconds:.0f} images/s", flush=True)

    print(f"summary peer=pytorch version={torch.__version__} format={layout} precision={precision} "
          f"images_per_s={total_images / total_seconds:.1f} "
          f"train_loss={train_loss:.6f} test_acc={test_acc:.6f}", flush=True)


if __name__ == "__main__":
    main()
