"""The lowering table: one small rule per TensorFlow op type (tf2onnx / JAX style).

A rule receives a :class:`LowerCtx` for one ``tf.*`` op and returns the values that
replace the op's outputs, emitting ``tfl.*`` ops through the context::

    @lowering("Relu")
    def lower_relu(ctx):
        return [ctx.emit("RELU", [ctx.input(0)])]
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from fuselite.errors import ConversionError
from fuselite.ir import Function, Op, Value

LoweringRule = Callable[["LowerCtx"], Sequence[Value]]
LOWERINGS: dict[str, LoweringRule] = {}


def lowering(*tf_types: str):
    """Register the decorated function as the lowering rule of ``tf_types``."""

    def register(rule: LoweringRule) -> LoweringRule:
        for t in tf_types:
            LOWERINGS[t] = rule
        return rule

    return register


class LowerError(ConversionError):
    """A rule cannot express this particular instance of the op."""


class LowerCtx:
    """What a lowering rule sees: the op, its function, and helpers to emit TFLite ops."""

    def __init__(self, fn: Function, op: Op, module=None):
        self.fn = fn
        self.op = op
        self.module = module
        self.new_ops: list[Op] = []

    # -- reading the op --------------------------------------------------------
    def input(self, i: int) -> Value:
        return self.op.inputs[i]

    @property
    def inputs(self) -> list[Value]:
        return self.op.inputs

    def attr(self, key: str, default: Any = None) -> Any:
        return self.op.attrs.get(key, default)

    def out(self, i: int = 0) -> Value:
        return self.op.outputs[i]

    def const_input(self, i: int, what: str = "") -> np.ndarray:
        v = self.op.inputs[i]
        if v is None or not v.is_const:
            raise LowerError(f"{self.op.describe()}: {what or f'input {i}'} must be a constant")
        return v.const

    def fail(self, why: str):
        raise LowerError(f"{self.op.describe()}: {why}")

    # -- building --------------------------------------------------------------
    def emit(self, kind: str, inputs: Sequence[Value | None], options: dict | None = None,
             like: Value | None = None, dtype=None, shape="same", n_out: int = 1,
             out_specs: Sequence[tuple] | None = None) -> Value | list[Value]:
        """Emit ``tfl.<kind>``. Output dtype/shape default to the TF op's first output."""
        if out_specs is None:
            ref = like if like is not None else self.out(0)
            spec = (dtype if dtype is not None else ref.dtype, ref.shape if shape == "same" else shape)
            out_specs = [spec] * n_out
        op = self.fn.make_op("tfl." + kind, inputs, out_specs, options or {},
                             name=self.op.name if not self.new_ops else f"{self.op.name}/{kind.lower()}",
                             location=self.op.location)
        self.new_ops.append(op)
        return op.outputs[0] if len(op.outputs) == 1 else op.outputs

    def const(self, array, dtype=None, name: str = "") -> Value:
        return self.fn.const(np.asarray(array, dtype=dtype), name or f"{self.op.name}/const")

    def i32(self, values) -> Value:
        return self.const(np.asarray(values, dtype=np.int32))

    def transpose(self, v: Value, perm) -> Value:
        perm = list(perm)
        if v.is_const:
            return self.const(np.transpose(v.const, perm))
        shape = None if v.shape is None else tuple(v.shape[p] for p in perm)
        return self.emit("TRANSPOSE", [v, self.i32(perm)], dtype=v.dtype, shape=shape)

    def reshape(self, v: Value, shape) -> Value:
        shape = [int(d) for d in shape]
        if v.is_const:
            return self.const(v.const.reshape(shape))
        out = tuple(None if d == -1 else d for d in shape)
        return self.emit("RESHAPE", [v, self.i32(shape)], dtype=v.dtype, shape=out)

    def cast(self, v: Value, dtype) -> Value:
        if np.dtype(v.dtype) == np.dtype(dtype):
            return v
        if v.is_const:
            return self.const(v.const.astype(dtype))
        return self.emit("CAST", [v], dtype=np.dtype(dtype), shape=v.shape)

    def int32_input(self, i: int) -> Value:
        """An index-like input as int32 (TFLite kernels mostly want int32)."""
        v = self.input(i)
        if v.dtype == np.int64 and v.is_const:
            return self.const(v.const.astype(np.int32))
        return v
