"""Operator versions: the lowest version of each builtin that expresses how it is used.

Rules follow ``GetBuiltinOperatorVersion`` in ``tensorflow/lite/tools/versioning/op_version.cc``
(now ``tensorflow/compiler/mlir/lite/tools/versioning/op_version.cc``) and the runtime
table of ``runtime_version.cc``; they were cross-checked against the TF 2.21 converter.

Like ``GetOpSignature`` (``op_signature.cc``), a rule sees each tensor as this exporter
writes it: unknown dims are written as 1 in ``shape`` (so they never count as a
broadcast), an unknown rank is written as rank 0, a missing optional input (``None``,
written as -1) still counts as an input. Hybrid ops (int8 weights, float activations:
dynamic-range quantization) follow op_version.cc too, per-channel where op_signature.cc
says so (a weight with one scale per output channel). Full-integer forms are left out:
fuselite emits none yet. Ops not listed use version 1.
"""

from __future__ import annotations

import numpy as np

from fuselite.ir import Module, Op, Value


# -- how op_signature.cc sees a tensor ---------------------------------------------
def _dtype(v: Value | None) -> str | None:
    if v is None:
        return None  # kTfLiteNoType
    return v.dtype if isinstance(v.dtype, str) else np.dtype(v.dtype).name


def _dims(v: Value | None) -> tuple:
    if v is None:
        return ()
    if v.is_const:
        return tuple(v.const.shape)
    return tuple(1 if d is None else int(d) for d in (v.shape or ()))


def _at(values: list, i: int):
    return values[i] if i < len(values) else None


# -- predicates used by the rule table ---------------------------------------------
def _in(i: int, *dtypes: str):
    return lambda op: _dtype(_at(op.inputs, i)) in dtypes


def _out(i: int, *dtypes: str):
    return lambda op: _dtype(_at(op.outputs, i)) in dtypes


def _both(*preds):
    return lambda op: all(p(op) for p in preds)


def _either(*preds):
    return lambda op: any(p(op) for p in preds)


def _rank_gt(i: int, n: int):
    return lambda op: len(_dims(_at(op.inputs, i))) > n


def _attr(key: str, default=False):
    return lambda op: bool(op.attrs.get(key, default))


def _broadcast_gt4(op: Op) -> bool:
    """NeedBroadcastForBinaryInputs(op_sig) && GetInputMaxDims(op_sig) > 4."""
    if len(op.inputs) < 2:
        return False
    return _dims(op.inputs[0]) != _dims(op.inputs[1]) and max(len(_dims(v)) for v in op.inputs) > 4


def _hybrid(i: int):
    """Float32 input 0 and output 0, int8 operand ``i`` (op_version.cc's hybrid test)."""
    return _both(_in(0, "float32"), _in(i, "int8"), _out(0, "float32"))


def _per_channel(i: int, dim: int):
    """op_signature.cc: operand ``i`` has as many scales as its dimension ``dim``."""
    def pred(op: Op) -> bool:
        v = _at(op.inputs, i)
        q = getattr(v, "quant", None)
        dims = _dims(v)
        return q is not None and len(dims) > dim and len(q.scale) == dims[dim]
    return pred


def _per_channel_on_axis(i: int):
    """op_signature.cc (DEQUANTIZE): operand ``i`` has more than one scale, one per index of its axis."""
    def pred(op: Op) -> bool:
        v = _at(op.inputs, i)
        q = getattr(v, "quant", None)
        dims = _dims(v)
        return q is not None and len(q.scale) > 1 and q.axis < len(dims) and len(q.scale) == dims[q.axis]
    return pred


def _asymmetric(op: Op) -> bool:
    return bool(op.attrs.get("asymmetric_quantize_inputs", False))


def _grouped_conv(op: Op) -> bool:
    """op_signature.cc: input channels (shape[3], unknown written as 1) != filter shape[3]."""
    x, w = _dims(op.inputs[0]), _dims(op.inputs[1])
    return len(x) > 3 and len(w) > 3 and x[3] != w[3]


