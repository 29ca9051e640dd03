"""The conditions of the op-version rules (``Facts.versions``), as ``GetBuiltinOperatorVersion`` in
``tensorflow/lite/tools/versioning/op_version.cc`` tests an op (``op_signature.cc``): each tensor as this exporter
writes it — unknown dims written as 1 in ``shape`` (so they never count as a broadcast), an unknown rank as rank 0,
a missing optional input (``None``, written as -1) still an input. Hybrid ops (int8 weights, float activations)
follow op_version.cc too, per channel where op_signature.cc says so."""

from __future__ import annotations

import numpy as np


# -- how op_signature.cc sees a tensor ---------------------------------------------
def dtype_name(v) -> str | None:
    if v is None:
        return None  # kTfLiteNoType
    return v.dtype if isinstance(v.dtype, str) else np.dtype(v.dtype).name


def dims(v) -> tuple:
    if v is None:
        return ()
    if v.is_const:
        return tuple(v.const.shape)
    return tuple(1 if d is None else int(d) for d in (v.shape or ()))


def at(values: list, i: int):
    return values[i] if i < len(values) else None


# -- predicates used by the rule table ---------------------------------------------
def in_(i: int, *dtypes: str):
    return lambda op: dtype_name(at(op.inputs, i)) in dtypes


def out(i: int, *dtypes: str):
    return lambda op: dtype_name(at(op.outputs, i)) in dtypes


def both(*preds):
    return lambda op: all(p(op) for p in preds)


def either(*preds):
    return lambda op: any(p(op) for p in preds)


def rank_gt(i: int, n: int):
    return lambda op: len(dims(at(op.inputs, i))) > n


def attr(key: str, default=False):
    return lambda op: bool(op.attrs.get(key, default))


def broadcast_gt4(op) -> bool:
    """NeedBroadcastForBinaryInputs(op_sig) && GetInputMaxDims(op_sig) > 4."""
    if len(op.inputs) < 2:
        return False
    return dims(op.inputs[0]) != dims(op.inputs[1]) and max(len(dims(v)) for v in op.inputs) > 4


def hybrid_weights(i: int):
    """Float32 input 0 and output 0, int8 operand ``i`` (op_version.cc's hybrid test)."""
    return both(in_(0, "float32"), in_(i, "int8"), out(0, "float32"))


def per_channel(i: int, dim: int):
    """op_signature.cc: operand ``i`` has as many scales as its dimension ``dim``."""
    def pred(op) -> bool:
        v = at(op.inputs, i)
        q = getattr(v, "quant", None)
        shape = dims(v)
        return q is not None and len(shape) > dim and len(q.scale) == shape[dim]
    return pred


def per_channel_on_axis(i: int):
    """op_signature.cc (DEQUANTIZE): operand ``i`` has more than one scale, one per index of its axis."""
    def pred(op) -> bool:
        v = at(op.inputs, i)
        q = getattr(v, "quant", None)
        shape = dims(v)
        return q is not None and len(q.scale) > 1 and q.axis < len(shape) and len(q.scale) == shape[q.axis]
    return pred


def asymmetric(op) -> bool:
    return bool(op.attrs.get("asymmetric_quantize_inputs", False))


def grouped_conv(op) -> bool:
    """op_signature.cc: input channels (shape[3], unknown written as 1) != filter shape[3]."""
    x, w = dims(op.inputs[0]), dims(op.inputs[1])
    return len(x) > 3 and len(w) > 3 and x[3] != w[3]


I16_IO = both(in_(0, "int16"), out(0, "int16"))
INT8 = in_(0, "int8")
INT16 = in_(0, "int16")
INT8_ONLY = [(INT8, 2)]
INT16_INT8 = [(INT16, 3), (INT8, 2)]
POOL_LIKE = [(I16_IO, 3), (INT8, 2)]
MINMAX = [(I16_IO, 4), (broadcast_gt4, 3), (INT8, 2)]
EXP_LIKE = [(in_(0, "int8", "int16"), 2)]
PAD_RULE = [(in_(0, "bool"), 5), (rank_gt(0, 4), 4), (INT16, 3), (INT8, 2)]
SPACE_BATCH = [(INT16, 4), (lambda op: len(dims(op.inputs[0])) != 4, 3), (INT8, 2)]
SEQUENCE_HYBRID = [(both(in_(1, "int8"), out(0, "float32"), asymmetric), 3),
                    (both(in_(1, "int8"), out(0, "float32")), 2)]
CAST_TYPES = [(("bfloat16",), 7), (("float64", "float16"), 5), (("uint16",), 4), (("int8",), 3), (("uint32",), 2)]


# -- TFLite Micro's type limits (``Facts.micro_limits``: (condition, why), observed with the tflite-micro interpreter)
_F32, _I8 = np.dtype(np.float32), np.dtype(np.int8)


def input_type(i: int, dtype: str, equal: bool = True):
    """Operand ``i`` is there and of the type named ``dtype`` (``equal=False``: of another type)."""
    def pred(op) -> bool:
        v = at(op.inputs, i)
        return v is not None and (v.dtype == dtype) == equal
    return pred


def computed(i: int):
    """Operand ``i`` is there and not a constant."""
    return lambda op: at(op.inputs, i) is not None and not op.inputs[i].is_const


def _softmax_scale_too_small(op) -> bool:
    v = at(op.inputs, 0)
    if v is None or v.dtype != _I8 or v.quant is None:
        return False
    return float(op.attrs.get("beta", 1.0)) * v.quant.scale[0] * 2 ** 26 <= 1  # softmax_common.cc


SOFTMAX_SCALE_LIMIT = (_softmax_scale_too_small, lambda op: (
    f"TFLite Micro's int8 SOFTMAX aborts the process for an input scale below 2^-26 / beta (here "
    f"{op.inputs[0].quant.scale[0]:.3g}: QuantizeMultiplierGreaterThanOne fails its check)"))


def float_weights_only(w: int):
    """TFLite Micro has no hybrid (int8 weights, float activations) kernels: its float kernel checks the filter's
    type (fully_connected.cc, conv.cc, depthwise_conv.cc, unidirectional_sequence_lstm.cc)."""
    return (lambda op: input_type(0, _F32)(op) and at(op.inputs, w) is not None and op.inputs[w].dtype != _F32,
            lambda op: f"{dtype_name(op.inputs[w])} weights with float32 activations (dynamic range): TFLite "
                       f"Micro has no hybrid {op.kind}")
