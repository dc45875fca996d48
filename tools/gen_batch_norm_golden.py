#!/usr/bin/env python3
"""Generate the TensorFlow golden data for the fused batch-norm ops.

What it generates (JSON, one file per op kind, in the output directory):
  forward.json       tf.raw_ops.FusedBatchNormV3
  grad_v3.json       tf.raw_ops.FusedBatchNormGradV3
  grad_v2.json       tf.raw_ops.FusedBatchNormGradV2
  second_order.json  gradient of FusedBatchNormGradV3 (nested tf.GradientTape over
                     FusedBatchNormV3 and its registered gradient)
See tests/data/batch_norm/README.md for the file format.

Produced with: TensorFlow 2.21.0 (tensorflow-cpu wheel), NumPy 2.4.6, ml_dtypes 0.6.0,
Python 3.11.7. TensorFlow runs with TF_ENABLE_ONEDNN_OPTS=0 (so its reference Eigen CPU
kernels run, not the oneDNN ones, whose results depend on the CPU) and with one intra-op
and one inter-op thread.

Rerun (overwrites the files; each file is written atomically):
    pip install tensorflow-cpu==2.21.0 numpy==2.4.6
    python3 tools/gen_batch_norm_golden.py tests/data/batch_norm
Check the stored files against the contract's formulas (NumPy only, no TensorFlow):
    python3 tools/gen_batch_norm_golden.py --check tests/data/batch_norm

Inputs are drawn in float64 from NumPy generators seeded by a CRC32 of the case name, rounded
to the dtype fed to TensorFlow (x / y_backprop: the I/O dtype; the rest float32) and stored
as the rounded values. Every number is written as the float64 repr of the exact value
(exact for float16, bfloat16 and float32); NaN / infinities as "nan", "inf", "-inf".

Shapes are named channels-last (NHWC / NDHWC, C = last number); a channels-first case uses
the same logical shape with C moved to dimension 1 (e.g. [2,3,4,5] NCHW is x of shape
[2,5,3,4]).

Skipped, because TensorFlow 2.21 on CPU rejects or lacks them:
  - FusedBatchNormGradV3 / V2 with is_training=false and NCHW or NCDHW: the CPU kernel fails
    with "The implementation of FusedBatchNormGrad with is_training=False only support NHWC
    tensor format for now." (empty x is accepted: its early return runs before that
    check, so the empty NCHW inference cases are included).
  - FusedBatchNormGradV2 with NDHWC / NCDHW: not in the op's data_format list.
  - float64: no FusedBatchNorm* op accepts T=double. The float64 cases of second_order.json
    therefore evaluate the Python composite that TensorFlow registers as the gradient of
    FusedBatchNormGradV3 (tensorflow/python/ops/nn_fused_batch_norm_grad.py: _BatchNormGrad,
    differentiated by GradientTape) directly in float64; they are marked with "source".
Not stored, because TensorFlow leaves them unwritten (uninitialised memory, different on every
run): reserve_space_1 and reserve_space_2 of the forward with is_training=false, and of the
forward with an empty x; those tensors have "data": null and an "unspecified" note. For the
same reason the training-mode gradient cases with an empty x take zero-filled reserve spaces
(the contract's values) instead of that forward's.
"""

import json
import math
import os
import sys
import tempfile
import zlib

import numpy as np

TF_ENV = {"TF_ENABLE_ONEDNN_OPTS": "0", "TF_CPP_MIN_LOG_LEVEL": "2"}
GENERATOR = "tools/gen_batch_norm_golden.py"

tf = None
ml_dtypes = None


def _import_tf():
    global tf, ml_dtypes
    for k, v in TF_ENV.items():
        os.environ[k] = v
    import ml_dtypes as _ml
    import tensorflow as _tf
    _tf.config.threading.set_intra_op_parallelism_threads(1)
    _tf.config.threading.set_inter_op_parallelism_threads(1)
    tf, ml_dtypes = _tf, _ml


# --------------------------------------------------------------------------------------------
# helpers

