"""Full integer: int8 (or int16, 16x8) activations from calibrated ranges, int8 weights, int32 (int64) biases.

Follows the TFLite quantization spec (``tensorflow/lite/g3doc/performance/quantization_spec.md``)
and each kernel's contract (``docs/kernel-contracts.md``):

* activations: int8, asymmetric, per tensor, from the calibrated range widened to hold 0;
* weights of ``FULLY_CONNECTED`` / ``CONV_2D`` (axis 0) and ``DEPTHWISE_CONV_2D`` (axis 3):
  int8, symmetric, per channel; their biases int32 at ``input scale * weight scale[c]``,
  zero point 0 (a conv without a bias gets a zero one: the int8 kernel needs it);
* ops whose kernel passes values through (reshape, pooling, slicing, ``GATHER``, ...) give
  their output the input's scale and zero point, as the spec restricts them;
* ``SOFTMAX`` / ``LOGISTIC`` outputs (1/256, -128), ``TANH`` (1/128, 0), as the kernels need;
* other constants an op reads (an ``ADD`` of a constant, a ``GATHER`` table) are quantized
  like activations, asymmetric int8 from their own range.

Between an op that stays float and its integer neighbours a ``DEQUANTIZE`` / ``QUANTIZE``
is placed (one per value); at the model's inputs and outputs too, unless
``inference_input_type`` / ``inference_output_type`` ask for int8 (or uint8) tensors there.
An op without an integer form here stays float, or, with only integer op sets, is a
conversion error listing every such op.

The ``wide`` ops (16x8 mode: all; int8 mode: the steps of unrolled recurrent cells, and the
layers an error budget widens) get int16 activations (symmetric, zero point 0) and int64
biases where ``INT16_KINDS`` says their kernels take them; ``QUANTIZE`` moves values between
int8 and int16. ``UNIDIRECTIONAL_SEQUENCE_LSTM`` becomes the 8x8->16 integer LSTM; stateful
layers' variables hold integers.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from fuselite.errors import ConversionError
from fuselite.ir import Function, Module, Op, Quantization, Value
from fuselite.quantize.dynamic import symmetric_int8
from fuselite.quantize.select import KeepFloat, WeightBytes, content_key, op_name, record
from fuselite.quantize.select import add_record as _add

FLOAT32 = np.dtype(np.float32)
INT8 = np.dtype(np.int8)
INT16 = np.dtype(np.int16)


class NotIntegerError(ConversionError):
    """Ops that cannot be made integer while the options ask for integer only."""


# The smallest range an activation gets: the official quantizer's ExpandVerySmallRange widens a calibrated
# range narrower than kNearZeroTolerance (1e-6) to at least [-1e-6, 1e-6] (compiler/mlir/lite/quantization/
# common/quantization_lib/quantization_utils.cc). A raw range of an almost-constant tensor gives scales down to
# 1e-13, which overflow the kernels' multipliers and fused-activation limits (kernel_util.cc Quantize:
# RELU6's 6 / scale must fit an int32; output_scale_floor keeps that).
NEAR_ZERO = 1e-6
MIN_SCALE = 2 * NEAR_ZERO / 255  # the int8 scale of that range: no int8 activation scale is smaller
# The int16 (symmetric) scale of that range. An int16 scale floored at the int8 one would leave a tensor whose
# values span 3e-7 (EfficientNet's last activation with random weights) ~40 steps: 8% of its range.
MIN_SCALE_INT16 = NEAR_ZERO / 32767


def _widened(lo: float, hi: float) -> tuple[float, float]:
    """[lo, hi] widened to hold 0 and to at least [-NEAR_ZERO, NEAR_ZERO] when narrower than that."""
    lo, hi = min(float(lo), 0.0), max(float(hi), 0.0)
    if not (np.isfinite(lo) and np.isfinite(hi)):
        raise _NoRange(f"its calibrated range [{lo}, {hi}] is not finite (the float model gives inf or NaN on "
                       "the representative dataset)")
    if hi - lo <= NEAR_ZERO:
        lo, hi = min(lo, -NEAR_ZERO), max(hi, NEAR_ZERO)
    return lo, hi


def activation_params(lo: float, hi: float) -> Quantization:
    """Asymmetric int8 parameters for values in [lo, hi] (widened to hold 0, as the spec says, and to the
    official converter's smallest range)."""
    lo, hi = _widened(lo, hi)
    scale = max((hi - lo) / 255, MIN_SCALE)
    zero_point = int(np.clip(round(-128 - lo / scale), -128, 127))
    return Quantization((float(np.float32(scale)),), (zero_point,))


def int16_params(lo: float, hi: float) -> Quantization:
    """Symmetric int16 parameters (zero point 0, as every 16x8 kernel requires) for values in [lo, hi]."""
    peak = max(abs(float(lo)), abs(float(hi)))
    # All zeros: the scale of a [-1, 1] range. A large one would break the kernels that rescale to twice
    # the larger input scale (int16 ADD / SUB need that below 2^15 x their output scale).
    scale = (peak if peak > 0 else 1.0) / 32767
    return Quantization((float(np.float32(max(scale, MIN_SCALE_INT16))),), (0,))


INT16_HEADROOM = 2.0  # int16 ranges are calibrated ranges x this: inputs beyond the calibration data do not
# clip (one of 15 bits: steps stay ~1e-4 of the range, while a clipped state is a large error)


def params_for(dtype: np.dtype, lo: float, hi: float, headroom: float = 1.0) -> Quantization:
    return int16_params(lo * headroom, hi * headroom) if dtype == INT16 else activation_params(lo, hi)


def represented(q: Quantization, dtype: np.dtype) -> tuple[float, float]:
    """The reals an integer tensor with parameters ``q`` can hold."""
    info = np.iinfo(dtype)
    return q.scale[0] * (info.min - q.zero_point[0]), q.scale[0] * (info.max - q.zero_point[0])


def quantize_values(x: np.ndarray, q: Quantization, dtype: np.dtype = INT8) -> np.ndarray:
    """Real values as ``dtype`` (int8 or int16) with per-tensor parameters ``q``."""
    info = np.iinfo(dtype)
    return np.clip(np.rint(np.asarray(x, np.float64) / q.scale[0]) + q.zero_point[0], info.min, info.max).astype(dtype)


def int32_bias(values: np.ndarray, scales: np.ndarray, dtype=np.int32) -> np.ndarray:
    """A bias as int32 (int64 for a 16x8 kernel) at ``scales`` (input scale x weight scale), zero point 0."""
    q = np.rint(np.asarray(values, np.float64) / np.asarray(scales, np.float64))
    info = np.iinfo(dtype)
    return np.clip(q, info.min + 1, info.max).astype(dtype)


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
    # one_hot.cc: the on and off values copied as they are (int8 evaluates; int16 passes Prepare, not Eval)
    "ONE_HOT": _AS_OUTPUT,
    # fill.cc: the scalar value must have the output's scale and zero point (int16: zero point 0)
    "FILL": _AS_OUTPUT,
    # pad.cc (LiteRT and TFLite Micro): the constant value must have the output's scale and zero point, and
    # the output the input's (values copied): quantized at the input's parameters (``_Int8Function.integer``)
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


def _integer_forms(fn: Function, keep: KeepFloat, ranges: dict[int, tuple[float, float]],
                   wide: Callable[[Op], bool] = lambda op: False) -> None:
    """Ops whose integer kernel would be wrong or missing, in an equal form that has one (float values alike):
    NEG is a raw integer negation in LiteRT (neg.cc: right only for zero point 0, -(-128) wraps) and has no
    integer kernel in TFLite Micro: x * -1; a division by a constant (Keras' Normalization) is a multiplication
    by its reciprocal, as the official converter's rewrites make it; a division by a square root (RMS norms
    written ``x * reciprocal(sqrt(var + eps))``: Gemma, T5Gemma) is a multiplication by RSQRT, which has int8
    and int16 kernels (elementwise.cc) where SQRT has none in LiteRT 2.3 or TFLite Micro; ZEROS_LIKE (int32,
    int64 and float32 only: zeros_like.cc) of a float value is x * 0 (exact zeros at any zero point); SQUARE
    and POW(x, 2) (Mixtral's norms) are x * x; a ``wide`` SQUARED_DIFFERENCE (no int16 kernel: int8 inside a 16x8
    model, a layer norm's variance limited to int8) is d * d of d = a - b, both with int16 kernels."""
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


# Past these inputs the integer output of the function is within half a step of its limit (int8 tanh at
# 1/128: atanh(1 - 1/256); logistic at 1/256: ln(511); int16 at 1/32768): a wider input range only
# coarsens the input's steps.
SATURATES = {("TANH", "int8"): float(np.arctanh(1 - 1 / 256)), ("LOGISTIC", "int8"): float(np.log(511)),
             ("TANH", "int16"): float(np.arctanh(1 - 1 / 65536)), ("LOGISTIC", "int16"): float(np.log(65535))}


def _saturated_ranges(fn: Function, ranges: dict[int, tuple[float, float]], wide: set[int]) -> None:
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


# How far below the largest logit a SOFTMAX input contributes nothing its output can show: exp(d) under half an
# output step (int8: 1/512, d < -6.2; int16: 1/65536, d < -11.1), with room; LiteRT's int16 softmax reads its
# differences over [-10, 0] only (activations.cc), so anything below counts as -10 there
SOFTMAX_CUTOFF = {"int8": 8.0, "int16": 12.0}
LARGE_NEGATIVE = -1e4  # a mask's fill value (Keras: -1e9 or the dtype's lowest): no logit is this low


# Float-only ops whose results have known bounds: their calibrated range widened to them, since the values they
# give at lengths or positions calibration did not see (a rotary embedding's sin past the calibrated length) fill it
BOUNDED = {"SIN": (-1.0, 1.0), "COS": (-1.0, 1.0)}


def _bounded_ranges(fn: Function, ranges: dict[int, tuple[float, float]]) -> None:
    for op in fn.ops:
        if op.kind in BOUNDED and op.outputs[0].uid in ranges:
            ranges[op.outputs[0].uid] = BOUNDED[op.kind]


def _is_mask_fill(v: Value | None) -> bool:
    """A constant that masks: every entry either 0 or at most LARGE_NEGATIVE, at least one of them the latter
    (``-1e9`` where Keras 3 selects, ``(1 - mask) * -1e9`` where tf_keras adds, the causal mask folded)."""
    if v is None or not v.is_const or v.const.dtype != FLOAT32 or not v.const.size:
        return False
    c = v.const
    return float(c.min()) <= LARGE_NEGATIVE and bool(np.all((c == 0) | (c <= LARGE_NEGATIVE)))


INDEX_ARITHMETIC = ("index arithmetic: float values computed from integers (positions, buckets, rotary angles) "
                    "and read as integers or by float-only ops; exact in float at every length, as the official "
                    "converter's constant folding leaves them")
# Float ops that may compute integers (positions, buckets, lengths): elementwise arithmetic, comparisons and moves
INDEX_KINDS = frozenset({"ADD", "SUB", "MUL", "DIV", "LOG", "EXP", "SQRT", "RSQRT", "ABS", "NEG", "FLOOR", "CEIL",
                         "ROUND", "MINIMUM", "MAXIMUM", "POW", "SQUARE", "FLOOR_DIV", "FLOOR_MOD", "SELECT_V2",
                         "LESS", "LESS_EQUAL", "GREATER", "GREATER_EQUAL", "EQUAL", "NOT_EQUAL", "RESHAPE",
                         "EXPAND_DIMS", "SQUEEZE", "TRANSPOSE", "STRIDED_SLICE", "SLICE", "BROADCAST_TO", "TILE",
                         "CONCATENATION", "PACK", "FULLY_CONNECTED", "BATCH_MATMUL"})


def index_arithmetic(fn: Function) -> set[int]:
    """The float ops that compute from positions: every float operand comes from integers (a CAST of an integer
    tensor, through such ops) or is a constant, and every float result is read only by a CAST back to an
    integer, a comparison, an op with no integer kernel (the SIN and COS of rotary embeddings), or another such
    op (T5's relative-position buckets: ``int(log(|i - j| / 8) / log(16) * 8)``; rotary angles: position x
    frequency). Quantized, they would move indices (``log(0) = -inf`` has no range) and clip every position past
    the calibrated lengths; the official converter folds them at static shapes. They stay float in every mode,
    as CAST itself does, integer-only op sets included."""
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
    return chosen


def _masked_logits(fn: Function, ranges: dict[int, tuple[float, float]], wide: set[int]) -> None:
    """A SOFTMAX input that masks logits with a large negative constant (``SELECT_V2(mask, logits, -1e9)``, as
    Keras 3's masked softmax writes it, or ``ADD(logits, (1 - mask) * -1e9)``, as tf_keras does): its range is the
    logits' own, down to the cutoff below their largest, not the constant's -1e9 (which leaves every logit the
    same integer: attention uniform). The masked entries clamp to the lowest code, where their weight rounds to 0;
    the constant is quantized at the output's parameters (``_Int8Function.integer``)."""
    for op in fn.ops:
        if op.kind != "SOFTMAX":
            continue
        x = op.inputs[0]
        masking = x.producer
        if masking is None or masking.kind not in ("SELECT_V2", "ADD") or x.uid not in ranges:
            continue
        operands = masking.inputs[1:] if masking.kind == "SELECT_V2" else masking.inputs
        kept = [v for v in operands if not _is_mask_fill(v)]
        if len(kept) != 1 or len(kept) == len(operands) or kept[0].uid not in ranges:
            continue
        lo, hi = ranges[kept[0].uid]
        cutoff = SOFTMAX_CUTOFF["int16" if op.outputs[0].uid in wide else "int8"]
        ranges[x.uid] = (min(lo, hi - cutoff), hi)


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
    # int16 with zero points 0 in LiteRT (kernel-contracts §15); TFLite Micro: MICRO_INT8_ONLY in pipeline.py
    "TRANSPOSE_CONV", "BATCH_MATMUL", "RESIZE_BILINEAR", "RESIZE_NEAREST_NEIGHBOR", "REDUCE_MAX", "REDUCE_MIN",
    "SUM", "ABS", "EXP", "LOG", "RSQRT", "LEAKY_RELU", "MAXIMUM", "MINIMUM", "SELECT_V2", "SLICE", "TOPK_V2",
    "PADV2", "FILL"})
