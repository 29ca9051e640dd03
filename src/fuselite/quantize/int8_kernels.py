"""The integer kernels' rules the int8 engine applies, from each op's entry in ``ops/catalog.py`` (its integer
kernel and scale rule, int16 form, saturation, shifts and clamps: adding an integer rule for an op is that
entry): each kernel's scale floors, fixed-range starvation, the output range of ops that share their inputs'
parameters, and the ranges of softmax inputs, masks and index arithmetic."""

from __future__ import annotations

import numpy as np

from fuselite.ir import Op
from fuselite.ops.catalog import (  # noqa: F401  (the engine's names for the catalog's tables)
    CLAMP_LIMIT,
    INT16_KINDS,
    INTEGER_KERNELS,
    LEFT_SHIFT,
    NO_INTEGER_KERNEL,
    SATURATES,
    IntegerKernel,
)
from fuselite.quantize.int8_params import INT8, INT16, MIN_SCALE, MIN_SCALE_INT16

# How far below the largest logit a SOFTMAX input contributes nothing its output can show: exp(d) under half an
# output step (int8: 1/512, d < -6.2; int16: 1/65536, d < -11.1), with room; LiteRT's int16 softmax reads its
# differences over [-10, 0] only (activations.cc), so anything below counts as -10 there
SOFTMAX_CUTOFF = {"int8": 8.0, "int16": 12.0}


LARGE_NEGATIVE = -1e4  # a mask's fill value (Keras: -1e9 or the dtype's lowest): no logit is this low


# Float-only ops whose results have known bounds: their calibrated range widened to them, since the values they
# give at lengths or positions calibration did not see (a rotary embedding's sin past the calibrated length) fill it
BOUNDED = {"SIN": (-1.0, 1.0), "COS": (-1.0, 1.0)}


INDEX_ARITHMETIC = ("index arithmetic: float values computed from integers (positions, buckets, rotary angles) "
                    "and read as integers or by float-only ops; exact in float at every length, as the official "
                    "converter's constant folding leaves them")


# Float ops that may compute integers (positions, buckets, lengths): elementwise arithmetic, comparisons and moves
INDEX_KINDS = frozenset({"ADD", "SUB", "MUL", "DIV", "LOG", "EXP", "SQRT", "RSQRT", "ABS", "NEG", "FLOOR", "CEIL",
                         "ROUND", "MINIMUM", "MAXIMUM", "POW", "SQUARE", "FLOOR_DIV", "FLOOR_MOD", "SELECT_V2",
                         "LESS", "LESS_EQUAL", "GREATER", "GREATER_EQUAL", "EQUAL", "NOT_EQUAL", "RESHAPE",
                         "EXPAND_DIMS", "SQUEEZE", "TRANSPOSE", "STRIDED_SLICE", "SLICE", "BROADCAST_TO", "TILE",
                         "CONCATENATION", "PACK", "FULLY_CONNECTED", "BATCH_MATMUL"})


# A kernel that fixes its int8 output scale (TANH at 1/128, LOGISTIC and SOFTMAX at 1/256) gives values that span
# fewer steps than this in calibration next to nothing: Gemma-2-style logit soft-capping, tanh(logits / 50) * 50,
# has tanh outputs of +-0.009, about one int8 step (T5Gemma int8: 20% off). Such an op runs on its int16 kernel
# (1/32768) inside an int8 model, requantized to int8 at its calibrated range after (``fixed_scale_starved``).
STARVED_STEPS = 16


def fixed_scale_steps(op: Op, ranges: dict[int, tuple[float, float]]) -> float | None:
    """How many steps of its int8 kernel's fixed output scale ``op``'s calibrated outputs span (None: its kernel
    fixes no scale, or has no int16 form)."""
    kernel = INTEGER_KERNELS.get(op.kind)
    if kernel is None or kernel.output != "fixed" or op.kind not in INT16_KINDS or not op.outputs \
            or op.outputs[0].uid not in ranges:
        return None
    lo, hi = ranges[op.outputs[0].uid]
    return (hi - lo) / kernel.fixed[0]