def np_dtype(name):
    return {"float32": np.float32, "float16": np.float16, "float64": np.float64,
            "bfloat16": ml_dtypes.bfloat16}[name]


def tf_dtype(name):
    return {"float32": tf.float32, "float16": tf.float16, "float64": tf.float64,
            "bfloat16": tf.bfloat16}[name]


def channels_first(fmt):
    return fmt in ("NCHW", "NCDHW")


def layout_shape(logical, fmt):
    """logical: channels-last shape; returns the shape of x in data_format fmt."""
    logical = list(logical)
    if channels_first(fmt):
        return [logical[0], logical[-1]] + logical[1:-1]
    return logical


def shape_tag(shape):
    return "x".join(str(d) for d in shape)


def num(v):
    v = float(v)
    if math.isnan(v):
        return "nan"
    if math.isinf(v):
        return "inf" if v > 0 else "-inf"
    return v


def enc(arr, dtype_name, shape=None):
    """Encode a NumPy/TF array of I/O dtype dtype_name."""
    if hasattr(arr, "numpy"):
        arr = arr.numpy()
    arr = np.asarray(arr)
    if shape is None:
        shape = list(arr.shape)
    flat = arr.astype(np.float64).reshape(-1)
    return {"dtype": dtype_name, "shape": [int(d) for d in shape],
            "data": [num(v) for v in flat]}


def unspecified(t, why):
    return {"dtype": "float32", "shape": [int(d) for d in t.shape], "data": None,
            "unspecified": why}


class Gen:
    """Draws float64 values seeded by the case name and rounds them to a dtype."""

    def __init__(self, name):
        self.rng = np.random.default_rng(zlib.crc32(name.encode()))

    def rounded(self, values, dtype_name):
        return np.asarray(values, np.float64).astype(np_dtype(dtype_name))

    def x(self, logical, fmt, dtype_name):
        c = logical[-1]
        loc = self.rng.uniform(-1.0, 1.0, c)
        scl = self.rng.uniform(0.5, 2.0, c)
        v = loc + scl * self.rng.standard_normal(logical)
        if channels_first(fmt):
            v = np.moveaxis(v, -1, 1)
        return self.rounded(v, dtype_name)

    def normal(self, shape, dtype_name, sigma=1.0):
        return self.rounded(sigma * self.rng.standard_normal(shape), dtype_name)

    def uniform(self, lo, hi, shape, dtype_name):
        return self.rounded(self.rng.uniform(lo, hi, shape), dtype_name)


def const(a, dtype_name):
    t = tf.constant(a, dtype=tf_dtype(dtype_name))
    assert t.dtype == tf_dtype(dtype_name)
    return t



def epsilon_for(logical):
    # TensorFlow's default epsilon (0.0001) for a few shapes, 0.001 for the rest.
    return 0.0001 if list(logical) in ([1, 1, 6, 2], [1, 1, 1, 1], [1, 2, 3, 67],
                                       [2, 3, 2, 2]) else 0.001


def mode_tag(training, f=None):
    if not training:
        return "inference" if f in (None, 1.0) else "inference_f%g" % f
    return "training" if f in (None, 1.0) else "training_f%g" % f


# --------------------------------------------------------------------------------------------
# forward