FIXED_INT16 = (1 / 32768, 0)


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
    on the calibration values (their mean relative error). Without them (an RSQRT fuselite wrote), int8."""
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
        errors[dtype] = float(np.mean(np.abs(simulate(values, qi, qo) - exact) / exact))
    return INT16 if errors[INT16] <= errors[INT8] else INT8


def _moves(op: Op) -> bool:
    """The op only moves values (reshape, slice, pooling, concatenation): its int8 / int16 form follows
    its neighbours'."""
    kernel = INTEGER_KERNELS.get(op.kind)
    return kernel is not None and (kernel.output == "same" or kernel.inputs_as_output)


def computes_16x8(kind: str) -> bool:
    """An op kind that computes (not only moves values) and has a 16x8 kernel: worth making wider."""
    kernel = INTEGER_KERNELS.get(kind)
    return kernel is not None and kind in INT16_KINDS and kernel.output != "same" and not kernel.inputs_as_output


def _wide_values(fn: Function, wide: Callable[[Op], bool], narrow: Callable[[Op], bool],
                 wide_inputs: bool = False) -> set[int]:
    """The float values to become int16: the outputs of the ``wide`` ops that compute and have a 16x8 kernel;
    of the ops that only move values, those whose inputs are all wide (a wide sequence stays wide up to the
    op that computes with it) or whose readers are all wide (a float input is quantized once, to int16).
    ``narrow`` ops stay int8 in any case (the target has no int16 kernel for them). ``wide_inputs``: the
    model's float inputs count as wide (16x8 mode: an op moving an input is int16 too)."""
    out = {o.uid for op in fn.ops if wide(op) and op.kind in INT16_KINDS and not _moves(op) and not narrow(op)
           for o in op.outputs if o.dtype == FLOAT32}
    inputs = {v.uid for v in fn.inputs if v.dtype == FLOAT32} if wide_inputs else set()
    for op in fn.ops:
        ins = [v for v in op.inputs if _is_activation(v)]
        if _moves(op) and op.kind in INT16_KINDS and not narrow(op) and ins and \
                all(v.uid in out or v.uid in inputs for v in ins):
            out.update(o.uid for o in op.outputs if o.dtype == FLOAT32)
    for op in reversed(fn.ops):  # (a variable's value too: it is int16 when what reads it is 16x8)
        if not (_moves(op) and op.kind in INT16_KINDS and not narrow(op)) and op.kind != "READ_VARIABLE":
            continue
        for o in op.outputs:
            users = fn.uses(o)
            if o.dtype == FLOAT32 and users and not fn.is_output(o) and \
                    all(any(u2.uid in out for u2 in u.outputs) for u in users):
                out.add(o.uid)
    return out


