"""Constant folding of lowered ``tfl.*`` ops with NumPy (weight transposes, casts...)."""

from __future__ import annotations

import numpy as np

from fuselite.ir import Function

MAX_ELEMENTS = 1 << 24


def _binary(f):
    return lambda op, a, b: [f(a, b).astype(op.outputs[0].dtype)]


_FOLDERS = {
    "TRANSPOSE": lambda op, x, p: [np.transpose(x, p)],
    "RESHAPE": lambda op, x, s=None: [x.reshape(op.outputs[0].shape if s is None else [int(d) for d in s])],
    "CAST": lambda op, x: [x.astype(op.outputs[0].dtype)],
    "ADD": _binary(np.add), "SUB": _binary(np.subtract), "MUL": _binary(np.multiply),
    "MAXIMUM": _binary(np.maximum), "MINIMUM": _binary(np.minimum),
    "NEG": lambda op, x: [-x],
    "CONCATENATION": lambda op, *xs: [np.concatenate(xs, axis=op.attrs["axis"])],
    "PACK": lambda op, *xs: [np.stack(xs, axis=op.attrs["axis"])],
    "EXPAND_DIMS": lambda op, x, a: [np.expand_dims(x, int(a))],
    "FILL": lambda op, s, v: [np.full([int(d) for d in s], v, dtype=v.dtype)],
}


def is_pinned(op) -> bool:
    """Ops that write or read stateful (variable) tensors must stay exactly as built."""
    return bool(op.attrs.get("_pinned")) or any(o.meta.get("is_variable") for o in op.outputs)


def fold_tfl_function(fn: Function) -> int:
    folded = 0
    kept = []
    for op in fn.ops:
        f = _FOLDERS.get(op.kind)
        if (f is not None and op.inputs and all(v is not None and v.is_const for v in op.inputs)
                and op.attrs.get("fused_activation_function", "NONE") == "NONE" and not is_pinned(op)):
            try:
                results = f(op, *[v.const for v in op.inputs])
            except Exception:
                results = None
            if results is not None and all(r.size <= MAX_ELEMENTS for r in results):
                for o, r in zip(op.outputs, results):
                    o.const = np.ascontiguousarray(np.asarray(r, dtype=o.dtype))
                    o.shape = tuple(o.const.shape)
                    o.producer = None
                folded += 1
                continue
        kept.append(op)
    fn.ops = kept
    return folded