def forward_case(dtype, fmt, logical, training, f, empty_stats=False):
    c = logical[-1]
    name = "fwd_%s_%s_%s_%s%s" % (dtype, fmt, shape_tag(logical), mode_tag(training, f),
                                   "_emptystats" if empty_stats else "")
    eps = epsilon_for(logical)
    g = Gen(name)
    x = g.x(logical, fmt, dtype)
    scale = g.uniform(0.5, 1.5, [c], "float32")
    offset = g.normal([c], "float32")
    if empty_stats:
        mean = np.zeros([0], np.float32)
        var = np.zeros([0], np.float32)
    else:
        mean = g.normal([c], "float32", 0.5)
        var = g.uniform(0.5, 2.0, [c], "float32")
    r = tf.raw_ops.FusedBatchNormV3(
        x=const(x, dtype), scale=const(scale, "float32"), offset=const(offset, "float32"),
        mean=const(mean, "float32"), variance=const(var, "float32"), epsilon=eps,
        exponential_avg_factor=f, data_format=fmt, is_training=training)
    y, bm, bv, rs1, rs2, rs3 = r
    empty = x.size == 0
    outs = {"y": enc(y, dtype), "batch_mean": enc(bm, "float32"),
            "batch_variance": enc(bv, "float32")}
    if training and not empty:
        outs["reserve_space_1"] = enc(rs1, "float32")
        outs["reserve_space_2"] = enc(rs2, "float32")
    else:
        why = ("not written by TensorFlow's CPU kernel when is_training=false"
               if not training else "not written by TensorFlow's CPU kernel when x is empty")
        outs["reserve_space_1"] = unspecified(rs1, why)
        outs["reserve_space_2"] = unspecified(rs2, why)
    outs["reserve_space_3"] = enc(rs3, "float32")
    return {
        "name": name, "op": "FusedBatchNormV3",
        "attrs": {"epsilon": eps, "data_format": fmt, "is_training": training,
                  "exponential_avg_factor": f},
        "inputs": {"x": enc(x, dtype), "scale": enc(scale, "float32"),
                   "offset": enc(offset, "float32"), "mean": enc(mean, "float32"),
                   "variance": enc(var, "float32")},
        "outputs": outs,
    }


def forward_cases():
    cases = []
    small = [[1, 1, 6, 1], [1, 1, 6, 2], [1, 2, 1, 6], [2, 3, 4, 5], [1, 1, 1, 1],
             [2, 3, 5, 17]]
    modes = [(True, 1.0), (True, 0.6), (False, 1.0)]
    for dtype in ("float32", "float16", "bfloat16"):
        for fmt in ("NHWC", "NCHW"):
            for training, f in modes:
                for logical in small:
                    if logical == [1, 1, 6, 1] and dtype != "float32":
                        continue
                    # f = 1 in training: the mean/variance inputs are not read; pass them
                    # empty, as tf.nn.fused_batch_norm does, except for [2,3,4,5].
                    es = training and f == 1.0 and logical != [2, 3, 4, 5]
                    cases.append(forward_case(dtype, fmt, logical, training, f, es))
        for fmt in ("NDHWC", "NCDHW"):
            for training, f in modes:
                cases.append(forward_case(dtype, fmt, [1, 2, 6, 1, 3], training, f,
                                          training and f == 1.0))
    # exponential_avg_factor is ignored in inference
    for fmt in ("NHWC", "NCHW"):
        cases.append(forward_case("float32", fmt, [2, 3, 4, 5], False, 0.6))
    # larger shapes, a few combinations
    for dtype, fmt, logical, training, f in [
            ("float32", "NHWC", [5, 7, 11, 4], True, 1.0),
            ("float16", "NCHW", [5, 7, 11, 4], True, 0.6),
            ("bfloat16", "NHWC", [5, 7, 11, 4], False, 1.0),
            ("float32", "NHWC", [1, 2, 3, 67], True, 1.0),
            ("float32", "NCHW", [1, 2, 3, 67], True, 0.6),
            ("float32", "NHWC", [1, 2, 3, 67], False, 1.0),
            ("float16", "NHWC", [1, 2, 3, 67], True, 0.6),
            ("bfloat16", "NCHW", [1, 2, 3, 67], False, 1.0)]:
        cases.append(forward_case(dtype, fmt, logical, training, f))
    # empty x (R = 0)
    for fmt in ("NHWC", "NCHW"):
        cases.append(forward_case("float32", fmt, [0, 2, 3, 6], True, 1.0, True))
        cases.append(forward_case("float32", fmt, [0, 2, 3, 6], True, 1.0, False))
        cases.append(forward_case("float32", fmt, [0, 2, 3, 6], True, 0.6))
        cases.append(forward_case("float32", fmt, [0, 2, 3, 6], False, 1.0))
    cases.append(forward_case("float16", "NHWC", [0, 2, 3, 6], True, 1.0, True))
    cases.append(forward_case("bfloat16", "NHWC", [0, 2, 3, 6], False, 1.0))
    for fmt in ("NDHWC", "NCDHW"):
        cases.append(forward_case("float32", fmt, [0, 2, 3, 1, 6], True, 1.0, True))
    return cases


