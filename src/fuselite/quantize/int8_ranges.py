"""Range rules the int8 engine applies to the calibrated ranges before quantizing a function: values read only by
TANH / LOGISTIC narrowed to where those saturate, the fixed ranges of bounded ops, one range for the inputs of an op
that copies raw integers from each (CONCATENATION, PACK, SELECT, ...), and index arithmetic left float
(``index_arithmetic``). Importable from ``int8_forms`` too."""

from __future__ import annotations

import numpy as np

from fuselite.ir import Function, Op, Value
from fuselite.ir.core import op_name
from fuselite.quantize.int8_kernels import BOUNDED, INDEX_KINDS, INTEGER_KERNELS, NO_INTEGER_KERNEL, SATURATES
from fuselite.quantize.int8_params import (
    FLOAT32,
    INT8,
    INT16,
    INT16_HEADROOM,
    is_activation,
    params_for,
    represented,
)


def saturated_ranges(fn: Function, ranges: dict[int, tuple[float, float]], wide: set[int]) -> None:
    """Narrow the range of each value read only by TANH / LOGISTIC ops to where they saturate."""
    for op in fn.ops:
        for v in op.outputs:
            users = fn.uses(v)
            if v.uid not in ranges or not users or fn.is_output(v) or \
                    any(u.kind not in ("TANH", "LOGISTIC") for u in users):
                continue
            limit = max(SATURATES[u.kind, "int16" if u.outputs[0].uid in wide else "int8"] for u in users)
            lo, hi = ranges[v.uid]
            ranges[v.uid] = (max(lo, -limit), min(hi, limit))


def bounded_ranges(fn: Function, ranges: dict[int, tuple[float, float]]) -> None:
    for op in fn.ops:
        if op.kind in BOUNDED and op.outputs[0].uid in ranges:
            ranges[op.outputs[0].uid] = BOUNDED[op.kind]


# ops whose kernels copy raw integers from each input (the output's parameters on every input) and give any
# input's value: one scale for the group, from the union of its inputs' ranges
SHARED_SCALE = frozenset({"CONCATENATION", "PACK", "SELECT", "SELECT_V2", "DYNAMIC_UPDATE_SLICE"})


def shared_ranges(fn: Function, ranges: dict[int, tuple[float, float]]) -> None:
    """Each input of a CONCATENATION / PACK / SELECT that nothing else reads takes the union of the group's
    ranges, up through the ops that only move it (a RESHAPE, a slice: their outputs keep their input's
    parameters) to the op that computes it, which then writes the group's parameters itself: no QUANTIZE
    between, and no value clipped at its own narrower range before the group's wider one (TimeDistributed's
    20 per-step FULLY_CONNECTED outputs, each calibrated alone: a test input past one step's range clipped
    there, 19.9% off; the official converter propagates the PACK's scale the same way)."""
    widened: set[int] = set()
    for op in reversed(fn.ops):  # a group inside a group (a CONCATENATION of PACKs) takes the outer one's range
        if op.kind not in SHARED_SCALE:
            continue
        members = [v for v in op.inputs if is_activation(v) and v.uid in ranges]
        if len(members) < 2:
            continue
        spans = [ranges[v.uid] for v in members] + [ranges[o.uid] for o in op.outputs if o.uid in widened]
        span = (min(lo for lo, _ in spans), max(hi for _, hi in spans))
        for v in members:
            widened |= _widen_to(fn, v, op, span, ranges)


def _widen_to(fn: Function, v: Value, reader: Op, span: tuple[float, float],
              ranges: dict[int, tuple[float, float]]) -> set[int]:
    """``v`` (read by ``reader`` alone) and, up through ops that only move it, what it is moved from take the
    range ``span``; the values changed."""
    changed: set[int] = set()
    while v.uid in ranges and not fn.is_output(v) and all(u is reader for u in fn.uses(v)):
        ranges[v.uid] = span
        changed.add(v.uid)
        mover = v.producer
        kernel = INTEGER_KERNELS.get(mover.kind) if mover is not None else None
        if kernel is None or kernel.output != "same":
            break
        ins = [x for x in mover.inputs if is_activation(x)]
        if len(ins) != 1:
            break
        reader, v = mover, ins[0]
    return changed


def index_arithmetic(fn: Function) -> set[int]:
    """The float ops that compute from positions: every float operand comes from integers (a CAST of an integer
    tensor, through such ops) or is a constant, and every float result is read only by a CAST back to an
    integer, a comparison, an op with no integer kernel (the SIN and COS of rotary embeddings), or another such
    op (T5's relative-position buckets: ``int(log(|i - j| / 8) / log(16) * 8)``; rotary angles: position x
    frequency). Quantized, they would move indices (``log(0) = -inf`` has no range) and clip every position past
    the calibrated lengths; the official converter folds them at static shapes. They stay float in every mode,
    as CAST itself does, integer-only op sets included, with the candidates that compute their inputs."""
    from_ints: set[int] = set()
    candidates: list[Op] = []
    for op in fn.ops:
        floats_in = [v for v in op.inputs if v is not None and v.dtype == FLOAT32]
        floats_out = [v for v in op.outputs if v.dtype == FLOAT32]
        if op.kind == "CAST" and floats_out and op.inputs[0].dtype.kind in "iub":
            from_ints.update(v.uid for v in floats_out)
        elif op.kind in INDEX_KINDS and floats_in and any(v.uid in from_ints for v in floats_in) and \
                all(v.uid in from_ints or v.is_const for v in floats_in):
            from_ints.update(v.uid for v in floats_out)
            candidates.append(op)
    chosen: set[int] = set()
    for op in reversed(candidates):
        ends = True
        for v in op.outputs:
            if v.dtype != FLOAT32:
                continue
            users = fn.uses(v)
            ends = ends and bool(users) and not fn.is_output(v) and all(
                id(u) in chosen or u.kind in NO_INTEGER_KERNEL for u in users)
        if ends:
            chosen.add(id(op))
    # an op kept float reads float values: a candidate computing one of its inputs stays float too, though it has
    # other, integer readers (which read it through a QUANTIZE; Moonshine's rotary table is sliced both ways)
    by_id = {id(op): op for op in candidates}
    todo = list(chosen)
    while todo:
        for v in by_id[todo.pop()].inputs:
            producer = v.producer if v is not None and v.dtype == FLOAT32 else None
            if producer is not None and id(producer) in by_id and id(producer) not in chosen:
                chosen.add(id(producer))
                todo.append(id(producer))
    return chosen