def _is_activation(v: Value | None) -> bool:
    return v is not None and not v.is_const and v.dtype == FLOAT32


class _Int8Function:
    """Quantizes one function in op order: each value's parameters, and a conversion where integer meets
    float (or int8 meets int16)."""

    def __init__(self, fn: Function, ranges: dict[int, tuple[float, float]], wide: set[int] | None = None,
                 variables: dict | None = None, fixed: dict[int, Quantization] | None = None):
        self.fn = fn
        self.ranges = ranges
        self.fixed = fixed or {}  # value uid -> its trained (FakeQuant) int8 parameters
        self.notes: list[str] = []  # warnings for the report, taken by the op's record (take_notes)
        self.variables = variables if variables is not None else {}  # shared_name -> (dtype, Quantization)
        self.wide = wide or set()  # uids of the float values that become int16 (16x8 ops)
        self.float_twin: dict[int, Value] = {}  # integer value uid -> its DEQUANTIZE output
        self.weights: dict[tuple, Value] = {}  # (content, channel axis) -> the int8 weight
        self.twins: dict[tuple[int, str], Value] = {}  # (value uid, dtype) -> its QUANTIZE output

    def dtype(self, v: Value) -> np.dtype:
        return INT16 if v.uid in self.wide else INT8

    def params(self, v: Value, dtype: np.dtype | None = None) -> Quantization:
        if v.uid not in self.ranges:
            raise _NoRange(f"no calibrated range for %{v.name}")
        if (dtype or self.dtype(v)) == INT8 and v.uid in self.fixed:
            return self.fixed[v.uid]
        return params_for(dtype or self.dtype(v), *self.ranges[v.uid], headroom=INT16_HEADROOM)

    def why_float(self, op: Op, kernel: IntegerKernel | None) -> str | None:
        if kernel is None:
            return f"no integer {op.kind} form in fuselite yet"
        if any(o.meta.get("is_variable") for o in op.outputs):  # FILL(0) writing a float fused RNN's state
            return "it writes a float sequence op's state (a variable tensor the kernel updates in place)"
        state = op.inputs[0] if op.inputs else None
        if state is not None and state.meta.get("is_variable") and state.dtype == FLOAT32:
            # a float sequence op's state, read after the op: a QUANTIZE of the state itself would depend on
            # the state's writer only and could be ordered before the op (reading the initial state)
            return "it reads a float sequence op's state after the op"
        # an output that takes its input's (or a fixed) parameters needs no range of its own (a SPLIT's part the
        # model never reads has none: LiteRT leaves it without data)
        ranged = op.outputs if kernel.output == "range" else []
        values = [v for v in (*op.inputs, *ranged) if _is_activation(v)]
        missing = [v.name for v in values if v.quant is None and v.uid not in self.ranges]
        if missing:
            return f"no calibrated range for {', '.join(missing[:3])}"
        if op.kind in COMPARISONS:  # comparisons.cc: each input's scale must be below 1 (else the process aborts)
            wide = [v.name for v in op.inputs if v is not None and v.dtype == FLOAT32 and
                    (activation_params(v.const.min(), v.const.max()) if v.is_const else
                     self.params(v, INT8) if v.uid in self.ranges else Quantization((0.0,), (0,))).scale[0] >= 1.0]
            if wide:
                return f"the range of {wide[0]} needs an int8 scale >= 1, which LiteRT's integer comparison rejects"
        if kernel.weight is not None:
            w = op.inputs[kernel.weight[0]]
            if w is None or not w.is_const or w.const.dtype != FLOAT32:
                return f"operand {kernel.weight[0]} (a weight) is not a float32 constant"
        return None

    def int8_input(self, v: Value, op: Op | None) -> Value:
        return self.integer_input(v, op, INT8)

    def integer_input(self, v: Value, op: Op | None, dtype: np.dtype) -> Value:
        """``v`` as an int8 (or int16) operand of ``op``: itself if it is one, else one QUANTIZE (placed
        before ``op``; last when ``op`` is None) from float, from the other integer width, or from a uint8
        model input."""
        if v.dtype == dtype:
            return v
        key = (v.uid, dtype.name)
        if key not in self.twins:
            if v.dtype == INT16 and dtype == INT8 and v.uid in self.ranges:
                # Leaving an int16 (16x8) part: values beyond the calibrated range that int16's headroom kept
                # would clip here; the int8 range gets the margin the integer LSTM's output has.
                lo, hi = self.ranges[v.uid]
                margin = OUTPUT_MARGIN * (hi - lo)
                quant = activation_params(lo - margin, hi + margin)
            elif v.dtype == FLOAT32 or v.uid in self.ranges:
                quant = self.params(v, dtype)
            elif v.dtype == np.uint8 and dtype == INT8:  # a uint8 model input: the same reals, zero point - 128
                quant = Quantization(v.quant.scale, (v.quant.zero_point[0] - 128,))
            else:
                quant = params_for(dtype, *represented(v.quant, v.dtype))
            q = self.fn.make_op("tfl.QUANTIZE", [v], [(dtype, v.shape)], name=f"{v.name}_{dtype.name}")
            q.outputs[0].quant = quant
            self.fn.ops.insert(self.fn.ops.index(op) if op is not None else len(self.fn.ops), q)
            self.twins[key] = q.outputs[0]
        return self.twins[key]

    def read_variable(self, op: Op) -> None:
        """A variable's value, in the variable's integer type: int16 when the ops reading it are 16x8, with
        the range of what is read and assigned (over the calibration samples, the state carried on)."""
        name, out = shared_name(op.inputs[0]), op.outputs[0]
        if name is None:
            raise _NoRange("a variable read through an unknown handle")
        if name not in self.variables:
            values = [out] + [a.inputs[1] for a in self.fn.ops if a.kind == "ASSIGN_VARIABLE"
                              and shared_name(a.inputs[0]) == name]
            known = [self.ranges[v.uid] for v in values if v.uid in self.ranges]
            if not known:
                raise _NoRange(f"no calibrated range for variable {name}")
            dtype = self.dtype(out)
            self.variables[name] = (dtype, params_for(dtype, min(lo for lo, _ in known), max(hi for _, hi in known),
                                                      headroom=INT16_HEADROOM))
        out.dtype, out.quant = self.variables[name]

    def assign_variable(self, op: Op) -> None:
        """The value assigned, converted (one QUANTIZE) to the variable's type and parameters if need be."""
        name, v = shared_name(op.inputs[0]), op.inputs[1]
        if name not in self.variables:
            if v.dtype in (INT8, INT16):
                self.variables[name] = (v.dtype, v.quant)
            else:
                self.variables[name] = (INT8, self.params(v, INT8))
        dtype, quant = self.variables[name]
        if v.dtype != dtype or v.quant != quant:
            q = self.fn.make_op("tfl.QUANTIZE", [v], [(dtype, v.shape)], name=f"{v.name}_to_{name}")
            q.outputs[0].quant = quant
            self.fn.ops.insert(self.fn.ops.index(op), q)
            op.inputs[1] = q.outputs[0]

    def float_input(self, v: Value, op: Op) -> Value:
        """``v`` as a float operand of ``op``: itself if float, else one DEQUANTIZE (placed before ``op``)."""
        if v.dtype == FLOAT32:
            return v
        if v.uid not in self.float_twin:
            d = self.fn.make_op("tfl.DEQUANTIZE", [v], [(FLOAT32, v.shape)], name=f"{v.name}_dequantize")
            self.fn.ops.insert(self.fn.ops.index(op), d)
            self.float_twin[v.uid] = d.outputs[0]
        return self.float_twin[v.uid]

    def const_as_activation(self, v: Value, dtype: np.dtype) -> Value:
        q = params_for(dtype, float(v.const.min()), float(v.const.max()))
        return self.fn.const(quantize_values(v.const, q, dtype), f"{v.name}_{dtype.name}", quant=q)

    def pad_value(self, v: Value, x: Value, dtype: np.dtype) -> Value:
        """PADV2's constant at the parameters of its (integer) input ``x``, as pad.cc requires: exact where ``x``
        can hold it; a fill far below (or above) every value (-inf before max pooling) clamps to the lowest
        (highest) code, which no window's maximum (minimum) is below (above)."""
        if x.dtype != dtype or x.quant is None:
            raise _NoRange("PADV2's input is not integer")
        lo, hi = represented(x.quant, dtype)
        c = float(np.asarray(v.const).reshape(-1)[0])
        step = x.quant.scale[0]
        if not (lo - step / 2 <= c <= hi + step / 2 or c <= LARGE_NEGATIVE or c >= -LARGE_NEGATIVE):
            raise _NoRange(f"PADV2's value {c:g} is outside what its input's {dtype.name} parameters hold "
                           f"[{lo:.3g}, {hi:.3g}]")
        return self.fn.const(quantize_values(np.asarray(v.const), x.quant, dtype), f"{v.name}_{dtype.name}",
                             quant=x.quant)

    def op_dtype(self, op: Op) -> np.dtype:
        """int16 when the op's outputs are to be wide and its kernel has a 16x8 form, else int8."""
        wide = op.kind in INT16_KINDS and any(o.uid in self.wide for o in op.outputs)
        if _moves(op) and op.kind in INT16_KINDS and any(v is not None and v.dtype == INT16 for v in op.inputs):
            wide = True  # moving an int16 value (the integer LSTM's cell state): it stays int16
        return INT16 if wide else INT8

    def integer(self, op: Op, kernel: IntegerKernel) -> None:
        """Make ``op`` integer; raises _NoRange (and changes nothing) when it cannot be."""
        if not any(v is not None and (_is_activation(v) or v.dtype in (INT8, INT16) or v.quant is not None
                                      or (v.is_const and v.const.dtype == FLOAT32)) for v in op.inputs):
            raise _NoRange(f"{op.kind} has no operand to quantize")
        dtype = self.op_dtype(op)
        ranged = {o.uid: self.params(o, dtype) for o in op.outputs
                  if kernel.output == "range" and o.dtype == FLOAT32}
        for i, v in enumerate(op.inputs):
            if v is None:
                continue
            if kernel.weight is not None and i == kernel.weight[0]:
                # one int8 tensor per distinct weight: the steps of an unrolled cell share their matrices
                # (and their per-channel scales, which the file would otherwise repeat per step)
                key = (content_key(v.const), kernel.weight[1])
                if key not in self.weights:
                    q, quant = symmetric_int8(v.const, kernel.weight[1])
                    self.weights[key] = self.fn.const(q, f"{v.name}_int8", quant=quant)
                op.inputs[i] = self.weights[key]
            elif kernel.bias is not None and i == kernel.bias:
                continue  # after the weight and the input are known
            elif op.kind == "PADV2" and i == 2 and v.is_const and v.const.dtype == FLOAT32:
                op.inputs[i] = self.pad_value(v, op.inputs[0], dtype)
            elif op.kind in ("SELECT_V2", "ADD") and _is_mask_fill(v) and op.outputs[0].uid in self.ranges:
                # a mask's fill (-1e9): at the output's lowest code (its zeros exact), not a range of its own
                # that would swamp the other operand
                q = self.params(op.outputs[0], dtype)
                op.inputs[i] = self.fn.const(quantize_values(v.const, q, dtype), f"{v.name}_{dtype.name}", quant=q)
            elif v.is_const and v.const.dtype == FLOAT32:
                op.inputs[i] = self.const_as_activation(v, dtype)
            elif _is_activation(v) or v.quant is not None:
                op.inputs[i] = self.integer_input(v, op, dtype)
        least = input_scale_floor(op, dtype)
        if least and op.inputs[0].dtype == dtype and op.inputs[0].quant.scale[0] < least:
            # the kernel cannot prepare (TFLite Micro aborts the process): the input requantized to that scale
            lo, hi = represented(op.inputs[0].quant, dtype)
            grow = least / op.inputs[0].quant.scale[0]
            r = self.fn.make_op("tfl.QUANTIZE", [op.inputs[0]], [(dtype, op.inputs[0].shape)],
                                name=f"{op.inputs[0].name}_requantize")
            r.outputs[0].quant = params_for(dtype, lo * grow, hi * grow)
            self.fn.ops.insert(self.fn.ops.index(op), r)
            op.inputs[0] = r.outputs[0]
        if kernel.bias is not None:
            self.bias(op, kernel)
        floor = output_scale_floor(op.kind, dtype, [v.quant.scale[0] for v in op.inputs
                                                     if v is not None and v.dtype == dtype and v.quant is not None],
                                   op.attrs.get("fused_activation_function", "NONE"))
        for uid, quant in ranged.items():
            if quant.scale[0] < floor:  # the kernel's output multiplier would not fit: a wider output range
                lo, hi = represented(quant, dtype)
                ranged[uid] = params_for(dtype, lo * floor / quant.scale[0], hi * floor / quant.scale[0])
        if dtype == INT16 and op.kind in ("ADD", "SUB"):
            # general int16 scales, as the official quantizer sets (tools/optimize/quantize_model.cc:846-875)
            op.attrs["pot_scale_int16"] = False
        first = next(v for v in op.inputs if v is not None and v.dtype == dtype)
        for o in op.outputs:
            if o.dtype != FLOAT32:
                continue
            if kernel.output == "same":
                o.quant = first.quant
            elif kernel.output == "fixed":
                scale, zero_point = FIXED_INT16 if dtype == INT16 else kernel.fixed
                o.quant = Quantization((float(np.float32(scale)),), (zero_point,))
                self._note_fixed_range(op, o, scale, dtype)
            else:
                o.quant = ranged[o.uid]
            o.dtype = dtype
        if kernel.inputs_as_output:  # the union of what the inputs can hold: concatenating clips nothing
            ins = [represented(v.quant, dtype) for v in op.inputs if v is not None and v.dtype == dtype]
            target = params_for(dtype, min(lo for lo, _ in ins), max(hi for _, hi in ins))
            op.outputs[0].quant = target
            for i, v in enumerate(op.inputs):
                if v is not None and v.dtype == dtype and v.quant != target:
                    r = self.fn.make_op("tfl.QUANTIZE", [v], [(dtype, v.shape)], name=f"{v.name}_requantize")
                    r.outputs[0].quant = target
                    self.fn.ops.insert(self.fn.ops.index(op), r)
                    op.inputs[i] = r.outputs[0]

    def _note_fixed_range(self, op: Op, out: Value, scale: float, dtype: np.dtype) -> None:
        """A model output whose kernel fixes its scale (SOFTMAX, LOGISTIC, TANH...) while its calibrated values
        span a small part of that range: few steps across them, said in the report."""
        if not self.fn.is_output(out) or out.uid not in self.ranges:
            return
        lo, hi = self.ranges[out.uid]
        steps = (hi - lo) / scale
        if steps < 16:
            self.notes.append(f"{op.kind} '{op_name(op)}' (a model output): its kernel fixes the {dtype.name} scale "
                              f"at {scale:.3g}, and its values span [{lo:.3g}, {hi:.3g}] in calibration, {steps:.1f} "
                              "steps: its error relative to that span is large (16x8 gives it 1/32768; a model "
                              "whose outputs use more of the range, as trained ones do, is not affected)")

    def take_notes(self) -> dict:
        """The warnings noted since the last call, as a record's ``warnings`` entry (or nothing)."""
        notes, self.notes = self.notes, []
        return {"warnings": notes} if notes else {}

    def integer_lstm(self, op: Op, cell_peak: float, int16: bool = False) -> list[str]:
        """The 8x8->16 integer LSTM: int8 input, weights (one scale each), output and output state;
        int32 gate biases at input scale x weight scale; int16 cell state at a power-of-two scale;
        5 intermediates, the last with the output's parameters (the kernel quantizes h with them).

        ``int16``: the 16x8 LSTM of TFLite Micro's kernel (and Vela's): int16 input, output and output state
        (symmetric, zero point 0), int64 gate biases, the rest as above. TFLM's kernel reads no intermediate
        (its gates are Q3.12 in and Q0.15 out, fixed); Vela reads the last for h's parameters. LiteRT has no
        such kernel (it registers the op up to version 4; this is version 5).

        The hidden state (input 18) and the output share one set of parameters (the kernel writes h once, with
        the last intermediate's, and copies it into both): an initial hidden state given to the layer widens
        them to its calibrated range too, so that it is not clipped. The cell state's scale holds the
        calibrated initial cell states as well (``cell_peak``). Returns warnings for the report where a range
        the kernel forces costs the model: an output made coarser by a wider initial state, a cell state
        beyond the largest scale the kernel takes."""
        act = INT16 if int16 else INT8
        x = op.inputs[0] = self.integer_input(op.inputs[0], op, act)
        own = self.ranges[op.outputs[0].uid] if op.outputs[0].uid in self.ranges else (-1.0, 1.0)
        margin = OUTPUT_MARGIN * (own[1] - own[0])  # h = o * tanh(c) is in (-1, 1): room up to that, not beyond
        lo, hi = max(own[0] - margin, -1.0), min(own[1] + margin, 1.0)
        warnings = []
        h0 = _state_source(op, 18)
        if h0 is not None and h0.uid in self.ranges:  # the initial hidden state shares the output's parameters
            h_lo, h_hi = self.ranges[h0.uid]
            wider = (min(lo, h_lo), max(hi, h_hi))
            if (wider[1] - wider[0]) > 1.25 * (hi - lo):
                warnings.append(f"LSTM '{op_name(op)}': its initial hidden state reaches [{h_lo:.3g}, {h_hi:.3g}], "
                                f"its output [{own[0]:.3g}, {own[1]:.3g}]; LiteRT's integer LSTM gives both one "
                                f"{act.name} scale, so the output's steps are {(wider[1] - wider[0]) / (hi - lo):.1f}x "
                                "coarser than its own range needs (pass initial states within the output's range, "
                                "as an encoder LSTM's own h is, or keep the layer float with keep_float)")
            lo, hi = wider
        out = int16_params(lo, hi) if int16 else activation_params(lo, hi)
        largest = 2.0 ** (CELL_SCALE_LOG2[1] + 15)
        if cell_peak > largest:
            warnings.append(f"LSTM '{op_name(op)}': its cell state reaches {cell_peak:.3g} in calibration, beyond "
                            f"+-{largest:g}, the widest int16 cell range LiteRT's integer LSTM computes with (scale "
                            f"2^{CELL_SCALE_LOG2[1]}): it is clipped there (keep the layer float with keep_float)")
        for i in (*_LSTM_W, *_LSTM_R):
            q, quant = symmetric_int8(op.inputs[i].const, None)
            op.inputs[i] = self.fn.const(q, f"{op.inputs[i].name}_int8", quant=quant)
        bias_type = np.int64 if int16 else np.int32
        for w, i in zip(_LSTM_W, _LSTM_B):
            scale = np.float64(x.quant.scale[0]) * np.float64(op.inputs[w].quant.scale[0])
            op.inputs[i] = self.fn.const(int32_bias(op.inputs[i].const, scale, bias_type),
                                         f"{op.inputs[i].name}_{np.dtype(bias_type).name}",
                                         quant=Quantization((float(np.float32(scale)),), (0,)))
        k = cell_scale_log2(cell_peak)
        for i, dtype, quant in ((18, act, out), (19, np.dtype(np.int16), Quantization((2.0 ** k,), (0,)))):
            writer = op.inputs[i].producer  # FILL (zeros) or CAST (a copy of the initial value)
            if writer.kind == "FILL":
                # The zero state, written afresh on every invoke: a QUANTIZE (to the same parameters) of a
                # constant. Not an integer FILL: TFLite Micro's FILL takes a float32 value only.
                source = self.fn.const(np.full(op.inputs[i].shape, quant.zero_point[0], dtype), "zero_state",
                                       quant=quant)
            else:
                source = writer.inputs[0]
                read = _variable_read(op.inputs[i])
                if read is not None:  # a stateful LSTM: its variable holds the state in the kernel's type
                    for v in {source.uid: source, read.outputs[0].uid: read.outputs[0]}.values():
                        v.dtype, v.quant = dtype, quant
                    self.variables[shared_name(read.inputs[0])] = (dtype, quant)
                else:  # an initial state computed in the graph
                    source = self.integer_input(source, writer, act)
            # the kernel's state tensor (a variable tensor it updates in place), written by a copy
            state = self.fn.make_op("tfl.QUANTIZE", [source], [(dtype, source.shape)], name=f"{op.name}/state_{i}")
            state.outputs[0].quant = quant
            state.outputs[0].meta["is_variable"] = True
            self.fn.ops[self.fn.ops.index(writer)] = state
            self.fn.replace_uses(op.inputs[i], state.outputs[0])
        op.attrs["_intermediates"] = [("float32", (0,), None)] * 4 + [(act.name, (0,), out.as_dict())]
        op.attrs.pop("asymmetric_quantize_inputs", None)
        op.outputs[0].dtype, op.outputs[0].quant = act, out
        return warnings

    def bias(self, op: Op, kernel: IntegerKernel) -> None:
        x, w = op.inputs[kernel.input], op.inputs[kernel.weight[0]]
        channels = w.const.shape[kernel.weight[1]]
        b = op.inputs[kernel.bias] if kernel.bias < len(op.inputs) else None
        if b is None and not kernel.needs_bias:
            return
        values = np.zeros(channels, np.float64) if b is None else np.asarray(b.const, np.float64)
        scales = np.float64(x.quant.scale[0]) * np.asarray(w.quant.scale, np.float64)
        wide = x.dtype == INT16  # 16x8 kernels take an int64 bias
        q = int32_bias(values, scales, np.int64 if wide else np.int32)
        quant = Quantization(tuple(float(np.float32(s)) for s in scales), (0,) * channels, 0)
        bias = self.fn.const(q, f"{b.name if b is not None else op.name}_bias_{q.dtype.name}", quant=quant)
        while len(op.inputs) <= kernel.bias:
            op.inputs.append(None)
        op.inputs[kernel.bias] = bias