# --------------------------------------------------------------------------------------------
# first-order gradients

def grad_case(version, dtype, fmt, logical, training):
    c = logical[-1]
    op = "FusedBatchNormGradV3" if version == 3 else "FusedBatchNormGradV2"
    name = "grad_v%d_%s_%s_%s_%s" % (version, dtype, fmt, shape_tag(logical),
                                      mode_tag(training))
    eps = epsilon_for(logical)
    g = Gen(name)
    x = g.x(logical, fmt, dtype)
    dy = g.normal(x.shape, dtype)
    scale = g.uniform(0.5, 1.5, [c], "float32")
    offset = g.normal([c], "float32")
    pop_mean = g.normal([c], "float32", 0.5)
    pop_var = g.uniform(0.5, 2.0, [c], "float32")
    # The forward pass as a network runs it: its reserve spaces feed the gradient (training);
    # in inference the gradient gets the population statistics the forward used.
    fmean = np.zeros([0], np.float32) if training else pop_mean
    fvar = np.zeros([0], np.float32) if training else pop_var
    fwd = tf.raw_ops.FusedBatchNormV3(
        x=const(x, dtype), scale=const(scale, "float32"), offset=const(offset, "float32"),
        mean=const(fmean, "float32"), variance=const(fvar, "float32"), epsilon=eps,
        exponential_avg_factor=1.0, data_format=fmt, is_training=training)
    if training and x.size == 0:
        # TensorFlow's forward leaves its reserve spaces unwritten for an empty x; use the
        # contract's zero-filled ones.
        rs1, rs2 = np.zeros([c], np.float32), np.zeros([c], np.float32)
    elif training:
        rs1, rs2 = fwd[3].numpy(), fwd[4].numpy()
    else:
        rs1, rs2 = pop_mean, pop_var
    rs3 = fwd[5].numpy()
    args = dict(y_backprop=const(dy, dtype), x=const(x, dtype), scale=const(scale, "float32"),
                reserve_space_1=const(rs1, "float32"), reserve_space_2=const(rs2, "float32"),
                epsilon=eps, data_format=fmt, is_training=training)
    inputs = {"y_backprop": enc(dy, dtype), "x": enc(x, dtype),
              "scale": enc(scale, "float32"), "reserve_space_1": enc(rs1, "float32"),
              "reserve_space_2": enc(rs2, "float32")}
    if version == 3:
        args["reserve_space_3"] = const(rs3, "float32")
        inputs["reserve_space_3"] = enc(rs3, "float32")
        r = tf.raw_ops.FusedBatchNormGradV3(**args)
        tail = ("reserve_space_4", "reserve_space_5")
    else:
        r = tf.raw_ops.FusedBatchNormGradV2(**args)
        tail = ("reserve_space_3", "reserve_space_4")
    outs = {"x_backprop": enc(r[0], dtype), "scale_backprop": enc(r[1], "float32"),
            "offset_backprop": enc(r[2], "float32"), tail[0]: enc(r[3], "float32"),
            tail[1]: enc(r[4], "float32")}
    return {"name": name, "op": op,
            "attrs": {"epsilon": eps, "data_format": fmt, "is_training": training},
            "inputs": inputs, "outputs": outs}


