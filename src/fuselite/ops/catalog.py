"""What the converter knows about each LiteRT op kind's quantized kernels, one entry per op (``OPS``).

An entry (:class:`Facts`) says, as read in the kernels' ``Prepare`` / ``Eval`` (LiteRT ``tflite/kernels/``,
TFLite Micro ``tensorflow/lite/micro/kernels/``; ``docs/kernel-contracts.md``):

* ``integer``: its int8 kernel and the scale rule it requires (:class:`IntegerKernel`: ``SAME``, the input's
  parameters; ``RANGE``, its own calibrated range; ``AS_OUTPUT``, every input at the output's parameters;
  a fixed output range; the weight, bias and their scales), or ``no_integer``: why it has none (it stays float
  between DEQUANTIZE and QUANTIZE in every mode);
* ``int16``: the kernel takes int16 activations (zero point 0) with int8 weights and int64 biases (16x8) in
  LiteRT and TFLite Micro (``micro="int8"``: not in TFLite Micro), ``no_16x8``: integer, but no 16x8 kernel in
  LiteRT (wider means float); ``micro="float"``: integer in LiteRT, float only in TFLite Micro;
* the numbers its integer kernel's scale rules need: the input past which a fixed-range output saturates
  (``saturates``), an ADD / SUB's left shift (``left_shift``), a clamp's largest limit (``clamp_limit``);
* ``hybrid``: its dynamic-range form, int8 weights with float activations (:class:`HybridKernel`).

The quantizers read the tables derived at the end (``INTEGER_KERNELS``, ``INT16_KINDS``, ``HYBRID_KERNELS``,
...). Adding an integer rule for an op is its entry here, with a test of the op on both LiteRT kernel sets
(``docs/architecture.md``, "an integer rule for an op"). Op versions (``tflite/versions.py``) and TFLite Micro's
op resolver (``tflite/micro.py``) are still tables of their own.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


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


@dataclass(frozen=True)
class HybridKernel:
    """How one op kind runs with int8 weights (read from its LiteRT kernel)."""

    weights: tuple[int, ...]  # operand indices that become int8 (all present ones, or none)
    axis: int | None  # per-channel axis of each weight; None: one scale per operand
    asymmetric_option: bool  # write asymmetric_quantize_inputs=True (inputs quantized per row, asymmetric)
    float_input: bool = True  # operand 0 must be float32 (not for EMBEDDING_LOOKUP: its ids)
    weight_only_below: int = 0  # weights of fewer elements: int8 + DEQUANTIZE, computed in float


@dataclass(frozen=True)
class Facts:
    """One op kind's quantized kernels (see the module docstring)."""

    integer: IntegerKernel | None = None
    no_integer: str | None = None  # why LiteRT has no integer kernel for it
    int16: bool = False  # a 16x8 kernel (LiteRT; TFLite Micro too unless micro == "int8")
    no_16x8: bool = False  # integer, but no 16x8 kernel in LiteRT: wider means float
    micro: str | None = None  # TFLite Micro: "int8" (no int16 kernel there) or "float" (no integer kernel there)
    saturates: dict[str, float] = field(default_factory=dict)  # dtype -> input past which the output saturates
    left_shift: dict[str, int] = field(default_factory=dict)  # dtype -> the kernel's left shift (ADD / SUB)
    clamp_limit: float | None = None  # a clamp's largest |limit| (round(limit / scale) must fit an int32)
    hybrid: HybridKernel | None = None


# Read in each kernel's Prepare / Eval (LiteRT tflite/kernels/, docs/kernel-contracts.md §15): "same" where the
# kernel moves or compares raw integers (the output must have the input's parameters, unchecked), "range" where
# it rescales from the input's parameters to the output's (a multiplier or a lookup table built from both).
SAME = IntegerKernel("same")
RANGE = IntegerKernel("range")
AS_OUTPUT = IntegerKernel("range", inputs_as_output=True)

# TF's converter leaves weights under 1024 elements float (``minimum_elements_for_weights``):
# for such a layer the hybrid kernel's per-invoke quantization of its input costs more accuracy
# than the layer's size is worth. fuselite stores them int8 all the same, dequantized once at load.
WEIGHT_ONLY_BELOW = 1024
_LSTM = (*range(1, 12), 16)  # the LSTM's weights (input and recurrent kernels, peepholes, projection)

# Past these inputs the integer output of the function is within half a step of its limit (int8 tanh at
# 1/128: atanh(1 - 1/256); logistic at 1/256: ln(511); int16 at 1/32768): a wider input range only
# coarsens the input's steps.
_TANH_SATURATES = {"int8": float(np.arctanh(1 - 1 / 256)), "int16": float(np.arctanh(1 - 1 / 65536))}
_LOGISTIC_SATURATES = {"int8": float(np.log(511)), "int16": float(np.log(65535))}