class _NoRange(Exception):
    pass


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


# -- the integer LSTM (UNIDIRECTIONAL_SEQUENCE_LSTM, 8x8->16) -------------------------------------------------
# Contract: docs/kernel-contracts.md §7.2 (unidirectional_sequence_lstm.cc, lstm_eval.cc, operator_property.cc).
_LSTM_W, _LSTM_R, _LSTM_B = (1, 2, 3, 4), (5, 6, 7, 8), (12, 13, 14, 15)
_LSTM_UNSUPPORTED = {9: "peephole", 10: "peephole", 11: "peephole", 16: "projection", 17: "projection",
                     20: "layer norm", 21: "layer norm", 22: "layer norm", 23: "layer norm"}
CELL_SCALE_LOG2 = (-15, -9)  # the kernel's ApplyTanh handles 2^-15..2^-9 only (anything else: silently wrong)


def _zero_fill(v: Value | None) -> Op | None:
    """The FILL of zeros that makes ``v`` (an LSTM state), or None."""
    op = v.producer if v is not None else None
    if op is None or op.kind != "FILL" or not op.inputs[1].is_const:
        return None
    return op if not np.any(op.inputs[1].const) else None


def why_not_integer_lstm(fn: Function, op: Op) -> str | None:
    """Why fuselite cannot make this LSTM integer (None: it can)."""
    if op.attrs.get("diagonal_recurrent_tensors"):
        return ("an LSTM with diagonal recurrent weights (an IndyLSTM) has no integer kernel in LiteRT (only its "
                "float and hybrid kernels read diagonals, unidirectional_sequence_lstm.cc)")
    for i, what in _LSTM_UNSUPPORTED.items():
        if i < len(op.inputs) and op.inputs[i] is not None:
            return f"an LSTM with {what} has no integer form in fuselite yet"
    if op.inputs[1] is None:
        return "a CIFG LSTM has no integer form in fuselite yet"
    if any(op.inputs[i] is None or not op.inputs[i].is_const for i in (*_LSTM_W, *_LSTM_R, *_LSTM_B)):
        return "its weights and biases must be constants"
    for i in (18, 19):
        state = op.inputs[i]
        writer = state.producer if state is not None else None
        # zeros (FILL) or an initial value copied in (CAST); the cell state may be read back after the op
        others = [u for u in fn.uses(state) if u is not op] if state is not None else []
        if writer is None or (writer.kind != "CAST" and _zero_fill(state) is None) or \
                (i == 18 and others) or any(u.kind != "RESHAPE" for u in others) or fn.is_output(state):
            return "its state is neither zeros nor an initial value copied into the kernel's state"
    return None