def grad_cases(version):
    cases = []
    if version == 3:
        small = [[1, 1, 6, 1], [1, 1, 6, 2], [1, 2, 1, 6], [2, 3, 4, 5], [1, 1, 1, 1],
                 [2, 3, 5, 17]]
    else:
        small = [[1, 2, 1, 6], [2, 3, 4, 5], [1, 1, 1, 1]]
    combos = [("NHWC", True), ("NHWC", False), ("NCHW", True)]  # NCHW inference: rejected
    for dtype in ("float32", "float16", "bfloat16"):
        for fmt, training in combos:
            for logical in small:
                if logical == [1, 1, 6, 1] and dtype != "float32":
                    continue
                cases.append(grad_case(version, dtype, fmt, logical, training))
        if version == 3:
            for fmt, training in [("NDHWC", True), ("NDHWC", False), ("NCDHW", True)]:
                cases.append(grad_case(3, dtype, fmt, [1, 2, 6, 1, 3], training))
    if version == 3:
        extra = [("float32", "NHWC", [5, 7, 11, 4], True),
                 ("bfloat16", "NCHW", [5, 7, 11, 4], True),
                 ("float16", "NHWC", [5, 7, 11, 4], False),
                 ("float32", "NHWC", [1, 2, 3, 67], True),
                 ("float32", "NHWC", [1, 2, 3, 67], False),
                 ("float16", "NCHW", [1, 2, 3, 67], True),
                 ("float32", "NDHWC", [0, 2, 3, 1, 6], True),
                 ("float32", "NCDHW", [0, 2, 3, 1, 6], True)]
    else:
        extra = [("float32", "NHWC", [2, 3, 5, 17], True),
                 ("float32", "NHWC", [2, 3, 5, 17], False),
                 ("float32", "NCHW", [2, 3, 5, 17], True)]
    for fmt in ("NHWC", "NCHW"):
        for training in (True, False):
            extra.append(("float32", fmt, [0, 2, 3, 6], training))
    for dtype, fmt, logical, training in extra:
        cases.append(grad_case(version, dtype, fmt, logical, training))
    return cases


# --------------------------------------------------------------------------------------------
# second order

