#!/usr/bin/env python3
"""PyTorch's values for xgrad's losses (tests/core/ops/test_torch_losses.cpp).

    python3 tools/torch_golden/losses.py tests/data/torch/losses.json

Every loss with every option xgrad takes, each under the reductions none, mean and sum (and
kl_div's batchmean), in float64. Inputs: "x" (the loss's input), "target", and where given
"weight" and "pos_weight". The gradient is of sum(y * grad_output) (common.py) w.r.t. x, and
w.r.t. target where PyTorch differentiates it (the regression losses, kl_div, the binary
cross-entropies, cross_entropy with probabilities). Class-index targets include ignored labels
(ignore_index -100, and an ignore_index that is a class) and every case with weights draws
them unequal, so a wrong normalisation shows.
"""
import os
import sys
import warnings

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

REDUCTIONS = ("none", "mean", "sum")


def labels(name, shape, classes, ignored=(), every=3):
    """Labels in [0, classes), every `every`-th one (from the second) replaced by the next
    value of `ignored` in turn."""
    g = common.generator(name + "/labels")
    t = torch.randint(0, classes, shape, generator=g, dtype=torch.int64)
    flat = t.view(-1)
    for k, i in enumerate(range(1, flat.numel(), every)):
        if ignored:
            flat[i] = ignored[k % len(ignored)]
    return t


def class_weight(name, classes):
    # In [0.25, 2): unequal, positive.
    return common.randn(name + "/weight", [classes]).abs() + 0.25


def check_grads(doc, wrt):
    # A differentiated input PyTorch gives no gradient for would be stored as zeros by
    # common.case and mask a missing derivative: require a real one.
    for k in wrt:
        assert k in doc["grads"], (doc["name"], k)


