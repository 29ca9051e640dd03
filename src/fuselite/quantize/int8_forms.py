"""Rewrites the int8 engine applies before quantizing a function: equal forms with integer kernels
(``integer_forms``: NEG, a division by a constant or by a square root, SQUARE and POW(x, 2), ZEROS_LIKE; a
16x8 model's SQUARED_DIFFERENCE and HARD_SWISH), a 16x8 norm scaled row by row (``_row_scaled_norm``), and a
concatenation of uneven parts marked int16 with the norm that reads it (``uneven_rows``).

The engine's other rules before quantizing are in ``int8_ranges`` (saturated, bounded and shared ranges, index
arithmetic left float), ``int8_masks`` (masked logits), ``int8_widths`` (the int16 values of a 16x8 model, RSQRT's
width chosen on the data) and ``int8_outputs`` (the output edges, what the report says of each integer op); their
names are importable from here too."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from fuselite.ir import Function, Op, Value
from fuselite.quantize.int8_masks import (  # noqa: F401  (importable from here, as before)
    is_mask_fill,
    is_mask_term,
    masked_logits,
    masked_low,
    masked_range,
)
from fuselite.quantize.int8_outputs import mode_of, operand_scales, output_edges  # noqa: F401  (as before)
from fuselite.quantize.int8_params import FLOAT32, is_activation
from fuselite.quantize.int8_ranges import (  # noqa: F401  (importable from here, as before)
    SHARED_SCALE,
    bounded_ranges,
    index_arithmetic,
    saturated_ranges,
    shared_ranges,
)
from fuselite.quantize.int8_widths import WIDE_ROWS, rsqrt_width, wide_values  # noqa: F401  (as before)
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
