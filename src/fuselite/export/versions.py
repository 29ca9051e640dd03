"""Operator versions: the lowest version of each builtin that expresses how it is used.

Facts from LiteRT's op versioning (``tensorflow/lite/tools/versioning/op_version.cc``)
and the runtime-version table (``runtime_version.cc``). Ops not listed use version 1.
"""

from __future__ import annotations

import numpy as np

from fuselite.ir import Module, Op


def _dtype(v):
    return None if v is None or isinstance(v.dtype, str) else np.dtype(v.dtype)


def _rank(v):
    return v.rank if v is not None and v.rank is not None else 0


def _fully_connected(op: Op) -> int:
    if op.attrs.get("keep_num_dims"):
        return 5
    if len(op.inputs) > 2 and op.inputs[2] is None:
        return 6
    return 1


def _broadcast_binary(op: Op) -> int:
    a, b = op.inputs[0], op.inputs[1]
    dt = _dtype(a)
    if dt == np.int64 and op.kind in ("ADD", "SUB", "MUL"):
        return 4 if op.kind != "SUB" else 5
    if max(_rank(a), _rank(b)) > 4:
        return {"ADD": 3, "SUB": 3, "MUL": 4, "DIV": 2}.get(op.kind, 1)
    if dt == np.int32 and op.kind == "DIV":
        return 2
    return 1


def _strided_slice(op: Op) -> int:
    if op.attrs.get("offset"):
        return 8
    if op.attrs.get("ellipsis_mask") or op.attrs.get("new_axis_mask"):
        return 6  # ellipsis / new axis
    if _rank(op.inputs[0]) > 4:
        return 5
    if _dtype(op.inputs[0]) == np.bool_:
        return 3
    return 1


def _by_dtype(versions: dict):
    def rule(op: Op) -> int:
        return versions.get(_dtype(op.inputs[0]), 1)

    return rule


def _gather(op: Op) -> int:
    if op.attrs.get("batch_dims"):
        return 5
    dt = _dtype(op.inputs[0])
    if dt == np.bool_:
        return 3
    if dt == np.int64 or _dtype(op.inputs[1]) == np.int64:
        return 1
    return 1


def _transpose(op: Op) -> int:
    if _rank(op.inputs[0]) > 5:
        return 6
    if _rank(op.inputs[0]) > 4:
        return 4
    if _dtype(op.inputs[0]) == np.bool_:
        return 3
    return 1


def _concat(op: Op) -> int:
    return 3 if _dtype(op.inputs[0]) in (np.dtype(np.int64), np.dtype(np.bool_)) else 1


def _reducer(op: Op) -> int:
    return 1


_RULES = {
    "FULLY_CONNECTED": _fully_connected,
    "ADD": _broadcast_binary, "SUB": _broadcast_binary, "MUL": _broadcast_binary, "DIV": _broadcast_binary,
    "STRIDED_SLICE": _strided_slice,
    "GATHER": _gather,
    "TRANSPOSE": _transpose,
    "CONCATENATION": _concat,
    "SELECT_V2": lambda op: 1,
    "CAST": lambda op: 1,
    "MEAN": _reducer,
    "BATCH_MATMUL": lambda op: 4 if op.attrs.get("adj_x") or op.attrs.get("adj_y") else 1,
    "SQUARED_DIFFERENCE": lambda op: 1,
    "PACK": _by_dtype({np.dtype(np.int64): 3, np.dtype(np.bool_): 3}),
    "RESHAPE": lambda op: 1,
    "GELU": lambda op: 1,
    "LESS": lambda op: 1,
}

# Earliest LiteRT runtime per (op, version) that this exporter emits; the model's
# min_runtime_version is the maximum over its ops.
_RUNTIME = {
    ("FULLY_CONNECTED", 5): "2.0.0", ("FULLY_CONNECTED", 6): "2.1.0", ("ADD", 3): "2.5.0",
    ("ADD", 4): "2.6.0", ("MUL", 4): "2.6.0", ("SUB", 3): "2.3.0", ("SUB", 5): "2.6.0", ("DIV", 2): "2.3.0",
    ("STRIDED_SLICE", 5): "2.5.0", ("STRIDED_SLICE", 6): "2.6.0", ("STRIDED_SLICE", 8): "2.14.0",
    ("GATHER", 5): "2.6.0", ("TRANSPOSE", 4): "2.5.0", ("TRANSPOSE", 6): "2.12.0",
    ("BATCH_MATMUL", 1): "2.3.0", ("BATCH_MATMUL", 4): "2.5.0", ("GELU", 1): "2.9.0",
    ("WHILE", 1): "1.15.0", ("IF", 1): "1.15.0", ("SELECT_V2", 1): "2.2.0", ("BROADCAST_TO", 2): "2.5.0",
    ("DYNAMIC_UPDATE_SLICE", 1): "2.9.0", ("HARD_SWISH", 1): "1.15.0", ("CUMSUM", 1): "2.4.0",
    ("REDUCE_ALL", 1): "2.9.0", ("SQUARED_DIFFERENCE", 1): "1.13.1", ("RSQRT", 1): "1.10.0",
}


def op_version(op: Op) -> int:
    rule = _RULES.get(op.kind)
    return rule(op) if rule else 1


def _parse(v: str) -> tuple:
    return tuple(int(x) for x in v.split("."))


def min_runtime_version(module: Module) -> str:
    best = "1.5.0"
    for fn in module.functions.values():
        for op in fn.ops:
            rv = _RUNTIME.get((op.kind, op_version(op)))
            if rv and _parse(rv) > _parse(best):
                best = rv
    return best