def cases():
    # kl_div's reduction='mean' warns that it is not the KL divergence; that is the case's point.
    warnings.filterwarnings("ignore", message="reduction: 'mean' divides")
    out = []

    def add(name, op, options, inputs, fn, differentiable=("x",)):
        doc = common.case(name, op, options, inputs, fn, differentiable)
        check_grads(doc, differentiable)
        out.append(doc)

    # ---- nll_loss ----------------------------------------------------------------------------
    layouts = {
        "2d": ([6, 4], [6]),
        "1d": ([4], []),
        "kdim": ([2, 4, 3, 2], [2, 3, 2]),
    }
    for layout, (xs, ts) in layouts.items():
        for red in REDUCTIONS:
            for variant in ("plain", "weight", "ignore", "ignore weight", "ignore class", "ignore class weight"):
                if layout == "1d" and variant.startswith("ignore"):
                    continue  # one target: ignoring it is the all-ignored case below
                name = f"nll_loss {layout} {variant} {red}"
                ignore_index = 1 if "class" in variant else -100
                ignored = () if not variant.startswith("ignore") else (ignore_index,)
                inputs = {"x": torch.log_softmax(common.randn(name, xs, 2.0), dim=0 if layout == "1d" else 1),
                          "target": labels(name, ts, 4, ignored)}
                opts = {"reduction": red, "ignore_index": ignore_index}
                if "weight" in variant:
                    inputs["weight"] = class_weight(name, 4)
                add(name, "nll_loss", opts, inputs,
                    lambda x, target, weight=None, r=red, i=ignore_index:
                        F.nll_loss(x, target, weight=weight, ignore_index=i, reduction=r))
    # Every target ignored: none and sum are 0 (mean is 0 / 0 = NaN, which JSON cannot hold:
    # tests/core/ops/test_losses.cpp checks it).
    for red in ("none", "sum"):
        name = f"nll_loss all ignored {red}"
        add(name, "nll_loss", {"reduction": red, "ignore_index": -100},
            {"x": common.randn(name, [3, 4]), "target": torch.full([3], -100, dtype=torch.int64)},
            lambda x, target, r=red: F.nll_loss(x, target, reduction=r))

    # ---- cross_entropy with class indices ------------------------------------------------------
    variants = {
        "plain": (None, -100, 0.0, False),
        "weight": (True, -100, 0.0, False),
        "ignore": (None, -100, 0.0, True),
        "ignore class": (None, 2, 0.0, True),
        "smoothing": (None, -100, 0.1, False),
        "smoothing weight": (True, -100, 0.25, False),
        "smoothing weight ignore": (True, -100, 0.25, True),
        "smoothing weight ignore class": (True, 0, 0.3, True),
        "smoothing one": (True, -100, 1.0, True),
    }
    for layout, (xs, ts) in layouts.items():
        for red in REDUCTIONS:
            for variant, (weighted, ignore_index, eps, ignoring) in variants.items():
                if layout == "1d" and ignoring:
                    continue
                name = f"cross_entropy {layout} {variant} {red}"
                inputs = {"x": common.randn(name, xs, 3.0),
                          "target": labels(name, ts, 4, (ignore_index,) if ignoring else ())}
                if weighted:
                    inputs["weight"] = class_weight(name, 4)
                opts = {"reduction": red, "ignore_index": ignore_index, "label_smoothing": eps}
                add(name, "cross_entropy", opts, inputs,
                    lambda x, target, weight=None, r=red, i=ignore_index, e=eps:
                        F.cross_entropy(x, target, weight=weight, ignore_index=i, reduction=r, label_smoothing=e))

    # ---- cross_entropy with probabilities ----------------------------------------------------
    for layout, (xs, _) in layouts.items():
        for red in REDUCTIONS:
            for variant, (weighted, eps) in {"plain": (False, 0.0), "weight": (True, 0.0),
                                             "smoothing weight": (True, 0.2)}.items():
                name = f"cross_entropy probabilities {layout} {variant} {red}"
                class_dim = 0 if layout == "1d" else 1
                inputs = {"x": common.randn(name, xs, 3.0),
                          "target": torch.softmax(common.randn(name + "/target", xs, 2.0), dim=class_dim)}
                if weighted:
                    inputs["weight"] = class_weight(name, 4)
                add(name, "cross_entropy", {"reduction": red, "ignore_index": -100, "label_smoothing": eps}, inputs,
                    lambda x, target, weight=None, r=red, e=eps:
                        F.cross_entropy(x, target, weight=weight, reduction=r, label_smoothing=e),
                    ("x", "target"))

    # ---- binary cross-entropy ----------------------------------------------------------------
    shape = [4, 3]
    for red in REDUCTIONS:
        for variant in ("plain", "weight row", "weight full", "edges"):
            name = f"binary_cross_entropy {variant} {red}"
            p = torch.sigmoid(common.randn(name, shape, 2.0))
            t = torch.rand(shape, generator=common.generator(name + "/target"), dtype=torch.float64)
            differentiable = ("x", "target")
            if variant == "edges":
                # A case of its own, as its gradients (~1e12) would dwarf any other element in
                # the tolerance's scale: 0 and 1 clamp the logs to -100 (1e-50 too, below
                # e^-100), 1e-13 and 1 - 1e-13 are inside the 1e-12 floor of PyTorch's backward.
                # The target gradient is infinite at 0 and 1, which a tolerance cannot compare,
                # so only x's is stored.
                p = torch.tensor([0.0, 1.0, 1e-13, 1 - 1e-13, 1e-50, 0.0, 1.0], dtype=torch.float64)
                t = torch.tensor([0.3, 0.6, 0.7, 0.2, 0.9, 0.0, 1.0], dtype=torch.float64)
                differentiable = ("x",)
            inputs = {"x": p, "target": t}
            if variant == "weight row":
                inputs["weight"] = class_weight(name, 3)
            elif variant == "weight full":
                inputs["weight"] = common.randn(name + "/weight", shape).abs()
            add(name, "binary_cross_entropy", {"reduction": red}, inputs,
                lambda x, target, weight=None, r=red: F.binary_cross_entropy(x, target, weight=weight, reduction=r),
                differentiable)

    for red in REDUCTIONS:
        for variant in ("plain", "weight", "pos_weight", "weight pos_weight", "kdim pos_weight", "large"):
            name = f"binary_cross_entropy_with_logits {variant} {red}"
            xs = [2, 3, 2, 2] if variant.startswith("kdim") else shape
            x = common.randn(name, xs, 3.0)
            if variant == "large":
                # Far beyond exp's range in both directions: the stable form stays finite.
                x.view(-1)[:4] = torch.tensor([800.0, -800.0, 60.0, -60.0], dtype=torch.float64)
            t = torch.rand(xs, generator=common.generator(name + "/target"), dtype=torch.float64)
            inputs = {"x": x, "target": t}
            if "weight" in variant.split(" "):
                inputs["weight"] = class_weight(name, 3)
            if "pos_weight" in variant:
                pw = class_weight(name + "/pos", 3)
                inputs["pos_weight"] = pw.view(3, 1, 1) if variant.startswith("kdim") else pw
            add(name, "binary_cross_entropy_with_logits", {"reduction": red}, inputs,
                lambda x, target, weight=None, pos_weight=None, r=red:
                    F.binary_cross_entropy_with_logits(x, target, weight=weight, pos_weight=pos_weight, reduction=r),
                ("x", "target"))

    # ---- regression ----------------------------------------------------------------------------
    def pair(name):
        x = common.randn(name, [3, 4, 2], 2.0)
        t = common.randn(name + "/target", [3, 4, 2], 2.0)
        t.view(-1)[:3] = x.view(-1)[:3]  # equal elements: l1's derivative there is 0
        return {"x": x, "target": t}

    regression = [
        ("mse_loss", {}, lambda x, target, r: F.mse_loss(x, target, reduction=r)),
        ("l1_loss", {}, lambda x, target, r: F.l1_loss(x, target, reduction=r)),
    ]
    for beta in (1.0, 0.5, 0.0):
        # beta = 0 is l1_loss in PyTorch 2.x's F.smooth_l1_loss, which calls it then; 1.13's
        # smooth-L1 kernel differs only in the derivative where x == target (-1 instead of 0).
        regression.append(("smooth_l1_loss", {"beta": beta},
                           lambda x, target, r, b=beta: F.l1_loss(x, target, reduction=r) if b == 0.0
                           else F.smooth_l1_loss(x, target, reduction=r, beta=b)))
    for delta in (1.0, 0.3, 2.5):
        regression.append(("huber_loss", {"delta": delta},
                           lambda x, target, r, d=delta: F.huber_loss(x, target, reduction=r, delta=d)))
    for op, opts, fn in regression:
        for red in REDUCTIONS:
            name = f"{op} {opts} {red}"
            add(name, op, dict(opts, reduction=red), pair(name), lambda x, target, f=fn, r=red: f(x, target, r),
                ("x", "target"))

    # ---- kl_div ------------------------------------------------------------------------------
    for red in REDUCTIONS + ("batchmean",):
        for log_target in (False, True):
            for zeros in ((False, True) if not log_target else (False,)):
                name = f"kl_div log_target={log_target} zeros={zeros} {red}"
                x = torch.log_softmax(common.randn(name, [3, 5], 2.0), dim=1)
                t = torch.softmax(common.randn(name + "/target", [3, 5], 2.0), dim=1)
                differentiable = ("x", "target")
                if log_target:
                    t = t.log()
                if zeros:
                    # Target 0 adds 0 (PyTorch's xlogy); its target derivative is NaN in
                    # PyTorch and -x in xgrad (see the header), so only x's is stored.
                    t.view(-1)[::4] = 0.0
                    differentiable = ("x",)
                add(name, "kl_div", {"reduction": red, "log_target": log_target}, {"x": x, "target": t},
                    lambda x, target, r=red, lt=log_target: F.kl_div(x, target, reduction=r, log_target=lt),
                    differentiable)
    return out


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    common.write(sys.argv[1], "tools/torch_golden/losses.py", cases())
