"""Elementwise arithmetic, math functions, comparisons, logic and selection: one catalog entry each (``catalog.py`` says what an entry holds)."""

from __future__ import annotations

from fuselite.ops.catalog import add_entries
from fuselite.ops.conditions import (
    EXP_LIKE,
    I16_IO,
    INT8,
    INT8_ONLY,
    INT16,
    INT16_INT8,
    MINMAX,
    at,
    both,
    broadcast_gt4,
    dims,
    in_,
    input_type,
)
from fuselite.ops.facts import AS_OUTPUT, RANGE, Facts

# ADD / SUB rescale both inputs to twice the larger input scale, shifted left by 20 bits (int8) or 15 (int16's
# general path), and then to the output scale; the output multiplier must be below 1 (add.cc, sub.cc Prepare)
_ADD_SHIFT = {"int8": 20, "int16": 15}

add_entries({
    "ABS": Facts(
        integer=RANGE,
        int16=True,
        versions=[(in_(0, "int32"), 5), (INT16, 4), (in_(0, "int8", "uint8"), 2)],
        runtime=("1.13.0", "2.4.0", "2.5.0", "2.6.0", "2.12.0"),
        micro_op="AddAbs"),
    # int16 ADD/MUL/ABS without quantization parameters take the "not input_quantized" branch.
    "ADD": Facts(
        integer=RANGE,
        int16=True,
        left_shift=_ADD_SHIFT,
        versions=[(both(INT16, lambda op: op.inputs[0].quant is None), 5), (in_(0, "int64"), 4),
            (both(I16_IO, lambda op: not op.attrs.get("pot_scale_int16", True)), 3), (INT8, 2)],
        runtime=("1.5.0", "1.14.0", "2.4.0", "2.6.0", "2.13.0"),
        micro_op="AddAdd"),
    "ADD_N": Facts(
        no_integer="LiteRT's ADD_N takes float32 and int32 only (add_n.cc)",
        runtime=("1.14.0",),
        micro_op="AddAddN"),
    "ATAN2": Facts(no_integer="LiteRT's ATAN2 takes float types only", runtime=("2.10.0",)),
    "CEIL": Facts(no_integer="LiteRT's CEIL takes float32 only", runtime=("1.14.0",), micro_op="AddCeil"),
    "COS": Facts(no_integer="LiteRT's COS takes float32 only", runtime=("1.14.0",), micro_op="AddCos"),
    "DIV": Facts(integer=RANGE, versions=[(broadcast_gt4, 2)], runtime=("1.6.0", "2.3.0"), micro_op="AddDiv"),
    # comparisons rescale each side (comparisons.cc); their output is bool
    "EQUAL": Facts(
        integer=RANGE,
        versions=[(INT16, 5), (in_(0, "string"), 3), (INT8, 2)],
        runtime=("1.14.0", "1.14.0", "2.3.0", "2.13.0", "2.21.0"),
        micro_op="AddEqual"),
    "EXP": Facts(  # TFLite Micro's exp.cc: float32
        integer=RANGE,
        int16=True,
        micro="float",
        versions=EXP_LIKE,
        runtime=("1.7.0", "2.12.0"),
        micro_op="AddExp"),
    "FLOOR": Facts(
        no_integer="LiteRT's FLOOR takes float types only (floor.cc)",
        runtime=("1.9.0",),
        micro_op="AddFloor"),
    "FLOOR_DIV": Facts(
        no_integer="no quantized FLOOR_DIV kernel",
        versions=[(in_(0, "int16", "int8"), 3), (in_(0, "float32"), 2)],
        runtime=("1.14.0", "1.14.0", "2.13.0"),
        micro_op="AddFloorDiv"),
    "FLOOR_MOD": Facts(
        no_integer="no quantized FLOOR_MOD kernel",
        versions=[(in_(0, "int16", "int8"), 2)],
        runtime=("1.13.0", "2.13.0"),
        micro_op="AddFloorMod"),
    "GREATER": Facts(integer=RANGE, versions=INT8_ONLY, runtime=("1.14.0", "1.14.0"), micro_op="AddGreater"),
    "GREATER_EQUAL": Facts(
        integer=RANGE,
        versions=INT16_INT8,
        runtime=("1.14.0", "1.14.0", "2.13.0"),
        micro_op="AddGreaterEqual"),
    "LESS": Facts(integer=RANGE, versions=INT16_INT8, runtime=("1.14.0", "1.14.0", "2.13.0"), micro_op="AddLess"),
    "LESS_EQUAL": Facts(integer=RANGE, versions=INT8_ONLY, runtime=("1.14.0", "1.14.0"), micro_op="AddLessEqual"),
    "LOG": Facts(  # TFLite Micro's elementwise.cc: float32
        integer=RANGE,
        int16=True,
        micro="float",
        versions=EXP_LIKE,
        runtime=("1.14.0", "2.15.0"),
        micro_op="AddLog"),
    "LOGICAL_AND": Facts(runtime=("1.11.0",), micro_op="AddLogicalAnd"),
    "LOGICAL_NOT": Facts(runtime=("1.11.0",), micro_op="AddLogicalNot"),
    "LOGICAL_OR": Facts(runtime=("1.11.0",), micro_op="AddLogicalOr"),
    # maximum_minimum.cc, select.cc: raw integers compared / copied: the inputs and the output share parameters
    "MAXIMUM": Facts(
        integer=AS_OUTPUT,
        int16=True,
        versions=MINMAX,
        runtime=("1.14.0", "1.14.0", "2.3.0", "2.3.0"),
        micro_op="AddMaximum"),
    "MINIMUM": Facts(
        integer=AS_OUTPUT,
        int16=True,
        versions=MINMAX,
        runtime=("1.14.0", "1.14.0", "2.3.0", "2.3.0"),
        micro_op="AddMinimum"),
    "MUL": Facts(
        integer=RANGE,
        int16=True,
        versions=[(in_(0, "int16", "uint32"), 7), (in_(0, "complex64"), 6), (in_(0, "int64"), 5), (INT8, 2)],
        runtime=("1.5.0", "1.14.0", "1.15.0", "2.3.0", "2.6.0", "2.11.0", "2.13.0"),
        micro_op="AddMul"),
    "NEG": Facts(runtime=("1.9.0",), micro_op="AddNeg"),
    "NOT_EQUAL": Facts(
        integer=RANGE,
        versions=[(INT16, 4), (in_(0, "string"), 3), (INT8, 2)],
        runtime=("1.14.0", "1.14.0", "2.3.0"),
        micro_op="AddNotEqual"),
    "POW": Facts(no_integer="LiteRT's POW takes float32 and int32 only (pow.cc)", runtime=("1.10.0",)),
    "ROUND": Facts(no_integer="LiteRT's ROUND takes float32 only", runtime=("1.14.0",), micro_op="AddRound"),
    # TFLite Micro's elementwise.cc rsqrt: int8 only; in LiteRT which of its two kernels is closer depends on
    # the data (``int8_widths.rsqrt_width``)
    "RSQRT": Facts(
        integer=RANGE,
        int16=True,
        micro="int8",
        versions=INT16_INT8,
        runtime=("1.10.0", "2.5.0", "2.15.0"),
        micro_op="AddRsqrt"),
    "SELECT": Facts(
        integer=AS_OUTPUT,
        versions=[(in_(0, "uint32"), 4), (lambda op: any(len(dims(at(op.inputs, i))) == 5 for i in range(3)), 3),
            (INT8, 2)],
        runtime=("1.14.0", "1.14.0", "2.12.0", "2.12.0")),
    "SELECT_V2": Facts(
        integer=AS_OUTPUT,
        int16=True,
        versions=[(in_(0, "uint32"), 2)],
        runtime=("2.2.0", "2.12.0"),
        micro_op="AddSelectV2",
        micro_limits=((input_type(1, "int32"), "TFLite Micro's SELECT_V2 takes no int32 values"),)),
    "SIGN": Facts(
        no_integer="LiteRT's SIGN takes float32, float64 and int32 only (sign.cc)",
        versions=[(in_(0, "int32"), 2)],
        runtime=("2.11.0", "2.12.0")),
    "SIN": Facts(no_integer="LiteRT's SIN takes float32 only", runtime=("1.9.0",), micro_op="AddSin"),
    "SQRT": Facts(  # elementwise.cc: SqrtEval is EvalNumeric, float32 only
        no_integer="LiteRT's SQRT takes float32 only (elementwise.cc)", versions=EXP_LIKE, runtime=("1.10.0",),
        micro_op="AddSqrt"),
    "SQUARE": Facts(
        no_integer="LiteRT's SQUARE takes float32 only (elementwise.cc)",
        runtime=("1.12.0",),
        micro_op="AddSquare"),
    # the output multiplier from (twice the larger scale) squared and 2^14 (squared_difference.cc)
    "SQUARED_DIFFERENCE": Facts(
        integer=RANGE,
        versions=INT8_ONLY,
        runtime=("1.13.1", "2.5.0"),
        micro_op="AddSquaredDifference"),
    "SUB": Facts(
        integer=RANGE,
        int16=True,
        left_shift=_ADD_SHIFT,
        versions=[(both(I16_IO, lambda op: not op.attrs.get("pot_scale_int16", True)), 5),
            (in_(0, "int64"), 4), (broadcast_gt4, 3), (INT8, 2)],
        runtime=("1.6.0", "1.14.0", "2.3.0", "2.4.0", "2.4.0"),
        micro_op="AddSub"),
})

# bitwise_xor.cc, right_shift.cc: int8 / 16 / 32 and uint8 / 16 / 32 bits, broadcasting to 4 dims; version 1 only,
# not in runtime_version.cc; no TFLite Micro kernel
add_entries({
    "BITWISE_XOR": Facts(no_integer="BITWISE_XOR works on an integer's bits, not on quantized reals (bitwise_xor.cc)"),
    "RIGHT_SHIFT": Facts(no_integer="RIGHT_SHIFT works on an integer's bits, not on quantized reals (right_shift.cc)"),
})