def _state_source(op: Op, index: int) -> Value | None:
    """The value an LSTM's state tensor (input ``index``: 18 h, 19 c) is copied from on every invoke: an initial
    state given to the layer (None: zeros, or nothing recognisable)."""
    state = op.inputs[index] if index < len(op.inputs) else None
    writer = state.producer if state is not None else None
    return writer.inputs[0] if writer is not None and writer.kind == "CAST" else None


def lstm_state_sources(op: Op) -> list[Value]:
    """The initial states an LSTM op is given (h, c), for calibration to keep their values per sample."""
    return [v for v in (_state_source(op, 18), _state_source(op, 19)) if v is not None]


def _variable_read(v: Value | None) -> Op | None:
    """The READ_VARIABLE that ``v`` (an LSTM state: a copy of a RESHAPE of it) comes from, or None."""
    op = v.producer if v is not None else None
    for kind in ("CAST", "RESHAPE"):
        if op is not None and op.kind == kind:
            op = op.inputs[0].producer
    return op if op is not None and op.kind == "READ_VARIABLE" else None


def shared_name(handle: Value) -> str | None:
    """The variable a resource handle names (its VAR_HANDLE's shared_name)."""
    op = handle.producer
    return op.attrs.get("shared_name") if op is not None and op.kind == "VAR_HANDLE" else None


