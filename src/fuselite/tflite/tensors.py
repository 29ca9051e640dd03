"""A tensor's type and bytes in a TFLite flatbuffer: the LiteRT tensor type of an IR dtype (``tensor_type``), int4
values packed two per byte (``pack_int4``), a string tensor's layout, and quantization parameters whose equal
zero-point vectors are written once (``quantization_of``). Used by ``model_builder``; the names are importable from
``flatbuffer`` too."""

from __future__ import annotations

import numpy as np
from ai_edge_litert import schema_py_generated as schema

from fuselite.errors import ConversionError

_TENSOR_TYPES = {
    np.dtype(np.float32): schema.TensorType.FLOAT32, np.dtype(np.float16): schema.TensorType.FLOAT16,
    np.dtype(np.int32): schema.TensorType.INT32, np.dtype(np.uint8): schema.TensorType.UINT8,
    np.dtype(np.int64): schema.TensorType.INT64, np.dtype(np.bool_): schema.TensorType.BOOL,
    np.dtype(np.int16): schema.TensorType.INT16, np.dtype(np.int8): schema.TensorType.INT8,
    np.dtype(np.float64): schema.TensorType.FLOAT64, np.dtype(np.complex64): schema.TensorType.COMPLEX64,
    np.dtype(np.uint32): schema.TensorType.UINT32, np.dtype(np.uint16): schema.TensorType.UINT16,
    "string": schema.TensorType.STRING, "resource": schema.TensorType.RESOURCE,
    "variant": schema.TensorType.VARIANT,
}


def tensor_type(dtype) -> int:
    key = dtype if isinstance(dtype, str) else np.dtype(dtype)
    if not isinstance(key, str) and key.kind in "SOU":  # a constant of bytes / str (a lookup table's keys)
        return schema.TensorType.STRING
    if not isinstance(key, str) and key.name == "int4":  # ml_dtypes.int4: two per byte in the file
        return schema.TensorType.INT4
    if key not in _TENSOR_TYPES:
        raise ConversionError(f"dtype {dtype} has no LiteRT tensor type")
    return _TENSOR_TYPES[key]


def pack_int4(values: np.ndarray) -> np.ndarray:
    """int4 values two per byte, the even index in the low nibble, row-major, ceil(n / 2) bytes (LiteRT's
    ``UnpackPackedIntToInt8`` reverses it; ``BytesRequired``: ``(bytes + 1) / 2``)."""
    flat = values.astype(np.int8).reshape(-1)
    if flat.size % 2:
        flat = np.concatenate([flat, np.zeros(1, np.int8)])
    nibbles = flat.view(np.uint8) & 0x0F
    return (nibbles[0::2] | (nibbles[1::2] << 4)).astype(np.uint8)


def string_tensor_bytes(arr: np.ndarray) -> np.ndarray:
    """LiteRT string tensor layout: count, offsets, then the bytes."""
    items = [x if isinstance(x, bytes) else str(x).encode() for x in np.asarray(arr).reshape(-1)]
    n = len(items)
    header = 4 * (n + 2)
    offsets, pos = [], header
    for s in items:
        offsets.append(pos)
        pos += len(s)
    offsets.append(pos)
    out = np.array([n] + offsets, dtype=np.int32).tobytes() + b"".join(items)
    return np.frombuffer(out, dtype=np.uint8)


class _QuantizationParameters(schema.QuantizationParametersT):
    """Scales and zero points; equal zero-point vectors are written once and shared.

    A per-channel int8 weight has one int64 zero point (all 0) per channel: 8 bytes per
    channel that would otherwise outweigh its float32 scales. Flatbuffers lets tables
    share a vector, and LiteRT reads each tensor's through its own offset.
    """

    shared: dict  # zero-point bytes -> vector offset, one dict per writer (and so per builder)

    def Pack(self, builder):
        shared = self.shared
        scale = builder.CreateNumpyVector(np.asarray(self.scale, np.float32))
        zeros = np.asarray(self.zeroPoint, np.int64)
        key = zeros.tobytes()
        if key not in shared:
            shared[key] = builder.CreateNumpyVector(zeros)
        schema.QuantizationParametersStart(builder)
        schema.QuantizationParametersAddScale(builder, scale)
        schema.QuantizationParametersAddZeroPoint(builder, shared[key])
        schema.QuantizationParametersAddQuantizedDimension(builder, self.quantizedDimension)
        return schema.QuantizationParametersEnd(builder)


def quantization_of(q, shared: dict) -> schema.QuantizationParametersT:
    out = _QuantizationParameters()
    out.shared = shared
    out.scale = [float(x) for x in q.scale]
    out.zeroPoint = [int(x) for x in q.zero_point]
    out.quantizedDimension = int(q.axis)
    return out
