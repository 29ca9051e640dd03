"""The IR's invariants, checked: :func:`verify` lists every broken one.

A module is well formed when

* every signature names a function of the module;
* in every function, each operand is a constant, an input of that function, a captured
  variable (a ``resource`` value with no producer whose ``meta["handle"]`` is the
  TensorFlow variable, until the variables pass freezes or materializes it), a kernel
  state (a value with no producer and ``meta["is_variable"]``: a variable tensor that
  the ops taking it update in place, kept across invokes), or the output of an op of
  that function that comes earlier in ``fn.ops`` (defined before use; ``None`` stands
  for an omitted optional operand);
* each op's outputs name the op as their producer, at their own index, and no value is
  produced twice or is both an input and an op's output;
* each function output is defined in the function (constant, input or op output);
* types are well formed: a dtype is a numpy dtype or ``"resource"`` / ``"variant"``; a
  shape is ``None`` (unknown rank) or a tuple of non-negative ints and ``None``; a
  constant's dtype and shape are those of its array; a quantized value is an integer
  tensor with positive finite scales, one per tensor or one per index of its axis;
* every function an op refers to (``f``, ``body``, ``cond``, ``then_branch``,
  ``else_branch``, ``*_subgraph_index``) exists;
* an entry function's ``input_names`` / ``output_names``, when given, name each input /
  output once.

The pass manager runs it after every pass when ``verify_ir`` is on (the tests turn it
on), so a pass that breaks the graph is named at once.

Example::

    problems = verify(module)       # [] when well formed
    check(module, after="fold")     # raises IRVerificationError listing them
"""

from __future__ import annotations

import math

import numpy as np

from fuselite.errors import ConversionError
from fuselite.ir.core import BlockwiseQuantization, Function, Module, Value, dtype_name

_CALLEE_KEYS = ("f", "cond", "body", "then_branch", "else_branch")
_SPECIAL_DTYPES = ("resource", "variant", "string")


class IRVerificationError(ConversionError):
    """The IR broke one of its invariants (a bug in a pass or a rule, not in the user's model)."""


def is_captured_variable(v: Value) -> bool:
    """A TensorFlow variable the program captured (read or assigned, not yet frozen)."""
    return v.producer is None and v.dtype == "resource" and "handle" in v.meta


def is_kernel_state(v: Value) -> bool:
    """A variable tensor no op produces: the ops taking it update it in place (it persists across invokes)."""
    return v.producer is None and not v.is_const and bool(v.meta.get("is_variable"))


def _dtype_problem(v: Value) -> str | None:
    if isinstance(v.dtype, str):
        return None if v.dtype in _SPECIAL_DTYPES else f"unknown dtype {v.dtype!r}"
    try:
        np.dtype(v.dtype)
    except TypeError:
        return f"unknown dtype {v.dtype!r}"
    return None


def _shape_problem(v: Value) -> str | None:
    s = v.shape
    if s is None:
        return None
    if not isinstance(s, tuple) or not all(d is None or (isinstance(d, (int, np.integer)) and d >= 0) for d in s):
        return f"malformed shape {s!r}"
    return None


def _value_problems(v: Value) -> list[str]:
    problems = [p for p in (_dtype_problem(v), _shape_problem(v)) if p]
    if v.is_const and not problems:
        if not isinstance(v.dtype, str) and np.dtype(v.dtype) != v.const.dtype:
            problems.append(f"dtype {np.dtype(v.dtype).name} but its constant is {v.const.dtype.name}")
        if v.shape is not None and tuple(v.shape) != tuple(v.const.shape):
            problems.append(f"shape {v.shape} but its constant has shape {tuple(v.const.shape)}")
    if v.quant is not None and not problems:
        problems += _quant_problems(v)
    return problems


def _quant_problems(v: Value) -> list[str]:
    """A quantized value is an integer tensor with one scale, or one per index of its axis."""
    q = v.quant
    if isinstance(v.dtype, str) or (np.dtype(v.dtype).kind not in "iu" and np.dtype(v.dtype).name != "int4"):
        return [f"quantization on a {dtype_name(v.dtype)} value"]
    if isinstance(q, BlockwiseQuantization):
        return _blockwise_problems(v, q)
    if not q.scale or len(q.scale) != len(q.zero_point):
        return [f"quantization has {len(q.scale)} scales and {len(q.zero_point)} zero points"]
    if len(q.scale) > 1:
        dims = v.shape or ()
        if not 0 <= q.axis < len(dims) or dims[q.axis] != len(q.scale):
            return [f"{len(q.scale)} per-channel scales on axis {q.axis} of shape {v.shape}"]
    if not all(s > 0 and math.isfinite(s) for s in q.scale):
        return ["quantization scales must be positive and finite"]
    return []