# ADD / SUB rescale both inputs to twice the larger input scale, shifted left by 20 bits (int8) or 15 (int16's
# general path), and then to the output scale; the output multiplier must be below 1 (add.cc, sub.cc Prepare)
_ADD_SHIFT = {"int8": 20, "int16": 15}


OPS: dict[str, Facts] = {
    "ABS": Facts(integer=RANGE, int16=True),
    "ADD": Facts(integer=RANGE, int16=True, left_shift=_ADD_SHIFT),
    "ADD_N": Facts(no_integer="LiteRT's ADD_N takes float32 and int32 only (add_n.cc)"),
    # an int8 input, an integer (index) output
    "ARG_MAX": Facts(integer=SAME),
    "ARG_MIN": Facts(integer=SAME),
    "ATAN2": Facts(no_integer="LiteRT's ATAN2 takes float types only"),
    "AVERAGE_POOL_2D": Facts(integer=SAME, int16=True),
    # both operands activations (a constant right-hand side quantized as one, per tensor: the kernel reads
    # params.scale), as operator_property.cc's quantize_input_as_activations
    "BATCH_MATMUL": Facts(integer=RANGE, int16=True,
                          hybrid=HybridKernel((1,), None, True, weight_only_below=WEIGHT_ONLY_BELOW)),
    "BATCH_TO_SPACE_ND": Facts(integer=SAME),
    "BIDIRECTIONAL_SEQUENCE_LSTM": Facts(hybrid=HybridKernel((*_LSTM, *(i + 17 for i in _LSTM), *range(40, 48)),
                                                             None, True)),
    "BIDIRECTIONAL_SEQUENCE_RNN": Facts(hybrid=HybridKernel((1, 2, 5, 6, 10, 11), None, True)),
    "BROADCAST_TO": Facts(integer=SAME),
    "CAST": Facts(no_integer="LiteRT's CAST converts values, not quantized reals (cast.cc)"),
    "CEIL": Facts(no_integer="LiteRT's CEIL takes float32 only"),
    "COMPLEX_ABS": Facts(no_integer="COMPLEX_ABS reads complex values (complex_support.cc)"),
    "CONCATENATION": Facts(integer=AS_OUTPUT, int16=True),  # concatenation.cc: no rescaling for int8
    "CONV_2D": Facts(integer=IntegerKernel("range", weight=(1, 0), bias=2, needs_bias=True), int16=True,
                     hybrid=HybridKernel((1,), 0, False, weight_only_below=WEIGHT_ONLY_BELOW)),
    "COS": Facts(no_integer="LiteRT's COS takes float32 only"),
    "CUMSUM": Facts(no_integer="LiteRT's CUMSUM takes float32, int32 and int64 only (cumsum.cc)"),
    "DEPTHWISE_CONV_2D": Facts(integer=IntegerKernel("range", weight=(1, 3), bias=2, needs_bias=True), int16=True,
                               hybrid=HybridKernel((1,), 3, False, weight_only_below=WEIGHT_ONLY_BELOW)),
    "DEPTH_TO_SPACE": Facts(integer=SAME),
    "DIV": Facts(integer=RANGE),
    # dynamic_update_slice.cc: the update's integers copied into the operand's (int8 and int16 in LiteRT 2.3 and
    # TFLite Micro): a TensorList written step by step (keras-hub RWKV-7's time loop at a static length)
    "DYNAMIC_UPDATE_SLICE": Facts(integer=AS_OUTPUT, int16=True),
    "ELU": Facts(integer=RANGE),
    "EMBEDDING_LOOKUP": Facts(hybrid=HybridKernel((1,), None, False, float_input=False)),
    # comparisons rescale each side (comparisons.cc); their output is bool
    "EQUAL": Facts(integer=RANGE),
    "EXP": Facts(integer=RANGE, int16=True, micro="float"),  # TFLite Micro's exp.cc: float32
    "EXPAND_DIMS": Facts(integer=SAME, int16=True),
    # fill.cc: the scalar value must have the output's scale and zero point (int16: zero point 0)
    "FILL": Facts(integer=AS_OUTPUT, int16=True),
    "FLOOR": Facts(no_integer="LiteRT's FLOOR takes float types only (floor.cc)"),
    "FLOOR_DIV": Facts(no_integer="no quantized FLOOR_DIV kernel"),
    "FLOOR_MOD": Facts(no_integer="no quantized FLOOR_MOD kernel"),
    "FULLY_CONNECTED": Facts(integer=IntegerKernel("range", weight=(1, 0), bias=2), int16=True,
                             hybrid=HybridKernel((1,), 0, True, weight_only_below=WEIGHT_ONLY_BELOW)),
    # TFLite Micro's gather.cc: float32 and int8 data
    "GATHER": Facts(integer=SAME, int16=True, micro="int8"),
    "GATHER_ND": Facts(integer=SAME),
    # an int16 lookup table in LiteRT (TFLite Micro has no GELU kernel in any type)
    "GELU": Facts(integer=RANGE, int16=True),
    "GREATER": Facts(integer=RANGE),
    "GREATER_EQUAL": Facts(integer=RANGE),
    "HARD_SWISH": Facts(integer=RANGE),
    "IMAG": Facts(no_integer="IMAG reads complex values"),
    "L2_NORMALIZATION": Facts(integer=IntegerKernel("fixed", fixed=(1 / 128, 0))),  # l2norm.cc: the output is Q0.7
    "LEAKY_RELU": Facts(integer=RANGE, int16=True),
    "LESS": Facts(integer=RANGE),
    "LESS_EQUAL": Facts(integer=RANGE),
    "LOCAL_RESPONSE_NORMALIZATION": Facts(no_integer="LiteRT's LOCAL_RESPONSE_NORMALIZATION takes float32 only"),
    "LOG": Facts(integer=RANGE, int16=True, micro="float"),  # TFLite Micro's elementwise.cc: float32
    "LOGISTIC": Facts(integer=IntegerKernel("fixed", fixed=(1 / 256, -128)), int16=True,
                      saturates=_LOGISTIC_SATURATES),
    # activations.cc LogSoftmaxPrepare: exactly
    "LOG_SOFTMAX": Facts(integer=IntegerKernel("fixed", fixed=(16 / 256, 127))),
    # maximum_minimum.cc, select.cc: raw integers compared / copied: the inputs and the output share parameters
    "MAXIMUM": Facts(integer=AS_OUTPUT, int16=True),
    "MAX_POOL_2D": Facts(integer=SAME, int16=True),
    "MEAN": Facts(integer=RANGE, int16=True),
    "MINIMUM": Facts(integer=AS_OUTPUT, int16=True),
    "MIRROR_PAD": Facts(integer=SAME),
    "MUL": Facts(integer=RANGE, int16=True),
    "NOT_EQUAL": Facts(integer=RANGE),
    # one_hot.cc: the on and off values copied as they are (int8 evaluates; int16 passes Prepare, not Eval)
    "ONE_HOT": Facts(integer=AS_OUTPUT),
    "PACK": Facts(integer=AS_OUTPUT, int16=True),  # pack.cc: inputs and output must share parameters
    "PAD": Facts(integer=SAME, int16=True),
    # pad.cc (LiteRT and TFLite Micro): the constant value must have the output's scale and zero point, and
    # the output the input's (values copied): quantized at the input's parameters (``int8_engine.Int8Function``)
    "PADV2": Facts(integer=SAME, int16=True),
    "POW": Facts(no_integer="LiteRT's POW takes float32 and int32 only (pow.cc)"),
    "PRELU": Facts(integer=RANGE),
    "RANGE": Facts(no_integer="RANGE makes indices"),
    "REAL": Facts(no_integer="REAL reads complex values"),
    "REDUCE_MAX": Facts(integer=SAME, int16=True, micro="int8"),  # TFLite Micro's reduce.cc: int8 only
    "REDUCE_MIN": Facts(integer=SAME, int16=True, micro="int8"),
    "RELU": Facts(integer=RANGE, int16=True),
    # the clamp's limit becomes round(limit / scale), which must fit an int32 (kernel_util.cc Quantize checks
    # it and fails Prepare; activations.cc's QuantizedReluX casts unchecked): only int16 scales get that small
    "RELU6": Facts(integer=RANGE, int16=True, clamp_limit=6.0),
    "RELU_0_TO_1": Facts(clamp_limit=1.0),  # a fused activation's limit
    "RELU_N1_TO_1": Facts(clamp_limit=1.0),
    "RESHAPE": Facts(integer=SAME, int16=True),
    "RESIZE_BILINEAR": Facts(integer=SAME, int16=True, micro="int8"),  # TFLite Micro's resize_bilinear.cc
    "RESIZE_NEAREST_NEIGHBOR": Facts(integer=SAME, int16=True),
    "REVERSE_V2": Facts(integer=SAME, int16=True),
    "RFFT2D": Facts(no_integer="LiteRT's RFFT2D takes float32 only (rfft2d.cc)"),
    "ROUND": Facts(no_integer="LiteRT's ROUND takes float32 only"),
    # TFLite Micro's elementwise.cc rsqrt: int8 only; in LiteRT which of its two kernels is closer depends on
    # the data (``int8_forms.rsqrt_width``)
    "RSQRT": Facts(integer=RANGE, int16=True, micro="int8"),
    "SELECT": Facts(integer=AS_OUTPUT),
    "SELECT_V2": Facts(integer=AS_OUTPUT, int16=True),
    "SIGN": Facts(no_integer="LiteRT's SIGN takes float32, float64 and int32 only (sign.cc)"),
    "SIN": Facts(no_integer="LiteRT's SIN takes float32 only"),
    "SLICE": Facts(integer=SAME, int16=True),
    "SOFTMAX": Facts(integer=IntegerKernel("fixed", fixed=(1 / 256, -128)), int16=True),
    "SPACE_TO_BATCH_ND": Facts(integer=SAME),
    "SPACE_TO_DEPTH": Facts(integer=SAME),
    "SPLIT": Facts(integer=SAME, int16=True),
    "SPLIT_V": Facts(integer=SAME, int16=True),
    "SQRT": Facts(micro="float"),
    "SQUARE": Facts(no_integer="LiteRT's SQUARE takes float32 only (elementwise.cc)"),
    # the output multiplier from (twice the larger scale) squared and 2^14 (squared_difference.cc)
    "SQUARED_DIFFERENCE": Facts(integer=RANGE),
    "SQUEEZE": Facts(integer=SAME, int16=True),
    "STRIDED_SLICE": Facts(integer=SAME, int16=True),
    "SUB": Facts(integer=RANGE, int16=True, left_shift=_ADD_SHIFT),
    "SUM": Facts(integer=RANGE, int16=True),
    "TANH": Facts(integer=IntegerKernel("fixed", fixed=(1 / 128, 0)), int16=True, saturates=_TANH_SATURATES),
    "TILE": Facts(integer=SAME),
    "TOPK_V2": Facts(integer=SAME, int16=True),  # its values are the input's
    "TRANSPOSE": Facts(integer=SAME, int16=True),
    # transpose_conv.cc: 0 output shape, 1 weights [O, H, W, I] (per channel on 0), 2 input, 3 bias (optional)
    "TRANSPOSE_CONV": Facts(integer=IntegerKernel("range", weight=(1, 0), bias=3, input=2), int16=True),
    "UNIDIRECTIONAL_SEQUENCE_LSTM": Facts(no_16x8=True, hybrid=HybridKernel(_LSTM, None, True)),
    "UNIDIRECTIONAL_SEQUENCE_RNN": Facts(hybrid=HybridKernel((1, 2), None, True)),
    "UNPACK": Facts(integer=SAME, int16=True),
}


