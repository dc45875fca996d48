#!/usr/bin/env python3
"""PyTorch's learning-rate sequences for xgrad's schedules (tests/train/optim/test_optim_torch_schedules.cpp).

    python3 tools/torch_golden/schedules.py tests/data/torch/schedules.json

Each case builds torch.optim.lr_scheduler's class on an SGD optimizer of one float64 parameter
whose lr is the schedule's base rate, then records the optimizer's lr before each
scheduler.step(): outputs "lr" [steps] is the rate of steps 0, 1, ... (ReduceLROnPlateau: the
rate after each step(metric), with the inputs "metrics" it was given, and its counters after
each step). Composite cases (SequentialLR, ChainedScheduler) name their children in options
"schedules", built on the same optimizer in that order, as PyTorch's documentation does.

CosineAnnealingLR is recorded over [0, T_max]: past T_max PyTorch's rate rises again (a period
of 2 T_max), where xgrad's cosine_lr holds min_lr (lr_scheduler.hpp). OneCycleLR is recorded
over its total_steps steps [0, total_steps - 1]: PyTorch also allows the step to total_steps (the
step() after the last batch, whose rate no batch uses; it lies past the cycle's end, negative for
the linear anneal), which xgrad's one_cycle_lr refuses.
"""
import os
import sys
import warnings

import torch
from torch.optim import lr_scheduler as L

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

# SequentialLR steps a later schedule with the deprecated step(epoch) at its milestone.
warnings.simplefilter("ignore")


def optimizer(lr):
    return torch.optim.SGD([torch.zeros(1, dtype=torch.float64, requires_grad=True)], lr=lr)


def build(opt, spec):
    """One torch scheduler from {"op": ..., "options": {...}} on opt."""
    op, o = spec["op"], spec["options"]
    if op == "step":
        return L.StepLR(opt, o["step_size"], o["gamma"])
    if op == "cosine":
        return L.CosineAnnealingLR(opt, o["total"], o["min_lr"])
    if op == "multistep":
        return L.MultiStepLR(opt, o["milestones"], o["gamma"])
    if op == "exponential":
        return L.ExponentialLR(opt, o["gamma"])
    if op == "linear":
        return L.LinearLR(opt, o["start_factor"], o["end_factor"], o["total_iters"])
    if op == "onecycle":
        return L.OneCycleLR(opt, o["max_lr"], total_steps=o["total_steps"], pct_start=o["pct_start"],
                            anneal_strategy=o["anneal_strategy"], cycle_momentum=False,
                            div_factor=o["div_factor"], final_div_factor=o["final_div_factor"],
                            three_phase=o["three_phase"])
    if op == "sequential":
        children = [build(opt, c) for c in o["schedules"]]
        return L.SequentialLR(opt, children, o["milestones"])
    if op == "chained":
        return L.ChainedScheduler([build(opt, c) for c in o["schedules"]])
    raise ValueError(op)


def sequence(name, spec, steps):
    opt = optimizer(spec["options"]["base_lr"])
    sched = build(opt, spec)
    lrs = []
    for t in range(steps):
        if t > 0:
            opt.step()
            sched.step()
        lrs.append(opt.param_groups[0]["lr"])
    return {"name": name, "op": spec["op"], "options": spec["options"], "inputs": {},
            "outputs": {"lr": common.tensor_json(torch.tensor(lrs, dtype=torch.float64))}}


def plateau(name, options, metrics):
    opt = optimizer(options["base_lr"])
    kw = {k: v for k, v in options.items() if k != "base_lr"}
    sched = L.ReduceLROnPlateau(opt, **kw)
    rows = {"lr": [], "best": [], "num_bad_epochs": [], "cooldown_counter": []}
    for m in metrics:
        sched.step(m)
        rows["lr"].append(opt.param_groups[0]["lr"])
        rows["best"].append(sched.best)
        rows["num_bad_epochs"].append(sched.num_bad_epochs)
        rows["cooldown_counter"].append(sched.cooldown_counter)
    outputs = {k: common.tensor_json(torch.tensor(v, dtype=torch.int64 if k in ("num_bad_epochs", "cooldown_counter")
                                                   else torch.float64)) for k, v in rows.items()}
    return {"name": name, "op": "plateau", "options": options,
            "inputs": {"metrics": common.tensor_json(torch.tensor(metrics, dtype=torch.float64))},
            "outputs": outputs}


