"""Range rules the int8 engine applies to the calibrated ranges before quantizing a function: values read only by
TANH / LOGISTIC narrowed to where those saturate, the fixed ranges of bounded ops, one range for the inputs of an op
that copies raw integers from each (CONCATENATION, PACK, SELECT, ...), and index arithmetic left float
(``index_arithmetic``). Importable from ``int8_forms`` too."""

from __future__ import annotations

from fuselite.ir import Function, Op, Value
from fuselite.quantize.int8_kernels import BOUNDED, INDEX_KINDS, INTEGER_KERNELS, NO_INTEGER_KERNEL, SATURATES
from fuselite.quantize.int8_params import FLOAT32, is_activation


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
