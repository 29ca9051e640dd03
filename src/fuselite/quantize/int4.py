"""Blockwise int4 weights (mode ``"int4"``): FULLY_CONNECTED weights as LiteRT's blockwise int4, float activations.

``conv.optimizations = [tf.lite.Optimize.DEFAULT]`` with ``conv.target_spec.supported_types = ["int4"]``
(``fuselite convert --quantize int4``, ``convert-lm --weights int4``), ``block_size`` 32 by default. Each
``FULLY_CONNECTED`` weight ``[outputs, inputs]`` is stored as signed int4 (two per byte) with one float16 scale
per block of ``block_size`` inputs of an output (the schema's ``BlockwiseQuantization``: 4.5 bits a weight at
block 32, 4.125 at 128); the other ops with a hybrid kernel get int8 weights as in dynamic-range quantization
(``dynamic.py``), as do the FULLY_CONNECTED ops the kernels cannot run blockwise. The kernels' contract
(``docs/kernel-contracts.md``):

- LiteRT's builtin ``fully_connected.cc`` runs ``EvalBlockwise4Bit`` only for a constant INT4 filter with an even
  number of inputs, at least 32 of them and at least 4 outputs (otherwise it computes the bias alone, with no
  error); its input is quantized per row (asymmetric int8) at each invoke, and it does not apply the op's fused
  activation — so an activation is written as an op of its own after it.
- XNNPACK (``xnnpack_delegate.cc``, ``qb4w``): a block size that is a multiple of 32 and divides the inputs,
  ``quantized_dimension`` 0, no zero point; it reads the float16 scales as bfloat16 — so the scales are rounded
  through bfloat16 here and both kernel sets compute with the same ones (and no scale is 0: XNNPACK refuses one).

Values are ``round(w / scale)`` in [-7, 7] with ``scale = max |w| / 7`` over the block (symmetric, as the
weights' rule in the quantization spec): a block of zeros gets a tiny positive scale (2^-24), its values 0.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

from fuselite.ir import BlockwiseQuantization, Function, Op, Value
from fuselite.ir.arrays import row_ranges

DEFAULT_BLOCK_SIZE = 32
BLOCK_SIZES = "a positive multiple of 32 (XNNPACK's blockwise int4 GEMM)"
MIN_INPUTS, MIN_OUTPUTS = 32, 4  # fully_connected.cc: below these EvalBlockwise4Bit is not run
SCALE_RANGE = (2.0 ** -24, 2.0 ** 15)  # powers of two float16 and bfloat16 both hold: a block of zeros gets the
# smallest (XNNPACK refuses a scale of 0), a larger one saturates its values
_ACTIVATIONS = ("RELU", "RELU6", "RELU_N1_TO_1")  # the float FULLY_CONNECTED kernel's fused activations


def check_block_size(value) -> int:
    """``block_size`` as the kernels take it, or the reason it is not."""
    from fuselite.quantize.options import QuantizationOptionError

    if isinstance(value, bool) or not isinstance(value, int) or value <= 0 or value % 32:
        raise QuantizationOptionError(f"block_size is the int4 weights' block of inputs, {BLOCK_SIZES}: 32, 64, "
                                      f"128, ...; got {value!r}")
    return value


def blockwise_int4(w: np.ndarray, block_size: int) -> tuple[np.ndarray, BlockwiseQuantization]:
    """``w`` ([outputs, inputs], float) as int4 values in [-7, 7] and one scale per block of ``block_size`` inputs
    (float16 holding a bfloat16 value); a slice of rows at a time (no whole float64 copy of a large weight)."""
    outputs, inputs = w.shape
    blocks = inputs // block_size
    scales = np.empty((outputs, blocks), np.float16)
    q = np.empty((outputs, inputs), ml_dtypes.int4)
    for start, stop in row_ranges(w, 8):
        part = np.asarray(w[start:stop], np.float32).reshape(stop - start, blocks, block_size)
        peak = np.clip(np.abs(part).max(axis=2) / np.float32(7), SCALE_RANGE[0], SCALE_RANGE[1])
        scale = peak.astype(ml_dtypes.bfloat16).astype(np.float16)
        scales[start:stop] = scale
        values = np.clip(np.rint(part / scale.astype(np.float32)[..., None]), -7, 7)
        q[start:stop] = values.reshape(stop - start, inputs).astype(np.int8).astype(ml_dtypes.int4)
    return q, BlockwiseQuantization(scales, block_size)


def why_not_blockwise(op: Op, block_size: int) -> str | None:
    """Why ``op``'s weight cannot be blockwise int4 on both kernel sets (None: it can)."""
    if op.kind != "FULLY_CONNECTED":
        return f"LiteRT's blockwise int4 kernels are FULLY_CONNECTED's; {op.kind} gets int8"
    w = op.inputs[1]
    if w.const.ndim != 2:
        return f"its weight has rank {w.const.ndim}, not 2"
    outputs, inputs = w.const.shape
    if inputs % block_size:
        return f"its {inputs} inputs are not a multiple of the block size {block_size}"
    if inputs < MIN_INPUTS or outputs < MIN_OUTPUTS:
        return (f"{outputs} outputs of {inputs} inputs: LiteRT's blockwise kernel needs at least {MIN_OUTPUTS} "
                f"outputs and {MIN_INPUTS} inputs (fully_connected.cc)")
    act = op.attrs.get("fused_activation_function", "NONE")
    if act not in ("NONE", *_ACTIVATIONS):
        return f"its fused activation {act}"
    return None


def make_blockwise(fn: Function, op: Op, weight: Value) -> Op:
    """Give ``op`` (a FULLY_CONNECTED) ``weight`` (blockwise int4), its fused activation as an op after it; the op
    whose output is the result (``op``, or the activation's)."""
    op.inputs[1] = weight
    act = op.attrs.get("fused_activation_function", "NONE")
    if act == "NONE":
        return op
    op.attrs["fused_activation_function"] = "NONE"
    (out,) = op.outputs  # stays the result (its name, its users): the activation's output now
    pre = Value(fn.unique_name(f"{out.name}_linear"), out.dtype, out.shape, producer=op, index=0)
    op.outputs[0] = pre
    after = fn.make_op(f"tfl.{act}", [pre], [(out.dtype, out.shape)], name=f"{op.name}/{act.lower()}",
                       location=op.location)
    after.outputs[0], out.producer, out.index = out, after, 0
    fn.ops.insert(fn.ops.index(op) + 1, after)
    return after