def _sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def lstm_cell_peak(op: Op, sequences: list[np.ndarray], carry: bool = False, initial: list | None = None) -> float:
    """max |cell state| of the float LSTM over the calibration inputs (a NumPy replay of the op); with
    ``carry`` (a stateful LSTM) each sample starts from the states the previous one left, as on LiteRT;
    ``initial``: per sample, the (h, c) it starts from (initial states given to the layer; None: zeros)."""
    w = [np.asarray(op.inputs[i].const, np.float64) for i in _LSTM_W]
    r = [np.asarray(op.inputs[i].const, np.float64) for i in _LSTM_R]
    b = [np.asarray(op.inputs[i].const, np.float64) for i in _LSTM_B]
    clip = float(op.attrs.get("cell_clip", 0.0) or 0.0)
    peak = 0.0
    h = c = None
    for n, x in enumerate(sequences):
        x = np.asarray(x, np.float64)
        if not op.attrs.get("time_major", False):
            x = x.transpose(1, 0, 2)
        if h is None or not carry:
            h = np.zeros((x.shape[1], r[0].shape[1]))
            c = np.zeros((x.shape[1], w[0].shape[0]))
        if initial is not None:
            h0, c0 = initial[n]
            h = h if h0 is None else np.broadcast_to(np.asarray(h0, np.float64).reshape(-1, h.shape[1]), h.shape)
            c = c if c0 is None else np.broadcast_to(np.asarray(c0, np.float64).reshape(-1, c.shape[1]), c.shape)
            peak = max(peak, float(np.abs(c).max()))
        for step in x:
            z = [step @ w[k].T + h @ r[k].T + b[k] for k in range(4)]
            c = _sigmoid(z[1]) * c + _sigmoid(z[0]) * np.tanh(z[2])
            if clip > 0:
                c = np.clip(c, -clip, clip)
            h = _sigmoid(z[3]) * np.tanh(c)
            peak = max(peak, float(np.abs(c).max()))
    return peak


