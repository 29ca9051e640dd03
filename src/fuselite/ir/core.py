"""The fuselite graph IR: a small, readable SSA graph in the spirit of torch.fx.

A :class:`Module` holds named :class:`Function` objects. A function is an ordered
list of :class:`Op` nodes; each op consumes and produces :class:`Value` objects.
Ops carry a dialect-qualified type (``tf.MatMul`` straight from TensorFlow,
``tfl.FULLY_CONNECTED`` after lowering) and a plain-dict ``attrs``.

Example::

    fn = Function("main")
    x = fn.add_input("x", np.float32, (None, 4))
    (y,) = fn.add_op("tfl.RELU", [x], [(np.float32, (None, 4))]).outputs
    fn.outputs = [y]
    fn.uses(x)          # -> [the RELU op]

Uses are indexed: ``fn.ops`` and every ``op.inputs`` are lists that tell their function
when they change (however they are changed: ``append``, slice assignment, ``remove``,
``op.inputs[1] = v``, ``fn.ops = [...]``), so :meth:`Function.users` and
:meth:`Function.uses` are always current and cost nothing between changes. The text
form is in :mod:`fuselite.ir.text`, the invariants in :mod:`fuselite.ir.invariants`.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

Shape = tuple[int | None, ...] | None  # None: unknown rank; None dim: unknown size

_ids = itertools.count()


class Shaped:
    """Rank and static-ness derived from a ``shape`` attribute (shared by values and rule args)."""

    shape: Shape

    @property
    def rank(self) -> int | None:
        return None if self.shape is None else len(self.shape)

    @property
    def static_shape(self) -> bool:
        return self.shape is not None and all(d is not None for d in self.shape)


@dataclass(frozen=True)
class Quantization:
    """Affine quantization of an integer tensor: ``real = scale * (q - zero_point)``.

    One scale (per-tensor) or one per index of dimension ``axis`` (per-channel), as the
    flatbuffer's ``QuantizationParameters`` (``quantized_dimension`` = ``axis``).
    """

    scale: tuple[float, ...]
    zero_point: tuple[int, ...]
    axis: int = 0

    @property
    def per_channel(self) -> bool:
        return len(self.scale) > 1

    def as_dict(self) -> dict:
        return {"scale": list(self.scale), "zero_point": list(self.zero_point), "axis": self.axis}


@dataclass(frozen=True, eq=False)
class BlockwiseQuantization:
    """Blockwise quantization of a 2-D int4 weight ``[outputs, inputs]``: ``real = scales[o, i // block_size] * q``.

    The flatbuffer's ``BlockwiseQuantization`` details: the scales are a FLOAT16 tensor of their own
    (``[outputs, inputs / block_size]``, named by index, not an op input), no zero points, blocks along the
    inputs (``quantized_dimension`` 0 names the outputs). LiteRT's ``FULLY_CONNECTED`` reads it
    (``fully_connected.cc``, ``EvalBlockwise4Bit``; XNNPACK's blockwise int4 GEMM). Compared by identity.
    """

    scales: np.ndarray  # float16 [outputs, inputs / block_size]
    block_size: int
    axis: int = 0

    per_channel = False

    def as_dict(self) -> dict:
        return {"block_size": self.block_size, "scales": list(self.scales.shape),
                "scale_range": [float(self.scales.min()), float(self.scales.max())] if self.scales.size else []}


@dataclass(eq=False)
class Value(Shaped):
    """One SSA value: a tensor with a dtype, a (possibly partial) shape, maybe a constant.

    ``dtype`` is a numpy dtype, or the strings ``"resource"`` / ``"variant"``.
    ``const`` holds the numpy value when the value is a compile-time constant.
    ``producer`` is the op that defines it (``None`` for function inputs).
    ``quant`` holds the :class:`Quantization` of an integer value that stands for reals.
    """

    name: str
    dtype: Any
    shape: Shape
    const: np.ndarray | None = None
    producer: Op | None = None
    index: int = 0
    meta: dict = field(default_factory=dict)
    quant: Quantization | BlockwiseQuantization | None = None
    uid: int = field(default_factory=lambda: next(_ids))

    @property
    def is_const(self) -> bool:
        return self.const is not None

    def __repr__(self) -> str:
        s = "?" if self.shape is None else "x".join("?" if d is None else str(d) for d in self.shape)
        c = " const" if self.is_const else ""
        return f"%{self.name}:{dtype_name(self.dtype)}[{s}]{c}"


def dtype_name(dt) -> str:
    return dt if isinstance(dt, str) else np.dtype(dt).name


class _TrackedList(list):
    """A list that calls ``self._changed()`` after every change (the users index's source of truth)."""

    __slots__ = ()

    def _changed(self) -> None:  # pragma: no cover - overridden
        raise NotImplementedError

    def _wrap(name):
        def method(self, *args, **kwargs):
            result = getattr(list, name)(self, *args, **kwargs)
            self._changed()
            return result

        method.__name__ = name
        return method

    for _name in ("__setitem__", "__delitem__", "__iadd__", "__imul__", "append", "extend", "insert", "pop",
                  "remove", "clear", "sort", "reverse"):
        locals()[_name] = _wrap(_name)
    del _name, _wrap


class _Operands(_TrackedList):
    """``op.inputs``: a change marks the users index of the op's function stale."""

    __slots__ = ("op",)

    def __init__(self, values, op: Op):
        super().__init__(values)
        self.op = op

    def _changed(self) -> None:
        fn = self.op._function
        if fn is not None:
            fn._users = None


class _OpList(_TrackedList):
    """``fn.ops``: a change marks the function's users index stale.

    Building the index tells each op its function, so that a later change of the op's
    inputs marks the index stale too.
    """

    __slots__ = ("fn",)

    def __init__(self, ops, fn: Function):
        super().__init__(ops)
        self.fn = fn
        fn._users = None

    def _changed(self) -> None:
        self.fn._users = None


@dataclass(eq=False)
class Op:
    """One operation. ``location`` is the user's source line (``file:line``) if known.

    ``inputs`` may hold ``None`` for an omitted optional operand (LiteRT's ``-1``).
    """

    type: str
    inputs: list[Value | None]
    outputs: list[Value]
    attrs: dict[str, Any] = field(default_factory=dict)
    name: str = ""
    location: str | None = None
    _function: Function | None = field(default=None, repr=False, compare=False)

    def __setattr__(self, key, value):
        if key == "inputs":
            value = _Operands(value, self)
            fn = self.__dict__.get("_function")
            if fn is not None:
                fn._users = None
        object.__setattr__(self, key, value)

    @property
    def dialect(self) -> str:
        return self.type.split(".", 1)[0]

    @property
    def kind(self) -> str:
        return self.type.split(".", 1)[1]

    def describe(self) -> str:
        where = f" (at {self.location})" if self.location else ""
        return f"{self.kind} '{self.name}'{where}"

    def __repr__(self) -> str:
        outs = ", ".join(map(repr, self.outputs))
        ins = ", ".join("<none>" if v is None else f"%{v.name}" for v in self.inputs)
        attrs = {k: v for k, v in self.attrs.items() if not k.startswith("_")}
        return f"{outs} = {self.type}({ins}) {attrs if attrs else ''}".rstrip()


# Ops whose order relative to each other is part of the program's meaning (variable state).
STATEFUL_OPS = frozenset({
    "tf.VarHandleOp", "tf.ReadVariableOp", "tf.AssignVariableOp", "tf.AssignAddVariableOp",
    "tf.AssignSubVariableOp", "tfl.READ_VARIABLE", "tfl.ASSIGN_VARIABLE", "tfl.CALL_ONCE",
    "tfl.HASHTABLE_IMPORT", "tfl.HASHTABLE_FIND",  # a table is found in after its import (passes/tables.py)
})


def is_ordered(op: Op) -> bool:
    """True for ops that read or write variable state (or call functions that do)."""
    return op.type in STATEFUL_OPS or bool(op.attrs.get("_side_effect"))


class Function:
    """An ordered list of ops with inputs and outputs (a TFLite subgraph after export)."""

    def __init__(self, name: str):
        self.name = name
        self.inputs: list[Value] = []
        self.outputs: list[Value] = []
        self._users: dict[int, list[Op]] | None = None
        self.ops: list[Op] = []
        self.attrs: dict[str, Any] = {}
        self.input_names: list[str] = []
        self.output_names: list[str] = []
        self._names: set[str] = set()

    @property
    def ops(self) -> list[Op]:
        """The ops in program order (a list whose changes keep the users index current)."""
        return self._ops

    @ops.setter
    def ops(self, ops: Iterable[Op]) -> None:
        self._ops = _OpList(ops, self)

    # -- construction ---------------------------------------------------------
    def unique_name(self, base: str) -> str:
        name, i = base, 1
        while name in self._names:
            name = f"{base}_{i}"
            i += 1
        self._names.add(name)
        return name

    def add_input(self, name: str, dtype, shape: Shape) -> Value:
        v = Value(self.unique_name(name), dtype, shape)
        self.inputs.append(v)
        return v

    def const(self, array, name: str = "const", dtype=None, quant: Quantization | None = None) -> Value:
        """A constant value (not an op: constants live on values); ``quant`` for a quantized one."""
        arr = np.asarray(array, dtype=dtype)
        return Value(self.unique_name(name), arr.dtype, tuple(arr.shape), const=arr, quant=quant)

    def make_op(
        self,
        type: str,
        inputs: Sequence[Value | None],
        outputs: Sequence[tuple[Any, Shape]],
        attrs: dict | None = None,
        name: str = "",
        location: str | None = None,
    ) -> Op:
        """Create an op (not yet placed) with fresh output values."""
        base = name or type.split(".")[-1].lower()
        op = Op(type, list(inputs), [], dict(attrs or {}), base, location)
        for i, (dt, shape) in enumerate(outputs):
            vname = self.unique_name(base if i == 0 else f"{base}:{i}")
            op.outputs.append(Value(vname, dt, shape, producer=op, index=i))
        return op

    def add_op(self, *args, **kwargs) -> Op:
        op = self.make_op(*args, **kwargs)
        self.ops.append(op)
        return op

    # -- queries and rewrites -------------------------------------------------
    def users(self) -> dict[int, list[Op]]:
        """Map value uid -> ops that consume it (in program order, an op once per operand).

        The index is kept current by the IR's own lists and rebuilt only after a change;
        the dict returned is a snapshot: do not modify it.

        Example::

            users = fn.users()
            relu_users = users.get(relu.outputs[0].uid, [])
        """
        if self._users is None:
            out: dict[int, list[Op]] = {}
            for op in self._ops:
                if op._function is not self:
                    op._function = self
                for v in op.inputs:
                    if v is not None:
                        out.setdefault(v.uid, []).append(op)
            self._users = out
        return self._users

    def uses(self, value: Value) -> list[Op]:
        """The ops that consume ``value`` (function outputs are not ops: see :meth:`is_output`)."""
        return self.users().get(value.uid, [])

    def is_output(self, value: Value) -> bool:
        return any(v is value for v in self.outputs)

    def replace_uses(self, old: Value, new: Value) -> None:
        """Point every use of ``old`` (ops and function outputs) at ``new``."""
        self._remap({old.uid: new}, [old])

    def replace_op(self, op: Op, new_ops: Iterable[Op], new_outputs: Sequence[Value]) -> None:
        """Replace ``op`` by ``new_ops`` (placed where it was); rewire its outputs."""
        i = self.ops.index(op)
        self.ops[i : i + 1] = list(new_ops)
        self._remap({o.uid: n for o, n in zip(op.outputs, new_outputs)}, op.outputs)

    def _remap(self, mapping: dict[int, Value], old: Sequence[Value]) -> None:
        """Rewire the uses of the values ``old`` as ``mapping`` says, all at once (only their users change).

        With a current users index only the users are visited; else one scan of the ops,
        which is cheaper than rebuilding the index between two rewirings.
        """
        if self._users is not None:
            candidates = dict.fromkeys(u for v in old for u in self._users.get(v.uid, ()))
        else:
            candidates = self._ops
        for user in candidates:
            for v in user.inputs:
                if v is not None and v.uid in mapping:
                    user.inputs = [mapping.get(v.uid, v) if v is not None else None for v in user.inputs]
                    break
        if any(v is not None and v.uid in mapping for v in self.outputs):
            self.outputs = [mapping.get(v.uid, v) for v in self.outputs]

    def topo_sort(self) -> None:
        """Order ops so that every value is defined before it is used.

        Stable: an already valid order is kept. Ops with side effects
        (:func:`is_ordered`: variable reads and assigns, ``CALL_ONCE``, loops that touch
        variables) also keep their order relative to each other, which is the program's.
        """
        placed: set[int] = {v.uid for v in self.inputs}
        remaining = list(self.ops)
        sequence = [op for op in self.ops if is_ordered(op)]
        next_effect = 0
        ordered: list[Op] = []
        while remaining:
            progressed = []
            for op in remaining:
                effect = is_ordered(op)
                if (all(v is None or v.is_const or v.producer is None or v.uid in placed for v in op.inputs)
                        and (not effect or sequence[next_effect] is op)):
                    ordered.append(op)
                    placed.update(o.uid for o in op.outputs)
                    next_effect += effect
                else:
                    progressed.append(op)
            if len(progressed) == len(remaining):
                names = ", ".join(op.name for op in progressed[:5])
                raise RuntimeError(f"cycle or dangling input in function {self.name}: {names}")
            remaining = progressed
        self.ops = ordered

    def op_counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for op in self.ops:
            counts[op.kind] = counts.get(op.kind, 0) + 1
        return counts

    def __str__(self) -> str:
        lines = [f"func @{self.name}({', '.join(map(repr, self.inputs))}) {{"]
        lines += [f"  {op!r}" for op in self.ops]
        lines.append(f"  return {', '.join(f'%{v.name}' for v in self.outputs)}")
        lines.append("}")
        return "\n".join(lines)


class Module:
    """A set of functions plus the entry points (signatures) of the program.

    ``signatures`` maps a signature key to the name of its entry function.
    """

    def __init__(self):
        self.functions: dict[str, Function] = {}
        self.signatures: dict[str, str] = {}

    def add(self, fn: Function) -> Function:
        self.functions[fn.name] = fn
        return fn

    def entry_functions(self) -> list[Function]:
        return [self.functions[n] for n in self.signatures.values()]

    def __str__(self) -> str:
        return "\n\n".join(str(f) for f in self.functions.values())


_TRACED = re.compile(r"__inference_([A-Za-z0-9_.\-]+?)_\d+(?=$|/|:)")


def op_name(op: Op) -> str:
    """The op's node name without TensorFlow's trace counters (stable across conversions)."""
    return _TRACED.sub(r"\1", op.name)
