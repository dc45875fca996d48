#!/usr/bin/env python3
"""Draws bench/run's batch-norm summary lines as an SVG chart (standard library only).

Usage: python3 tools/bn_chart.py [INPUT|-] [OUTPUT.svg] [--threads N]
  INPUT: bench/run's stdout saved to a file (default: stdin); OUTPUT: the SVG (default: stdout).
  --threads N: which thread count to draw (default 2).

Reads the lines `case=<op>_<layout>_<dtype>_<shape>_t<n> xgrad_gbps=.. peer_gbps=.. probe_gbps=..`
(other lines, such as the kernels_bench and grad_grad ones, are ignored) and draws one panel per
op (training gradient, inference gradient, training forward) with one row per
layout/dtype/shape and four horizontal bars per row: xgrad, oneDNN, ATen and the bandwidth
probe over the same bytes (2 reads + 1 write for gradients, a copy for the forward), in GB/s on
a common scale. A missing peer figure (peer=none, aten_gbps=nan) is marked "n/a".
"""
import argparse
import math
import re
import sys
from xml.sax.saxutils import escape

OPS = [("grad_train", "training gradient"), ("grad_infer", "inference gradient"), ("fwd_train", "training forward")]
SERIES = [("xgrad_gbps", "xgrad", "#1f77b4"), ("peer_gbps", "oneDNN", "#ff7f0e"),
          ("aten_gbps", "ATen (PyTorch)", "#2ca02c"), ("probe_gbps", "bandwidth probe (same bytes)", "#9e9e9e")]
CASE_RE = re.compile(r"^(grad_train|grad_infer|fwd_train)_(nhwc|nchw)_(f32|bf16)_(\d+x\d+x\d+x\d+)_t(\d+)$")


def parse(lines):
    """Returns (machine line or None, {(op, layout, dtype, shape, threads): {field: value}})."""
    machine, cases = None, {}
    for line in lines:
        line = line.strip()
        if line.startswith("machine:"):
            machine = line[len("machine:"):].strip() + (machine or "")
        if line.startswith("bn_bench:"):
            for key, name in (("onednn=", "oneDNN"), ("aten=", "ATen")):
                tok = [t for t in line.split() if t.startswith(key)]
                machine = (machine or "") + (f" {name} {tok[0][len(key):]}" if tok else "")
        if not line.startswith("case="):
            continue
        fields = dict(tok.split("=", 1) for tok in line.split() if "=" in tok)
        m = CASE_RE.match(fields["case"])
        if not m or "xgrad_gbps" not in fields:
            continue
        op, lay, dt, shape, threads = m.groups()
        values = {}
        for key, _, _ in SERIES:
            try:
                values[key] = float(fields.get(key, "nan"))
            except ValueError:
                values[key] = math.nan
        cases[(op, lay, dt, shape, int(threads))] = values
    return machine, cases


def nice_step(vmax, ticks=5):
    raw = vmax / ticks
    mag = 10 ** math.floor(math.log10(raw))
    for m in (1, 2, 2.5, 5, 10):
        if raw <= m * mag:
            return m * mag
    return 10 * mag