def s(op, **options):
    return {"op": op, "options": options}


def onecycle(base_lr=None, **kw):
    o = dict(max_lr=0.1, total_steps=20, pct_start=0.3, anneal_strategy="cos", div_factor=25.0,
             final_div_factor=1e4, three_phase=False)
    o.update(kw)
    # The schedule's own base rate: the optimizer's lr is replaced by max_lr / div_factor.
    o["base_lr"] = o["max_lr"] / o["div_factor"] if base_lr is None else base_lr
    return s("onecycle", **o)


def cases():
    out = []

    def add(name, spec, steps):
        out.append(sequence(name, spec, steps))

    add("step", s("step", base_lr=0.1, step_size=3, gamma=0.1), 12)
    add("step every epoch", s("step", base_lr=0.5, step_size=1, gamma=0.5), 8)
    add("cosine", s("cosine", base_lr=0.1, total=10, min_lr=0.0), 11)
    add("cosine min_lr", s("cosine", base_lr=0.1, total=10, min_lr=0.01), 11)
    add("cosine odd", s("cosine", base_lr=0.2, total=7, min_lr=0.05), 8)
    add("multistep", s("multistep", base_lr=0.1, milestones=[2, 5, 9], gamma=0.1), 12)
    add("multistep one", s("multistep", base_lr=1.0, milestones=[1], gamma=0.5), 5)
    add("exponential", s("exponential", base_lr=0.1, gamma=0.9), 30)
    add("exponential half", s("exponential", base_lr=1.0, gamma=0.5), 12)
    add("linear defaults", s("linear", base_lr=0.1, start_factor=1.0 / 3, end_factor=1.0, total_iters=5), 9)
    add("linear warm-up", s("linear", base_lr=0.1, start_factor=0.1, end_factor=1.0, total_iters=4), 8)
    add("linear decay", s("linear", base_lr=1.0, start_factor=1.0, end_factor=0.0, total_iters=8), 11)
    add("linear both", s("linear", base_lr=0.3, start_factor=0.5, end_factor=0.25, total_iters=3), 6)
    add("onecycle", onecycle(), 20)
    add("onecycle linear", onecycle(anneal_strategy="linear"), 20)
    add("onecycle three_phase", onecycle(three_phase=True), 20)
    add("onecycle three_phase linear", onecycle(three_phase=True, anneal_strategy="linear"), 20)
    # pct_start * total_steps not an integer: the phase ends between two steps.
    add("onecycle fractional", onecycle(max_lr=0.5, total_steps=17, pct_start=0.25, div_factor=10.0,
                                        final_div_factor=100.0), 17)
    add("onecycle fractional three_phase", onecycle(max_lr=0.5, total_steps=17, pct_start=0.35, div_factor=10.0,
                                                    final_div_factor=100.0, three_phase=True), 17)

    # SequentialLR: a later schedule starts at its milestone from its own first value (PyTorch
    # steps it with step(0), its closed form at 0).
    add("sequential warm-up cosine",
        s("sequential", base_lr=0.1, milestones=[4],
          schedules=[s("linear", base_lr=0.1, start_factor=0.1, end_factor=1.0, total_iters=4),
                     s("cosine", base_lr=0.1, total=6, min_lr=0.0)]), 11)
    add("sequential exponential linear",
        s("sequential", base_lr=1.0, milestones=[3],
          schedules=[s("exponential", base_lr=1.0, gamma=0.5),
                     s("linear", base_lr=1.0, start_factor=0.2, end_factor=1.0, total_iters=3)]), 8)
    add("sequential three",
        s("sequential", base_lr=0.2, milestones=[3, 7],
          schedules=[s("step", base_lr=0.2, step_size=2, gamma=0.5),
                     s("multistep", base_lr=0.2, milestones=[2, 3], gamma=0.1),
                     s("exponential", base_lr=0.2, gamma=0.9)]), 12)
    # OneCycleLR sets the optimizer's initial_lr to max_lr / div_factor, which SequentialLR
    # then gives every child: the warm-up's base rate is that value (here 1.0 / 25).
    add("sequential linear onecycle",
        s("sequential", base_lr=1.0, milestones=[5],
          schedules=[s("linear", base_lr=0.04, start_factor=0.5, end_factor=1.0, total_iters=5),
                     onecycle(max_lr=1.0, total_steps=10)]), 15)

    # ChainedScheduler: each step applies every schedule's chainable form in order.
    add("chained linear exponential",
        s("chained", base_lr=0.1,
          schedules=[s("linear", base_lr=0.1, start_factor=0.1, end_factor=1.0, total_iters=4),
                     s("exponential", base_lr=0.1, gamma=0.9)]), 12)
    add("chained step cosine",
        s("chained", base_lr=0.1,
          schedules=[s("step", base_lr=0.1, step_size=3, gamma=0.5),
                     s("cosine", base_lr=0.1, total=10, min_lr=0.01)]), 11)
    # cosine's chainable form with min_lr > 0 is affine in the rate, not a factor.
    add("chained linear cosine min_lr",
        s("chained", base_lr=1.0,
          schedules=[s("linear", base_lr=1.0, start_factor=0.1, end_factor=1.0, total_iters=4),
                     s("cosine", base_lr=1.0, total=6, min_lr=0.1)]), 7)
    add("chained three",
        s("chained", base_lr=0.5,
          schedules=[s("multistep", base_lr=0.5, milestones=[3, 6], gamma=0.5),
                     s("linear", base_lr=0.5, start_factor=0.5, end_factor=1.0, total_iters=4),
                     s("exponential", base_lr=0.5, gamma=0.95)]), 12)
    # OneCycleLR is not chainable: it sets its own rate, which the next schedule then scales.
    add("chained onecycle exponential",
        s("chained", base_lr=0.004,
          schedules=[onecycle(max_lr=0.1, total_steps=10), s("exponential", base_lr=0.004, gamma=0.9)]), 10)

    def pl(name, metrics, **kw):
        o = dict(base_lr=0.1, mode="min", factor=0.5, patience=2, threshold=1e-4, threshold_mode="rel",
                 cooldown=0, min_lr=0.0, eps=1e-8)
        o.update(kw)
        out.append(plateau(name, o, metrics))

    falling = [1.0, 0.9, 0.95, 0.92, 0.91, 0.5, 0.6, 0.6, 0.6, 0.6, 0.49995, 0.7, 0.7, 0.7, 0.7, 0.7, 0.7, 0.7]
    pl("plateau min rel", falling)
    pl("plateau min abs", falling, threshold=0.05, threshold_mode="abs")
    rising = [0.1, 0.2, 0.19, 0.2, 0.2, 0.5, 0.5, 0.50004, 0.4, 0.6, 0.6, 0.6, 0.6, 0.6, 0.6]
    pl("plateau max rel", rising, mode="max", patience=1)
    pl("plateau max abs", rising, mode="max", threshold=0.05, threshold_mode="abs", patience=0)
    pl("plateau cooldown", falling, cooldown=2, patience=1)
    pl("plateau min_lr", [1.0] * 16, patience=0, factor=0.3, min_lr=0.002)
    # factor 0.9 of 1e-7 is a decrease of 1e-8 < eps: PyTorch leaves the rate.
    pl("plateau eps", [1.0] * 8, base_lr=1e-7, patience=0, factor=0.9, eps=2e-8)
    pl("plateau defaults", [3.0 - 0.01 * i for i in range(5)] + [2.96] * 25, factor=0.1, patience=10)
    return out


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    common.write(sys.argv[1], "tools/torch_golden/schedules.py", cases())