def fixed_scale_starved(op: Op, ranges: dict[int, tuple[float, float]]) -> bool:
    """``op``'s int8 kernel fixes its output scale, and its calibrated outputs span fewer than STARVED_STEPS of
    it; its int16 kernel would give them 256 times the steps."""
    steps = fixed_scale_steps(op, ranges)
    return steps is not None and steps < STARVED_STEPS


def only_moves(op: Op) -> bool:
    """The op only moves values (reshape, slice, pooling, concatenation): its int8 / int16 form follows
    its neighbours'."""
    kernel = INTEGER_KERNELS.get(op.kind)
    return kernel is not None and (kernel.output == "same" or kernel.inputs_as_output)


def computes_16x8(kind: str) -> bool:
    """An op kind that computes (not only moves values) and has a 16x8 kernel: worth making wider."""
    kernel = INTEGER_KERNELS.get(kind)
    return kernel is not None and kind in INT16_KINDS and kernel.output != "same" and not kernel.inputs_as_output


COMPARISONS = ("EQUAL", "NOT_EQUAL", "LESS", "LESS_EQUAL", "GREATER", "GREATER_EQUAL")


def input_scale_floor(op: Op, dtype: np.dtype) -> float:
    """The smallest scale of ``op``'s first input its kernel prepares with (0: no floor). An int8 SOFTMAX:
    TFLite Micro's ``PreprocessSoftmaxScaling`` calls ``QuantizeMultiplierGreaterThanOne(beta * input_scale *
    2^26)``, whose ``TFLITE_CHECK_GT(multiplier, 1)`` aborts the process below 2^-26 / beta
    (``softmax_common.cc``; a collapsed model's logits, calibrated to the minimum range, have 7.8e-9); twice that,
    to spare."""
    if op.kind == "SOFTMAX" and np.dtype(dtype) == INT8:
        return 2.0 ** -25 / max(float(op.attrs.get("beta", 1.0)), 1e-30)
    return 0.0


def output_scale_floor(kind: str, dtype: np.dtype, input_scales: list[float], activation: str = "NONE") -> float:
    """The smallest output scale ``kind``'s kernel prepares with (and clamps right with), given its inputs'
    scales and its fused ``activation`` (with 1% to spare)."""
    least = MIN_SCALE_INT16 if np.dtype(dtype) == INT16 else MIN_SCALE
    limit = max(CLAMP_LIMIT.get(kind, 0.0), CLAMP_LIMIT.get(activation, 0.0))
    if limit:
        least = max(least, 1.01 * limit / 2 ** 31)
    if not input_scales:
        return least
    top = max(input_scales)
    if kind == "SQUARED_DIFFERENCE":
        return max(least, 1.01 * (2 * top) ** 2 / 2 ** 14)
    if kind == "HARD_SWISH":
        return max(least, 1.01 * top / 128)
    shift = LEFT_SHIFT.get((kind, np.dtype(dtype).name))
    return least if shift is None else max(least, 1.01 * 2 * top / 2 ** shift)


def result_range(kind: str, ins: list[tuple[float, float]]) -> tuple[float, float]:
    """The reals an op whose inputs share its output's parameters can give, from what its inputs hold: a
    MAXIMUM's are at least its inputs' largest low (an input clipped up to it changes no result: clip_by_value's
    -1e9 would otherwise take the whole int8 range, GPT-OSS's experts), a MINIMUM's at most their smallest
    high; a CONCATENATION or SELECT gives any input's value (their union)."""
    if kind == "MAXIMUM":
        return max(lo for lo, _ in ins), max(hi for _, hi in ins)
    if kind == "MINIMUM":
        return min(lo for lo, _ in ins), min(hi for _, hi in ins)
    return min(lo for lo, _ in ins), max(hi for _, hi in ins)