def second_order_case(dtype, fmt, logical, training):
    c = logical[-1]
    name = "gradgrad_%s_%s_%s_%s" % (dtype, fmt, shape_tag(logical), mode_tag(training))
    eps = epsilon_for(logical)
    g = Gen(name)
    x = g.x(logical, fmt, dtype)
    dy = g.normal(x.shape, dtype)
    scale = g.uniform(0.5, 1.5, [c], dtype)
    offset = g.normal([c], dtype)
    if training:
        mean = np.zeros([0], np_dtype(dtype))
        var = np.zeros([0], np_dtype(dtype))
    else:
        mean = g.normal([c], dtype, 0.5)
        var = g.uniform(0.5, 2.0, [c], dtype)
    A = g.normal(x.shape, dtype)
    a = g.normal([c], dtype)
    b = g.normal([c], dtype)
    tx, tdy, tscale, toffset = (const(v, dtype) for v in (x, dy, scale, offset))
    tmean, tvar, tA, ta, tb = (const(v, dtype) for v in (mean, var, A, a, b))
    case = {"name": name, "op": "FusedBatchNormGradV3",
            "order": 2,
            "attrs": {"epsilon": eps, "data_format": fmt, "is_training": training,
                      "exponential_avg_factor": 1.0}}
    if dtype == "float32":
        with tf.GradientTape(persistent=True) as outer:
            outer.watch([tx, tscale, tdy])
            with tf.GradientTape() as inner:
                inner.watch([tx, tscale, toffset])
                fwd = tf.raw_ops.FusedBatchNormV3(
                    x=tx, scale=tscale, offset=toffset, mean=tmean, variance=tvar,
                    epsilon=eps, exponential_avg_factor=1.0, data_format=fmt,
                    is_training=training)
                y = fwd[0]
            dx, dscale, doffset = inner.gradient(y, [tx, tscale, toffset],
                                                 output_gradients=tdy)
            loss = (tf.reduce_sum(tA * dx) + tf.reduce_sum(ta * dscale)
                    + tf.reduce_sum(tb * doffset))
        gdy, gx, gscale = outer.gradient(loss, [tdy, tx, tscale])
        if training:
            rs1, rs2 = fwd[3].numpy(), fwd[4].numpy()
        else:
            rs1, rs2 = mean, var
        rs3 = fwd[5].numpy()
        case["source"] = ("tf.raw_ops.FusedBatchNormV3 under two nested tf.GradientTape; "
                          "first order by its registered gradient (FusedBatchNormGradV3), "
                          "second order by the registered gradient of FusedBatchNormGradV3")
    else:
        from tensorflow.python.ops import nn_fused_batch_norm_grad as nfg
        # The attribute is a float32; TensorFlow's gradient code reads it back as such.
        eps_attr = float(np.float32(eps))
        x_stat = x.astype(np.float64)
        ax = tuple(i for i in range(x.ndim) if i != (1 if channels_first(fmt) else x.ndim - 1))
        if training:
            # what the fused forward would store: batch mean and biased variance
            rs1 = x_stat.mean(axis=ax)
            rs2 = x_stat.var(axis=ax)
        else:
            rs1, rs2 = mean, var
        rs3 = np.zeros([0], np.float64)
        with tf.GradientTape(persistent=True) as outer:
            outer.watch([tx, tscale, tdy])
            dx, dscale, doffset = nfg._BatchNormGrad(
                tdy, tx, tscale, const(rs1, dtype), const(rs2, dtype), eps_attr,
                fmt.encode(), training)
            loss = (tf.reduce_sum(tA * dx) + tf.reduce_sum(ta * dscale)
                    + tf.reduce_sum(tb * doffset))
        gdy, gx, gscale = outer.gradient(loss, [tdy, tx, tscale])
        case["source"] = ("TensorFlow's registered gradient of FusedBatchNormGradV3 "
                          "(nn_fused_batch_norm_grad._BatchNormGrad differentiated by "
                          "tf.GradientTape) evaluated in float64, because no FusedBatchNorm* "
                          "op has a float64 kernel; epsilon used as float(float32(epsilon)); "
                          "reserve_space_1/2 in training are the NumPy batch mean and biased "
                          "variance (not read by this composite in training)")
    case["inputs"] = {
        "x": enc(x, dtype), "scale": enc(scale, dtype), "offset": enc(offset, dtype),
        "mean": enc(mean, dtype), "variance": enc(var, dtype), "y_backprop": enc(dy, dtype),
        "reserve_space_1": enc(rs1, dtype), "reserve_space_2": enc(rs2, dtype),
        "reserve_space_3": enc(rs3, dtype),
        "A": enc(A, dtype), "a": enc(a, dtype), "b": enc(b, dtype)}
    case["outputs"] = {
        "x_backprop": enc(dx, dtype), "scale_backprop": enc(dscale, dtype),
        "offset_backprop": enc(doffset, dtype),
        "d_y_backprop": enc(gdy, dtype), "d_x": enc(gx, dtype), "d_scale": enc(gscale, dtype)}
    return case


def second_order_cases():
    cases = []
    for dtype in ("float32", "float64"):
        for logical, fmts in [([2, 3, 4, 5], ("NHWC", "NCHW")),
                              ([2, 3, 2, 2], ("NHWC", "NCHW")),
                              ([2, 3, 2, 2, 2], ("NDHWC", "NCDHW"))]:
            for fmt in fmts:
                for training in (True, False):
                    cases.append(second_order_case(dtype, fmt, logical, training))
    return cases


# --------------------------------------------------------------------------------------------
# writing

def dumps(obj, indent=0):
    """JSON with one line per tensor (its data list on that line)."""
    pad = " " * indent
    if isinstance(obj, dict):
        if "data" in obj and "dtype" in obj:
            return json.dumps(obj, separators=(", ", ": "), allow_nan=False)
        items = [pad + " " + json.dumps(k) + ": " + dumps(v, indent + 1)
                 for k, v in obj.items()]
        return "{\n" + ",\n".join(items) + "\n" + pad + "}"
    if isinstance(obj, list) and obj and isinstance(obj[0], dict):
        items = [pad + " " + dumps(v, indent + 1) for v in obj]
        return "[\n" + ",\n".join(items) + "\n" + pad + "]"
    return json.dumps(obj, allow_nan=False)