_I16_IO = _both(_in(0, "int16"), _out(0, "int16"))
_INT8 = _in(0, "int8")
_INT16 = _in(0, "int16")
_INT8_ONLY = [(_INT8, 2)]
_INT16_INT8 = [(_INT16, 3), (_INT8, 2)]
_POOL_LIKE = [(_I16_IO, 3), (_INT8, 2)]
_MINMAX = [(_I16_IO, 4), (_broadcast_gt4, 3), (_INT8, 2)]
_EXP_LIKE = [(_in(0, "int8", "int16"), 2)]
_PAD = [(_in(0, "bool"), 5), (_rank_gt(0, 4), 4), (_INT16, 3), (_INT8, 2)]
_SPACE_BATCH = [(_INT16, 4), (lambda op: len(_dims(op.inputs[0])) != 4, 3), (_INT8, 2)]
_SEQUENCE_HYBRID = [(_both(_in(1, "int8"), _out(0, "float32"), _asymmetric), 3),
                    (_both(_in(1, "int8"), _out(0, "float32")), 2)]
_CAST_TYPES = [(("bfloat16",), 7), (("float64", "float16"), 5), (("uint16",), 4), (("int8",), 3), (("uint32",), 2)]

# op -> ordered (condition, version) pairs; the first condition that holds wins.
_RULES: dict[str, list] = {
    # int16 ADD/MUL/ABS without quantization parameters take the "not input_quantized" branch.
    "ADD": [(_both(_INT16, lambda op: op.inputs[0].quant is None), 5), (_in(0, "int64"), 4),
            (_both(_I16_IO, lambda op: not op.attrs.get("pot_scale_int16", True)), 3), (_INT8, 2)],
    "SUB": [(_both(_I16_IO, lambda op: not op.attrs.get("pot_scale_int16", True)), 5),
            (_in(0, "int64"), 4), (_broadcast_gt4, 3), (_INT8, 2)],
    "MUL": [(_in(0, "int16", "uint32"), 7), (_in(0, "complex64"), 6), (_in(0, "int64"), 5), (_INT8, 2)],
    "DIV": [(_broadcast_gt4, 2)],
    # tensorflow/lite/tools/versioning/op_version.cc: float16 / int16 input 3, int8 2
    "DEQUANTIZE": [(_in(0, "int4"), 6), (_both(_in(0, "int8"), _per_channel_on_axis(0)), 5),
                   (_in(0, "float16", "int16"), 3),
                   (_in(0, "int8"), 2)],
    "FLOOR_DIV": [(_in(0, "int16", "int8"), 3), (_in(0, "float32"), 2)],
    "FLOOR_MOD": [(_in(0, "int16", "int8"), 2)],
    "MAXIMUM": _MINMAX, "MINIMUM": _MINMAX,
    "LESS": _INT16_INT8, "GREATER_EQUAL": _INT16_INT8,
    "GREATER": _INT8_ONLY, "LESS_EQUAL": _INT8_ONLY, "SQUARED_DIFFERENCE": _INT8_ONLY,
    "SUM": _INT8_ONLY, "LOG_SOFTMAX": _INT8_ONLY, "SPLIT_V": _INT8_ONLY,
    "EQUAL": [(_INT16, 5), (_in(0, "string"), 3), (_INT8, 2)],
    "NOT_EQUAL": [(_INT16, 4), (_in(0, "string"), 3), (_INT8, 2)],
    "RELU": [(_INT16, 3), (_in(0, "int8", "uint8"), 2)],
    "SOFTMAX": _INT16_INT8, "MEAN": _INT16_INT8, "MIRROR_PAD": _INT16_INT8, "REDUCE_MAX": _INT16_INT8,
    "REDUCE_MIN": _INT16_INT8, "RELU6": _INT16_INT8, "RSQRT": _INT16_INT8,
    "TANH": _POOL_LIKE, "LOGISTIC": _POOL_LIKE, "MAX_POOL_2D": _POOL_LIKE, "AVERAGE_POOL_2D": _POOL_LIKE,
    "EXP": _EXP_LIKE, "LOG": _EXP_LIKE, "SQRT": _EXP_LIKE, "REDUCE_PROD": _EXP_LIKE,
    "ABS": [(_in(0, "int32"), 5), (_INT16, 4), (_in(0, "int8", "uint8"), 2)],
    "SIGN": [(_in(0, "int32"), 2)],
    "LEAKY_RELU": [(_INT16, 2)],
    "GELU": [(_in(0, "int8", "uint8"), 2)],
    "ARG_MAX": [(_in(0, "bool"), 3), (_INT8, 2)], "ARG_MIN": [(_in(0, "bool"), 3), (_INT8, 2)],
    # Only a literally 2-input FC is v6; a None bias is still written as input -1.
    # Hybrid (dynamic range): per-channel 12 comes first; a hybrid FC with keep_num_dims is 5.
    "FULLY_CONNECTED": [(_both(_hybrid(1), _per_channel(1, 0)), 12), (lambda op: len(op.inputs) == 2, 6),
                        (_attr("keep_num_dims"), 5), (_both(_in(0, "int8"), _in(1, "int8"), _out(0, "int8")), 4),
                        (_both(_hybrid(1), _asymmetric), 9), (_hybrid(1), 3),
                        (lambda op: op.attrs.get("weights_format", "DEFAULT") != "DEFAULT", 2)],
    "BATCH_MATMUL": _INT16_INT8 + [(_both(_hybrid(1), _asymmetric), 4)],  # adj_x / adj_y: no change
    "CONV_2D": [(_grouped_conv, 6), (_both(_in(0, "int8"), _in(1, "int8"), _out(0, "int8")), 3),
                (_both(_hybrid(1), _per_channel(1, 0)), 5), (_hybrid(1), 2)],
    "DEPTHWISE_CONV_2D": [(_both(_hybrid(1), _per_channel(1, 3)), 6), (_hybrid(1), 4),
                          (_both(_in(0, "int8"), _in(1, "int8"), _out(0, "int8")), 3),
                          (lambda op: op.attrs.get("dilation_h_factor", 1) != 1
                           or op.attrs.get("dilation_w_factor", 1) != 1, 2)],
    "EMBEDDING_LOOKUP": [(lambda op: _per_channel(1, 0)(op) and len(op.inputs[1].quant.scale) > 1, 4)],
    "TRANSPOSE_CONV": [(lambda op: op.attrs.get("fused_activation_function", "NONE") != "NONE", 4),
                       (lambda op: len(op.inputs) == 4 and op.inputs[3] is not None, 3),
                       (_in(1, "int8"), 2)],
    "RESIZE_BILINEAR": [(_INT16, 4), (_attr("half_pixel_centers"), 3), (_INT8, 2)],
    "RESIZE_NEAREST_NEIGHBOR": [(_INT16, 4), (_either(_attr("half_pixel_centers"), _attr("align_corners")), 3),
                                (_INT8, 2)],
    "TRANSPOSE": [(_rank_gt(0, 5), 6), (_INT16, 5), (_rank_gt(0, 4), 4), (_in(0, "bool"), 3), (_INT8, 2)],
    "CONCATENATION": [(_in(0, "uint32"), 4), (_INT16, 3), (_INT8, 2)],
    "SPLIT": [(_in(1, "int16"), 4), (_in(1, "int32"), 3), (_in(1, "int8"), 2)],  # input 1 is the data
    "SLICE": [(_in(0, "uint32"), 6), (_rank_gt(0, 4), 5), (_INT16, 4), (_in(0, "string"), 3), (_INT8, 2)],
    "STRIDED_SLICE": [(_attr("offset"), 8), (_in(0, "uint32"), 7),
                      (_either(_attr("ellipsis_mask", 0), _attr("new_axis_mask", 0)), 6),
                      (_in(0, "string"), 5), (_rank_gt(0, 4), 4), (_in(0, "bool"), 3), (_INT8, 2)],
    "PAD": _PAD, "PADV2": _PAD,
    "SQUEEZE": [(_in(0, "string"), 2)],
    "PACK": [(_INT8, 2), (_I16_IO, 3), (_in(0, "uint32"), 4)],
    "UNPACK": [(_in(0, "int8", "uint8"), 2), (_in(0, "bool"), 3), (_I16_IO, 4)],
    "GATHER": [(_in(1, "int16"), 6), (_attr("batch_dims", 0), 5), (_INT16, 4), (_in(0, "bool"), 3), (_INT8, 2)],
    "GATHER_ND": [(_in(0, "bool"), 5), (_in(1, "int16"), 4), (_INT16, 3), (_in(0, "string"), 2)],
    "CAST": [(_either(_in(0, *t), _out(0, *t)), v) for t, v in _CAST_TYPES],
    "FILL": [(_in(1, "float16"), 4), (_in(1, "int8", "int16"), 3), (_in(1, "bool", "string"), 2)],
    "TILE": [(_INT8, 3), (_in(0, "string"), 2)],
    "BROADCAST_TO": [(_in(0, "int8", "int16"), 3), (lambda op: True, 2)],  # version 1 was retired
    "RANGE": [(_in(0, "int64"), 2)],
    "SELECT": [(_in(0, "uint32"), 4), (lambda op: any(len(_dims(_at(op.inputs, i))) == 5 for i in range(3)), 3),
               (_INT8, 2)],
    "SELECT_V2": [(_in(0, "uint32"), 2)],
    "REVERSE_V2": [(_INT8, 3), (_in(0, "bool"), 2)],
    "TOPK_V2": [(_either(_INT16, _in(1, "int16"), _out(1, "int16")), 3), (_INT8, 2)],
    "DYNAMIC_UPDATE_SLICE": [(_INT16, 4), (_in(0, "float16"), 3), (_in(2, "int64"), 2)],
    "SPACE_TO_BATCH_ND": _SPACE_BATCH, "BATCH_TO_SPACE_ND": _SPACE_BATCH,
    # version 5: int16 activations, int8 weights (TFLite Micro's 16x8 kernel; LiteRT registers up to 4)
    "UNIDIRECTIONAL_SEQUENCE_LSTM": [(_both(_in(0, "int16"), _out(0, "int16")), 5),
                                     (_attr("diagonal_recurrent_tensors"), 4),
                                     (_both(_hybrid(2), _asymmetric), 3), (_hybrid(2), 2)],
    "BIDIRECTIONAL_SEQUENCE_LSTM": _SEQUENCE_HYBRID, "UNIDIRECTIONAL_SEQUENCE_RNN": _SEQUENCE_HYBRID,
    "BIDIRECTIONAL_SEQUENCE_RNN": _SEQUENCE_HYBRID,
    "LSTM": [(lambda op: op.attrs.get("kernel_type", "FULL") == "BASIC", 2)],
}