def _blockwise_problems(v: Value, q: BlockwiseQuantization) -> list[str]:
    """A blockwise weight is a 2-D int4 constant [outputs, inputs] with one positive float16 scale per block."""
    if np.dtype(v.dtype).name != "int4" or v.shape is None or len(v.shape) != 2 or None in v.shape:
        return [f"blockwise quantization on a {dtype_name(v.dtype)} value of shape {v.shape} (it takes a 2-D int4 "
                "weight)"]
    outputs, inputs = v.shape
    if q.block_size <= 0 or inputs % q.block_size:
        return [f"block size {q.block_size} does not divide the {inputs} inputs"]
    if q.scales.dtype != np.float16 or q.scales.shape != (outputs, inputs // q.block_size):
        return [f"blockwise scales {q.scales.dtype} {q.scales.shape}; want float16 {(outputs, inputs // q.block_size)}"]
    if not (np.isfinite(q.scales).all() and (q.scales > 0).all()):
        return ["blockwise scales must be positive and finite"]
    return []


def _callees(op) -> list[str]:
    names = [op.attrs[k] for k in _CALLEE_KEYS if isinstance(op.attrs.get(k), str)]
    names += [v.lstrip("@") for k, v in op.attrs.items() if k.endswith("_subgraph_index") and isinstance(v, str)]
    return names


def verify_function(fn: Function, module: Module | None = None) -> list[str]:
    """The broken invariants of one function, each as one line naming the op or value."""
    problems: list[str] = []
    where = f"function {fn.name}"
    defined: set[int] = set()
    for v in fn.inputs:
        if v.producer is not None:
            problems.append(f"{where}: input %{v.name} has a producer ({v.producer.describe()})")
        problems += [f"{where}: input %{v.name}: {p}" for p in _value_problems(v)]
        defined.add(v.uid)
    produced_here = {o.uid for op in fn.ops for o in op.outputs}
    for op in fn.ops:
        what = f"{where}: {op.type} '{op.name}'"
        if "." not in op.type:
            problems.append(f"{what}: op type has no dialect ('tf.' or 'tfl.')")
        for i, v in enumerate(op.inputs):
            if v is None or v.is_const or v.uid in defined or is_captured_variable(v) or is_kernel_state(v):
                continue
            if v.uid in produced_here:
                problems.append(f"{what}: operand {i} %{v.name} is used before it is defined")
            else:
                origin = f"produced by {v.producer.describe()} elsewhere" if v.producer else "not an input here"
                problems.append(f"{what}: operand {i} %{v.name} is not defined in this function ({origin})")
        for i, o in enumerate(op.outputs):
            if o.producer is not op or o.index != i:
                problems.append(f"{what}: output {i} %{o.name} names another producer or index")
            if o.uid in defined:
                problems.append(f"{what}: output {i} %{o.name} is defined twice")
            problems += [f"{what}: output {i} %{o.name}: {p}" for p in _value_problems(o)]
            defined.add(o.uid)
        for v in op.inputs:
            if v is not None and v.is_const:
                problems += [f"{what}: constant %{v.name}: {p}" for p in _value_problems(v)]
        if module is not None:
            problems += [f"{what}: refers to function '{name}', which does not exist"
                         for name in _callees(op) if name not in module.functions]
    for i, v in enumerate(fn.outputs):
        if v is None or not (v.is_const or v.uid in defined):
            name = "None" if v is None else f"%{v.name}"
            problems.append(f"{where}: output {i} {name} is not defined in this function")
    for attr, values in (("input_names", fn.inputs), ("output_names", fn.outputs)):
        names = getattr(fn, attr)
        if names and (len(names) != len(values) or len(set(names)) != len(names)):
            problems.append(f"{where}: {attr} {names} do not name its {len(values)} value(s) once each")
    return problems


def verify(module: Module) -> list[str]:
    """Every broken invariant of ``module`` (empty when well formed)."""
    problems = [f"signature '{key}' names function '{name}', which does not exist"
                for key, name in module.signatures.items() if name not in module.functions]
    for fn in module.functions.values():
        problems += verify_function(fn, module)
    return problems


def check(module: Module, after: str | None = None) -> None:
    """Raise :class:`IRVerificationError` listing every broken invariant (``after``: the pass just run)."""
    problems = verify(module)
    if problems:
        when = f" after pass '{after}'" if after else ""
        raise IRVerificationError(f"the IR is malformed{when} (a fuselite bug)", problems)
