"""Custom-op options as a flexbuffer map (what LiteRT custom kernels read at init)."""

from __future__ import annotations

import numpy as np

from fuselite.errors import ConversionError


def _plain(value, key: str):
    if getattr(value, "is_function_attr", False):
        raise ConversionError(f"custom option '{key}' is a function ({value}): a flexbuffer option is an int, "
                              "float, bool, string or a list of them")
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        return float(value)
    if isinstance(value, bytes):
        return value.decode()
    if isinstance(value, str):
        return value
    if isinstance(value, (list, tuple, np.ndarray)):
        items = [_plain(v, key) for v in value]
        if any(isinstance(v, list) for v in items):
            raise ConversionError(f"custom option '{key}': nested lists are not supported")
        return items
    raise ConversionError(f"custom option '{key}' has unsupported type {type(value).__name__}")


def encode_options(options: dict) -> bytes:
    """Encode ``{name: int|float|bool|str|list}`` as flexbuffer bytes."""
    from flatbuffers import flexbuffers

    if not options:
        return b""
    return bytes(flexbuffers.Dumps({str(k): _plain(v, k) for k, v in sorted(options.items())}))


def decode_options(data: bytes) -> dict:
    """Decode what :func:`encode_options` wrote (empty bytes give ``{}``)."""
    from flatbuffers import flexbuffers

    return flexbuffers.Loads(bytearray(data)) if data else {}


def encode_tf_attrs(attrs: dict, tensor_type) -> bytes:
    """A TF op's attributes as the flexbuffer map TensorFlow's converter writes for a custom op that keeps the
    TF op's name (what tensorflow-text's TFLite kernels read): dtypes as LiteRT tensor types (int), lists as
    typed vectors (a list of strings: ``FBT_VECTOR_STRING_DEPRECATED``, which ragged_tensor_to_tensor_tflite.cc
    reads with ``AsTypedVector``), the map written even when empty. ``tensor_type``: an IR dtype -> its LiteRT
    tensor type (``tensors.tensor_type``)."""
    from flatbuffers import flexbuffers

    def scalar(b, v, key):  # a dtype: the IR's numpy dtype, or its name for a non-numeric type attribute (T, out_type)
        if isinstance(v, np.dtype) or isinstance(v, str) and v in ("string", "resource", "variant") and (
                key[:1] == "T" or key.endswith("type")):
            b.Int(int(tensor_type(v)))
            return
        v = _plain(v, key)
        if isinstance(v, bool):
            b.Bool(v)
        elif isinstance(v, int):
            b.Int(v)
        elif isinstance(v, float):
            b.Float(v)
        else:
            b.String(v)

    b = flexbuffers.Builder()
    with b.Map():
        for key in sorted(attrs):
            b.Key(str(key))
            value = attrs[key]
            if isinstance(value, (list, tuple)):
                with b.TypedVector():
                    for v in value:
                        scalar(b, v, key)
            else:
                scalar(b, value, key)
    return bytes(b.Finish())