LSTM_8X8 = "integer LSTM (8x8->16)"
LSTM_16X8 = "integer LSTM (16x8: int16 activations, TFLite Micro's kernel)"
OUTPUT_MARGIN = 0.1  # of the calibrated output range, each side: the output (and state) clips beyond it
CELL_HEADROOM = 1.5  # inputs beyond the calibration data drive the cell further; int16 has bits to spare


def cell_scale_log2(peak: float) -> int:
    """The power-of-two int16 cell scale 2^k whose range (2^(k+15)) holds ``CELL_HEADROOM * peak``, k in
    CELL_SCALE_LOG2 (a saturated cell state is a large error; one bit less of an int16 is a small one)."""
    k = int(np.ceil(np.log2(peak * CELL_HEADROOM))) - 15 if peak > 0 else CELL_SCALE_LOG2[0]
    return int(np.clip(k, *CELL_SCALE_LOG2))


def quantize_int8(module: Module, ranges: dict[int, tuple[float, float]], keep: KeepFloat | None = None,
                  integer_only: bool = False, input_type: str = "float32", output_type: str = "float32",
                  outputs: dict[int, int] | None = None, captured: dict[int, list] | None = None,
                  wide: Callable[[Op], bool] = lambda op: False,
                  narrow: Callable[[Op], bool] = lambda op: False, wide_inputs: bool = False,
                  fixed: dict[int, Quantization] | None = None, int16_lstm: bool = False) -> list[dict]:
    """Make the signature functions integer; one report record per op (how, or why it stays float).

    ``ranges``: value uid -> calibrated (min, max). ``integer_only``: an op that stays float
    is an error (``TFLITE_BUILTINS_INT8`` alone). ``input_type`` / ``output_type``: the
    model's float32, int8 or uint8 edges. ``captured``: value uid -> its values per
    calibration sample (the inputs of each LSTM, replayed for its cell-state range). ``wide``:
    the ops whose outputs are int16 (16x8 kernels) where their kernel has that form; ``narrow``: ops
    that stay int8 all the same (the target runtime has no int16 form of them). ``fixed``: value uid -> the
    int8 parameters a FakeQuant op trained for it (quantization-aware training), used as they are.
    ``int16_lstm``: the LSTMs among the ``wide`` ops take int16 activations (TFLite Micro's 16x8 kernel), not
    the 8x8->16 form LiteRT has.
    """
    keep = keep or KeepFloat()
    records: list[dict] = []
    problems: list[str] = []
    captured = captured or {}
    ranges = dict(ranges)  # narrowed here per quantization (saturating inputs): the caller's stay as calibrated
    variables: dict[str, tuple] = {}  # shared_name -> (dtype, Quantization) of the variables made integer
    for fname in dict.fromkeys(module.signatures.values()):
        fn = module.functions[fname]
        _integer_forms(fn, keep, ranges, wide)
        fn.topo_sort()
        narrow_rsqrt = {id(op) for op in fn.ops if op.kind == "RSQRT" and wide(op)
                        and rsqrt_width(op, ranges, captured) == INT8}
        widened = _wide_values(fn, wide, lambda op: narrow(op) or id(op) in narrow_rsqrt, wide_inputs)
        _saturated_ranges(fn, ranges, widened)
        _masked_logits(fn, ranges, widened)
        _bounded_ranges(fn, ranges)
        q = _Int8Function(fn, ranges, widened, variables, fixed)
        computes_integers = index_arithmetic(fn)
        counter = WeightBytes()
        lstms = {id(op): why_not_integer_lstm(fn, op) for op in fn.ops if op.kind == "UNIDIRECTIONAL_SEQUENCE_LSTM"}
        states = {id(op.inputs[i].producer) for op in fn.ops if lstms.get(id(op), "x") is None for i in (18, 19)}
        for op in fn.ops:  # a stateful LSTM's variable reads (and the RESHAPE after each) take its state's type
            read = [_variable_read(op.inputs[i]) for i in (18, 19)] if lstms.get(id(op), "x") is None else []
            states |= {id(r) for r in read if r is not None}
            states |= {id(op.inputs[i].producer.inputs[0].producer) for i, r in zip((18, 19), read) if r is not None}
        for v in fn.inputs:
            if v.dtype == FLOAT32 and input_type == "int16":
                v.quant, v.dtype = q.params(v, INT16), INT16
            elif v.dtype == FLOAT32 and input_type in ("int8", "uint8"):
                v.quant = q.params(v, INT8)
                if input_type == "uint8":
                    v.quant = Quantization(v.quant.scale, (v.quant.zero_point[0] + 128,))
                v.dtype = np.dtype(input_type)
        for op in list(fn.ops):
            if not any(_is_activation(v) or (v is not None and v.quant is not None)
                       for v in (*op.inputs, *op.outputs)):
                continue  # integer bookkeeping (shapes, ids): unchanged
            if id(op) in states and keep.match(op) is None:
                continue  # an integer LSTM's initial state: made integer with it
            if op.kind == "SHAPE":
                continue  # reads only the shape: any input type
            kernel = INTEGER_KERNELS.get(op.kind)
            entry = keep.match(op)
            if id(op) in computes_integers and entry is None:
                _add(records, outputs, op, record(fn, op, "float", counter.before(op), counter.after(op),
                                                  INDEX_ARITHMETIC, no_integer_kernel=True))
                continue
            why = f"keep_float {entry!r}" if entry is not None else q.why_float(op, kernel)
            before = counter.before(op)
            if op.kind in ("READ_VARIABLE", "ASSIGN_VARIABLE") and entry is None:
                try:
                    q.read_variable(op) if op.kind == "READ_VARIABLE" else q.assign_variable(op)
                except _NoRange as e:
                    why = str(e)
                else:
                    _add(records, outputs, op, record(fn, op, _mode_of(op), before, counter.after(op),
                                                      scheme="integer variable", scales=_scales(op)))
                    continue
            if op.kind == "UNIDIRECTIONAL_SEQUENCE_LSTM" and entry is None:
                why = lstms[id(op)] or (None if op.inputs[0].uid in captured else "no calibration values of its input")
                if why is None:
                    try:
                        stateful = _variable_read(op.inputs[19]) is not None
                        sixteen = int16_lstm and wide(op)
                        peak = lstm_cell_peak(op, captured[op.inputs[0].uid], carry=stateful,
                                              initial=_initial_states(op, captured, stateful))
                        notes = q.integer_lstm(op, peak, sixteen)
                    except _NoRange as e:
                        why = str(e)
                    else:
                        _add(records, outputs, op, record(fn, op, "int16x8" if sixteen else "int8", before,
                                                          counter.after(op), scales=_scales(op),
                                                          scheme=LSTM_16X8 if sixteen else LSTM_8X8,
                                                          **({"warnings": notes} if notes else {})))
                        for read in filter(None, (_variable_read(op.inputs[i].producer.inputs[0]) for i in (18, 19))):
                            _add(records, outputs, read, record(fn, read, _mode_of(read), 0, 0, scales=_scales(read),
                                                                scheme="integer variable (the LSTM's state)"))
                        continue
            if why is None:
                try:
                    q.integer(op, kernel)
                except _NoRange as e:
                    why = str(e)
                else:
                    _add(records, outputs, op, record(fn, op, _mode_of(op), before, counter.after(op),
                                                      scales=_scales(op), **q.take_notes()))
                    continue
            for i, v in enumerate(op.inputs):
                if v is not None and not v.is_const and v.quant is not None and v.dtype != FLOAT32:
                    op.inputs[i] = q.float_input(v, op)
            if op.kind in NO_INTEGER_KERNEL and entry is None:  # float in every mode, as the official quantizer
                why = f"no integer kernel: {NO_INTEGER_KERNEL[op.kind]}"
                _add(records, outputs, op, record(fn, op, "float", before, counter.after(op), why,
                                                  no_integer_kernel=True))
                continue
            problems.append(f"{op.kind} '{op_name(op)}'{' at ' + op.location if op.location else ''}: {why}")
            _add(records, outputs, op, record(fn, op, "float", before, counter.after(op), why))
        _edges(fn, q, output_type)
    _initial_values(module, variables)
    if integer_only and problems:
        raise NotIntegerError(f"{len(problems)} op(s) cannot be integer, and target_spec.supported_ops has only "
                              "integer op sets (TFLITE_BUILTINS_INT8 or the 16x8 set; add TFLITE_BUILTINS to let "
                              "them run in float)", problems)
    keep.check_used(module)
    return records