def write_atomic(path, text):
    d = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".tmp_", suffix=".json", dir=d)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as fh:
            fh.write(text)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp creates 0600
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def generate(outdir):
    _import_tf()
    os.makedirs(outdir, exist_ok=True)
    versions = {"tensorflow_version": tf.__version__, "numpy_version": np.__version__,
                "ml_dtypes_version": ml_dtypes.__version__}
    files = [("forward.json", forward_cases),
             ("grad_v3.json", lambda: grad_cases(3)),
             ("grad_v2.json", lambda: grad_cases(2)),
             ("second_order.json", second_order_cases)]
    for fname, fn in files:
        cases = fn()
        names = [c["name"] for c in cases]
        assert len(names) == len(set(names)), "duplicate case names in " + fname
        doc = {"generator": GENERATOR, **versions,
               "environment": "TF_ENABLE_ONEDNN_OPTS=0, 1 intra-op and 1 inter-op thread, CPU",
               "cases": cases}
        write_atomic(os.path.join(outdir, fname), dumps(doc) + "\n")
        print("%-18s %4d cases" % (fname, len(cases)))


# --------------------------------------------------------------------------------------------
# --check: recompute the stored cases from the contract's formulas with NumPy (float64)

def dec(t):
    vals = [float(v) for v in t["data"]]
    return np.array(vals, np.float64).reshape(t["shape"])


def to_cl(a, fmt):
    """to channels-last 2-D [R, C]"""
    if channels_first(fmt):
        a = np.moveaxis(a, 1, -1)
    return a.reshape(-1, a.shape[-1])


def from_cl(a2, shape, fmt):
    if channels_first(fmt):
        cl = [shape[0]] + list(shape[2:]) + [shape[1]]
        return np.moveaxis(a2.reshape(cl), -1, 1)
    return a2.reshape(shape)


def f32(v):
    return float(np.float32(v))


def ref_forward(case):
    at, i = case["attrs"], case["inputs"]
    fmt, eps, f = at["data_format"], f32(at["epsilon"]), f32(at["exponential_avg_factor"])
    x = dec(i["x"])
    x2 = to_cl(x, fmt)
    s, o = dec(i["scale"]), dec(i["offset"])
    R, C = x2.shape
    out = {}
    with np.errstate(invalid="ignore", divide="ignore"):
        if at["is_training"]:
            m = x2.sum(0) / R if R else np.full(C, np.nan)
            v = ((x2 - m) ** 2).sum(0) / R if R else np.full(C, np.nan)
            k = R / max(R - 1, 1)
            if f == 1.0:
                bm, bv = m, v * k
            else:
                bm = (1 - f) * dec(i["mean"]) + f * m
                bv = (1 - f) * dec(i["variance"]) + f * k * v
            out["reserve_space_1"], out["reserve_space_2"] = m, v
        else:
            m, v = dec(i["mean"]), dec(i["variance"])
            bm, bv = m, v
            if R == 0:
                bm = bv = np.full(C, np.nan)
        r = 1.0 / np.sqrt(v + eps)
        out["y"] = from_cl((x2 - m) * r * s + o, x.shape, fmt)
        out["batch_mean"], out["batch_variance"] = bm, bv
    return out


def ref_grad(case):
    at, i = case["attrs"], case["inputs"]
    fmt, eps = at["data_format"], f32(at["epsilon"])
    x, dy = dec(i["x"]), dec(i["y_backprop"])
    x2, g2 = to_cl(x, fmt), to_cl(dy, fmt)
    s, mu, var = dec(i["scale"]), dec(i["reserve_space_1"]), dec(i["reserve_space_2"])
    R, C = x2.shape
    r = 1.0 / np.sqrt(var + eps)
    xc = x2 - mu
    ob = g2.sum(0)
    sb = (g2 * xc).sum(0) * r
    if at["is_training"] and R:
        dx = s * r * (g2 - g2.sum(0) / R - xc * r * r * (g2 * xc).sum(0) / R)
    else:
        dx = g2 * s * r
    return {"x_backprop": from_cl(dx, x.shape, fmt), "scale_backprop": sb,
            "offset_backprop": ob}


