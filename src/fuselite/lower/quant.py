"""FakeQuant ops (quantization-aware training): a QUANTIZE / DEQUANTIZE pair with the trained grid.

``tf.quantization.fake_quant_with_min_max_vars`` / ``…_args`` / ``…_vars_per_channel`` and
tfmot's quantizers round a tensor to a grid of ``num_bits`` integers; TensorFlow's kernel
clamps to the nudged ``[min, max]``, then rounds. LiteRT's QUANTIZE rounds and saturates to
int8, so where the grid is all of int8 the pair computes TensorFlow's numbers; a narrower grid
(``narrow_range``, fewer bits) is clamped first (MAXIMUM / MINIMUM). A per-channel FakeQuant
of a non-constant tensor is written as that arithmetic in float (LiteRT's QUANTIZE is per
tensor). A constant input is folded before lowering (TensorFlow evaluates it).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fuselite.ir import Quantization
from fuselite.lower.registry import lowering

INT8 = np.dtype(np.int8)
FLOAT32 = np.dtype(np.float32)
INT8_MIN = -128  # the integer grid [quant_min, quant_max] of TF (0 or 1 .. 2^bits - 1) stored in int8: minus 128


@dataclass(frozen=True)
class FakeQuantGrid:
    """One FakeQuant op's grid, as TensorFlow nudges it: ``real = scale * (q - zero_point)`` for the
    int8 ``q`` in ``[q_min, q_max]`` (a sub-range of int8 for fewer bits or ``narrow_range``)."""

    scale: np.ndarray  # one per channel (the last axis) or one
    zero_point: np.ndarray  # int8 zero points
    q_min: int
    q_max: int

    @property
    def nudged_min(self) -> np.ndarray:
        return (self.q_min - self.zero_point) * self.scale

    @property
    def nudged_max(self) -> np.ndarray:
        return (self.q_max - self.zero_point) * self.scale

    @property
    def full_int8(self) -> bool:
        """The grid is all of int8: a QUANTIZE's own saturation is TensorFlow's clamp."""
        return self.q_min == -128 and self.q_max == 127

    def quantization(self, axis: int) -> Quantization:
        return Quantization(tuple(float(s) for s in self.scale), tuple(int(z) for z in self.zero_point), axis)


class FakeQuantError(ValueError):
    """A FakeQuant op whose range TensorFlow itself would reject (min >= max, num_bits outside 2..8)."""


def nudged(lo, hi, num_bits: int = 8, narrow_range: bool = False) -> FakeQuantGrid:
    """TensorFlow's ``Nudge`` (``fake_quant_ops_functor.h``) for each ``[lo, hi]``, in int8 terms.

    >>> g = nudged(-3.0, 3.0); float(g.scale[0]), int(g.zero_point[0])
    (0.023529411764705882, 0)
    """
    if not 2 <= int(num_bits) <= 8:
        raise FakeQuantError(f"num_bits={num_bits}: TensorFlow's FakeQuant takes 2 to 8 bits")
    lo, hi = np.atleast_1d(np.asarray(lo, np.float64)), np.atleast_1d(np.asarray(hi, np.float64))
    if np.any(~np.isfinite(lo)) or np.any(~np.isfinite(hi)) or np.any(lo >= hi):
        raise FakeQuantError(f"min {lo.tolist()} is not below max {hi.tolist()}")
    # TensorFlow computes in float32; the nudged grid is what its kernel rounds to
    lo, hi = lo.astype(np.float32), hi.astype(np.float32)
    quant_min = np.float32(1 if narrow_range else 0)
    quant_max = np.float32((1 << int(num_bits)) - 1)
    scale = (hi - lo) / (quant_max - quant_min)
    zero_from_min = quant_min - lo / scale
    zero = np.where(zero_from_min < quant_min, quant_min,
                    np.where(zero_from_min > quant_max, quant_max, np.round(zero_from_min)))
    return FakeQuantGrid(scale=scale.astype(np.float64), zero_point=zero.astype(np.int64) + INT8_MIN,
                         q_min=int(quant_min) + INT8_MIN, q_max=int(quant_max) + INT8_MIN)


def _grid(ctx):
    per_channel = ctx.op.kind == "FakeQuantWithMinMaxVarsPerChannel"
    if ctx.op.kind == "FakeQuantWithMinMaxArgs":
        lo, hi = ctx.attr("min", -6.0), ctx.attr("max", 6.0)
    else:
        lo = ctx.const_input(1, "min (a trained variable, frozen)")
        hi = ctx.const_input(2, "max (a trained variable, frozen)")
    try:
        grid = nudged(lo, hi, int(ctx.attr("num_bits", 8)), bool(ctx.attr("narrow_range", False)))
    except FakeQuantError as e:
        ctx.fail(str(e))
    if not per_channel and grid.scale.size != 1:
        ctx.fail(f"min / max of {grid.scale.size} values on a per-tensor FakeQuant")
    return grid, per_channel


@lowering("FakeQuantWithMinMaxVars", "FakeQuantWithMinMaxArgs", "FakeQuantWithMinMaxVarsPerChannel")
def lower_fake_quant(ctx):
    x = ctx.input(0)
    grid, per_channel = _grid(ctx)
    if per_channel and grid.scale.size > 1:
        return [_float_fake_quant(ctx, x, grid)]
    if not grid.full_int8:  # TensorFlow clamps to the nudged range; QUANTIZE saturates to all of int8
        lo = ctx.const(grid.nudged_min.astype(np.float32).reshape(()))
        hi = ctx.const(grid.nudged_max.astype(np.float32).reshape(()))
        x = ctx.emit("MINIMUM", [ctx.emit("MAXIMUM", [x, lo], dtype=FLOAT32), hi], dtype=FLOAT32)
    q = ctx.emit("QUANTIZE", [x], dtype=INT8)
    q.quant = grid.quantization(axis=0)
    q.producer.attrs.update(_fake_quant=True, _grid=(grid.q_min, grid.q_max))
    return [ctx.emit("DEQUANTIZE", [q], dtype=FLOAT32)]


def _float_fake_quant(ctx, x, grid):
    """TensorFlow's per-channel kernel in float: clamp, shift, round half up, scale back."""
    lo = ctx.const(grid.nudged_min.astype(np.float32))
    hi = ctx.const(grid.nudged_max.astype(np.float32))
    inv = ctx.const((1.0 / grid.scale).astype(np.float32))
    scale = ctx.const(grid.scale.astype(np.float32))
    half = ctx.const(np.float32(0.5))

    def emit(kind, a, b=None, options=None):
        return ctx.emit(kind, [a] if b is None else [a, b], options, dtype=FLOAT32)

    act = {"fused_activation_function": "NONE"}
    clamped = emit("MINIMUM", emit("MAXIMUM", x, lo), hi)
    steps = emit("FLOOR", emit("ADD", emit("MUL", emit("SUB", clamped, lo, act), inv, act), half, act))
    return emit("ADD", emit("MUL", steps, scale, act), lo, act)


