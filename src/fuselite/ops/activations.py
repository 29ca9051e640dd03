"""Activations: clamps, smooth functions and the fixed-range ones (LOGISTIC, TANH, SOFTMAX): one catalog entry each (``catalog.py`` says what an entry holds)."""

from __future__ import annotations

import numpy as np

from fuselite.ops.catalog import add_entries
from fuselite.ops.conditions import INT8_ONLY, INT16, INT16_INT8, POOL_LIKE, SOFTMAX_SCALE_LIMIT, in_
from fuselite.ops.facts import RANGE, Facts, IntegerKernel

# Past these inputs the integer output of the function is within half a step of its limit (int8 tanh at
# 1/128: atanh(1 - 1/256); logistic at 1/256: ln(511); int16 at 1/32768): a wider input range only
# coarsens the input's steps.
_TANH_SATURATES = {"int8": float(np.arctanh(1 - 1 / 256)), "int16": float(np.arctanh(1 - 1 / 65536))}
_LOGISTIC_SATURATES = {"int8": float(np.log(511)), "int16": float(np.log(65535))}

add_entries({
    "ELU": Facts(integer=RANGE, runtime=("1.14.0",), micro_op="AddElu"),
    # an int16 lookup table in LiteRT (TFLite Micro has no GELU kernel in any type)
    "GELU": Facts(integer=RANGE, int16=True, versions=[(in_(0, "int8", "uint8"), 2)], runtime=("2.9.0", "2.9.0")),
    "HARD_SWISH": Facts(integer=RANGE, runtime=("1.15.0",), micro_op="AddHardSwish"),
    "LEAKY_RELU": Facts(
        integer=RANGE,
        int16=True,
        versions=[(INT16, 2)],
        runtime=("1.13.1", "2.3.0"),
        micro_op="AddLeakyRelu"),
    "LOGISTIC": Facts(
        integer=IntegerKernel("fixed", fixed=(1 / 256, -128)),
        int16=True,
        saturates=_LOGISTIC_SATURATES,
        versions=POOL_LIKE,
        runtime=("1.14.0", "1.14.0", "2.3.0"),
        micro_op="AddLogistic"),
    # activations.cc LogSoftmaxPrepare: exactly
    "LOG_SOFTMAX": Facts(
        integer=IntegerKernel("fixed", fixed=(16 / 256, 127)),
        versions=INT8_ONLY,
        runtime=("1.14.0", "1.14.0"),
        micro_op="AddLogSoftmax"),
    "PRELU": Facts(integer=RANGE, micro_op="AddPrelu"),
    "RELU": Facts(
        integer=RANGE,
        int16=True,
        versions=[(INT16, 3), (in_(0, "int8", "uint8"), 2)],
        runtime=("1.5.0", "2.1.0", "2.5.0"),
        micro_op="AddRelu"),
    # the clamp's limit becomes round(limit / scale), which must fit an int32 (kernel_util.cc Quantize checks
    # it and fails Prepare; activations.cc's QuantizedReluX casts unchecked): only int16 scales get that small
    "RELU6": Facts(
        integer=RANGE,
        int16=True,
        clamp_limit=6.0,
        versions=INT16_INT8,
        runtime=("1.5.0", "1.14.0", "2.5.0"),
        micro_op="AddRelu6"),
    "RELU_0_TO_1": Facts(clamp_limit=1.0),  # a fused activation's limit
    "RELU_N1_TO_1": Facts(clamp_limit=1.0, runtime=("1.5.0",)),
    "SOFTMAX": Facts(
        integer=IntegerKernel("fixed", fixed=(1 / 256, -128)),
        int16=True,
        versions=INT16_INT8,
        runtime=("1.5.0", "1.14.0", "2.3.0"),
        micro_op="AddSoftmax",
        micro_limits=(SOFTMAX_SCALE_LIMIT,)),
    "TANH": Facts(
        integer=IntegerKernel("fixed", fixed=(1 / 128, 0)),
        int16=True,
        saturates=_TANH_SATURATES,
        versions=POOL_LIKE,
        runtime=("1.14.0", "1.14.0", "2.3.0"),
        micro_op="AddTanh"),
})