def _initial_states(op: Op, captured: dict[int, list], stateful: bool) -> list | None:
    """Per calibration sample, the (h, c) an LSTM starts from where it is given initial states (not a stateful
    layer's variables, which the replay carries itself), from the values calibration kept; None: zeros."""
    if stateful:
        return None
    h0, c0 = _state_source(op, 18), _state_source(op, 19)
    if (h0 is None or h0.uid not in captured) and (c0 is None or c0.uid not in captured):
        return None
    n = len(captured[op.inputs[0].uid])
    pick = [captured[v.uid] if v is not None and v.uid in captured else [None] * n for v in (h0, c0)]
    return list(zip(*pick))


def _initial_values(module: Module, variables: dict[str, tuple]) -> None:
    """The constants assigned to integer variables (the init and reset functions) quantized to their types."""
    for fn in module.functions.values():
        for op in fn.ops:
            if op.kind != "ASSIGN_VARIABLE" or shared_name(op.inputs[0]) not in variables:
                continue
            v = op.inputs[1]
            if v.is_const and v.const.dtype == FLOAT32:
                dtype, quant = variables[shared_name(op.inputs[0])]
                op.inputs[1] = fn.const(quantize_values(v.const, quant, dtype), f"{v.name}_{dtype.name}", quant=quant)


def _mode_of(op: Op) -> str:
    """How an integer op runs: int16x8 (int16 activations) or int8."""
    values = op.outputs or op.inputs[1:]  # ASSIGN_VARIABLE: the value assigned
    return "int16x8" if any(v is not None and v.dtype == INT16 for v in values) else "int8"


def _scales(op: Op) -> dict:
    """The quantization of an integer op's operands and results, for the report: [scale, zero point] per
    tensor; a per-channel weight as its smallest and largest scale."""
    def one(v: Value | None):
        if v is None or v.quant is None:
            return None
        if len(v.quant.scale) > 1:
            return {"per_channel": len(v.quant.scale), "min": min(v.quant.scale), "max": max(v.quant.scale)}
        return [v.quant.scale[0], v.quant.zero_point[0]]
    return {"inputs": [one(v) for v in op.inputs], "outputs": [one(v) for v in op.outputs]}


def _edges(fn: Function, q: _Int8Function, output_type: str) -> None:
    """The outputs as the options ask: float32 (DEQUANTIZE), int8 or uint8 (QUANTIZE)."""
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