COLLAPSED_ADVICE = "calibrate on more, and more varied, representative samples (or keep_float it)"


def _holds(span: tuple[float, float] | None, width: str) -> str:
    """What a tensor quantized from the calibrated ``span`` holds, said (None: it stays float, never calibrated)."""
    if span is None:
        return "it stays float, between DEQUANTIZE and QUANTIZE"
    dtype = INT16 if width == "int16" else INT8
    lo, hi = represented(params_for(dtype, *span, headroom=INT16_HEADROOM), dtype)
    return f"quantized from it, it holds [{lo:.3g}, {hi:.3g}] only: any other value it takes at run time is clipped"


def collapsed_ranges(fn: Function, ranges: dict[int, tuple[float, float]], skip: set[int],
                     wide: set[int] = frozenset()) -> dict[int, str]:
    """{id(op): warning} for each op of ``fn`` whose output (or each model input) calibration saw take one value
    only (min == max) or never saw at all, though it is computed from the model's inputs: quantized from a point
    range, its scale is the smallest there is and every other value it takes at run time is clipped to that point
    (a SUB of two inputs calibrated on one sample where they were equal: the issue's model 54% off, and the
    official converter says nothing). Each warning names the tensor, the op and the layer that computes it (its
    location) and what to do; a collapsed tensor computed from another one is counted in that one's warning, not
    warned again. Tensors computed from no model input, and results of an op with an operand that is zero whatever
    the inputs (an unrolled cell's first step on its zero state), are one value by design: not warned.
    ``ranges`` are the calibrated ones (before the range rules: a fixed or saturating range is not calibration's);
    ``skip``: ids of ops that stay float or need no range (index arithmetic, keep_float); ``wide``: uids of the
    values that become int16 (16x8)."""
    def collapsed(v: Value) -> str | None:
        if v.uid not in ranges:
            return "was never computed in calibration"
        lo, hi = ranges[v.uid]
        return f"took one value only ({lo:.6g}) in calibration" if lo == hi else None

    origins: dict[int, tuple[Op | None, Value, str]] = {}  # uid -> (op, value, what) of each collapsed origin
    source: dict[int, int] = {}  # uid of a collapsed value -> uid of the origin it is computed from
    for v in fn.inputs:
        if is_activation(v) and fn.uses(v) and (what := collapsed(v)) is not None:
            origins[v.uid] = (None, v, what)
            source[v.uid] = v.uid
    fixed: set[int] = set()  # values computed from no model input's values (a FILL of zeros, a CAST of positions)
    for op in fn.ops:
        kernel = INTEGER_KERNELS.get(op.kind)
        ins = [v for v in op.inputs if is_activation(v)]
        upstream = [source[x.uid] for x in ins if x.uid in source]
        if all(x.uid in fixed for x in ins):
            fixed.update(v.uid for v in op.outputs)
            continue  # (one value is right there)
        # an operand that is zero whatever the inputs (a recurrent cell's initial state, a constant of zeros) makes
        # the result one value too (its product with anything): not calibration's fault
        structural = any(x is not None and x.dtype == FLOAT32 and (
            x.is_const and not np.any(x.const) or x.uid in fixed and ranges.get(x.uid) == (0.0, 0.0))
            for x in op.inputs)
        for v in op.outputs:
            if not is_activation(v):
                continue
            if kernel is not None and kernel.output == "same" and upstream:  # a move of a collapsed value
                source[v.uid] = upstream[0]
                continue
            if kernel is None or kernel.output != "range" or id(op) in skip or structural or \
                    not (fn.uses(v) or fn.is_output(v)) or (what := collapsed(v)) is None:
                continue
            if upstream:
                source[v.uid] = upstream[0]
            else:
                origins[v.uid] = (op, v, what)
                source[v.uid] = v.uid
    out: dict[int, str] = {}  # (a model input's warning goes with the first op that reads it)
    for uid, (op, v, what) in origins.items():
        width = "int16" if uid in wide else "int8"
        more = sum(1 for s, o in source.items() if o == uid and s != uid)
        by = "a model input" if op is None else \
            f"the output of {op.kind} '{op_name(op)}'{' at ' + op.location if op.location else ''}"
        then = f"; {more} tensor(s) computed from it too" if more else ""
        key = id(op) if op is not None else id(fn.uses(v)[0])
        out[key] = out[key] + " " if key in out else ""
        out[key] += (
            f"{width} calibration: tensor '{v.name}' {what}: {COLLAPSED_ADVICE}; {_holds(ranges.get(uid), width)} "
            f"({by}{then})")
    return out
