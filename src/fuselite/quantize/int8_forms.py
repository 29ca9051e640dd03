"""Rewrites and range rules the int8 engine applies before quantizing a function: equal forms with
integer kernels, saturated / bounded / masked ranges, index arithmetic left float, the int16 values of a
16x8 model (RSQRT's width chosen on the data), and what the report says of each integer op."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from fuselite.ir import Function, Op, Quantization, Value
from fuselite.quantize.int8_kernels import (
    BOUNDED,
    INDEX_KINDS,
    INT16_KINDS,
    INTEGER_KERNELS,
    LARGE_NEGATIVE,
    NO_INTEGER_KERNEL,
    SATURATES,
    SOFTMAX_CUTOFF,
    only_moves,
)
from fuselite.quantize.int8_params import FLOAT32, INT8, INT16, INT16_HEADROOM, is_activation, params_for, represented
from fuselite.quantize.select import KeepFloat


def _hard_swish_16x8(fn: Function, op: Op, ranges: dict[int, tuple[float, float]]) -> None:
    """A HARD_SWISH in a 16x8 model as x * (relu6(x + 3) / 6): ADD (RELU6 fused), MUL, MUL, each with an int16
    kernel in LiteRT and TFLite Micro. HARD_SWISH has int8 kernels only (hard_swish.cc), which left a 16x8
    MobileNetV3 as far off as its int8 model (keras-hub's: 3.3% both)."""
    x = op.inputs[0]
    lo, hi = ranges[x.uid]
    shifted = fn.make_op("tfl.ADD", [x, fn.const(np.float32(3.0), f"{op.name}_three")], [(FLOAT32, x.shape)],
                         {"fused_activation_function": "RELU6"}, name=f"{op.name}_relu6")
    gate = fn.make_op("tfl.MUL", [shifted.outputs[0], fn.const(np.float32(1 / 6), f"{op.name}_sixth")],
                      [(FLOAT32, x.shape)], {"fused_activation_function": "NONE"}, name=f"{op.name}_gate")
    at = fn.ops.index(op)
    fn.ops[at:at] = [shifted, gate]
    t_lo, t_hi = (min(max(v + 3.0, 0.0), 6.0) for v in (lo, hi))
    ranges[shifted.outputs[0].uid] = (t_lo, t_hi)
    ranges[gate.outputs[0].uid] = (t_lo / 6, t_hi / 6)
    op.type = "tfl.MUL"
    op.inputs = [x, gate.outputs[0]]
    op.attrs = {"fused_activation_function": "NONE"}


def integer_forms(fn: Function, keep: KeepFloat, ranges: dict[int, tuple[float, float]],
                   wide: Callable[[Op], bool] = lambda op: False, narrow: Callable[[Op], bool] = lambda op: False
                   ) -> None:
    """Ops whose integer kernel would be wrong or missing, in an equal form that has one (float values alike):
    NEG is a raw integer negation in LiteRT (neg.cc: right only for zero point 0, -(-128) wraps) and has no
    integer kernel in TFLite Micro: x * -1; a division by a constant (Keras' Normalization) is a multiplication
    by its reciprocal, as the official converter's rewrites make it; a division by a square root (RMS norms
    written ``x * reciprocal(sqrt(var + eps))``: Gemma, T5Gemma) is a multiplication by RSQRT, which has int8
    and int16 kernels (elementwise.cc) where SQRT has none in LiteRT 2.3 or TFLite Micro; ZEROS_LIKE (int32,
    int64 and float32 only: zeros_like.cc) of a float value is x * 0 (exact zeros at any zero point); SQUARE
    and POW(x, 2) (Mixtral's norms) are x * x; a ``wide`` SQUARED_DIFFERENCE (no int16 kernel: int8 inside a 16x8
    model, a layer norm's variance limited to int8) is d * d of d = a - b, both with int16 kernels; a ``wide``
    HARD_SWISH (no int16 kernel either) is x * (relu6(x + 3) / 6) (``_hard_swish_16x8``); a ``wide`` norm's
    RSQRT(MEAN(d * d) + eps) is scaled row by row (``_row_scaled_norm``) where its RSQRT and REDUCE_MAX are not
    ``narrow`` (int8 only in TFLite Micro)."""
    for op in list(fn.ops):
        if keep.match(op) is not None or not op.inputs or op.inputs[0] is None or op.inputs[0].dtype != FLOAT32:
            continue
        if op.kind == "DIV" and op.inputs[1].producer is not None and op.inputs[1].producer.kind == "SQRT" \
                and keep.match(op.inputs[1].producer) is None:
            a, root = op.inputs[0], op.inputs[1].producer
            rsqrt = fn.make_op("tfl.RSQRT", [root.inputs[0]], [(FLOAT32, op.inputs[1].shape)],
                               name=f"{root.name}_rsqrt")
            fn.ops.insert(fn.ops.index(op), rsqrt)
            lo, hi = ranges.get(op.inputs[1].uid, (0.0, 0.0))
            if lo > 0:  # the calibrated range of 1 / sqrt(x), from that of sqrt(x)
                ranges[rsqrt.outputs[0].uid] = (1.0 / hi, 1.0 / lo)
            if a.is_const and a.const.size == 1 and float(a.const.reshape(-1)[0]) == 1.0 and \
                    a.shape == () and tuple(rsqrt.outputs[0].shape) == tuple(op.outputs[0].shape):
                fn.replace_uses(op.outputs[0], rsqrt.outputs[0])  # 1 / sqrt(x): RSQRT itself
                fn.ops.remove(op)
            else:
                op.type = "tfl.MUL"
                op.inputs = [a, rsqrt.outputs[0]]
            if not fn.uses(root.outputs[0]) and not fn.is_output(root.outputs[0]):
                fn.ops.remove(root)
            continue
        if op.kind == "SQUARE" or (op.kind == "POW" and op.inputs[1].is_const and op.inputs[1].const.size == 1
                                   and float(op.inputs[1].const.reshape(-1)[0]) == 2.0):
            # x * x (MUL has int8 and int16 kernels; SQUARE takes float32 only, POW float32 and int32)
            op.type = "tfl.MUL"
            op.inputs = [op.inputs[0], op.inputs[0]]
            op.attrs = {"fused_activation_function": "NONE"}
            continue
        if op.kind == "SQUARED_DIFFERENCE" and wide(op) and op.outputs[0].uid in ranges:
            d = fn.make_op("tfl.SUB", list(op.inputs), [(FLOAT32, op.outputs[0].shape)], {"fused_activation_function":
                                                                                          "NONE"}, name=f"{op.name}_d")
            fn.ops.insert(fn.ops.index(op), d)
            peak = float(np.sqrt(max(ranges[op.outputs[0].uid][1], 0.0)))
            ranges[d.outputs[0].uid] = (-peak, peak)  # |a - b| at most the root of the largest square
            op.type = "tfl.MUL"
            op.inputs = [d.outputs[0], d.outputs[0]]
            op.attrs = {"fused_activation_function": "NONE"}
            continue
        if op.kind == "HARD_SWISH" and wide(op) and op.inputs[0].uid in ranges:
            _hard_swish_16x8(fn, op, ranges)
            continue
        if op.kind == "ZEROS_LIKE":
            op.type = "tfl.MUL"
            op.inputs = [op.inputs[0], fn.const(np.float32(0.0), f"{op.name}_zero")]
            op.attrs = {"fused_activation_function": "NONE"}
            continue
        if op.kind == "NEG":
            op.type = "tfl.MUL"
            op.inputs = [op.inputs[0], fn.const(np.float32(-1.0), f"{op.name}_minus_one")]
            op.attrs = {"fused_activation_function": "NONE"}
        elif op.kind == "DIV" and op.inputs[1].is_const and op.inputs[1].const.dtype == FLOAT32 \
                and np.all(op.inputs[1].const != 0):
            op.type = "tfl.MUL"
            op.inputs = [op.inputs[0], fn.const((1.0 / op.inputs[1].const.astype(np.float64)).astype(np.float32),
                                               f"{op.inputs[1].name}_reciprocal")]
    for op in list(fn.ops):
        if op.kind == "RSQRT" and wide(op) and not narrow(op):
            _row_scaled_norm(fn, op, keep, ranges)


ROW_SCALE_SPAN = 1024  # a row-scaled norm's scale c spans at most this (its int16 steps: 2 * 1024 / 32767 = 6%)
ROW_SCALE_HEADROOM = 1.25  # |c d| stays under this: c is 1 / max|d| up to RSQRT's table error (under 10%)
ROOT_GAINS = (16,)  # _wide_rsqrt's second tables for c (within 10%: its table errors cancel, up to the headroom)
NORM_GAINS = (4, 16)  # and for the norm's root itself (within 0.1% from 1 / 6554 of its input's range up)


def _single_use(fn: Function, v: Value, reader: Op) -> bool:
    return not fn.is_output(v) and fn.uses(v) == [reader]


def _wide_rsqrt(emit: Callable, x: Value, lo: float, hi: float, gains: tuple[int, ...], tag: str) -> Value:
    """1 / sqrt(x) for x in [lo, hi] on int16 kernels, close across the whole range. LiteRT's int16 RSQRT is a
    table of 513 samples over the input's symmetric range (elementwise.cc), read linearly: it overstates 1 / sqrt(x)
    by about 0.094 / k^2 in its k-th interval (4.6% in the second, 0.1% from the tenth on; the first ends at 1 /
    sqrt of the output's top). A table that reads x * g^2 (saturating at ``hi``) and multiplies by g gives
    1 / sqrt(x) from a g^2 times later interval where x * g^2 is in range, more where it saturates; every table
    overstates, so the smallest of them is the closest."""
    out = emit("RSQRT", [x], (1 / np.sqrt(hi), 1 / np.sqrt(lo)), {"_row_scaled": True}, f"{tag}_rsqrt")
    for g in gains:
        low = min(g * g * lo, hi)
        gained = emit("MUL", [x, float(g * g)], (low, hi), tag=f"{tag}_x{g}")
        root = emit("RSQRT", [gained], (1 / np.sqrt(hi), 1 / np.sqrt(low)), {"_row_scaled": True},
                    f"{tag}_rsqrt_x{g}")
        root = emit("MUL", [root, float(g)], (g / np.sqrt(hi), g / np.sqrt(low)), tag=f"{tag}_rsqrt_x{g}_over")
        out = emit("MINIMUM", [out, root], (1 / np.sqrt(hi), 1 / np.sqrt(lo)), tag=f"{tag}_min{g}")
    return out


def _row_scaled_norm(fn: Function, op: Op, keep: KeepFloat, ranges: dict[int, tuple[float, float]]) -> None:
    """A norm's ``RSQRT(MEAN(d * d) + eps)`` (layer norm: d = x - mean; RMS norm: d = x; an l2 norm's
    ``RSQRT(MAXIMUM(SUM(d * d), eps))`` alike) in a 16x8 model, as ``c * RSQRT(MEAN((c d) * (c d)) + eps c^2)``
    with c about 1 / max|d| per row (``_wide_rsqrt`` of the row's largest |d|, floored at f, squared): equal for
    any c > 0, and every row's mean square then lies in [1 / n, ROW_SCALE_HEADROOM^2] whatever its scale. One
    int16 scale for the mean squares of all rows left a row 100 times smaller than the largest (DINOv3's class
    token, PaliGemma's text tokens beside its image tokens) a few codes, and its RSQRT saturated (PaliGemma's 16x8
    output 61% off, 4.7% with the norms float). f = max(sqrt(eps), peak / ROW_SCALE_SPAN) (rows below sqrt(eps)
    are the eps's anyway); the ranges of the new values follow from d's calibrated peak and the RSQRT's
    calibrated top."""
    add = op.inputs[0].producer
    if add is None or add.kind not in ("ADD", "MAXIMUM") or add.attrs.get("fused_activation_function", "NONE") != "NONE" \
            or not _single_use(fn, add.outputs[0], op) or op.outputs[0].uid not in ranges:
        return
    eps_at = next((i for i, v in enumerate(add.inputs) if v.is_const and v.const.size == 1), None)
    if eps_at is None or float(add.inputs[eps_at].const.reshape(-1)[0]) <= 0:
        return
    mean = add.inputs[1 - eps_at].producer
    if mean is None or mean.kind not in ("MEAN", "SUM") or not mean.attrs.get("keep_dims") or not mean.inputs[1].is_const \
            or not _single_use(fn, mean.outputs[0], add):
        return
    square = mean.inputs[0].producer
    if square is None or square.kind != "MUL" or square.inputs[0] is not square.inputs[1] \
            or square.attrs.get("fused_activation_function", "NONE") != "NONE" \
            or not _single_use(fn, square.outputs[0], mean):
        return  # (a 16x8 layer norm's SQUARED_DIFFERENCE is d * d by now, above)
    d = square.inputs[0]
    axes = [int(a) % len(d.shape) for a in np.ravel(mean.inputs[1].const)]
    if d.uid not in ranges or any(not isinstance(d.shape[a], int) or d.shape[a] < 1 for a in axes) or \
            any(keep.match(o) is not None for o in (op, add, mean, square)):
        return
    eps = float(add.inputs[eps_at].const.reshape(-1)[0])
    peak = max(abs(ranges[d.uid][0]), abs(ranges[d.uid][1]))
    floor = max(np.sqrt(eps), peak / ROW_SCALE_SPAN)
    if floor >= peak:
        return
    n = int(np.prod([d.shape[a] for a in axes]))
    row = mean.outputs[0].shape

    def emit(kind, inputs, span, attrs=None, tag=""):  # placed before ``op``; a row's shape unless it reads d
        inputs = [v if isinstance(v, Value) else fn.const(np.float32(v), f"{op.name}_row_scale{tag}_k")
                  for v in inputs]
        new = fn.make_op(f"tfl.{kind}", inputs, [(FLOAT32, d.shape if inputs[0] is d else row)],
                         attrs if attrs is not None else {"fused_activation_function": "NONE"} if kind in
                         ("MUL", "ADD") else None, name=f"{op.name}_row_scale{tag}", location=op.location)
        fn.ops.insert(fn.ops.index(op), new)
        ranges[new.outputs[0].uid] = span
        return new.outputs[0]

    largest = emit("REDUCE_MAX", [emit("ABS", [d], (0.0, peak), tag="_abs"), mean.inputs[1]], (0.0, peak),
                   {"keep_dims": True}, "_peak")
    largest = emit("MAXIMUM", [largest, floor], (floor, peak), tag="_floor")
    root = _wide_rsqrt(emit, largest, floor, peak, ROOT_GAINS, "_root")
    c = emit("MUL", [root, root], (1 / peak, 1 / floor), tag="_c")
    scaled = emit("MUL", [d, c], (-ROW_SCALE_HEADROOM, ROW_SCALE_HEADROOM), tag="_d")
    per = n if mean.kind == "SUM" else 1  # a row's sum of squares: n times its mean
    sums = ROW_SCALE_HEADROOM ** 2 * per
    square.inputs = [scaled, scaled]
    ranges[square.outputs[0].uid], ranges[mean.outputs[0].uid] = (0.0, ROW_SCALE_HEADROOM ** 2), (0.0, sums)
    c_eps = emit("MUL", [c, eps], (eps / peak, eps / floor), tag="_c_eps")
    add.inputs = [mean.outputs[0], emit("MUL", [c_eps, c], (eps / peak ** 2, eps / floor ** 2), tag="_eps")]
    top = sums + eps / floor ** 2 if add.kind == "ADD" else max(sums, eps / floor ** 2)
    ranges[add.outputs[0].uid] = (0.0, top)
    for moved in (square, mean, add):  # after the values they now read
        fn.ops.remove(moved)
        fn.ops.insert(fn.ops.index(op), moved)
    # the row-scaled mean square: 1 / n at least where the row's peak is its own (its largest |c d| is about 1),
    # eps / f^2 below the floor, where the root is f / sqrt(var + eps), the calibrated top's f times
    low = min(per / (n * ROW_SCALE_HEADROOM ** 2), 1 / (floor * ranges[op.outputs[0].uid][1]) ** 2)
    r = _wide_rsqrt(emit, add.outputs[0], max(low, top / 2 ** 20), top, NORM_GAINS, "")
    op.type = "tfl.MUL"
    op.inputs = [c, r]
    op.attrs = {"fused_activation_function": "NONE"}


WIDE_ROWS = "_wide_rows"  # an op attribute: int16 in any mode (``uneven_rows``)
UNEVEN = 16  # a concatenated part whose peak is under the whole's / UNEVEN has under 8 int8 steps
ROW_WISE = frozenset({"ADD", "SUB", "MUL", "DIV", "SQUARED_DIFFERENCE", "RSQRT", "MEAN", "SUM", "ABS", "REDUCE_MAX",
                      "MAXIMUM", "MINIMUM"})


def uneven_share(op: Op, ranges: dict[int, tuple[float, float]]) -> float | None:
    """For a CONCATENATION whose smallest part peaks under 1 / UNEVEN of the whole, that part's peak over the
    whole's (None otherwise): the share of the one scale its kernel gives every input."""
    if op.kind != "CONCATENATION" or not op.outputs or op.outputs[0].uid not in ranges:
        return None
    parts = [v for v in op.inputs if is_activation(v) and v.uid in ranges]
    whole = max(abs(ranges[op.outputs[0].uid][0]), abs(ranges[op.outputs[0].uid][1]))
    if len(parts) < 2 or whole <= 0:
        return None
    share = min(max(abs(ranges[v.uid][0]), abs(ranges[v.uid][1])) for v in parts) / whole
    return share if share * UNEVEN < 1 else None


def _norm_region(fn: Function, x: Value) -> list[Op]:
    """The ops computing from ``x`` alone (and constants) with row-wise kinds: a norm of ``x`` and its scale
    and shift, up to the ops that read something else (the residual's ADD, the projections)."""
    inside, region = {x.uid}, []
    for op in fn.ops:
        ins = [v for v in op.inputs if v is not None and not v.is_const]
        if op.kind in ROW_WISE and ins and all(v.uid in inside for v in ins):
            region.append(op)
            inside.update(o.uid for o in op.outputs)
    return region


def uneven_rows(fn: Function, ranges: dict[int, tuple[float, float]], narrow: Callable[[Op], bool]) -> None:
    """Mark ``WIDE_ROWS`` (int16, row-scaled: ``_row_scaled_norm``) a CONCATENATION whose parts differ in scale by
    more than UNEVEN and the norm that reads it. A CONCATENATION's integer kernels take one scale for every
    input (concatenation.cc), so a small part is a few steps of the whole's: a ViT's class and register tokens
    (small learned constants) beside its patch tokens, the first norm then scaling those steps up to unit rows
    (DINOv3's int8 output 32% off; 10% with the tokens drawn 30 times larger). In int16 the part keeps 256 times
    the steps, and the row-scaled norm takes each row at its own scale; what reads the norm's output reads it in
    int8 again. Not where the RSQRT or REDUCE_MAX are ``narrow`` (TFLite Micro: int8 only). Run again after
    ``integer_forms`` to mark the ops its rewrite added."""
    for op in list(fn.ops):
        if uneven_share(op, ranges) is None:
            continue
        x = op.outputs[0]
        region = _norm_region(fn, x)
        if not any(r.kind == "RSQRT" for r in region) or any(narrow(r) for r in region if r.kind in
                                                              ("RSQRT", "REDUCE_MAX")):
            continue
        for r in (op, *region):
            r.attrs[WIDE_ROWS] = True


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


def is_mask_fill(v: Value | None) -> bool:
    """A constant that masks: every entry either 0 or at most LARGE_NEGATIVE, at least one of them the latter
    (``-1e9`` where Keras 3 selects, ``(1 - mask) * -1e9`` where tf_keras adds, the causal mask folded)."""
    if v is None or not v.is_const or v.const.dtype != FLOAT32 or not v.const.size:
        return False
    c = v.const
    return float(c.min()) <= LARGE_NEGATIVE and bool(np.all((c == 0) | (c <= LARGE_NEGATIVE)))


def is_mask_term(v: Value | None, ranges: dict[int, tuple[float, float]]) -> bool:
    """A mask computed at run time: a 0 / 1 value made from integers (a CAST of a padding mask, ``1 - that``)
    times a large negative constant (T5Gemma's ``(1 - mask) * -1e9``), entries 0 or at most LARGE_NEGATIVE; or a
    sum of such masks (T5Gemma2's padding and sliding-window masks) or a concatenation (its merged attention's
    self and cross masks side by side)."""
    p = v.producer if v is not None else None
    if p is not None and (p.kind == "ADD" and len(p.inputs) == 2 or p.kind == "CONCATENATION"):
        return all(is_mask_fill(u) or is_mask_term(u, ranges) for u in p.inputs)
    if p is not None and _moves_one(p):  # sliced, reshaped, broadcast
        return is_mask_term(p.inputs[0], ranges)
    if p is None or p.kind != "MUL" or len(p.inputs) != 2:
        return False
    fill = [u for u in p.inputs if u is not None and u.is_const and u.const.dtype == FLOAT32 and u.const.size
            and float(u.const.max()) <= LARGE_NEGATIVE]
    ones = [u for u in p.inputs if u is not None and not u.is_const]
    return len(fill) == 1 and len(ones) == 1 and _zero_one(ones[0], ranges)


def _mask_parts(v: Value) -> list[Value]:
    """A computed mask and the computed masks it sums, concatenates or moves."""
    p = v.producer
    if p is not None and (p.kind in ("ADD", "CONCATENATION") or _moves_one(p)):
        return [v] + [part for u in p.inputs[:1 if _moves_one(p) else None] if not u.is_const
                      for part in _mask_parts(u)]
    return [v]


def _moves_one(op: Op) -> bool:
    """``op`` moves the values of its first operand (a slice, reshape, broadcast: its integer output keeps the
    input's parameters), its other operands shapes and indices."""
    kernel = INTEGER_KERNELS.get(op.kind)
    return kernel is not None and kernel.output == "same" and op.kind != "CONCATENATION" and bool(op.inputs) \
        and op.inputs[0] is not None and op.inputs[0].dtype == FLOAT32 \
        and all(u is None or u.dtype != FLOAT32 for u in op.inputs[1:])


def _zero_one(v: Value, ranges: dict[int, tuple[float, float]]) -> bool:
    """``v`` comes from integers (a CAST of an integer or bool tensor, then SUB / ADD / MUL with constants) and
    its calibrated values lie in [0, 1]."""
    while v.uid not in ranges and v.producer is not None and v.producer.kind == "QUANTIZE":  # its integer twin
        v = v.producer.inputs[0]
    lo, hi = ranges.get(v.uid, (-1.0, 2.0))
    if lo < 0 or hi > 1:
        return False
    p = v.producer
    while p is not None and p.kind in ("SUB", "ADD", "MUL", "QUANTIZE"):  # (QUANTIZE: once made integer)
        computed = [u for u in p.inputs if u is not None and not u.is_const]
        if len(computed) != 1:
            return False
        p = computed[0].producer
    return p is not None and p.kind == "CAST" and p.inputs[0].dtype.kind in "iub"


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


def masked_low(lo: float, hi: float) -> float:
    """The value a mask added to logits is quantized at, where the sum's range is [lo, hi]: low enough that any
    logit up to twice the calibrated largest plus it clamps to the sum's lowest code (a SOFTMAX weight of 0)."""
    return lo - 2.0 * max(hi, 0.0)


def masked_logits(fn: Function, ranges: dict[int, tuple[float, float]], wide: set[int]) -> None:
    """A SOFTMAX input that masks logits with a large negative constant (``SELECT_V2(mask, logits, -1e9)``, as
    Keras 3's masked softmax writes it, or ``ADD(logits, (1 - mask) * -1e9)``, as tf_keras does): its range is the
    logits' own, down to the cutoff below their largest, not the constant's -1e9 (which leaves every logit the
    same integer: attention uniform); a mask computed at run time (``is_mask_term``) and added goes down to
    ``masked_low``. The masked entries clamp to the lowest code, where their weight rounds to 0;
    the constant is quantized at the output's parameters (``int8_engine.Int8Function.integer``). Likewise each value between
    the mask and the SOFTMAX (``masked_range``: GPT-OSS's two masks, its sink logits concatenated and the row's
    maximum subtracted)."""
    terms: dict[int, float] = {}  # a computed mask's uid -> the lowest sum it is added into
    for op in fn.ops:
        if op.kind != "SOFTMAX":
            continue
        chain: list[Value] = []
        if masked_range(op.inputs[0], ranges, chain) is None:
            continue
        for v in chain:  # each masked value: its unmasked entries' range, down to the cutoff below its largest
            lo, hi = masked_range(v, ranges, [])
            cutoff = SOFTMAX_CUTOFF["int16" if v.uid in wide else "int8"]
            ranges[v.uid] = (min(lo, hi - cutoff), hi)
            if v.producer.kind == "ADD":  # a computed mask: its -1e9 at masked_low, its 0 exact
                for u in v.producer.inputs:
                    if is_mask_term(u, ranges):
                        for part in _mask_parts(u):
                            terms[part.uid] = min(terms.get(part.uid, 0.0), masked_low(*ranges[v.uid]))
    ranges.update({uid: (low, 0.0) for uid, low in terms.items()})


def masked_range(v: Value, ranges: dict[int, tuple[float, float]], chain: list[Value]) -> tuple | None:
    """The range of ``v``'s entries that a mask did not fill, where ``v`` holds logits masked with a large
    negative constant (None where it does not): through the masking ``SELECT_V2`` / ``ADD`` (masks chained, as a
    sliding window's and a padding mask), a ``CONCATENATION`` with other logits (attention sinks) and a ``SUB`` of
    the row's ``REDUCE_MAX``. The masked values found are appended to ``chain``, ``v`` last."""
    p = v.producer
    if p is None or v.uid not in ranges:
        return None
    found = None
    if p.kind in ("SELECT_V2", "ADD"):
        operands = p.inputs[1:] if p.kind == "SELECT_V2" else p.inputs
        kept = [u for u in operands if not is_mask_fill(u) and not is_mask_term(u, ranges)]
        if len(kept) == 1 and len(kept) != len(operands) and kept[0].uid in ranges:
            inner = masked_range(kept[0], ranges, chain) or ranges[kept[0].uid]
            found = (inner[0], ranges[v.uid][1])
    elif p.kind == "CONCATENATION":
        parts = [masked_range(u, ranges, chain) for u in p.inputs]
        if any(r is not None for r in parts) and all(r is not None or u.uid in ranges for u, r in zip(p.inputs, parts)):
            found = (min((r or ranges[u.uid])[0] for u, r in zip(p.inputs, parts)), ranges[v.uid][1])
    elif p.kind == "SUB" and p.inputs[1] is not None and p.inputs[1].uid in ranges:
        peak = p.inputs[1].producer
        if peak is not None and peak.kind == "REDUCE_MAX" and peak.inputs[0] is p.inputs[0]:
            inner = masked_range(p.inputs[0], ranges, chain)
            if inner is not None:  # a - max(a) over a row: at least the unmasked low less the largest maximum
                found = (inner[0] - ranges[p.inputs[1].uid][1], ranges[v.uid][1])
    if found is not None and all(u is not v for u in chain):
        chain.append(v)
    return found


def _rsqrt_int16(x: np.ndarray, qi: Quantization, qo: Quantization) -> np.ndarray:
    """LiteRT's int16 RSQRT (elementwise.cc: LUTPopulate<int16_t>, 513 samples over the input's whole symmetric
    range, read with linear interpolation; 1/sqrt of 0 or less is the output's largest value)."""
    top = 32767 * qo.scale[0]
    grid = np.linspace(-32768 * qi.scale[0], 32767 * qi.scale[0], 513)
    table = np.clip(np.where(grid > 0, 1.0 / np.sqrt(np.maximum(grid, 1e-30)), top), -top, top)
    q = np.clip(np.rint(x / qi.scale[0]), -32768, 32767) * qi.scale[0]
    return np.clip(np.rint(np.interp(q, grid, table) / qo.scale[0]), -32768, 32767) * qo.scale[0]


def _rsqrt_int8(x: np.ndarray, qi: Quantization, qo: Quantization) -> np.ndarray:
    """LiteRT's int8 RSQRT: each input code's 1/sqrt computed (its zero point: the output's largest value)."""
    lo, hi = represented(qo, INT8)
    codes = np.clip(np.rint(x / qi.scale[0]) + qi.zero_point[0], -128, 127) - qi.zero_point[0]
    y = np.where(codes > 0, 1.0 / np.sqrt(np.maximum(codes, 1) * qi.scale[0]), hi)
    return np.clip(np.rint(y / qo.scale[0]) + qo.zero_point[0], -128, 127).astype(np.float64) * qo.scale[0] - \
        qo.zero_point[0] * qo.scale[0]


def rsqrt_width(op: Op, ranges: dict[int, tuple[float, float]], captured: dict[int, list]) -> np.dtype:
    """The width a 16x8 model runs RSQRT in: its int16 kernel (a lookup table, coarse near 0, where a layer
    norm's small variances are: DeiT's 16x8 output 31% off) or its int8 one (exact per code, but 256 codes over
    the variance's range and an int8 output: BERT's 16x8 8.7% off, against 2.2% in int16), whichever is closer
    on the calibration values by their largest relative error: a norm's every row is scaled by its own RSQRT, so
    the worst row is the error a user sees (Qwen3.5's l2-normalised keys, sums of squares from 2e-5 to 0.01: the
    table's mean error 1.4% against int8's 1.5%, but its worst 64% against 19%; a test input's rows at 2e-5 took
    the 16x8 model to 4.9%, int8's to 2.3%). Without them (an RSQRT fuselite wrote), int8."""
    if op.attrs.get("_row_scaled"):
        return INT16  # its input well scaled (``_row_scaled_norm``), away from the table's coarse start
    x, y = op.inputs[0], op.outputs[0]
    if x.uid not in captured or x.uid not in ranges or y.uid not in ranges:
        return INT8
    values = np.concatenate([np.ravel(v) for v in captured[x.uid]]).astype(np.float64)
    values = values[values > 0]
    if not values.size:
        return INT8
    exact = 1.0 / np.sqrt(values)
    errors = {}
    for dtype, simulate in ((INT16, _rsqrt_int16), (INT8, _rsqrt_int8)):
        qi = params_for(dtype, *ranges[x.uid], headroom=INT16_HEADROOM)
        qo = params_for(dtype, *ranges[y.uid], headroom=INT16_HEADROOM)
        errors[dtype] = float(np.max(np.abs(simulate(values, qi, qo) - exact) / exact))
    return INT16 if errors[INT16] <= errors[INT8] else INT8


def wide_values(fn: Function, wide: Callable[[Op], bool], narrow: Callable[[Op], bool],
                 wide_inputs: bool = False) -> set[int]:
    """The float values to become int16: the outputs of the ``wide`` ops that compute and have a 16x8 kernel;
    of the ops that only move values, those whose inputs are all wide (a wide sequence stays wide up to the
    op that computes with it) or whose readers are all wide (a float input is quantized once, to int16).
    ``narrow`` ops stay int8 in any case (the target has no int16 kernel for them). ``wide_inputs``: the
    model's float inputs count as wide (16x8 mode: an op moving an input is int16 too)."""
    out = {o.uid for op in fn.ops if wide(op) and op.kind in INT16_KINDS and not narrow(op)
           and (not only_moves(op) or op.attrs.get(WIDE_ROWS))
           for o in op.outputs if o.dtype == FLOAT32}
    inputs = {v.uid for v in fn.inputs if v.dtype == FLOAT32} if wide_inputs else set()
    for op in fn.ops:
        ins = [v for v in op.inputs if is_activation(v)]
        if only_moves(op) and op.kind in INT16_KINDS and not narrow(op) and ins and \
                all(v.uid in out or v.uid in inputs for v in ins):
            out.update(o.uid for o in op.outputs if o.dtype == FLOAT32)
    for op in reversed(fn.ops):  # (a variable's value too: it is int16 when what reads it is 16x8)
        if not (only_moves(op) and op.kind in INT16_KINDS and not narrow(op)) and op.kind != "READ_VARIABLE":
            continue
        for o in op.outputs:
            users = fn.uses(o)
            if o.dtype == FLOAT32 and users and not fn.is_output(o) and \
                    all(any(u2.uid in out for u2 in u.outputs) for u in users):
                out.add(o.uid)
    return out


def mode_of(op: Op) -> str:
    """How an integer op runs: int16x8 (int16 activations) or int8."""
    values = op.outputs or op.inputs[1:]  # ASSIGN_VARIABLE: the value assigned
    return "int16x8" if any(v is not None and v.dtype == INT16 for v in values) else "int8"


def operand_scales(op: Op) -> dict:
    """The quantization of an integer op's operands and results, for the report: [scale, zero point] per
    tensor; a per-channel weight as its smallest and largest scale."""
    def one(v: Value | None):
        if v is None or v.quant is None:
            return None
        if len(v.quant.scale) > 1:
            return {"per_channel": len(v.quant.scale), "min": min(v.quant.scale), "max": max(v.quant.scale)}
        return [v.quant.scale[0], v.quant.zero_point[0]]
    return {"inputs": [one(v) for v in op.inputs], "outputs": [one(v) for v in op.outputs]}


def output_edges(fn: Function, q, output_type: str) -> None:
    """The outputs as the options ask: float32 (DEQUANTIZE), int8 or uint8 (QUANTIZE); ``q``: the int8 engine
    quantizing ``fn`` (``int8_engine.Int8Function``)."""
    outs = []
    for v in fn.outputs:
        if v.dtype in (INT8, INT16) and output_type == "float32":
            d = fn.add_op("tfl.DEQUANTIZE", [v], [(FLOAT32, v.shape)], name=f"{v.name}_dequantize")
            v = d.outputs[0]
        elif v.dtype in (INT8, INT16, FLOAT32) and output_type == "uint8" and (v.quant is not None or v.uid in q.ranges):
            src = q.int8_input(v, None)
            base = src.quant
            r = fn.add_op("tfl.QUANTIZE", [src], [(np.dtype(np.uint8), v.shape)], name=f"{v.name}_uint8")
            r.outputs[0].quant = Quantization(base.scale, (base.zero_point[0] + 128,))
            v = r.outputs[0]
        elif v.dtype == FLOAT32 and output_type == "int8" and v.uid in q.ranges:
            r = fn.add_op("tfl.QUANTIZE", [v], [(INT8, v.shape)], name=f"{v.name}_int8")
            r.outputs[0].quant = q.params(v, INT8)
            v = r.outputs[0]
        elif v.dtype == INT16 and output_type == "int8":
            v = q.int8_input(v, None)
        elif v.dtype in (INT8, FLOAT32) and output_type == "int16" and (v.quant is not None or v.uid in q.ranges):
            v = q.integer_input(v, None, INT16)
        outs.append(v)
    fn.outputs = outs