def draw(machine, cases, threads):
    sel = {k: v for k, v in cases.items() if k[4] == threads}
    if not sel:
        raise SystemExit(f"bn_chart: no batch-norm case lines for t{threads} in the input")
    ops = [(op, title) for op, title in OPS if any(k[0] == op for k in sel)]
    # rows: layout, then dtype, then shape, in the order of the input
    rows = []
    for k in sel:
        row = (k[1], k[2], k[3])
        if row not in rows:
            rows.append(row)
    rows.sort(key=lambda r: (["nhwc", "nchw"].index(r[0]), ["f32", "bf16"].index(r[1])))
    vmax = max((v for vals in sel.values() for v in vals.values() if not math.isnan(v)), default=1.0)
    step = nice_step(vmax)
    xmax = step * math.ceil(vmax / step)

    bar_h, bar_gap, row_gap = 9, 1, 10
    row_h = len(SERIES) * (bar_h + bar_gap) + row_gap
    label_w, panel_w, panel_gap = 190, 300, 40
    top, bottom = 110, 60
    width = label_w + len(ops) * panel_w + (len(ops) - 1) * panel_gap + 30
    height = top + len(rows) * row_h + bottom
    out = []
    add = out.append
    add(f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" font-family="Helvetica, Arial, sans-serif" font-size="11">')
    add(f'<rect width="{width}" height="{height}" fill="white"/>')
    add(f'<text x="{width / 2}" y="24" text-anchor="middle" font-size="16" font-weight="bold">'
        f'Batch norm on the CPU, {threads} thread{"s" if threads != 1 else ""}: effective bandwidth, '
        f'xgrad vs oneDNN vs ATen vs a bandwidth probe</text>')
    if machine:
        add(f'<text x="{width / 2}" y="42" text-anchor="middle" fill="#555">{escape(machine)}</text>')
    # legend
    lx = label_w
    for _, name, color in SERIES:
        add(f'<rect x="{lx}" y="56" width="12" height="12" fill="{color}"/>')
        add(f'<text x="{lx + 17}" y="66">{escape(name)}</text>')
        lx += 24 + 6 * len(name)
    add(f'<text x="{lx}" y="66" fill="#555">GB/s counts each tensor once (gradients: x, dy, dx; '
        f'forward: x, y); caches cold</text>')

    # row labels and block shading (one block per layout/dtype)
    for i, (lay, dt, shape) in enumerate(rows):
        y = top + i * row_h
        if ["nhwc", "nchw"].index(lay) * 2 + ["f32", "bf16"].index(dt) in (1, 3):
            add(f'<rect x="4" y="{y - row_gap / 2}" width="{width - 8}" height="{row_h}" fill="#f4f6f8"/>')
        add(f'<text x="{label_w - 8}" y="{y + row_h / 2}" text-anchor="end">'
            f'{lay.upper()} {dt} {shape.replace("x", "×")}</text>')

    for p, (op, title) in enumerate(ops):
        x0 = label_w + p * (panel_w + panel_gap)
        scale = panel_w / xmax
        add(f'<text x="{x0 + panel_w / 2}" y="{top - 22}" text-anchor="middle" font-size="13" '
            f'font-weight="bold">{escape(title)}</text>')
        # grid and ticks
        t = 0.0
        while t <= xmax + 1e-9:
            gx = x0 + t * scale
            add(f'<line x1="{gx:.1f}" y1="{top - 10}" x2="{gx:.1f}" y2="{top + len(rows) * row_h - row_gap / 2}" '
                f'stroke="#ddd"/>')
            add(f'<text x="{gx:.1f}" y="{top + len(rows) * row_h + 8}" text-anchor="middle" fill="#333">'
                f'{t:g}</text>')
            t += step
        add(f'<line x1="{x0}" y1="{top - 10}" x2="{x0}" y2="{top + len(rows) * row_h - row_gap / 2}" '
            f'stroke="#333"/>')
        add(f'<text x="{x0 + panel_w / 2}" y="{top + len(rows) * row_h + 28}" text-anchor="middle">GB/s</text>')
        for i, (lay, dt, shape) in enumerate(rows):
            vals = sel.get((op, lay, dt, shape, threads))
            if vals is None:
                continue
            for s, (key, name, color) in enumerate(SERIES):
                y = top + i * row_h + s * (bar_h + bar_gap)
                v = vals[key]
                if math.isnan(v):
                    add(f'<text x="{x0 + 3}" y="{y + bar_h - 1}" font-size="9" fill="#999">{name}: n/a</text>')
                    continue
                w = max(v * scale, 0.5)
                add(f'<rect x="{x0}" y="{y}" width="{w:.1f}" height="{bar_h}" fill="{color}">'
                    f'<title>{escape(name)}: {v:.2f} GB/s</title></rect>')
                add(f'<text x="{x0 + w + 3:.1f}" y="{y + bar_h - 1}" font-size="9" fill="#333">{v:.1f}</text>')
    add("</svg>")
    return "\n".join(out) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("input", nargs="?", default="-", help="bench/run output (default: stdin)")
    ap.add_argument("output", nargs="?", default="-", help="SVG file (default: stdout)")
    ap.add_argument("--threads", type=int, default=2, help="thread count to draw (default 2)")
    args = ap.parse_args()
    if args.input == "-":
        lines = sys.stdin.readlines()
    else:
        with open(args.input, encoding="utf-8") as f:
            lines = f.readlines()
    machine, cases = parse(lines)
    svg = draw(machine, cases, args.threads)
    if args.output == "-":
        sys.stdout.write(svg)
    else:
        with open(args.output, "w", encoding="utf-8") as f:
            f.write(svg)


if __name__ == "__main__":
    main()
