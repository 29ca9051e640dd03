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
