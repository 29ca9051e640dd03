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

import numpy as np

from fuselite.lower.registry import lowering
from fuselite.quantize.fake_quant import FakeQuantError, nudged

INT8 = np.dtype(np.int8)
FLOAT32 = np.dtype(np.float32)


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


@lowering(*("FakeQuantWithMinMaxVars", "FakeQuantWithMinMaxArgs", "FakeQuantWithMinMaxVarsPerChannel"))
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