# -- the tables the quantizers read, derived (filled in place: ``register_op`` keeps them current) ------------
INTEGER_KERNELS: dict[str, IntegerKernel] = {}
NO_INTEGER_KERNEL: dict[str, str] = {}
INT16_KINDS: set[str] = set()
NO_16X8: set[str] = set()
MICRO_INT8_ONLY: set[str] = set()
MICRO_FLOAT_ONLY: set[str] = set()
SATURATES: dict[tuple[str, str], float] = {}
LEFT_SHIFT: dict[tuple[str, str], int] = {}
CLAMP_LIMIT: dict[str, float] = {}
HYBRID_KERNELS: dict[str, HybridKernel] = {}


def _derive() -> None:
    for table in (INTEGER_KERNELS, NO_INTEGER_KERNEL, INT16_KINDS, NO_16X8, MICRO_INT8_ONLY, MICRO_FLOAT_ONLY,
                  SATURATES, LEFT_SHIFT, CLAMP_LIMIT, HYBRID_KERNELS):
        table.clear()
    for k, f in OPS.items():
        if f.integer is not None:
            INTEGER_KERNELS[k] = f.integer
        if f.no_integer is not None:
            NO_INTEGER_KERNEL[k] = f.no_integer
        for flag, table in ((f.int16, INT16_KINDS), (f.no_16x8, NO_16X8), (f.micro == "int8", MICRO_INT8_ONLY),
                            (f.micro == "float", MICRO_FLOAT_ONLY)):
            if flag:
                table.add(k)
        SATURATES.update({(k, dtype): x for dtype, x in f.saturates.items()})
        LEFT_SHIFT.update({(k, dtype): n for dtype, n in f.left_shift.items()})
        if f.clamp_limit is not None:
            CLAMP_LIMIT[k] = f.clamp_limit
        if f.hybrid is not None:
            HYBRID_KERNELS[k] = f.hybrid


def register_op(kind: str, facts: Facts | None) -> Facts | None:
    """Set ``kind``'s entry (None: remove it) and the derived tables; returns the entry it replaced. For a rule
    tried from outside the package (a test, a worked example): the catalog's own entries are written above."""
    before = OPS.pop(kind, None)
    if facts is not None:
        OPS[kind] = facts
    _derive()
    return before


_derive()