def ref_second(case):
    at, i = case["attrs"], case["inputs"]
    fmt = at["data_format"]
    eps = f32(at["epsilon"])
    x, g, A = dec(i["x"]), dec(i["y_backprop"]), dec(i["A"])
    x2, g2, A2 = to_cl(x, fmt), to_cl(g, fmt), to_cl(A, fmt)
    gam, a, b = dec(i["scale"]), dec(i["a"]), dec(i["b"])
    R = x2.shape[0]
    mean = lambda t: t.sum(0) / R
    if at["is_training"]:
        m = mean(x2)
        v = mean((x2 - m) ** 2)
        r = 1.0 / np.sqrt(v + eps)
        xh = (x2 - m) * r
        gb, Ab = mean(g2), mean(A2)
        mAx, mgx, mAg = mean(A2 * xh), mean(g2 * xh), mean(A2 * (g2 - gb))
        d_g = gam * r * (A2 - Ab - xh * mAx) + a * xh + b
        d_x = (gam * r * r * (3 * xh * mAx * mgx - xh * mAg - (A2 - Ab) * mgx - (g2 - gb) * mAx)
               + a * r * (g2 - gb - xh * mgx))
        d_s = r * (A2 * (g2 - gb - xh * mgx)).sum(0)
    else:
        mu, var = dec(i["mean"]), dec(i["variance"])
        r = 1.0 / np.sqrt(var + eps)
        d_g = gam * r * A2 + a * (x2 - mu) * r + b
        d_x = a * g2 * r
        d_s = r * (A2 * g2).sum(0)
    out = ref_grad(case)  # the first-order outputs stored alongside
    out.update({"d_y_backprop": from_cl(d_g, x.shape, fmt),
                "d_x": from_cl(d_x, x.shape, fmt), "d_scale": d_s})
    return out


def compare(ref, got):
    """(normwise relative error, max elementwise relative error where |ref| >= 1e-3*max)"""
    ref, got = np.asarray(ref, np.float64).reshape(-1), np.asarray(got).reshape(-1)
    if ref.size == 0:
        return 0.0, 0.0
    if np.isnan(ref).any() or np.isnan(got).any():
        same = np.array_equal(np.isnan(ref), np.isnan(got))
        ok = ~np.isnan(ref)
        if not same:
            return float("inf"), float("inf")
        ref, got = ref[ok], got[ok]
        if ref.size == 0:
            return 0.0, 0.0
    scale = np.abs(ref).max()
    err = np.abs(got - ref)
    norm = float(err.max() / scale) if scale > 0 else float(err.max())
    if scale == 0:
        return norm, norm
    big = np.abs(ref) >= 1e-3 * scale
    elem = float((err[big] / np.abs(ref[big])).max())
    return norm, elem


def check(outdir):
    refs = {"forward.json": ref_forward, "grad_v3.json": ref_grad, "grad_v2.json": ref_grad,
            "second_order.json": ref_second}
    worst = {}
    for fname, fn in refs.items():
        with open(os.path.join(outdir, fname), encoding="utf-8") as fh:
            doc = json.load(fh)
        for case in doc["cases"]:
            ref = fn(case)
            io = case["inputs"]["x"]["dtype"]
            for k, v in ref.items():
                t = case["outputs"][k]
                if t["data"] is None:
                    continue
                n, e = compare(v, dec(t))
                key = (fname, k, io)
                if key not in worst or n > worst[key][0]:
                    worst[key] = (n, e, case["name"])
    print("%-18s %-16s %-9s %-10s %-10s %s" % ("file", "output", "io dtype", "norm-rel",
                                              "elem-rel", "worst case"))
    for (fname, k, io), (n, e, name) in sorted(worst.items()):
        print("%-18s %-16s %-9s %-10.3g %-10.3g %s" % (fname, k, io, n, e, name))


def main(argv):
    args = [a for a in argv[1:] if a != "--check"]
    if len(args) != 1:
        print(__doc__)
        return 2
    if "--check" in argv:
        check(args[0])
    else:
        generate(args[0])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
