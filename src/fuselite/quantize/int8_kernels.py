"""What LiteRT's integer kernels take, per op kind (read in each kernel's ``Prepare``;
``docs/kernel-contracts.md``): the integer kernel and its scale rule, the kinds with no integer kernel and
why, the int16 (16x8) kinds, saturating activations, fixed ranges and each kernel's scale floors. Adding an
integer rule for an op is an entry here."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fuselite.ir import Op
from fuselite.quantize.int8_params import INT8, INT16, MIN_SCALE, MIN_SCALE_INT16


@dataclass(frozen=True)
class IntegerKernel:
    """How one op kind runs on int8 (read from its LiteRT kernel)."""

    output: str  # "range" (calibrated), "same" (the first input's params) or "fixed"
    fixed: tuple[float, int] | None = None  # (scale, zero point) of an int8 output when output == "fixed"
    weight: tuple[int, int] | None = None  # (operand, per-channel axis) of a symmetric int8 weight
    bias: int | None = None  # operand of an int32 bias at input scale x weight scale
    needs_bias: bool = False  # the int8 kernel requires a bias operand
    inputs_as_output: bool = False  # every input must have the output's parameters (requantized if not)
    input: int = 0  # the operand the bias scale multiplies with the weight's (TRANSPOSE_CONV: 2)


_SAME = IntegerKernel("same")


_RANGE = IntegerKernel("range")


_AS_OUTPUT = IntegerKernel("range", inputs_as_output=True)


# Read in each kernel's Prepare / Eval (LiteRT tflite/kernels/, docs/kernel-contracts.md §15): "same" where the
# kernel moves or compares raw integers (the output must have the input's parameters, unchecked), "range" where
# it rescales from the input's parameters to the output's (a multiplier or a lookup table built from both).
INTEGER_KERNELS: dict[str, IntegerKernel] = {
    "FULLY_CONNECTED": IntegerKernel("range", weight=(1, 0), bias=2),
    "CONV_2D": IntegerKernel("range", weight=(1, 0), bias=2, needs_bias=True),
    "DEPTHWISE_CONV_2D": IntegerKernel("range", weight=(1, 3), bias=2, needs_bias=True),
    # transpose_conv.cc: 0 output shape, 1 weights [O, H, W, I] (per channel on 0), 2 input, 3 bias (optional)
    "TRANSPOSE_CONV": IntegerKernel("range", weight=(1, 0), bias=3, input=2),
    "SOFTMAX": IntegerKernel("fixed", fixed=(1 / 256, -128)),
    "LOGISTIC": IntegerKernel("fixed", fixed=(1 / 256, -128)),
    "TANH": IntegerKernel("fixed", fixed=(1 / 128, 0)),
    "LOG_SOFTMAX": IntegerKernel("fixed", fixed=(16 / 256, 127)),  # activations.cc LogSoftmaxPrepare: exactly
    "L2_NORMALIZATION": IntegerKernel("fixed", fixed=(1 / 128, 0)),  # l2norm.cc: the output is Q0.7
    "CONCATENATION": _AS_OUTPUT,  # concatenation.cc: no rescaling for int8
    "PACK": _AS_OUTPUT,  # pack.cc: inputs and output must share parameters
    # maximum_minimum.cc, select.cc: raw integers compared / copied: the inputs and the output share parameters
    "MAXIMUM": _AS_OUTPUT, "MINIMUM": _AS_OUTPUT, "SELECT_V2": _AS_OUTPUT, "SELECT": _AS_OUTPUT,
    # dynamic_update_slice.cc: the update's integers copied into the operand's (int8 and int16 in LiteRT 2.3 and
    # TFLite Micro): a TensorList written step by step (keras-hub RWKV-7's time loop at a static length)
    "DYNAMIC_UPDATE_SLICE": _AS_OUTPUT,
    # one_hot.cc: the on and off values copied as they are (int8 evaluates; int16 passes Prepare, not Eval)
    "ONE_HOT": _AS_OUTPUT,
    # fill.cc: the scalar value must have the output's scale and zero point (int16: zero point 0)
    "FILL": _AS_OUTPUT,
    # pad.cc (LiteRT and TFLite Micro): the constant value must have the output's scale and zero point, and
    # the output the input's (values copied): quantized at the input's parameters (``int8_engine.Int8Function.integer``)
    "PADV2": _SAME,
    # both operands activations (a constant right-hand side quantized as one, per tensor: the kernel reads
    # params.scale), as operator_property.cc's quantize_input_as_activations
    "BATCH_MATMUL": _RANGE,
    **{k: _RANGE for k in ("ADD", "SUB", "MUL", "DIV", "MEAN", "SUM", "GELU", "HARD_SWISH", "LEAKY_RELU", "RELU",
                           "RELU6", "SQUARED_DIFFERENCE", "RSQRT", "ABS", "ELU", "EXP", "LOG", "PRELU",
                           # comparisons rescale each side (comparisons.cc); their output is bool
                           "EQUAL", "NOT_EQUAL", "LESS", "LESS_EQUAL", "GREATER", "GREATER_EQUAL")},
    **{k: _SAME for k in ("RESHAPE", "SQUEEZE", "EXPAND_DIMS", "MAX_POOL_2D", "AVERAGE_POOL_2D", "TRANSPOSE",
                          "STRIDED_SLICE", "SLICE", "GATHER", "GATHER_ND", "PAD", "SPLIT", "SPLIT_V", "UNPACK", "TILE",
                          "BROADCAST_TO", "REVERSE_V2", "DEPTH_TO_SPACE", "SPACE_TO_DEPTH", "RESIZE_NEAREST_NEIGHBOR",
                          "RESIZE_BILINEAR", "REDUCE_MAX", "REDUCE_MIN", "SPACE_TO_BATCH_ND", "BATCH_TO_SPACE_ND",
                          "MIRROR_PAD",
                          # an int8 input, an integer (index) output; TOPK_V2's values are the input's
                          "ARG_MAX", "ARG_MIN", "TOPK_V2")},
}


# Kinds LiteRT has no integer kernel for (docs/kernel-contracts.md §15): they stay float between DEQUANTIZE and
# QUANTIZE in every mode, as the official quantizer leaves them, integer-only op sets included.
NO_INTEGER_KERNEL: dict[str, str] = {
    "CUMSUM": "LiteRT's CUMSUM takes float32, int32 and int64 only (cumsum.cc)",
    "RFFT2D": "LiteRT's RFFT2D takes float32 only (rfft2d.cc)",
    "COMPLEX_ABS": "COMPLEX_ABS reads complex values (complex_support.cc)",
    "CAST": "LiteRT's CAST converts values, not quantized reals (cast.cc)",
    "POW": "LiteRT's POW takes float32 and int32 only (pow.cc)",
    "FLOOR": "LiteRT's FLOOR takes float types only (floor.cc)",
    "SIGN": "LiteRT's SIGN takes float32, float64 and int32 only (sign.cc)",
    "SQUARE": "LiteRT's SQUARE takes float32 only (elementwise.cc)",
    "ADD_N": "LiteRT's ADD_N takes float32 and int32 only (add_n.cc)",
    "LOCAL_RESPONSE_NORMALIZATION": "LiteRT's LOCAL_RESPONSE_NORMALIZATION takes float32 only",
    "SIN": "LiteRT's SIN takes float32 only", "COS": "LiteRT's COS takes float32 only",
    "REAL": "REAL reads complex values", "IMAG": "IMAG reads complex values",
    "RANGE": "RANGE makes indices", "FLOOR_DIV": "no quantized FLOOR_DIV kernel",
    "FLOOR_MOD": "no quantized FLOOR_MOD kernel", "ROUND": "LiteRT's ROUND takes float32 only",
    "CEIL": "LiteRT's CEIL takes float32 only", "ATAN2": "LiteRT's ATAN2 takes float types only",
}


# Past these inputs the integer output of the function is within half a step of its limit (int8 tanh at
# 1/128: atanh(1 - 1/256); logistic at 1/256: ln(511); int16 at 1/32768): a wider input range only
# coarsens the input's steps.
SATURATES = {("TANH", "int8"): float(np.arctanh(1 - 1 / 256)), ("LOGISTIC", "int8"): float(np.log(511)),
             ("TANH", "int16"): float(np.arctanh(1 - 1 / 65536)), ("LOGISTIC", "int16"): float(np.log(65535))}


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


# Kinds whose LiteRT and TFLite Micro kernels take int16 activations (zero point 0) with int8 weights and
# int64 biases (the 16x8 scheme); read in each kernel's Prepare (docs/kernel-contracts.md §7.3). A fixed
# int8 output scale becomes 1/32768 (zero point 0) in int16. LiteRT only: GELU (an int16 lookup table; TFLite
# Micro has no GELU kernel in any type) and GATHER (TFLite Micro's takes int8 and float32 only). RSQRT: which of
# its two kernels is closer depends on the data (``rsqrt_width``).
INT16_KINDS = frozenset({
    "FULLY_CONNECTED", "CONV_2D", "DEPTHWISE_CONV_2D", "ADD", "SUB", "MUL", "LOGISTIC", "TANH", "SOFTMAX", "RELU",
    "RELU6", "GELU",
    "CONCATENATION", "PACK", "UNPACK", "RESHAPE", "SQUEEZE", "EXPAND_DIMS", "SPLIT", "SPLIT_V", "STRIDED_SLICE",
    "MEAN", "MAX_POOL_2D", "AVERAGE_POOL_2D", "PAD", "GATHER", "REVERSE_V2", "TRANSPOSE",
    # int16 with zero points 0 in LiteRT (kernel-contracts §15); TFLite Micro: MICRO_INT8_ONLY in stages/quantization.py
    "TRANSPOSE_CONV", "BATCH_MATMUL", "RESIZE_BILINEAR", "RESIZE_NEAREST_NEIGHBOR", "REDUCE_MAX", "REDUCE_MIN",
    "SUM", "ABS", "EXP", "LOG", "RSQRT", "LEAKY_RELU", "MAXIMUM", "MINIMUM", "SELECT_V2", "SLICE", "TOPK_V2",
    "PADV2", "FILL", "DYNAMIC_UPDATE_SLICE"})


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


# Kernels whose output multiplier must be below 1 (QuantizeMultiplierSmallerThanOneExp CHECK-fails, aborting the
# process, otherwise): ADD / SUB rescale both inputs to twice the larger input scale, shifted left by 20 bits
# (int8) or 15 (int16's general path), and then to the output scale (add.cc, sub.cc Prepare).
# SQUARED_DIFFERENCE: the same with (twice the larger scale) squared and 2^14 (squared_difference.cc); HARD_SWISH
# needs its output multiplier's exponent <= 0: input scale / 128 below the output's (activations.cc).
_LEFT_SHIFT = {("ADD", "int8"): 20, ("SUB", "int8"): 20, ("ADD", "int16"): 15, ("SUB", "int16"): 15}


COMPARISONS = ("EQUAL", "NOT_EQUAL", "LESS", "LESS_EQUAL", "GREATER", "GREATER_EQUAL")


# The largest |limit| of each clamp, fused or an op of its own: the kernel turns it into an integer as
# round(limit / scale), which must fit an int32 (kernel_util.cc Quantize checks it and fails Prepare;
# activations.cc's QuantizedReluX casts unchecked, a silently wrong clamp). Only int16 scales get that small.
CLAMP_LIMIT = {"RELU6": 6.0, "RELU_N1_TO_1": 1.0, "RELU_0_TO_1": 1.0}


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
    shift = _LEFT_SHIFT.get((kind, np.dtype(dtype).name))
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
