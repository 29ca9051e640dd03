"""Which values a model's integer ops run in int16: RSQRT's width in a 16x8 model, chosen on the calibration data
by simulating LiteRT's int8 and int16 kernels (``rsqrt_width``), and the float values that become int16
(``wide_values``: the 16x8 ops', what moves them, and the ops marked ``WIDE_ROWS`` by ``int8_forms.uneven_rows``).
Importable from ``int8_forms`` too."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from fuselite.ir import Function, Op, Quantization
from fuselite.quantize.int8_kernels import INT16_KINDS, only_moves
from fuselite.quantize.int8_params import FLOAT32, INT8, INT16, INT16_HEADROOM, is_activation, params_for, represented

WIDE_ROWS = "_wide_rows"  # an op attribute: int16 in any mode (``uneven_rows``)


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