# Earliest LiteRT runtime per op version: entry k is version k+1 (None: no entry).
# From runtime_version.cc; PAD/PADV2 v5, EQUAL v5 and CAST v7 as the TF 2.21 converter
# writes them. Pairs missing here are skipped, as UpdateMinimumRuntimeVersionForModel does.
_RUNTIME: dict[str, tuple] = {
    "ADD": ("1.5.0", "1.14.0", "2.4.0", "2.6.0", "2.13.0"),
    "SUB": ("1.6.0", "1.14.0", "2.3.0", "2.4.0", "2.4.0"),
    "MUL": ("1.5.0", "1.14.0", "1.15.0", "2.3.0", "2.6.0", "2.11.0", "2.13.0"),
    "DIV": ("1.6.0", "2.3.0"),
    "FLOOR_DIV": ("1.14.0", "1.14.0", "2.13.0"), "FLOOR_MOD": ("1.13.0", "2.13.0"),
    "MAXIMUM": ("1.14.0", "1.14.0", "2.3.0", "2.3.0"), "MINIMUM": ("1.14.0", "1.14.0", "2.3.0", "2.3.0"),
    "POW": ("1.10.0",), "SQUARED_DIFFERENCE": ("1.13.1", "2.5.0"),
    "LESS": ("1.14.0", "1.14.0", "2.13.0"), "LESS_EQUAL": ("1.14.0", "1.14.0"),
    "GREATER": ("1.14.0", "1.14.0"), "GREATER_EQUAL": ("1.14.0", "1.14.0", "2.13.0"),
    "EQUAL": ("1.14.0", "1.14.0", "2.3.0", "2.13.0", "2.21.0"),
    "NOT_EQUAL": ("1.14.0", "1.14.0", "2.3.0"),
    "LOGICAL_AND": ("1.11.0",), "LOGICAL_OR": ("1.11.0",), "LOGICAL_NOT": ("1.11.0",),
    "RELU": ("1.5.0", "2.1.0", "2.5.0"), "RELU6": ("1.5.0", "1.14.0", "2.5.0"), "ELU": ("1.14.0",),
    "LOGISTIC": ("1.14.0", "1.14.0", "2.3.0"), "TANH": ("1.14.0", "1.14.0", "2.3.0"),
    "EXP": ("1.7.0", "2.12.0"), "LOG": ("1.14.0", "2.15.0"), "SQRT": ("1.10.0",),
    "RSQRT": ("1.10.0", "2.5.0", "2.15.0"), "SQUARE": ("1.12.0",), "NEG": ("1.9.0",),
    "ABS": ("1.13.0", "2.4.0", "2.5.0", "2.6.0", "2.12.0"),
    "FLOOR": ("1.9.0",), "CEIL": ("1.14.0",), "ROUND": ("1.14.0",), "SIN": ("1.9.0",), "COS": ("1.14.0",),
    "SIGN": ("2.11.0", "2.12.0"), "ZEROS_LIKE": ("1.12.0",),
    "LOG_SOFTMAX": ("1.14.0", "1.14.0"), "SOFTMAX": ("1.5.0", "1.14.0", "2.3.0"),
    "LEAKY_RELU": ("1.13.1", "2.3.0"), "GELU": ("2.9.0", "2.9.0"), "HARD_SWISH": ("1.15.0",),
    "ADD_N": ("1.14.0",), "MEAN": ("1.6.0", "1.14.0", "2.4.0"), "SUM": ("1.10.0", "1.15.0"),
    "REDUCE_MAX": ("1.11.0", "1.14.0", "2.5.0"), "REDUCE_MIN": ("1.11.0", "1.14.0", "2.5.0"),
    "REDUCE_PROD": ("1.11.0", "2.6.0"), "REDUCE_ANY": ("1.11.0",), "REDUCE_ALL": ("2.6.0",),
    "ARG_MAX": ("1.9.0", "1.14.0", "2.9.0"), "ARG_MIN": ("1.9.0", "1.14.0", "2.9.0"), "CUMSUM": ("2.4.0",),
    "FULLY_CONNECTED": ("1.5.0", "1.10.0", "1.14.0", "1.14.0", "2.0.0", "2.1.0", "2.3.0", "2.3.0", "2.3.0",
                        "2.11.0", "2.15.0", "2.17.0"),
    "BATCH_MATMUL": ("2.3.0", "2.3.0", "2.4.0", "2.5.0"),
    "CONV_2D": ("1.5.0", "1.14.0", "1.14.0", "2.3.0", "2.4.0", "2.9.0"),
    "DEPTHWISE_CONV_2D": ("1.5.0", "1.12.0", "1.14.0", "2.2.0", "2.3.0", "2.3.0"),
    "CONV_3D": ("2.5.0",),
    "TRANSPOSE_CONV": ("1.9.0", "2.2.0", "2.3.0", "2.13.0"),
    "MAX_POOL_2D": ("1.5.0", "1.14.0", "2.3.0"), "AVERAGE_POOL_2D": ("1.5.0", "1.14.0", "2.3.0"),
    "RESIZE_BILINEAR": ("1.7.0", "1.14.0", "2.2.0", "2.5.0"),
    "RESIZE_NEAREST_NEIGHBOR": ("1.13.1", "1.14.0", "2.3.0", "2.4.0"),
    "RESHAPE": ("1.5.0",), "TRANSPOSE": ("1.6.0", "1.14.0", "1.15.0", "2.3.0", "2.4.0", "2.12.0"),
    "CONCATENATION": ("1.5.0", "1.14.0", "2.3.0", "2.14.0"),
    "SPLIT": ("1.5.0", "1.14.0", "1.14.0", "2.3.0"), "SPLIT_V": ("1.13.1", "2.3.0"),
    "SLICE": ("1.14.0", "1.14.0", "1.14.0", "2.4.0", "2.5.0", "2.14.0"),
    "STRIDED_SLICE": ("1.6.0", "1.14.0", "2.1.0", "2.2.0", "2.5.0", "2.6.0", "2.14.0", "2.14.0"),
    "PAD": ("1.5.0", "1.14.0", "2.4.0", "2.6.0", "2.20.0"),
    "PADV2": ("1.9.0", "1.14.0", "2.4.0", "2.6.0", "2.20.0"),
    "MIRROR_PAD": ("1.13.1", "2.3.0", "2.12.0"), "SQUEEZE": ("1.6.0", "2.5.0"), "EXPAND_DIMS": ("1.10.0",),
    "PACK": ("1.11.0", "1.14.0", "2.3.0", "2.13.0"), "UNPACK": ("1.11.0", "1.14.0", "2.2.0", "2.3.0"),
    "GATHER": ("1.6.0", "1.14.0", "1.15.0", "2.4.0", "2.5.0", "2.13.0"),
    "GATHER_ND": ("1.14.0", "2.3.0", "2.5.0", "2.13.0", "2.16.0"),
    "CAST": ("1.5.0", "2.7.0", "2.8.0", "2.9.0", "2.12.0", "2.15.0", "2.17.0"),
    "FILL": ("1.13.0", "2.3.0", "2.5.0", "2.12.0"), "TILE": ("1.10.1", "2.2.0", "2.8.0"),
    "BROADCAST_TO": (None, "2.5.0", "2.5.0"), "RANGE": ("1.13.0", "2.14.0"),
    "SELECT": ("1.14.0", "1.14.0", "2.12.0", "2.12.0"), "SELECT_V2": ("2.2.0", "2.12.0"),
    "SHAPE": ("1.10.0",), "RANK": ("1.14.0",), "REVERSE_V2": ("1.14.0", "2.2.0", "2.5.0"),
    "ONE_HOT": ("1.11.0",), "TOPK_V2": ("1.7.0", "1.14.0", "2.13.0"),
    "WHILE": ("1.15.0",), "IF": ("1.15.0",),
    "RFFT2D": ("2.5.0",), "COMPLEX_ABS": ("2.5.0",), "REAL": ("2.5.0",), "IMAG": ("2.5.0",),
    "DYNAMIC_UPDATE_SLICE": ("2.9.0", "2.17.0", "2.19.0", "2.20.0"),
    "DEQUANTIZE": ("1.13.1", "1.14.0", "1.15.0", "2.2.0", "2.7.0"),
    "EMBEDDING_LOOKUP": ("1.13.0", "1.14.0", "1.14.0", "2.18.0"),
    "SPACE_TO_BATCH_ND": ("1.6.0", "1.14.0", "2.3.0", "2.12.0"),
    "BATCH_TO_SPACE_ND": ("1.6.0", "1.14.0", "2.3.0", "2.12.0"),
    "ATAN2": ("2.10.0",), "RELU_N1_TO_1": ("1.5.0",), "CALL_ONCE": ("2.5.0",),
    "VAR_HANDLE": ("2.6.0",), "READ_VARIABLE": ("2.6.0",), "ASSIGN_VARIABLE": ("2.6.0",),
    "UNIDIRECTIONAL_SEQUENCE_LSTM": ("1.13.1", "1.14.0", "2.3.0", "2.12.0"),
    "BIDIRECTIONAL_SEQUENCE_LSTM": ("1.14.0", "1.14.0", "1.14.0"),
    "UNIDIRECTIONAL_SEQUENCE_RNN": ("1.14.0", "1.14.0", "2.3.0"),
    "BIDIRECTIONAL_SEQUENCE_RNN": ("1.14.0", "1.14.0", "2.3.0"), "LSTM": ("1.7.0", "1.10.0"),
}


def op_version(op: Op) -> int:
    for cond, version in _RULES.get(op.kind, ()):
        if cond(op):
            return version
    return 1


def runtime_version(kind: str, version: int) -> str | None:
    """Earliest runtime for ``kind`` at ``version`` (None when the table has no entry)."""
    row = _RUNTIME.get(kind, ())
    return row[version - 1] if 0 < version <= len(row) else None


def _parse(v: str) -> tuple:
    return tuple(int(x) for x in v.split("."))


def min_runtime_version(module: Module) -> str:
    """Largest runtime version over all ops ("" if none is known, as LiteRT's tooling writes)."""
    best = ""
    for fn in module.functions.values():
        for op in fn.ops:
            rv = runtime_version(op.kind, op_version(op))
            if rv and (not best or _parse(rv) > _parse(best)):
                best = rv
    return best