@lowering("QuantizeAndDequantizeV2", "QuantizeAndDequantizeV3", "QuantizeAndDequantizeV4")
def lower_quantize_and_dequantize(ctx):
    """``tf.quantization.quantize_and_dequantize_v2`` (V2, V4; V3 takes ``num_bits`` as an input) with a given
    range: TensorFlow's kernel (``quantize_and_dequantize_op.h``, ``QuantizeAndDequantizeOneScaleImpl``) takes
    the larger of the two scales the range allows, widens the other end of the range to it, then computes
    ``round(clamp(x, lo, hi) * scale) * (1 / scale)`` in float32 — written as those ops (MAXIMUM, MINIMUM, MUL,
    ROUND for HALF_TO_EVEN or FLOOR(x + 0.5) for HALF_UP), the same numbers. A range computed from the input
    (``range_given=False``) is refused: LiteRT would compute it at run time, not yet written."""
    x = ctx.input(0)
    if x.dtype != FLOAT32:
        ctx.fail(f"input dtype {x.dtype} (float32 only)")
    if not ctx.attr("range_given", False):
        ctx.fail("range_given=False (the range taken from the input at run time) is not supported: pass "
                 "range_given=True with constant input_min / input_max")
    lo = np.asarray(ctx.const_input(1, "input_min"), np.float32)
    hi = np.asarray(ctx.const_input(2, "input_max"), np.float32)
    bits = int(ctx.const_input(3, "num_bits")) if ctx.op.kind == "QuantizeAndDequantizeV3" else \
        int(ctx.attr("num_bits", 8))
    signed, narrow = bool(ctx.attr("signed_input", True)), bool(ctx.attr("narrow_range", False))
    round_mode = ctx.attr("round_mode", "HALF_TO_EVEN")
    if isinstance(round_mode, bytes):
        round_mode = round_mode.decode()
    if round_mode not in ("HALF_TO_EVEN", "HALF_UP"):
        ctx.fail(f"round_mode {round_mode!r}")
    if int(ctx.attr("axis", -1)) != -1:  # TensorFlow 2.21's CPU kernel refuses it too ("input_min must be a scalar")
        ctx.fail(f"axis={ctx.attr('axis')} (a range per slice) is not supported")
    if not 1 <= bits <= (63 if signed else 62):
        ctx.fail(f"num_bits={bits}")
    if signed:
        q_min, q_max = -(1 << (bits - 1)) + (1 if narrow else 0), (1 << (bits - 1)) - 1
    else:
        q_min, q_max = 0, (1 << bits) - 1
    if np.any(lo > hi):
        ctx.fail("input_min is above input_max")
    big = np.float32(np.finfo(np.float32).max)
    with np.errstate(divide="ignore", invalid="ignore"):
        from_min = np.where(q_min * lo > 0, np.float32(q_min) / lo, big).astype(np.float32)
        from_max = np.where(q_max * hi > 0, np.float32(q_max) / hi, big).astype(np.float32)
    use_min = from_min < from_max
    scale = np.where(use_min, from_min, from_max).astype(np.float32)
    inverse = (np.float32(1.0) / scale).astype(np.float32)
    hi = np.where(use_min, np.float32(q_max) * inverse, hi).astype(np.float32)
    lo = np.where(use_min, lo, np.float32(q_min) * inverse).astype(np.float32)
    if lo.size != 1 or hi.size != 1:
        ctx.fail(f"a range of {lo.size} values")
    act = {"fused_activation_function": "NONE"}

    def emit(kind, a, b=None, options=None):
        return ctx.emit(kind, [a] if b is None else [a, b], options, dtype=FLOAT32)

    scaled = emit("MUL", emit("MINIMUM", emit("MAXIMUM", x, ctx.const(lo)), ctx.const(hi)), ctx.const(scale), act)
    if round_mode == "HALF_TO_EVEN":
        steps = emit("ROUND", scaled)
    else:
        steps = emit("FLOOR", emit("ADD", scaled, ctx.const(np.float32(0.5)), act))
    return [emit("MUL", steps, ctx.const(inverse), act)]
