"""Mutability analysis: read-only variables become constants.

A variable that the program assigns is mutable; converting mutable state is a later
feature, so for now such a program gets a :class:`MutableVariableError` naming every
assigned variable.
"""

from __future__ import annotations

import numpy as np

from fuselite.errors import MutableVariableError
from fuselite.ir import Module

_ASSIGN_OPS = {
    "AssignVariableOp", "AssignAddVariableOp", "AssignSubVariableOp", "ResourceScatterUpdate",
    "ResourceScatterAdd", "ResourceScatterSub", "ResourceScatterNdUpdate", "ResourceScatterNdAdd",
    "ResourceApplyGradientDescent", "AssignVariableXlaConcatND",
}


def _read_variable(handle, dtype) -> np.ndarray:
    import tensorflow as tf

    return np.asarray(tf.raw_ops.ReadVariableOp(resource=handle, dtype=tf.as_dtype(dtype)).numpy())


def _gather_node_def(op, params_dtype):
    """A GatherV2 NodeDef, so later shape inference and folding see the rewritten op."""
    import tensorflow as tf
    from tensorflow.core.framework import node_def_pb2

    nd = node_def_pb2.NodeDef(name=op.name or "gather", op="GatherV2")
    nd.attr["Tparams"].type = tf.as_dtype(params_dtype).as_datatype_enum
    nd.attr["Tindices"].type = tf.as_dtype(op.inputs[1].dtype).as_datatype_enum
    nd.attr["Taxis"].type = tf.int32.as_datatype_enum
    nd.attr["batch_dims"].i = int(op.attrs.get("batch_dims", 0))
    return nd


def read_variable_value(v, dtype) -> np.ndarray:
    """The current value of the captured variable behind resource value ``v``."""
    return _read_variable(v.meta["handle"], dtype)


def freeze_variables(module: Module) -> list[dict]:
    """Replace reads of captured, never-assigned variables with constants.

    Returns ``[{"name":..., "shape":..., "dtype":...}, ...]`` for the report.
    """
    problems = []
    for fn in module.functions.values():
        for op in fn.ops:
            if op.kind in _ASSIGN_OPS and op.inputs and op.inputs[0] is not None:
                var = op.inputs[0].meta.get("variable", op.inputs[0].name)
                problems.append(f"variable '{var}' is assigned by {op.describe()}")
    if problems:
        raise MutableVariableError(
            "the program assigns variables; fuselite freezes read-only variables only "
            "(mutable state is not supported yet)",
            sorted(set(problems)),
        )
    frozen: dict[str, dict] = {}
    cache: dict[int, np.ndarray] = {}
    for fn in module.functions.values():
        kept = []
        for op in fn.ops:
            src = op.inputs[0] if op.inputs else None
            if op.kind == "ReadVariableOp" and src is not None and "handle" in src.meta:
                arr = cache.get(src.uid)
                if arr is None:
                    arr = cache[src.uid] = _read_variable(src.meta["handle"], op.outputs[0].dtype)
                const = fn.const(arr, src.meta["variable"])
                fn.replace_uses(op.outputs[0], const)
                name = src.meta["variable"]
                frozen[name] = {"name": name, "shape": list(arr.shape), "dtype": arr.dtype.name}
                continue
            if op.kind == "ResourceGather" and src is not None and "handle" in src.meta:
                # tf-keras Embedding gathers straight from the variable
                arr = cache.get(src.uid)
                if arr is None:
                    arr = cache[src.uid] = _read_variable(src.meta["handle"], op.attrs["dtype"])
                name = src.meta["variable"]
                frozen[name] = {"name": name, "shape": list(arr.shape), "dtype": arr.dtype.name}
                op.type = "tf.GatherV2"
                op.inputs = [fn.const(arr, name), op.inputs[1], fn.const(np.array(0, np.int32), "axis")]
                op.attrs = {"batch_dims": op.attrs.get("batch_dims", 0),
                            "_node_def": _gather_node_def(op, arr.dtype), "_stateful": False}
            kept.append(op)
        fn.ops = kept
    return sorted(frozen.values(), key=lambda d: d["name"])
